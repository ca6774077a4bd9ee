// Sync planning: relax lock-step into point-to-point waits (see sync_plan.h for their meaning).
//
// 1. Reads of a peer's output chunk that nothing has written yet become reads of its input
//    (lowering reads them there), so the plan orders the memory actually touched.
// 2. Every cross-rank dependency (dependencies.h) becomes a candidate wait "rank r, before step k,
//    waits until rank p has finished step j". Entry and exit waits come from the virtual start and
//    end vertices.
// 3. Dependencies inside one step (a rank overwrites what a peer reads in the same step) must not
//    form a cycle: a cycle is a deadlock. It is fixed by staging the writes through scratch and a
//    new step that copies them back (rewrites.h), or rejected with the cycle spelled out.
// 4. Transitive reduction: a wait is dropped when the rank already knows, through program order
//    and its other waits, that the peer has finished that step. Knowledge is tracked with vector
//    clocks, kept for a window of recent steps that fits a memory budget; an older wait counts only
//    itself, so far beyond the window a redundant wait may survive, but no needed wait is dropped.
//    When every rank's candidates are rank 0's rotated, so are its clocks: rank 0's alone are
//    computed, and each rank keeps the waits rank 0 keeps, seen from that rank.
#pragma once

#include <optional>
#include <string>

#include "ccc/diagnostics.h"
#include "sync_plan.h"

namespace ccc {

struct SyncOptions {
  bool in_place = false;  // each rank's input and output buffers are the same memory
  int64_t clock_budget = int64_t{1} << 24;  // vector-clock entries kept (2 bytes each, 4 past 32 K steps)
  // When every rank's candidate waits are rank 0's rotated (ring), compute rank 0's vector clocks
  // only: the same plan, O(N) instead of O(N^2) work per step. Off: every rank's (for tests).
  bool share_rotated_clocks = true;
};

// Plans the waits for a program that verify() accepted. Returns nullopt, with diagnostics, when the
// program is malformed or too large (check_structure) or a hazard cannot be ordered (a cycle staging cannot break, a read of an input already overwritten
// in place, two ops of one rank and step that read and write the same chunk).
std::optional<PlannedProgram> plan_syncs(StepProgram program, const SyncOptions& options, Diagnostics& diags);

// Per rank: which waits before which step, and why; notes and counts at the end.
std::string print_syncs(const PlannedProgram& planned);

}  // namespace ccc
