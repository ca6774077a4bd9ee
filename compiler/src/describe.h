// Short human descriptions of IR pieces, shared by the listings and diagnostics of every pass.
#pragma once

#include <string>

#include "dependencies.h"
#include "step_program.h"

namespace ccc {

// "output chunk 3", "output chunks 2..5" (inclusive, like the DSL's `a .. b`).
std::string describe_chunks(Buffer b, ChunkRange chunks);

// "reduce output chunk 3 from rank 2's output" or "... from its own scratch".
std::string describe_op(const Op& op, int rank);

// "r2 s4 op0", "r2 start", "r2 end".
std::string describe_ref(const OpRef& ref, int nsteps);

// "step 4 (all_gather s=1)"; "start" for -1 and "exit" for nsteps. Numbered as `--emit steps`
// numbers them: a step the sync planner inserted has the number of the step it stages and says
// so in its label ("step 1 (q staged out)").
std::string describe_step(const StepProgram& p, int step);
std::string describe_step(const std::vector<StepInfo>& steps, int step);

// "ring.sched:9" or "" when the location is unknown.
std::string describe_line(const StepProgram& p, SourceLoc loc);
std::string describe_line(const std::string& file, SourceLoc loc);

}  // namespace ccc
