#include "cli.h"

#include <fmt/format.h>

#include <array>

#include "commands.h"
#include "suggest.h"

namespace ccc::cli {
namespace {

constexpr const char* kVersion = "ccc 0.1.0";

std::array<const Command*, 6> commands() {
  return {&check_command(), &compile_command(), &topo_command(), &tune_command(), &run_command(), &trace_summary_command()};
}

std::string top_help() {
  std::string s = fmt::format("{} - the collective schedule compiler\n\nusage: ccc COMMAND [ARGS]\n\ncommands:\n", kVersion);
  for (const Command* c : commands()) s += fmt::format("  {:<13} {}\n", c->name, c->summary);
  s += "\noptions:\n  --help     show this help (ccc COMMAND --help for a command's)\n"
       "  --version  show the version\n\n"
       "exit status: 0 ok, 1 the schedule has errors, 2 bad command line\n";
  return s;
}

std::string command_help(const Command& c) {
  std::vector<OptionSpec> opts = c.options;
  opts.push_back({"--help", "", "show this help"});
  return fmt::format("usage: {}\n\n{}.\n\noptions:\n{}", c.usage, c.summary, format_options(opts));
}

}  // namespace

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    err << top_help();
    return kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "--help" || first == "-h") {
    out << top_help();
    return kExitOk;
  }
  if (first == "--version") {
    out << kVersion << "\n";
    return kExitOk;
  }
  for (const Command* c : commands()) {
    if (first != c->name) continue;
    std::vector<std::string> rest(args.begin() + 1, args.end());
    for (const std::string& a : rest)
      if (a == "--help" || a == "-h") {
        out << command_help(*c);
        return kExitOk;
      }
    std::string error;
    std::optional<ParsedArgs> parsed = parse_args(rest, c->options, error);
    if (!parsed) return usage_error(*c, error, err);
    return c->run(*parsed, out, err);
  }
  std::vector<std::string> names;
  for (const Command* c : commands()) names.push_back(c->name);
  err << fmt::format("ccc: error: unknown command '{}'{}\n\n{}", first, did_you_mean(first, names), top_help());
  return kExitUsage;
}

}  // namespace ccc::cli
