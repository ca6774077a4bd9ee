// Every shipped schedule verifies and gets a sync plan for N = 1..16 (where its `requires`
// allows), in and out of place (alltoall: out of place only), and the planned program computes the collective when ranks run
// at their own pace; ring also at N = 64 and 128. Plus the `--emit syncs` goldens.
#include <gtest/gtest.h>


#include "interpret.h"
#include "sync.h"
#include "verify.h"
#include "front_end_util.h"
#include "golden_util.h"

using namespace ccc;

namespace {

void expect_verified_and_planned(const StepProgram& p, bool run_dataflow) {
  Diagnostics d;
  ASSERT_TRUE(verify(p, d)) << d.render(nullptr);
  for (bool in_place : {false, true}) {
    if (in_place && p.collective == Collective::AllToAll) continue;  // out of place only (validate_call)
    SyncOptions opts;
    opts.in_place = in_place;
    std::optional<PlannedProgram> planned = plan_syncs(p, opts, d);
    ASSERT_TRUE(planned) << "in place " << in_place << "\n" << d.render(nullptr);
    ASSERT_TRUE(verify(planned->program, d)) << d.render(nullptr);
    for (uint64_t seed = 1; run_dataflow && seed <= 6; ++seed) {
      InterpretResult res = interpret(planned->program, {&planned->sync, in_place, seed});
      ASSERT_EQ(compare_with_reference(p, res, seed), "") << "in place " << in_place << " seed " << seed;
    }
  }
}

class ShippedVerifies : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedVerifies, ForNFrom1To16) {
  int instantiated = 0;
  for (int n = 1; n <= 16; ++n)
    for (int root : {0, n - 1}) {
      auto r = test::compile_schedule(GetParam(), n, root);
      if (!r.program) {
        EXPECT_NE(r.errors.find("error: requirement"), std::string::npos) << r.errors;
        continue;
      }
      if (root > 0 && r.program->root < 0) continue;  // no root: once is enough
      SCOPED_TRACE(GetParam() + " N=" + std::to_string(n) + " root " + std::to_string(root));
      expect_verified_and_planned(*r.program, n <= 8);
      ++instantiated;
    }
  EXPECT_GE(instantiated, 5);
}

INSTANTIATE_TEST_SUITE_P(Schedules, ShippedVerifies, ::testing::ValuesIn(test::shipped_schedule_names()),
                         [](const auto& info) { return info.param; });

TEST(ShippedVerifies, RingAt64And128) {
  for (int n : {64, 128}) {
    auto r = test::compile_schedule("ring", n);
    ASSERT_TRUE(r.program) << r.errors;
    expect_verified_and_planned(*r.program, false);
  }
}

TEST(GoldenSyncs, RingAndTreeAtN4) {
  for (std::string name : {"ring", "tree"}) {
    auto r = test::compile_schedule(name, 4);
    ASSERT_TRUE(r.program) << r.errors;
    Diagnostics d;
    std::optional<PlannedProgram> planned = plan_syncs(*r.program, {}, d);
    ASSERT_TRUE(planned) << d.render(nullptr);
    test::expect_matches_golden(print_syncs(*planned), "tests/golden/syncs/" + name + ".n4.txt", "GoldenSyncs.*");
  }
}

}  // namespace
