// `ccc compile FILE --ranks N --emit TARGET [codegen options] [-o OUT] [--dump-after=PASS]`.
#include <fmt/format.h>

#include <fstream>

#include "ccc/emit_cuda.h"
#include "ccc/topology.h"
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
  const bool cost = std::string(target->name) == "cost";
  std::optional<std::string> topo_path = args.get("--topo");
  if (topo_path && !cost) return usage_error(cmd, "--topo is for --emit cost", err);
  if (cost && !topo_path) return usage_error(cmd, "--emit cost needs --topo F (topologies/ has examples)", err);
  std::optional<Topology> topo;
  if (topo_path) {
    std::string errors;
    topo = load_topology(*topo_path, errors);
    if (!topo) {
      err << errors;
      return kExitScheduleError;
    }
  }
  // Options given on the command line pin the cost's search grid; the others are searched.
  SelectOptions cost_grid;
  if (args.has("--channels")) cost_grid.channels = {codegen->kernel.channels};
  if (args.has("--tile-bytes")) cost_grid.tiles = {codegen->kernel.tile_bytes};
  cost_grid.pipeline = codegen->kernel.pipeline;

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

  std::optional<StepProgram> program = run_front_end_on(*fe, dump, err);
  if (!program) return kExitScheduleError;
  std::optional<PlannedProgram> planned;
  if (target->last_pass >= Pass::Verify) {
    planned = run_analysis_on(*fe, *program, args.has("--in-place"), dump, err);
    if (!planned) return kExitScheduleError;
  }
  std::optional<KernelPlan> plan;
  std::optional<SourceFile> source;
  if (target->last_pass >= Pass::Lower) {
    Diagnostics ignored;  // the front end has just read the file; this copy is for comments
    source = read_source(fe->path, ignored);
    plan = run_lower_on(*planned, codegen->kernel, source ? &*source : nullptr, dump, err);
    if (!plan) return kExitScheduleError;
    dump(Pass::Emit, [&] { return emit_cuda(*plan, source ? &*source : nullptr).source; });
  }
  std::string text;
  try {
    text = target->emit({*program, planned ? &*planned : nullptr, plan ? &*plan : nullptr,
                         source ? &*source : nullptr, codegen->arch, args.has("--in-place"), args.has("--show-syncs"),
                         topo ? &*topo : nullptr, static_cast<int>(data_type_size(codegen->kernel.dtype)), cost_grid});
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
  opts.push_back({"--topo", "F", "cost: the topology file to price the schedule on"});
  opts.push_back({"-o", "OUT", "write the result to OUT instead of standard output"});
  opts.push_back({"--dump-after", "PASS", fmt::format("also print that pass's result to standard error: {}", pass_names())});
  return opts;
}

}  // namespace

const Command& compile_command() {
  static const Command cmd{"compile", "compile a schedule for N ranks",
                           "ccc compile FILE --ranks N --emit TARGET [--root R] [--in-place] [--dtype T] [--op OP]\n"
                           "       [--tile-bytes B] [--channels C] [--pipeline D] [--arch ARCH] [--show-syncs] [--topo F]\n"
                           "       [-o OUT] [--dump-after=PASS]",
                           compile_options(), &run_compile};
  return cmd;
}

}  // namespace ccc::cli
