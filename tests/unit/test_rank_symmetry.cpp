// Rank symmetry: which shipped kernels share one table, and that sharing is refused whenever the
// map would not give a rank its own program exactly.
#include <gtest/gtest.h>

#include "rank_symmetry.h"
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

// Protocol ll: the same schedules share one table (sends and receive regions relabelled, region
// numbers kept), trees and rooted rings keep one per rank.
TEST(RankSymmetry, LlKernelsShareATableWhereTheSimpleOnesDo) {
  KernelOptions ll;
  ll.protocol = Protocol::Ll;
  struct Case {
    const char* schedule;
    int n;
    Kind kind;
  };
  for (const Case& c : {Case{"ring", 5, Kind::Rotation}, Case{"ring", 8, Kind::Rotation}, Case{"oneshot", 6, Kind::Rotation},
                        Case{"oneshot", 9, Kind::Rotation}, Case{"twoshot", 7, Kind::Rotation},
                        Case{"ring_allgather", 4, Kind::Rotation}, Case{"ring_reduce_scatter", 3, Kind::Rotation},
                        Case{"butterfly", 8, Kind::Xor}, Case{"butterfly", 4, Kind::Xor}, Case{"tree", 8, Kind::None},
                        Case{"dbtree", 6, Kind::None}, Case{"ring_broadcast", 4, Kind::None}}) {
    const KernelPlan plan = lower_shipped(c.schedule, c.n, ll);
    EXPECT_EQ(find_rank_symmetry(plan).kind, c.kind) << c.schedule << " N=" << c.n;
    EXPECT_EQ(find_rank_symmetry(plan).stride, find_rank_symmetry(lower_shipped(c.schedule, c.n)).stride)
        << c.schedule << " N=" << c.n;
  }
}

// Under ll a shared table also needs every send to name the consumer's region number that the
// consumer's own (relabelled) program reads.
TEST(RankSymmetry, AnLlRegionNumberedDifferentlyRefusesTheSharedTable) {
  KernelOptions ll;
  ll.protocol = Protocol::Ll;
  auto broken = [&](const char* schedule, auto change) {
    KernelPlan plan = lower_shipped(schedule, 5, ll);
    change(plan.ranks[3]);
    return find_rank_symmetry(plan).kind;
  };
  EXPECT_EQ(broken("ring", [](RankPlan&) {}), Kind::Rotation);
  auto first_send = [](RankPlan& r) -> DataPass& {
    for (StepPlan& step : r.steps)
      for (auto* list : {&step.entry_sends, &step.sends})
        if (!list->empty()) return list->front();
    throw std::logic_error("no send");
  };
  EXPECT_EQ(broken("oneshot", [&](RankPlan& r) { first_send(r).to.slot += 1; }), Kind::None);
  EXPECT_EQ(broken("oneshot", [&](RankPlan& r) { first_send(r).to.rank = (first_send(r).to.rank + 1) % 5; }), Kind::None);
  EXPECT_EQ(broken("ring", [](RankPlan& r) { r.steps[2].passes[0].operands[0].slot += 1; }), Kind::None);
  EXPECT_EQ(broken("ring", [](RankPlan& r) { r.steps[2].passes.front().operands.front().rank ^= 1; }), Kind::None);
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
  // The inverses take a rank's view back to rank 0's frame.
  EXPECT_EQ(unmap_peer(rot, 5, 3, 2), 4);
  EXPECT_EQ(unmap_chunks(rot, 5, 3, {2, 1}), (ChunkRange{4, 1}));
  EXPECT_EQ(unmap_peer(x, 8, 5, 7), 2);
  EXPECT_EQ(unmap_chunks(x, 8, 5, {4, 4}), (ChunkRange{0, 4}));
}

}  // namespace
}  // namespace ccc
