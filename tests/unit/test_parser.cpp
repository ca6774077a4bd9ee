#include <gtest/gtest.h>

#include "parser.h"
#include "front_end_util.h"

using namespace ccc;

namespace {
std::optional<ast::Schedule> parse(const std::string& text, std::string* errors = nullptr) {
  SourceFile f{"p.sched", text};
  Diagnostics d;
  auto s = parse_schedule(f, d);
  if (errors) *errors = d.render(&f);
  return s;
}
std::string wrap_expr(const std::string& e) {
  return "allreduce t { chunks 1 let x = " + e + " }";
}
std::string print_let(const std::string& e) {
  auto s = parse(wrap_expr(e));
  if (!s) return "<error>";
  return ast::print_expr(std::get<ast::LetStmt>(s->body[1].node).value);
}
}  // namespace

TEST(Parser, PrintedScheduleParsesBackToTheSameText) {
  for (const char* name : {"ring", "oneshot", "twoshot", "butterfly", "tree", "dbtree", "ring_reduce_scatter",
                           "ring_allgather", "ring_broadcast"}) {
    Diagnostics d;
    auto file = read_source(test::schedule_path(name), d);
    ASSERT_TRUE(file);
    auto s = parse_schedule(*file, d);
    ASSERT_TRUE(s) << d.render(&*file);
    std::string once = ast::print_schedule(*s);
    std::string errors;
    auto again = parse(once, &errors);
    ASSERT_TRUE(again) << errors;
    EXPECT_EQ(ast::print_schedule(*again), once);
  }
}

TEST(Parser, BitwiseOperatorsBindTighterThanComparisons) {
  EXPECT_EQ(print_let("N & 1 == 0"), "N & 1 == 0");
  auto s = parse(wrap_expr("N & 1 == 0"));
  ASSERT_TRUE(s);
  const ast::Expr& e = std::get<ast::LetStmt>(s->body[1].node).value;
  EXPECT_EQ(e.binary, ast::BinaryOp::Eq);
}

TEST(Parser, PrinterKeepsNeededParenthesesOnly) {
  EXPECT_EQ(print_let("(r - 1) % N"), "(r - 1) % N");
  EXPECT_EQ(print_let("r - (1 - N)"), "r - (1 - N)");
  EXPECT_EQ(print_let("(r * 2) + 1"), "r * 2 + 1");
  EXPECT_EQ(print_let("r > 0 ? (r - 1) / 2 : -1"), "r > 0 ? (r - 1) / 2 : -1");
  EXPECT_EQ(print_let("(N is pow2) && -(r) < 3"), "N is pow2 && -r < 3");
}

TEST(Parser, ComparisonsDoNotChain) {
  std::string errors;
  EXPECT_FALSE(parse(wrap_expr("0 < r < N"), &errors));
  EXPECT_NE(errors.find("comparisons cannot be chained"), std::string::npos) << errors;
}

TEST(Parser, SeveralSyntaxErrorsInOneFile) {
  std::string errors;
  EXPECT_FALSE(parse("allreduce t {\n  chunks\n  let = 3\n  phase p { step { reduce chunk 0 frm 1 } }\n}\n", &errors));
  EXPECT_EQ(errors,
            "p.sched:3:3: error: expected an expression, found 'let'\n  let = 3\n  ^\n"
            "p.sched:3:7: error: expected a name after 'let', found '='\n  let = 3\n      ^\n"
            "p.sched:4:35: error: expected 'from' (pull: from PEER) or 'to' (push: to PEER), found 'frm'\n"
            "  phase p { step { reduce chunk 0 frm 1 } }\n                                  ^\n");
}

TEST(Parser, DeepNestingIsRefusedNotACrash) {
  std::string deep = "allreduce t { chunks 1 let x = " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }";
  std::string errors;
  EXPECT_FALSE(parse(deep, &errors));
  EXPECT_NE(errors.find("expressions nest more than 64 deep"), std::string::npos);

  std::string blocks = "allreduce t { chunks 1 phase p { step { ";
  for (int i = 0; i < 100000; ++i) blocks += "if 1 { ";
  EXPECT_FALSE(parse(blocks, &errors));
  EXPECT_NE(errors.find("blocks nest more than 64 deep"), std::string::npos);

  std::string chain = "1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_FALSE(parse(wrap_expr(chain), &errors));
  EXPECT_NE(errors.find("expressions nest more than 64 deep"), std::string::npos);
}

TEST(Check, ResolvesLetsFunctionsAndLoopVariables) {
  std::string errors;
  auto s = parse("allreduce t { chunks N let parent(x) = (x - 1) / 2 let p = parent(r)\n"
                 "phase a { step k in 0 .. 1 { for c in {p, 0} where c >= 0 { reduce chunk c from input of (r + 1) % N } } } }",
                 &errors);
  ASSERT_TRUE(s) << errors;
  EXPECT_EQ(s->functions.size(), 1u);
  EXPECT_FALSE(s->rank_uniform_shape);  // the set {p, 0} depends on r and `where` filters it
}

TEST(Check, UniformShapeWhenOnlyOperandsDependOnRank) {
  auto s = parse("allreduce t { chunks N phase a { step s in 0 .. N-2 { reduce chunk (r - s) % N from (r + 1) % N } } }");
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->rank_uniform_shape);
}

TEST(Check, ReportsNamesArityAndPlacement) {
  std::string errors;
  EXPECT_FALSE(parse("allreduce t {\n"
                     "  chunks N\n"
                     "  let a = b + min(1)\n"
                     "  let a = root\n"
                     "  reduce chunk 0 from 1\n"
                     "  phase p { for i in 0 .. 1 { } }\n"
                     "}\n",
                     &errors));
  EXPECT_EQ(errors,
            "p.sched:3:11: error: unknown name 'b'\n  let a = b + min(1)\n          ^\n"
            "p.sched:3:15: error: 'min' takes 2 arguments, given 1\n  let a = b + min(1)\n              ^\n"
            "p.sched:4:11: error: 'root' is only defined in broadcast and reduce schedules\n  let a = root\n          ^\n"
            "p.sched:4:3: error: 'a' is already defined\n  let a = root\n  ^\n"
            "p.sched:3:3: note: 'a' was defined here\n  let a = b + min(1)\n  ^\n"
            "p.sched:5:3: error: 'reduce' is only allowed inside a step\n  reduce chunk 0 from 1\n  ^\n"
            "p.sched:6:13: error: 'for' is only allowed inside a step, or around phases (in a phase, 'step VAR in "
            "A .. B' makes a sequence of steps)\n  phase p { for i in 0 .. 1 { } }\n            ^\n");
}

TEST(Check, FunctionsCannotRecurse) {
  std::string errors;
  EXPECT_FALSE(parse("allreduce t { chunks 1 let f(x) = f(x - 1) }", &errors));
  EXPECT_NE(errors.find("unknown function 'f'"), std::string::npos) << errors;
}
