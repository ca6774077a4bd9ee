// Shipped schedules through the real front end, verifier and sync planner, for the
// code-generation tests.
#pragma once

#include <optional>
#include <string>

#include <stdexcept>

#include <gtest/gtest.h>

#include "lower.h"
#include "sync.h"
#include "verify.h"
#include "front_end_util.h"

namespace ccc::testing {

// One-shot spread over N - 1 steps (line 4): verified, but every rank's sum has another shape,
// so lowering refuses it (verify_bits.h).
inline SourceFile sequential_one_shot() {
  return {"seq.sched", R"(allreduce seq {
  chunks 1
  phase direct {
    step s in 0 .. N-2 { reduce chunk 0 from input of (r + s + 1) % N }
  }
})"};
}

struct Planned {
  std::optional<PlannedProgram> planned;
  SourceFile source;
  std::string errors;  // rendered diagnostics when planned is empty
};

// A shipped schedule by name, or another by its path in the source tree (test::schedule_path).
inline Planned plan_shipped(const std::string& name, int nranks, bool in_place = false) {
  Planned out;
  Diagnostics diags;
  std::optional<SourceFile> file = read_source(test::schedule_path(name), diags);
  if (!file) return {std::nullopt, {}, diags.render(nullptr)};
  file->name = test::schedule_file_name(name);
  out.source = *file;
  std::optional<StepProgram> program = run_front_end(*file, {nranks, 0}, diags);
  if (program && verify(*program, diags)) out.planned = plan_syncs(std::move(*program), {in_place}, diags);
  out.errors = diags.render(&out.source);
  return out;
}

// lower() where a test expects a plan: the plan, else a std::runtime_error with the errors.
inline KernelPlan lowered(const PlannedProgram& pp, const KernelOptions& o = {}) {
  Diagnostics diags;
  std::optional<KernelPlan> plan = lower(pp, o, diags);
  if (!plan) throw std::runtime_error(diags.render(nullptr));
  return std::move(*plan);
}

// The one error lower() reports where a test expects a refusal; a test failure (and an empty
// diagnostic) if it lowers.
inline Diagnostic lower_error(const PlannedProgram& pp, const KernelOptions& o = {}) {
  Diagnostics diags;
  if (lower(pp, o, diags)) ADD_FAILURE() << "lowered; expected a refusal";
  else if (diags.error_count() != 1) ADD_FAILURE() << "expected one error:\n" << diags.render(nullptr);
  return diags.all().empty() ? Diagnostic{} : diags.all().front();
}

// A shipped schedule's kernel plan; throws when the schedule does not plan for `n` ranks.
inline KernelPlan lower_shipped(const std::string& name, int n, KernelOptions o = {}) {
  Planned p = plan_shipped(name, n, o.in_place);
  if (!p.planned) throw std::runtime_error(p.errors);
  return lowered(*p.planned, o);
}

// A program with no waits at all: for tests of lowering errors, which never look at waits.
inline PlannedProgram without_waits(StepProgram p) {
  PlannedProgram pp;
  pp.sync.waits.assign(p.nranks, std::vector<std::vector<Wait>>(p.nsteps() + 1));
  pp.program = std::move(p);
  return pp;
}

}  // namespace ccc::testing
