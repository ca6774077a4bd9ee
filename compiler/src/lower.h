// Lowering: a planned step program -> kernel plan (see kernel_plan.h).
#pragma once

#include <optional>

#include "ccc/diagnostics.h"
#include "kernel_plan.h"
#include "sync_plan.h"

namespace ccc {

// Reports an error (and returns nothing) for options out of range or a program the kernel cannot run (a read of
// undefined scratch, a step that reads what it also writes on the same rank, an unsupported
// collective, an input read after an in-place overwrite), and for an allreduce whose ranks would
// end with different bits (verify_bits.h). Reduces fold in fold order (fold_order.h).
//
// Protocol ll turns every read of a peer's buffer into a read of the rank's own receive region,
// which the peer fills with a send right after the step that finished the value (at entry for
// its input), and replaces the sync plan's waits by what LL needs: before its first send to a
// consumer, a producer waits for that consumer to have entered the launch (check_ll_plan says
// why that is enough).
std::optional<KernelPlan> lower(const PlannedProgram& planned, const KernelOptions& options, Diagnostics& diags);
// The same, releasing planned.sync.waits and planned.program's ops as each rank's step is
// lowered (after: no waits, and every step of every rank without ops; the rest of the program
// stays): for callers that keep only the kernel plan, a large N's waits and ops (~300 and ~200
// MiB for ring at N = 1024) then make room for the plan instead of adding to it.
std::optional<KernelPlan> lower_releasing(PlannedProgram& planned, const KernelOptions& options, Diagnostics& diags);

// Checks what makes a protocol-ll plan safe, and reports an error naming rank, step and slot
// where it does not hold (false then):
//   - every receive region a rank reads is filled, in that launch, by exactly one peer's sends
//     that cover exactly the chunks its pass reads (else the reader would spin until it timed
//     out), each sent no later than the step before the read;
//   - a producer's first send to a consumer comes after a wait for that consumer to have entered
//     the launch. The consumer entered launch e only after its launch e - 1 returned, which it
//     did only after reading every line of that launch, so no line is overwritten before its
//     reader is done with it; and the consumer's mailbox, where the producer finds the region's
//     address, holds this launch's scratch.
bool check_ll_plan(const KernelPlan& plan, Diagnostics& diags);

}  // namespace ccc
