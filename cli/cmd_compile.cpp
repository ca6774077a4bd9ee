// `ccc compile FILE --ranks N --emit TARGET [codegen options] [-o OUT] [--dump-after=PASS]`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "topology.h"
#include "cli.h"
#include "commands.h"
#include "emit_targets.h"

namespace ccc::cli {
namespace {

// `--time-passes`: wall time of each pass and the process's peak resident memory after it, as
// rows on standard error once the output is written. A pass's time runs from the end of the one
// before (the graph is built only to be dumped, so it reads about 0; verify includes lint).
class PassClock {
 public:
  void finished(std::string_view pass) {
    const auto now = std::chrono::steady_clock::now();
    rows_ += fmt::format("  {:<14} {:>10.1f} ms {:>8} MiB\n", pass,
                         std::chrono::duration<double, std::milli>(now - last_).count(), peak_mib());
    last_ = now;
  }
  std::string report() const {
    return fmt::format("ccc: time per pass (wall, peak resident memory after it):\n{}  {:<14} {:>10.1f} ms\n", rows_,
                       "total", std::chrono::duration<double, std::milli>(last_ - start_).count());
  }

 private:
  static long peak_mib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss / 1024;  // KiB on Linux
  }
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
  std::string rows_;
};

// Writes all of `text` to fd; the reason it could not, or "".
std::string write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    text.remove_prefix(static_cast<size_t>(n));
  }
  return "";
}

// Writes `text` to `path`; the reason it could not, or "". A regular file (or a new one) is
// replaced only once the new text is whole: it is written to a temporary in the same directory
// and renamed over it, so a full disk or a failed write leaves the old file as it was, and no
// partial file behind. Anything else (/dev/stdout, a pipe, /dev/full) is written in place:
// renaming over a device would replace the device.
std::string write_output(const std::string& path, std::string_view text) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) return std::strerror(errno);
    std::string why = write_all(fd, text);
    if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
    return why;
  }
  // Through a symlink: replace the file it names, not the link.
  std::error_code ec;
  const std::filesystem::path target = exists ? std::filesystem::canonical(path, ec) : std::filesystem::path(path);
  if (ec) return ec.message();
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::string temp = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return fmt::format("cannot create a temporary file in {}: {}", dir.string(), std::strerror(errno));
  // mkstemp makes the file 0600: give it the mode the old file had, or a new file's.
  mode_t mode = st.st_mode & 07777;
  if (!exists) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  std::string why = write_all(fd, text);
  if (why.empty() && ::fchmod(fd, mode) != 0) why = std::strerror(errno);
  if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  if (why.empty() && ::rename(temp.c_str(), target.c_str()) != 0) why = std::strerror(errno);
  if (!why.empty()) ::unlink(temp.c_str());
  return why;
}

