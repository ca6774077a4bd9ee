// The step program as a picture (`ccc compile --emit svg`): a self-contained SVG grid with one
// lane per rank and one column per step, the phase names above. Each op is a box coloured by its
// (first) chunk with the chunk number in it, solid for a reduce and pale with an outline for a
// copy, with an arrow from the peer it reads; idle cells stay empty. Given the sync plan, the
// waits it kept are drawn too, as dashed arrows from the step a rank waits for to the step that
// waits.
//
// The picture scales down instead of tangling: lanes get thinner as N grows, and below a readable
// lane height the labels, arrows and waits are dropped (one plain cell per rank and step). Beyond
// 128 ranks or 128 steps only every k-th rank or step is drawn (the header says so), so the
// output stays around a megabyte whatever N is.
#pragma once

#include <string>

#include "step_program.h"
#include "sync_plan.h"

namespace ccc {

// `syncs`, when given, must be the plan of `p` (PlannedProgram::sync for PlannedProgram::program).
std::string step_diagram_svg(const StepProgram& p, const SyncPlan* syncs = nullptr);

}  // namespace ccc
