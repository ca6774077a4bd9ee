// Program rewrites the sync planner applies; both keep the lock-step meaning of the program.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "step_program.h"

namespace ccc {

// Reads of a rank's output chunk that nothing has written yet (lock-step: in an earlier step)
// become reads of its input, where lowering takes them from. Ops are split where a range is only
// partly written.
StepProgram resolve_first_reads(StepProgram p);

// Stages the output writes of each (rank, step) in `targets`: they go to the rank's scratch chunks
// instead, a new local step right after copies them to the output, and when a reduce needs the old
// value a new local step right before copies output to scratch. Peers that read the output in the
// original step then read it before it changes, so the writer can wait for them without a cycle.
// Fails (returns false, with `why_not`) when the schedule itself uses those scratch chunks.
bool stage_through_scratch(StepProgram& p, const std::vector<std::pair<int, int>>& targets, std::string& why_not);

}  // namespace ccc
