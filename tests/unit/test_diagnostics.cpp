#include <gtest/gtest.h>

#include "ccc/diagnostics.h"

using namespace ccc;

TEST(Diagnostics, RendersFileLineColAndCaret) {
  SourceFile f{"ring.sched", "allreduce ring {\n  chunks N\n  bogus 3\n}\n"};
  Diagnostics d;
  d.error({3, 3}, "unknown statement 'bogus'");
  d.note({1, 11}, "in schedule 'ring'");
  EXPECT_TRUE(d.has_errors());
  EXPECT_EQ(d.render(&f),
            "ring.sched:3:3: error: unknown statement 'bogus'\n"
            "  bogus 3\n"
            "  ^\n"
            "ring.sched:1:11: note: in schedule 'ring'\n"
            "allreduce ring {\n"
            "          ^\n");
}

TEST(Diagnostics, BinaryGarbageIsEchoedPrintably) {
  SourceFile f{"g.sched", std::string("\x01\x02z\xff", 4)};
  Diagnostics d;
  d.error({1, 3}, "unexpected character");
  EXPECT_EQ(d.render(&f), "g.sched:1:3: error: unexpected character\n??z?\n  ^\n");
}

TEST(Diagnostics, NoLocationHasNoCaret) {
  Diagnostics d;
  d.error({}, "empty schedule");
  EXPECT_EQ(d.render(nullptr), "<input>: error: empty schedule\n");
}
