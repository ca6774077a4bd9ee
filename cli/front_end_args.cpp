#include <fmt/format.h>

#include <charconv>
#include <map>

#include "cli.h"
#include "commands.h"
#include "lower.h"

namespace ccc::cli {

std::vector<OptionSpec> front_end_options() {
  return {
      {"--ranks", "N", fmt::format("number of ranks, 1 .. {}", kMaxRanks)},
      {"--root", "R", fmt::format("root rank of a broadcast or reduce; check: 'all' proves each (the default up to "
                             "{} ranks, root 0 beyond); others: default 0", kEveryRootByDefaultRanks)},
      {"--in-place", "", "input and output are one buffer: plan syncs (and staging) for that"},
      {"--define", "NAME=V,...", "set the schedule's 'param NAME' to the integer V (comma-separated for several)"},
      {"--Werror", "", "treat warnings (unused let, a write nobody reads, an idle step, ...) as errors"},
  };
}

// The option parser keeps one value per option, so several parameters are set with one
// comma-separated list.
std::string parse_defines(const std::string& text, std::map<std::string, int64_t>& defines) {
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return fmt::format("--define expects NAME=V (comma-separated for several), not '{}'", item);
    std::string name = item.substr(0, eq), value_text = item.substr(eq + 1);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
    if (ec != std::errc() || end != value_text.data() + value_text.size() || value_text.empty())
      return fmt::format("--define {}: '{}' is not a 64-bit integer", name, value_text);
    if (!defines.emplace(name, value).second) return fmt::format("--define sets '{}' more than once", name);
    if (comma == std::string::npos) return {};
    start = comma + 1;
  }
}

int usage_error(const Command& cmd, const std::string& message, std::ostream& err) {
  err << fmt::format("ccc {}: error: {}\nusage: {}\n(see 'ccc {} --help')\n", cmd.name, message, cmd.usage, cmd.name);
  return kExitUsage;
}

std::optional<FrontEndArgs> front_end_args(const Command& cmd, const ParsedArgs& args, std::ostream& err,
                                           int& exit_code) {
  auto fail = [&](const std::string& msg) {
    exit_code = usage_error(cmd, msg, err);
    return std::nullopt;
  };
  if (args.positional.size() != 1)
    return fail(args.positional.empty() ? "no schedule file given" : "give exactly one schedule file");
  FrontEndArgs fe;
  fe.path = args.positional[0];
  fe.werror = args.has("--Werror");
  std::optional<std::string> ranks = args.get("--ranks");
  if (!ranks) return fail("--ranks N is required");
  std::optional<int> n = parse_int(*ranks, 1, kMaxRanks);
  if (!n) return fail(fmt::format("--ranks expects a number of ranks, 1 .. {}, not '{}'", kMaxRanks, *ranks));
  fe.options.nranks = *n;
  if (std::optional<std::string> defines = args.get("--define"))
    if (std::string msg = parse_defines(*defines, fe.options.defines); !msg.empty()) return fail(msg);
  // Only `ccc check` proves every root; the others build or run one kernel, for root 0 unless told.
  const bool check = std::string_view(cmd.name) == "check";
  using Roots = FrontEndArgs::Roots;
  fe.roots = check ? Roots::EveryIfFew : Roots::Given;
  if (std::optional<std::string> root = args.get("--root")) {
    if (*root == "all" && check) {
      fe.roots = Roots::Every;
      return fe;
    }
    std::optional<int> r = parse_int(*root, 0, 1 << 30);
    if (!r)
      return fail(fmt::format("--root expects a non-negative integer{}, not '{}'", check ? " or 'all'" : "", *root));
    fe.options.root = *r;
    fe.roots = Roots::Given;
  }
  return fe;
}

void warn_meaningless_options(const Command& cmd, const ParsedArgs& args, Collective collective, std::ostream& err) {
  const bool rooted = collective == Collective::Broadcast || collective == Collective::Reduce;
  const bool reduces = collective == Collective::AllReduce || collective == Collective::ReduceScatter ||
                       collective == Collective::Reduce;
  if (args.has("--root") && !rooted)
    err << fmt::format("ccc {}: warning: --root means nothing for {} (only broadcast and reduce have a root); "
                       "ignored\n", cmd.name, collective_name(collective));
  if (args.has("--op") && !reduces)
    err << fmt::format("ccc {}: warning: --op means nothing for {}, which reduces nothing; ignored\n", cmd.name,
                       collective_name(collective));
}

std::optional<SourceFile> read_schedule(const Command& cmd, const FrontEndArgs& fe, std::ostream& err) {
  Diagnostics diags;
  std::optional<SourceFile> file = read_source(fe.path, diags);
  if (!file)
    for (const Diagnostic& d : diags.all()) usage_error(cmd, d.message, err);
  return file;
}

std::optional<StepProgram> run_front_end_on(const FrontEndArgs& fe, const SourceFile& source, const DumpHook& dump,
                                            std::ostream& err) {
  Diagnostics diags;
  diags.warnings_are_errors(fe.werror);
  std::optional<StepProgram> program = run_front_end(source, fe.options, diags, dump);
  err << diags.render(&source, fe.warnings);
  return program;
}

std::optional<PlannedProgram> run_analysis_on(const FrontEndArgs& fe, const SourceFile& source,
                                              StepProgram program, bool in_place,
                                              const DumpHook& dump, std::ostream& err) {
  Diagnostics diags;
  diags.warnings_are_errors(fe.werror);
  SyncOptions options;
  options.in_place = in_place;
  std::optional<PlannedProgram> planned = run_analysis(std::move(program), options, diags, dump);
  err << diags.render(&source, fe.warnings);
  return planned;
}

bool lowers_on(const FrontEndArgs& fe, const SourceFile& source, const PlannedProgram& planned, bool in_place,
               std::ostream& err) {
  Diagnostics diags;
  KernelOptions kernel;
  kernel.in_place = in_place;
  lower(planned, kernel, diags);
  err << diags.render(&source, fe.warnings);
  return !diags.has_errors();
}

}  // namespace ccc::cli
