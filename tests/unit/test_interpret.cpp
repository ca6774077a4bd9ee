#include <gtest/gtest.h>

#include "interpret.h"
#include "verify.h"
#include "program_builders.h"

using namespace ccc;
using namespace ccc::testing;

TEST(Interpret, ClassicSchedulesMatchTheReference) {
  for (const StepProgram& p : {shipped("ring", 5), shipped("oneshot", 4), shipped("butterfly", 8), naive_butterfly(4),
                               shipped("ring_broadcast", 4, 1), shipped("tree", 6)})
    EXPECT_EQ(compare_with_reference(p, interpret(p, {nullptr, false, 7}), 7), "") << p.schedule;
}

TEST(Interpret, WrongScheduleDiffersFromTheReference) {
  StepProgram p = shipped("ring", 4);
  p.ops[1][2].clear();
  EXPECT_NE(compare_with_reference(p, interpret(p, {nullptr, false, 7}), 7), "");
}

// The verifier and the interpreter are independent implementations of the same semantics: they
// must agree on every program, correct or not.
TEST(Interpret, AgreesWithTheVerifierOnRandomPrograms) {
  std::mt19937_64 rng(2026);
  std::vector<StepProgram> correct;
  for (int n = 1; n <= 5; ++n) correct.push_back(shipped("ring", n));
  for (int n : {1, 2, 4}) correct.push_back(shipped("butterfly", n));
  for (const char* name : {"tree", "twoshot", "ring_allgather", "ring_reduce_scatter", "ring_broadcast"})
    correct.push_back(shipped(name, 3));
  int valid = 0, invalid = 0;
  for (int i = 0; i < 3000; ++i) {
    StepProgram p = i % 2 == 0 ? random_program(rng) : mutate(correct[rng() % correct.size()], rng);
    Diagnostics d;
    if (!check_structure(p, d)) continue;
    bool verified = verify(p, d);
    std::string diff = compare_with_reference(p, interpret(p, {nullptr, false, static_cast<uint64_t>(i)}), i);
    ASSERT_EQ(verified, diff.empty()) << "program " << i << ": " << diff << "\n" << d.render(nullptr);
    (verified ? valid : invalid)++;
  }
  EXPECT_GT(valid, 300);
  EXPECT_GT(invalid, 300);
}
