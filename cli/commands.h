// The subcommands of `ccc`. Each lives in its own cmd_*.cpp and is listed in kCommands (cli.cpp);
// `run`, `topo` and `tune` join the same way.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kernel_plan.h"
#include "pipeline.h"
#include "options.h"

namespace ccc::cli {

struct Command {
  const char* name;
  const char* summary;      // one line for `ccc --help`
  const char* usage;        // "ccc check FILE --ranks N [--root R]"
  std::vector<OptionSpec> options;
  int (*run)(const ParsedArgs& args, std::ostream& out, std::ostream& err);
};

const Command& check_command();
const Command& compile_command();
const Command& topo_command();
const Command& tune_command();
const Command& run_command();
const Command& trace_summary_command();

// The options every front-end command takes.
std::vector<OptionSpec> front_end_options();

// `--define C=4,D=2` into name -> value. Returns an error message, empty if none.
std::string parse_defines(const std::string& text, std::map<std::string, int64_t>& defines);

// Prints `ccc CMD: error: MESSAGE` and the usage line; returns kExitUsage.
int usage_error(const Command& cmd, const std::string& message, std::ostream& err);

// FILE, --ranks and --root from args, or a usage error (exit code in `exit_code`).
struct FrontEndArgs {
  std::string path;
  InstantiateOptions options;
  // Which roots a rooted collective is proved for: options.root (--root R, or the default of
  // commands that build one kernel), every root (`--root all`), or every root up to
  // kEveryRootByDefaultRanks ranks and root 0 beyond (`ccc check` without --root).
  enum class Roots { Given, Every, EveryIfFew } roots = Roots::Given;
  bool werror = false;   // --Werror: warnings are errors
  bool warnings = true;  // show warnings (ccc check shows those of its first root only)
};
inline constexpr int kEveryRootByDefaultRanks = 64;
std::optional<FrontEndArgs> front_end_args(const Command& cmd, const ParsedArgs& args, std::ostream& err,
                                           int& exit_code);

// Reads the schedule file FILE, once: every later pass and diagnostic uses this text (FILE may be
// a pipe such as /dev/stdin, which a second read finds empty). A file that cannot be read is a
// usage error of `cmd`, printed to err.
std::optional<SourceFile> read_schedule(const Command& cmd, const FrontEndArgs& fe, std::ostream& err);

// Warns (to err) about options given that mean nothing for `collective`: --root where there is no
// root, --op where nothing is reduced. They are ignored, as before.
void warn_meaningless_options(const Command& cmd, const ParsedArgs& args, Collective collective, std::ostream& err);

// Compiles the schedule through the front end; diagnostics go to err.
std::optional<StepProgram> run_front_end_on(const FrontEndArgs& fe, const SourceFile& source, const DumpHook& dump,
                                            std::ostream& err);

// Verifies the program and plans its syncs; diagnostics (against the schedule's text) go to err.
std::optional<PlannedProgram> run_analysis_on(const FrontEndArgs& fe, const SourceFile& source,
                                              StepProgram program, bool in_place,
                                              const DumpHook& dump, std::ostream& err);

// Lowers the planned program for the default kernel, as `ccc compile` would, and reports what
// lowering refuses (among it: ranks of an allreduce that would end with different bits) to err:
// check's verdict is then compile's. False if refused.
bool lowers_on(const FrontEndArgs& fe, const SourceFile& source, const PlannedProgram& planned, bool in_place,
               std::ostream& err);

// --dtype, --op, --tile-bytes, --channels, --pipeline, --arch (codegen_args.cpp).
std::vector<OptionSpec> codegen_options();
struct CodegenArgs {
  KernelOptions kernel;  // in_place from --in-place
  std::string arch = "sm_90";
};
std::optional<CodegenArgs> codegen_args(const Command& cmd, const ParsedArgs& args, std::ostream& err, int& exit_code);

}  // namespace ccc::cli
