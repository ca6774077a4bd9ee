// The whole compiler as one list of passes (see pipeline.cpp: read it top to bottom).
// Each pass has a name for `--dump-after=PASS`, which shows the text of that pass's result.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ccc/diagnostics.h"
#include "emit_cuda.h"
#include "instantiate.h"
#include "kernel_plan.h"
#include "step_program.h"
#include "sync.h"

namespace ccc {

enum class Pass { Parse, Instantiate, Graph, Verify, Sync, Lower, Emit };
const char* pass_name(Pass p);                      // "parse", "instantiate", ...
std::optional<Pass> pass_from_name(std::string_view name);
std::vector<std::string> pass_names();              // "parse", "instantiate", ...

// Where the result of one pass goes as text (the pipeline continues after dumping), who hears
// that a pass has finished (`--time-passes`), before any text is made, and who is handed the
// diagnostics at the end of each stage (front end, analysis, lowering), so that a caller can
// print a stage's warnings after that stage's dumps, in the order they happened.
struct DumpHook {
  std::optional<Pass> after;                      // none: dump nothing
  std::function<void(std::string_view text)> write;
  std::function<void(Pass)> finished;             // none: nobody listens
  std::function<void(const Diagnostics&)> stage_done;
  void operator()(Pass p, const std::function<std::string()>& text) const {
    if (finished) finished(p);
    if (after == p && write) write(text());
  }
};

// Reads a schedule file; an unreadable or oversized file is an error in diags.
std::optional<SourceFile> read_source(const std::string& path, Diagnostics& diags);

// parse (lex, parse, check) -> instantiate.
std::optional<StepProgram> run_front_end(const SourceFile& file, const InstantiateOptions& options,
                                         Diagnostics& diags, const DumpHook& dump = {});

// graph -> verify -> plan syncs, on the front end's step program, which becomes the planned one
// (move it in when it is not needed after: at N = 1024 a ring's program is ~150 MiB). (The
// dependency graph is built here only to be dumped: verification and planning work on the
// program directly.)
std::optional<PlannedProgram> run_analysis(StepProgram program, const SyncOptions& options,
                                           Diagnostics& diags, const DumpHook& dump = {});

// The whole pipeline, from the schedule's text to CUDA source: what the runtime, `ccc compile` and
// the Python module call.
struct CodegenOptions {
  InstantiateOptions instantiate;
  SyncOptions sync;                       // its in_place is kernel.in_place
  KernelOptions kernel;                   // lower and emit
  Pass last = Pass::Emit;                 // the last pass to run; analysis runs from Verify on
  std::optional<Collective> collective;   // the collective the caller needs: another is an error
  bool keep_program = false;              // keep a copy of the front end's program past analysis
};

// The result of each pass that ran. From Lower on, `planned` has lost its waits and its ops
// (lower_releasing), since only the plan needs them; its program's steps and buffers remain.
struct CodegenResult {
  std::optional<StepProgram> program;     // the front end's: if last < Verify, or keep_program
  std::optional<PlannedProgram> planned;  // last >= Verify
  std::optional<KernelPlan> plan;         // last >= Lower
  std::optional<EmittedKernel> kernel;    // last == Emit
};

// Runs the passes up to options.last; every error (lowering's too) is reported in diags, and the
// result is empty if there was one. `source` names the schedule in the emitted code's comments.
std::optional<CodegenResult> run_codegen(const SourceFile& source, const CodegenOptions& options,
                                         Diagnostics& diags, const DumpHook& dump = {});

}  // namespace ccc
