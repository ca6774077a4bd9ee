// closest_name: the "did you mean" of every unknown name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "suggest.h"

namespace ccc {
namespace {

TEST(Suggest, TyposFindTheirNameAndStrangersFindNone) {
  const std::vector<std::string> dtypes{"f64", "f32", "f16", "bf16", "i64", "u64", "i32", "u32", "i8", "u8"};
  EXPECT_EQ(closest_name("bf61", dtypes), "bf16");  // two neighbours swapped: one edit
  EXPECT_EQ(closest_name("F32", dtypes), "f32");    // case alone
  EXPECT_EQ(closest_name("f3", dtypes), "f32");     // the first of equals
  EXPECT_EQ(closest_name("float", dtypes), std::nullopt);
  EXPECT_EQ(closest_name("", dtypes), std::nullopt);
  EXPECT_EQ(closest_name("x", {"C", "X"}), "X");  // one letter: a change of case only
  EXPECT_EQ(closest_name("D", {"C"}), std::nullopt);
  EXPECT_EQ(closest_name("chunk_per_rank", {"C", "chunks_per_rank"}), "chunks_per_rank");
  EXPECT_EQ(closest_name("reduce_scater", {"allreduce", "reduce_scatter"}), "reduce_scatter");
  EXPECT_EQ(did_you_mean("chek", {"check", "compile"}), " (did you mean 'check'?)");
  EXPECT_EQ(did_you_mean("zzz", {"check", "compile"}), "");
}

// Hostile input: names too long to be typed are neither suggested nor given suggestions, and
// only the first 4096 candidates are compared.
TEST(Suggest, LongNamesAndManyCandidatesCostBoundedTime) {
  const std::string long_name(33, 'a');
  EXPECT_EQ(closest_name(long_name, {long_name}), std::nullopt);
  EXPECT_EQ(closest_name("aaaa", {long_name}), std::nullopt);
  std::vector<std::string> many(100000, "zzzzzzzz");
  many.back() = "abcdefgh";
  EXPECT_EQ(closest_name("abcdefgx", many), std::nullopt);  // past the first 4096
  many[10] = "abcdefgh";
  EXPECT_EQ(closest_name("abcdefgx", many), "abcdefgh");
}

}  // namespace
}  // namespace ccc
