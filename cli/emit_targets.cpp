#include "emit_targets.h"

#include <array>
#include <sstream>

#include "ccc/graph.h"
#include "ccc/print_steps.h"
#include "ccc/sync.h"

namespace ccc::cli {
namespace {

std::string emit_steps(const StepProgram& p, const PlannedProgram*) { return print_steps(p); }
std::string emit_graph(const StepProgram& p, const PlannedProgram*) { return print_graph(p, build_graph(p)); }
std::string emit_dot(const StepProgram& p, const PlannedProgram*) {
  std::ostringstream out;
  write_dot(out, p, build_graph(p));
  return out.str();
}
std::string emit_syncs(const StepProgram&, const PlannedProgram* planned) { return print_syncs(*planned); }

constexpr std::array kEmitTargets{
    EmitTarget{"steps", "the step program: for each step, every rank's ops", Pass::Instantiate, &emit_steps},
    EmitTarget{"graph", "the dependency graph as text: every op and its edges", Pass::Graph, &emit_graph},
    EmitTarget{"dot", "the dependency graph for Graphviz (readable at N = 4)", Pass::Graph, &emit_dot},
    EmitTarget{"syncs", "per rank, the waits before each step and why (verifies first)", Pass::Sync, &emit_syncs},
};

}  // namespace

std::span<const EmitTarget> emit_targets() { return kEmitTargets; }

const EmitTarget* find_emit_target(const std::string& name) {
  for (const EmitTarget& t : kEmitTargets)
    if (name == t.name) return &t;
  return nullptr;
}

std::string emit_target_names() {
  std::string s;
  for (const EmitTarget& t : kEmitTargets) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

}  // namespace ccc::cli
