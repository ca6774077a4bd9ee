// The same bits on every rank: the last check of lowering, on the plan the kernel runs.
#pragma once

#include "ccc/diagnostics.h"
#include "kernel_plan.h"

namespace ccc {

// Follows every chunk through the plan's passes, step by step, as an expression: a leaf is rank
// q's input chunk, a reduce pass is a node over its operands in the order it folds them, a copy
// moves a value. Nodes are ordered and never regrouped: bit for bit, reductions are neither
// associative nor commutative (fold_order.h). A data pass does the same arithmetic on every rank,
// channel and alignment (ccc::combine folds in one accumulator and rounds once), so equal
// expressions are equal bits, on every run.
//
// Reports an error (false) if two ranks of an allreduce end with different expressions for one output
// chunk, at the DSL op that computed the value of the first rank that differs from rank 0; the
// message names the rank, the chunk and both expressions. Other collectives pass: none of them
// gives two ranks the result of a reduction of one chunk.
bool verify_same_bits(const KernelPlan& plan, Diagnostics& diags);

}  // namespace ccc
