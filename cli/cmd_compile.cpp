// `ccc compile FILE --ranks N --emit TARGET [codegen options] [-o OUT] [--dump-after=PASS]`.
#include <fmt/format.h>

#include <fstream>

#include "ccc/emit_cuda.h"
#include "cli.h"
#include "commands.h"
#include "emit_targets.h"

namespace ccc::cli {
namespace {

int run_compile(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const Command& cmd = compile_command();
  int exit_code = kExitOk;
  std::optional<FrontEndArgs> fe = front_end_args(cmd, args, err, exit_code);
  if (!fe) return exit_code;

  std::optional<CodegenArgs> codegen = codegen_args(cmd, args, err, exit_code);
  if (!codegen) return exit_code;

  std::optional<std::string> emit_name = args.get("--emit");
  if (!emit_name) return usage_error(cmd, fmt::format("--emit is required (one of: {})", emit_target_names()), err);
  const EmitTarget* target = find_emit_target(*emit_name);
  if (!target)
    return usage_error(cmd, fmt::format("unknown --emit target '{}' (one of: {})", *emit_name, emit_target_names()), err);

  if (args.has("--show-syncs") && std::string(target->name) != "svg")
    return usage_error(cmd, "--show-syncs is for --emit svg", err);

  DumpHook dump;
  if (std::optional<std::string> pass = args.get("--dump-after")) {
    dump.after = pass_from_name(*pass);
    if (!dump.after)
      return usage_error(cmd, fmt::format("unknown pass '{}' (one of: {})", *pass, pass_names()), err);
    if (*dump.after > target->last_pass)
      return usage_error(cmd, fmt::format("--emit {} stops after pass '{}', so there is no '{}' to dump",
                                          target->name, pass_name(target->last_pass), *pass), err);
    dump.write = [&err](std::string_view text) { err << text; };
  }

  const std::optional<SourceFile> source = read_schedule(*fe, err);
  if (!source) return kExitScheduleError;
  std::optional<StepProgram> program = run_front_end_on(*fe, *source, dump, err);
  if (!program) return kExitScheduleError;
  std::optional<PlannedProgram> planned;
  if (target->last_pass >= Pass::Verify) {
    planned = run_analysis_on(*source, *program, args.has("--in-place"), dump, err);
    if (!planned) return kExitScheduleError;
  }
  std::optional<KernelPlan> plan;
  if (target->last_pass >= Pass::Lower) {
    plan = run_lower_on(*planned, codegen->kernel, &*source, dump, err);
    if (!plan) return kExitScheduleError;
    dump(Pass::Emit, [&] { return emit_cuda(*plan, &*source).source; });
  }
  std::string text;
  try {
    text = target->emit({*program, planned ? &*planned : nullptr, plan ? &*plan : nullptr,
                         &*source, codegen->arch, args.has("--in-place"), args.has("--show-syncs")});
  } catch (const std::runtime_error& e) {
    err << fmt::format("ccc: error: {}\n", e.what());
    return kExitScheduleError;
  }

  std::optional<std::string> path = args.get("-o");
  if (!path || *path == "-") {
    out << text;
    return kExitOk;
  }
  std::ofstream file(*path, std::ios::binary);
  file << text;
  if (!file.flush()) {
    err << fmt::format("ccc: error: cannot write '{}'\n", *path);
    return kExitScheduleError;
  }
  return kExitOk;
}

std::vector<OptionSpec> compile_options() {
  std::vector<OptionSpec> opts = front_end_options();
  for (OptionSpec& o : codegen_options()) opts.push_back(std::move(o));
  // The help column starts after "  " and a 20-wide option column and a space (format_options).
  opts.push_back({"--emit", "TARGET", "what to produce, one of:" + emit_target_help(23)});
  opts.push_back({"--show-syncs", "", "svg: also draw the waits the sync planner kept"});
  opts.push_back({"-o", "OUT", "write the result to OUT instead of standard output"});
  opts.push_back({"--dump-after", "PASS", fmt::format("also print that pass's result to standard error: {}", pass_names())});
  return opts;
}

}  // namespace

const Command& compile_command() {
  static const Command cmd{"compile", "compile a schedule for N ranks",
                           "ccc compile FILE --ranks N --emit TARGET [--root R] [--in-place] [--dtype T] [--op OP]\n"
                           "       [--tile-bytes B] [--channels C] [--pipeline D] [--arch ARCH] [--show-syncs] [-o OUT]\n"
                           "       [--dump-after=PASS]",
                           compile_options(), &run_compile};
  return cmd;
}

}  // namespace ccc::cli
