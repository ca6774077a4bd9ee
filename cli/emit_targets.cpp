#include "emit_targets.h"

#include <array>

#include "ccc/print_steps.h"

namespace ccc::cli {
namespace {

constexpr std::array kEmitTargets{
    EmitTarget{"steps", "the step program: for each step, every rank's ops", Pass::Instantiate, &print_steps},
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