int run_compile(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const Command& cmd = compile_command();
  int exit_code = kExitOk;
  std::optional<FrontEndArgs> fe = front_end_args(cmd, args, err, exit_code);
  if (!fe) return exit_code;

  std::optional<CodegenArgs> codegen = codegen_args(cmd, args, err, exit_code);
  if (!codegen) return exit_code;

  std::optional<std::string> emit_name = args.get("--emit");
  if (!emit_name) return usage_error(cmd, fmt::format("--emit is required (one of: {})", fmt::join(emit_target_names(), ", ")), err);
  const EmitTarget* target = find_emit_target(*emit_name);
  if (!target)
    return usage_error(cmd, unknown_value("--emit target", *emit_name, emit_target_names()), err);

  if (args.has("--show-syncs") && std::string(target->name) != "svg")
    return usage_error(cmd, "--show-syncs is for --emit svg", err);
  const bool cost = std::string(target->name) == "cost";
  std::optional<std::string> topo_path = args.get("--topo");
  if (topo_path && !cost) return usage_error(cmd, "--topo is for --emit cost", err);
  if (args.has("--graph") && !cost) return usage_error(cmd, "--graph is for --emit cost", err);
  if (cost && !topo_path) return usage_error(cmd, "--emit cost needs --topo F (topologies/ has examples)", err);
  std::optional<std::string> hidden = args.get("--hidden");
  if (hidden && !(cost && codegen->kernel.epilogue == Epilogue::ResidualRmsNorm))
    return usage_error(cmd, "--hidden is for --emit cost with --epilogue residual-rmsnorm", err);
  if (cost && codegen->kernel.epilogue == Epilogue::ResidualRmsNorm && !hidden)
    return usage_error(cmd, "--emit cost --epilogue residual-rmsnorm needs --hidden H (the row length it prices)", err);
  std::optional<Topology> topo;
  if (topo_path) {
    std::string errors;
    topo = load_topology(*topo_path, errors);
    if (!topo) {
      err << errors;
      return kExitScheduleError;
    }
    if (args.has("--graph")) price_graph_replays(*topo);
  }
  // Options given on the command line pin the cost's search grid; the others are searched.
  SelectOptions cost_grid;
  if (args.has("--channels")) cost_grid.channels = {codegen->kernel.channels};
  if (args.has("--tile-bytes")) cost_grid.tiles = {codegen->kernel.tile_bytes};
  if (args.has("--protocol")) cost_grid.protocols = {codegen->kernel.protocol};
  cost_grid.pipeline = codegen->kernel.pipeline;
  // The epilogue priced with the kernel (docs/epilogue.md, "Cost"); the norm writes residual_out.
  cost_grid.epilogue.kind = codegen->kernel.epilogue;
  cost_grid.epilogue.elem_size = static_cast<int>(data_type_size(codegen->kernel.dtype));
  if (hidden) {
    const std::optional<int> h = parse_int(*hidden, 1, 1 << 24);
    if (!h) return usage_error(cmd, fmt::format("--hidden expects a row length of 1 .. 2^24 elements, not '{}'", *hidden), err);
    cost_grid.epilogue.row_bytes = static_cast<int64_t>(*h) * cost_grid.epilogue.elem_size;
    cost_grid.epilogue.residual_out = true;
  }

  DumpHook dump;
  if (std::optional<std::string> pass = args.get("--dump-after")) {
    dump.after = pass_from_name(*pass);
    if (!dump.after)
      return usage_error(cmd, unknown_value("pass", *pass, pass_names()), err);
    if (*dump.after > target->last_pass)
      return usage_error(cmd, fmt::format("--emit {} stops after pass '{}', so there is no '{}' to dump",
                                          target->name, pass_name(target->last_pass), *pass), err);
    dump.write = [&err](std::string_view text) { err << text; };
  }
  std::optional<PassClock> clock;
  if (args.has("--time-passes")) {
    clock.emplace();
    dump.finished = [&clock](Pass p) { clock->finished(pass_name(p)); };
  }

  const std::optional<SourceFile> source = read_schedule(cmd, *fe, err);
  if (!source) return kExitUsage;
  CodegenOptions options;
  options.instantiate = fe->options;
  options.kernel = codegen->kernel;
  options.last = target->last_pass;
  // Each stage's diagnostics follow its dumps.
  size_t shown = 0;
  dump.stage_done = [&](const Diagnostics& diags) {
    err << diags.render(&*source, fe->warnings, shown);
    shown = diags.all().size();
  };
  Diagnostics diags;
  diags.warnings_are_errors(fe->werror);
  std::optional<CodegenResult> result = run_codegen(*source, options, diags, dump);
  if (!result) return kExitScheduleError;
  // Past the front end, targets read the program as planned (the same collective and buffers).
  const StepProgram& program = result->planned ? result->planned->program : *result->program;
  warn_meaningless_options(cmd, args, program.collective, err);
  std::string text;
  try {
    text = target->emit({program, result->planned ? &*result->planned : nullptr, result->plan ? &*result->plan : nullptr,
                         result->kernel ? &*result->kernel : nullptr, codegen->arch, args.has("--in-place"), args.has("--show-syncs"),
                         topo ? &*topo : nullptr, static_cast<int>(data_type_size(codegen->kernel.dtype)), cost_grid,
                         codegen->kernel.epilogue});
  } catch (const std::runtime_error& e) {
    err << fmt::format("ccc: error: {}\n", e.what());
    return kExitScheduleError;
  }

  std::optional<std::string> path = args.get("-o");
  if (!path || *path == "-") {
    out << text;
  } else if (std::string why = write_output(*path, text); !why.empty()) {
    err << fmt::format("ccc: error: cannot write '{}': {}\n", *path, why);
    return kExitScheduleError;
  }
  if (clock) {
    clock->finished(fmt::format("output ({})", target->name));
    err << clock->report();
  }
  return kExitOk;
}

std::vector<OptionSpec> compile_options() {
  std::vector<OptionSpec> opts = front_end_options();
  for (OptionSpec& o : codegen_options()) opts.push_back(std::move(o));
  // The help column starts after "  " and a 20-wide option column and a space (format_options).
  opts.push_back({"--emit", "TARGET", "what to produce, one of:" + emit_target_help(23)});
  opts.push_back({"--show-syncs", "", "svg: also draw the waits the sync planner kept"});
  opts.push_back({"--time-passes", "", "print each pass's wall time and the peak memory after it to standard error"});
  opts.push_back({"--topo", "F", "cost: the topology file to price the schedule on"});
  opts.push_back({"--graph", "", "cost: price each call replayed from a CUDA graph (graph_launch=)"});
  opts.push_back({"--hidden", "H", "cost with --epilogue residual-rmsnorm: the row length the norm is priced over "
                                   "(sizes start at one row; residual_out written)"});
  opts.push_back({"-o", "OUT", "write the result to OUT instead of standard output"});
  opts.push_back({"--dump-after", "PASS", fmt::format("also print that pass's result to standard error: {}", fmt::join(pass_names(), ", "))});
  return opts;
}

}  // namespace

const Command& compile_command() {
  static const Command cmd{"compile", "compile a schedule for N ranks",
                           "ccc compile FILE --ranks N --emit TARGET [--root R] [--define NAME=V,...] [--in-place] [--Werror]\n"
                           "       [--dtype T] [--op OP] [--tile-bytes B] [--channels C] [--pipeline D] [--protocol P] [--epilogue E] [--arch ARCH]\n"
                           "       [--show-syncs] [--topo F] [--graph] [--hidden H] [-o OUT] [--dump-after=PASS] [--time-passes]",
                           compile_options(), &run_compile};
  return cmd;
}

}  // namespace ccc::cli
