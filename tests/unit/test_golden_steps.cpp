// `--emit steps` of every shipped schedule at N = 4 and N = 5 against tests/golden/steps/.
#include <gtest/gtest.h>


#include "print_steps.h"
#include "front_end_util.h"
#include "golden_util.h"

using namespace ccc;

namespace {

class GoldenSteps : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenSteps, MatchesAtN4AndN5) {
  const std::string& name = GetParam();
  for (int n : {4, 5}) {
    auto r = test::compile_schedule(name, n);
    std::string rel = "tests/golden/steps/" + name + ".n" + std::to_string(n) + ".txt";
    if (!r.program) {
      // Only a schedule's own `requires` may rule a rank count out (butterfly needs a power of two).
      EXPECT_EQ(n, 5) << r.errors;
      EXPECT_NE(r.errors.find("error: requirement"), std::string::npos) << r.errors;
      EXPECT_FALSE(std::filesystem::exists(std::string(CCC_SOURCE_DIR) + "/" + rel)) << rel << " is stale";
      continue;
    }
    test::expect_matches_golden(print_steps(*r.program), rel, "Schedules/GoldenSteps.*");
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, GoldenSteps, ::testing::ValuesIn(test::shipped_schedule_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
