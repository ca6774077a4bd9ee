// Rank symmetry: which shipped kernels share one table, and that sharing is refused whenever the
// map would not give a rank its own program exactly.
#include <gtest/gtest.h>

#include "ccc/rank_symmetry.h"
#include "codegen_pipeline.h"

namespace ccc {
namespace {

using testing::lower_shipped;
using Kind = RankSymmetry::Kind;

TEST(RankSymmetry, ShippedSchedulesShareATableWhereTheyAreSymmetric) {
  struct Case {
    const char* schedule;
    int n;
    Kind kind;
    int64_t stride;
  };
  for (const Case& c : {Case{"ring", 5, Kind::Rotation, 1}, Case{"ring", 8, Kind::Rotation, 1},
                        Case{"oneshot", 6, Kind::Rotation, 0}, Case{"twoshot", 7, Kind::Rotation, 1},
                        Case{"ring_allgather", 4, Kind::Rotation, 1}, Case{"ring_reduce_scatter", 3, Kind::Rotation, 1},
                        Case{"butterfly", 8, Kind::Xor, 1}, Case{"butterfly", 4, Kind::Xor, 1},
                        Case{"tree", 8, Kind::None, 0}, Case{"dbtree", 6, Kind::None, 0},
                        Case{"ring_broadcast", 4, Kind::None, 0}, Case{"ring_reduce", 4, Kind::None, 0}}) {
    const RankSymmetry s = find_rank_symmetry(lower_shipped(c.schedule, c.n));
    EXPECT_EQ(s.kind, c.kind) << c.schedule << " N=" << c.n;
    if (c.kind != Kind::None) {
      EXPECT_EQ(s.stride, c.stride) << c.schedule << " N=" << c.n;
    }
  }
  KernelOptions in_place;
  in_place.in_place = true;
  EXPECT_EQ(find_rank_symmetry(lower_shipped("ring", 6, in_place)).kind, Kind::Rotation);
}

// Any difference between a rank's own program and the mapped one keeps the per-rank tables.
TEST(RankSymmetry, ADifferenceInAnyRankRefusesTheSharedTable) {
  auto broken = [](auto change) {
    KernelPlan plan = lower_shipped("ring", 5);
    change(plan.ranks[3]);
    return find_rank_symmetry(plan).kind;
  };
  EXPECT_EQ(broken([](RankPlan&) {}), Kind::Rotation);
  EXPECT_EQ(broken([](RankPlan& r) { r.steps[1].passes[0].chunks.begin ^= 1; }), Kind::None);
  EXPECT_EQ(broken([](RankPlan& r) { r.steps[1].passes[0].operands[0].rank ^= 1; }), Kind::None);
  EXPECT_EQ(broken([](RankPlan& r) { r.steps[1].passes[0].kind = OpKind::Copy; }), Kind::None);
  EXPECT_EQ(broken([](RankPlan& r) { r.steps[2].waits[0].step += 1; }), Kind::None);
  EXPECT_EQ(broken([](RankPlan& r) { r.exit_waits.clear(); }), Kind::None);
  // The fold order is part of the program: swapping a pass's sources changes the bits.
  EXPECT_EQ(broken([](RankPlan& r) {
              auto& ops = r.steps[0].passes[0].operands;
              std::swap(ops[0], ops[1]);
            }),
            Kind::None);
}

TEST(RankSymmetry, MapsRelabelPeersChunksAndTheFoldStart) {
  const RankSymmetry rot{Kind::Rotation, 1};
  EXPECT_EQ(map_peer(rot, 5, 3, 4), 2);
  EXPECT_EQ(map_chunks(rot, 5, 3, {4, 1}), (ChunkRange{2, 1}));
  const RankSymmetry x{Kind::Xor, 1};
  EXPECT_EQ(map_peer(x, 8, 5, 2), 7);
  EXPECT_EQ(map_chunks(x, 8, 5, {0, 4}), (ChunkRange{4, 4}));  // the aligned block holding 0 ^ 5
  EXPECT_EQ(map_chunks(x, 8, 5, {2, 1}), (ChunkRange{7, 1}));
  // Rank 0 folds [0, 3] (ascending); rank 2 sees [2, 1] and folds [1, 2].
  const Operands ops{{0, Storage::Input}, {3, Storage::Output}};
  EXPECT_EQ(map_operands(rot, 4, 2, ops), (Operands{{1, Storage::Output}, {2, Storage::Input}}));
}

}  // namespace
}  // namespace ccc
