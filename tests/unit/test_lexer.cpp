#include <gtest/gtest.h>

#include "lexer.h"

using namespace ccc;

namespace {
std::vector<Tok> kinds(const std::string& text, std::string* errors = nullptr) {
  SourceFile f{"l.sched", text};
  Diagnostics d;
  std::vector<Tok> out;
  for (const Token& t : lex(f, d)) out.push_back(t.kind);
  if (errors) *errors = d.render(&f);
  return out;
}
}  // namespace

TEST(Lexer, KeywordsNamesNumbersAndLongestOperators) {
  EXPECT_EQ(kinds("step s in 0 .. N-2 # comment\n{ r<<1 >= 3 && !x }"),
            (std::vector<Tok>{Tok::KwStep, Tok::Ident, Tok::KwIn, Tok::Int, Tok::DotDot, Tok::Ident, Tok::Minus,
                              Tok::Int, Tok::LBrace, Tok::Ident, Tok::Shl, Tok::Int, Tok::Ge, Tok::Int,
                              Tok::AndAnd, Tok::Bang, Tok::Ident, Tok::RBrace, Tok::End}));
}

TEST(Lexer, LocationsAreOneBasedLineAndColumn) {
  SourceFile f{"l.sched", "a\n  bb 12"};
  Diagnostics d;
  auto toks = lex(f, d);
  ASSERT_EQ(toks.size(), 4u);
  EXPECT_EQ(toks[1].loc, (SourceLoc{2, 3}));
  EXPECT_EQ(toks[2].loc, (SourceLoc{2, 6}));
  EXPECT_EQ(toks[2].value, 12);
}

TEST(Lexer, IntegerLiteralThatOverflowsIsAnError) {
  std::string errors;
  kinds("9223372036854775807 9223372036854775808", &errors);
  EXPECT_EQ(errors, "l.sched:1:21: error: integer literal 9223372036854775808 does not fit in 64 bits\n"
                    "9223372036854775807 9223372036854775808\n"
                    "                    ^\n");
}

TEST(Lexer, BadCharactersAreReportedOncePerRun) {
  std::string errors;
  kinds("a @@@ b $", &errors);
  EXPECT_EQ(errors, "l.sched:1:3: error: unexpected character '@'\na @@@ b $\n  ^\n"
                    "l.sched:1:9: error: unexpected character '$'\na @@@ b $\n        ^\n");
}

TEST(Lexer, BinaryGarbageStopsAfterTwentyErrors) {
  std::string garbage;
  for (int i = 0; i < 1000; ++i) garbage += "\x01 ";
  SourceFile f{"g.sched", garbage};
  Diagnostics d;
  lex(f, d);
  EXPECT_EQ(d.error_count(), 21);  // 20 reports and "too many errors"
}
