#include <gtest/gtest.h>

#include "ccc/interpret.h"
#include "ccc/verify.h"
#include "program_builders.h"

using namespace ccc;
using namespace ccc::testing;

TEST(Interpret, ClassicSchedulesMatchTheReference) {
  for (const StepProgram& p : {ring(5), oneshot(4), butterfly(8), naive_butterfly(4), chain_broadcast(4, 1, 2)})
    EXPECT_EQ(compare_with_reference(p, interpret(p, {nullptr, false, 7}), 7), "") << p.schedule;
}

TEST(Interpret, WrongScheduleDiffersFromTheReference) {
  StepProgram p = ring(4);
  p.ops[1][2].clear();
  EXPECT_NE(compare_with_reference(p, interpret(p, {nullptr, false, 7}), 7), "");
}

// The verifier and the interpreter are independent implementations of the same semantics: they
// must agree on every program, correct or not.
TEST(Interpret, AgreesWithTheVerifierOnRandomPrograms) {
  std::mt19937_64 rng(2026);
  int valid = 0, invalid = 0;
  for (int i = 0; i < 3000; ++i) {
    StepProgram base = i % 3 == 0   ? random_program(rng)
                       : i % 3 == 1 ? ring(1 + static_cast<int>(rng() % 5))
                                    : butterfly(1 << (rng() % 3));
    StepProgram p = i % 3 == 0 ? base : mutate(base, rng);
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
