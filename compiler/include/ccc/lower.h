// Lowering: a planned step program -> kernel plan (see kernel_plan.h).
#pragma once

#include "ccc/kernel_plan.h"
#include "ccc/sync_plan.h"

namespace ccc {

// Throws LowerError for options out of range or a program the kernel cannot run (a read of
// undefined scratch, a step that reads what it also writes on the same rank, an unsupported
// collective, an input read after an in-place overwrite), and for an allreduce whose ranks would
// end with different bits (verify_bits.h). Reduces fold in fold order (fold_order.h).
KernelPlan lower(const PlannedProgram& planned, const KernelOptions& options);

}  // namespace ccc
