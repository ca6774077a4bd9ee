// What `ccc compile --emit TARGET` can produce. Adding a target is one entry in kEmitTargets
// (emit_targets.cpp): its name, a help line, the last pass it needs, and the function that
// renders the result. Targets whose last pass is verify or later get the planned program.
#pragma once

#include <span>
#include <string>

#include "ccc/pipeline.h"
#include "ccc/step_program.h"
#include "ccc/sync_plan.h"

namespace ccc::cli {

struct EmitTarget {
  const char* name;
  const char* help;
  Pass last_pass;  // --dump-after may name this pass or an earlier one
  std::string (*emit)(const StepProgram& program, const PlannedProgram* planned);
};

std::span<const EmitTarget> emit_targets();
const EmitTarget* find_emit_target(const std::string& name);
std::string emit_target_names();  // "steps, ..." for help and errors

}  // namespace ccc::cli
