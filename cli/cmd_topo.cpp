// `ccc topo --file F`: the topology as the cost model sees it, in the file format (so the output
// is itself a topology file), preceded by a readable summary as comments.
#include <fmt/format.h>

#include <sstream>

#include "ccc/topology.h"
#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

int run_topo(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const Command& cmd = topo_command();
  if (!args.positional.empty()) return usage_error(cmd, fmt::format("unexpected argument '{}'", args.positional[0]), err);
  std::optional<std::string> path = args.get("--file");
  if (!path) return usage_error(cmd, "--file F is required", err);
  std::string errors;
  std::optional<Topology> topo = load_topology(*path, errors);
  if (!topo) {
    err << errors;
    return kExitScheduleError;
  }
  std::istringstream summary(describe_topology(*topo));
  for (std::string line; std::getline(summary, line);) out << "# " << line << "\n";
  out << format_topology(*topo);
  return kExitOk;
}

}  // namespace

const Command& topo_command() {
  static const Command cmd{"topo", "print a topology file as the cost model reads it", "ccc topo --file F",
                           {{"--file", "F", "topology file (see docs/topology.md)"}}, &run_topo};
  return cmd;
}

}  // namespace ccc::cli
