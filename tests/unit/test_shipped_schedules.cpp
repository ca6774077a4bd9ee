// Properties of the shipped schedules beyond their postcondition (which test_verify_shipped.cpp
// proves for every N = 1..16 and checks against the interpreter), and docs/dsl.md quoting them.
#include <gtest/gtest.h>

#include <filesystem>

#include "front_end_util.h"
#include "golden_util.h"

using namespace ccc;

namespace {

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
