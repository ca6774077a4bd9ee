// What `ccc compile --emit TARGET` and Python's `ccc.compile(emit=...)` can produce. Adding a
// target is one entry in kEmitTargets (emit_targets.cpp): its name, a help line, the last pass
// it needs, and the function that renders the result from what run_codegen made. Targets whose
// last pass is verify or later get the planned program; lower or later, the kernel plan too;
// emit, the kernel.
#pragma once

#include <string>
#include <vector>

#include "emit_cuda.h"
#include "kernel_plan.h"
#include "pipeline.h"
#include "select.h"
#include "step_program.h"
#include "sync_plan.h"

namespace ccc {

struct EmitInput {
  const StepProgram& program;
  const PlannedProgram* planned = nullptr;  // last pass verify or later
  const KernelPlan* plan = nullptr;         // last pass lower or later
  const EmittedKernel* kernel = nullptr;    // last pass emit
  std::string arch;                         // ptx and cubin: the GPU architecture, e.g. sm_90
  bool in_place = false;                    // graph and dot: input and output are one buffer
  bool show_syncs = false;                  // svg: draw the waits of the sync plan
  const Topology* topo = nullptr;           // cost: the machine to price the schedule on
  int elem_size = 4;                        // cost: bytes per element (validates sizes)
  SelectOptions cost_grid;                  // cost: the channels and tiles to search
  Epilogue epilogue = Epilogue::None;       // steps: where a fused allreduce epilogue runs
};

struct EmitTarget {
  const char* name;
  const char* help;
  Pass last_pass;  // --dump-after may name this pass or an earlier one
  // Throws std::runtime_error when the result cannot be produced (e.g. NVRTC fails).
  std::string (*emit)(const EmitInput& in);
};

const EmitTarget* find_emit_target(const std::string& name);
std::vector<std::string> emit_target_names();  // "steps", ...
// One line per target, "name  help", each starting with a newline and `indent` spaces: the
// --emit option's help lists them under its own line.
std::string emit_target_help(int indent);

}  // namespace ccc
