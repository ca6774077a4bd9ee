// The order in which a data pass folds its operands, and why it is what it is.
//
// Every rank of an allreduce must end with the same bits. Floating-point sums and products are not
// associative, and bit for bit nothing is even commutative: min and max keep one of +0 / -0
// depending on the operand order, and which NaN payload survives depends on it too. So two ranks
// that reduce the same values (one-shot: every rank folds all N inputs itself) must fold them in
// the same order. The DSL's order cannot be it: one-shot on rank r lists its own value first, then
// r+1, r+2, ..., a different order on every rank.
//
// The rule: a pass folds its operands by the lowest rank that contributes to each operand's value
// (operands of a correct reduction carry disjoint sets of ranks, so the keys differ). The key
// depends only on the values, never on the rank that runs the pass, its own value's place in the
// DSL, or where first touch and staging put the value (input, output or scratch). Ties happen only
// in programs the verifier rejects; they keep program order.
//
// This makes equal reductions equal; it cannot make a schedule whose ranks reduce in different
// shapes (one rank adds a + b first, another b + c) agree. verify_same_bits proves the result.
#pragma once

#include <algorithm>
#include <vector>

#include "small_sort.h"

namespace ccc {

// Sorts operands into fold order; lowest_rank(o) is the lowest rank contributing to o's value.
template <class Operands, class LowestRank>
void sort_into_fold_order(Operands& operands, LowestRank lowest_rank) {
  using Operand = typename Operands::value_type;
  stable_sort_small(operands.begin(), operands.end(),
                    [&](const Operand& a, const Operand& b) { return lowest_rank(a) < lowest_rank(b); });
}

}  // namespace ccc
