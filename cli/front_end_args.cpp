#include <fmt/format.h>

#include "cli.h"
#include "commands.h"

namespace ccc::cli {

std::vector<OptionSpec> front_end_options() {
  return {
      {"--ranks", "N", fmt::format("number of ranks, 1 .. {}", kMaxRanks)},
      {"--root", "R", fmt::format("root rank of a broadcast or reduce; check: 'all' proves each (the default up to "
                             "{} ranks, root 0 beyond); others: default 0", kEveryRootByDefaultRanks)},
      {"--in-place", "", "input and output are one buffer: plan syncs (and staging) for that"},
      {"--Werror", "", "treat warnings (unused let, a write nobody reads, an idle step, ...) as errors"},
  };
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
  // Any count parses here; instantiation reports one outside the documented limits.
  std::optional<int> n = parse_int(*ranks, 0, 1 << 30);
  if (!n) return fail(fmt::format("--ranks expects a non-negative integer, not '{}'", *ranks));
  fe.options.nranks = *n;
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

std::optional<SourceFile> read_schedule(const FrontEndArgs& fe, std::ostream& err) {
  Diagnostics diags;
  std::optional<SourceFile> file = read_source(fe.path, diags);
  if (!file)
    for (const Diagnostic& d : diags.all()) err << "ccc: error: " << d.message << "\n";
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
                                              const StepProgram& program, bool in_place,
                                              const DumpHook& dump, std::ostream& err) {
  Diagnostics diags;
  diags.warnings_are_errors(fe.werror);
  SyncOptions options;
  options.in_place = in_place;
  std::optional<PlannedProgram> planned = run_analysis(program, options, diags, dump);
  err << diags.render(&source, fe.warnings);
  return planned;
}

}  // namespace ccc::cli
