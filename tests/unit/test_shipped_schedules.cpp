// The shipped schedules compute their collective: each is executed lock-step on symbolic values
// (per chunk, how many times each rank's contribution is in it) for many N, and the collective's
// postcondition is checked. (Hazards and synchronisation are the verify pass's business.)
#include <gtest/gtest.h>

#include <filesystem>

#include "front_end_util.h"
#include "golden_util.h"

using namespace ccc;

namespace {

using Value = std::vector<int>;  // Value[q]: copies of rank q's contribution

struct ScheduleRun {
  std::string name;
  Collective collective;
  std::vector<int> ranks;
};

// Lock-step execution: every op of a step reads the state at the start of the step.
std::vector<std::vector<Value>> execute(const StepProgram& p) {
  const int n = p.nranks;
  std::vector<std::vector<Value>> input(n, std::vector<Value>(p.nchunks, Value(n, 0)));
  for (int r = 0; r < n; ++r)
    for (auto& v : input[r]) v[r] = 1;
  auto output = input;
  std::vector<std::vector<Value>> scratch(n, std::vector<Value>(p.nchunks, Value(n, -1000)));  // undefined
  auto buffer = [&](auto& out, auto& scr, Buffer b, int rank) -> std::vector<Value>& {
    return b == Buffer::Input ? input[rank] : b == Buffer::Output ? out[rank] : scr[rank];
  };
  for (int k = 0; k < p.nsteps(); ++k) {
    auto out_before = output;
    auto scr_before = scratch;
    for (int r = 0; r < n; ++r) {
      for (const Op& op : p.ops[r][k]) {
        for (int64_t c = op.chunks.begin; c < op.chunks.end(); ++c) {
          const Value& src = buffer(out_before, scr_before, op.src, op.peer)[c];
          Value& dst = buffer(output, scratch, op.dst, r)[c];
          if (op.kind == OpKind::Copy) {
            dst = src;
          } else {
            for (int q = 0; q < n; ++q) dst[q] += src[q];
          }
        }
      }
    }
  }
  return output;
}

Value only(int n, int q) {
  Value v(n, 0);
  v[q] = 1;
  return v;
}

class ShippedSchedule : public ::testing::TestWithParam<ScheduleRun> {};

TEST_P(ShippedSchedule, MeetsItsPostcondition) {
  const ScheduleRun& run = GetParam();
  for (int n : run.ranks) {
    for (int root : {0, n - 1}) {
      auto r = test::compile_schedule(run.name, n, root);
      ASSERT_TRUE(r.program) << r.errors;
      const StepProgram& p = *r.program;
      ASSERT_EQ(p.collective, run.collective);
      auto out = execute(p);
      Value all(n, 1);
      for (int rank = 0; rank < n; ++rank) {
        for (int64_t c = 0; c < p.nchunks; ++c) {
          SCOPED_TRACE(testing::Message() << run.name << " N=" << n << " root=" << root << " rank " << rank
                                          << " chunk " << c);
          const Value& v = out[rank][c];
          switch (p.collective) {
            case Collective::AllReduce: EXPECT_EQ(v, all); break;
            case Collective::ReduceScatter:
              if (owned_chunks(p, rank).overlaps({c, 1})) {
                EXPECT_EQ(v, all);
              }
              break;
            case Collective::AllGather: EXPECT_EQ(v, only(n, static_cast<int>(c * n / p.nchunks))); break;
            case Collective::Broadcast: EXPECT_EQ(v, only(n, root)); break;
            case Collective::Reduce:
              if (rank == root) {
                EXPECT_EQ(v, all);
              }
              break;
          }
        }
      }
    }
  }
}

const std::vector<int> kAnyN = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 31, 32};
const std::vector<int> kPow2 = {1, 2, 4, 8, 16, 32, 64};

INSTANTIATE_TEST_SUITE_P(All, ShippedSchedule,
                         ::testing::Values(ScheduleRun{"ring", Collective::AllReduce, kAnyN},
                                           ScheduleRun{"oneshot", Collective::AllReduce, kAnyN},
                                           ScheduleRun{"twoshot", Collective::AllReduce, kAnyN},
                                           ScheduleRun{"butterfly", Collective::AllReduce, kPow2},
                                           ScheduleRun{"tree", Collective::AllReduce, kAnyN},
                                           ScheduleRun{"dbtree", Collective::AllReduce, kAnyN},
                                           ScheduleRun{"ring_reduce_scatter", Collective::ReduceScatter, kAnyN},
                                           ScheduleRun{"ring_allgather", Collective::AllGather, kAnyN},
                                           ScheduleRun{"ring_broadcast", Collective::Broadcast, kAnyN}),
                         [](const auto& info) { return info.param.name; });

// dbtree: with an even rank count every rank is an inner node (has children) in at most one tree.
TEST(ShippedSchedules, DbtreeRanksAreInnerInAtMostOneTree) {
  for (int n : {2, 4, 6, 8, 10, 16, 24, 32}) {
    auto r = test::compile_schedule("dbtree", n);
    ASSERT_TRUE(r.program) << r.errors;
    for (int rank = 0; rank < n; ++rank) {
      bool receives[2] = {false, false};  // reduces from a child in tree t (chunk t)
      for (const auto& step : r.program->ops[rank])
        for (const Op& op : step)
          if (op.kind == OpKind::Reduce) receives[op.chunks.begin] = true;
      EXPECT_FALSE(receives[0] && receives[1]) << "N=" << n << " rank " << rank;
    }
  }
}

}  // namespace

// docs/dsl.md shows every shipped schedule verbatim.
TEST(ShippedSchedules, DslDocShowsEachScheduleVerbatim) {
  std::string doc = test::read_file(std::string(CCC_SOURCE_DIR) + "/docs/dsl.md");
  for (const auto& e : std::filesystem::directory_iterator(std::string(CCC_SOURCE_DIR) + "/schedules")) {
    if (e.path().extension() != ".sched") continue;
    std::string text = test::read_file(e.path());
    EXPECT_NE(doc.find("```\n" + text + "```"), std::string::npos)
        << "docs/dsl.md does not show " << e.path().filename() << " as it is";
  }
}
