#include "emit_targets.h"

#include <fmt/format.h>

#include <array>
#include <sstream>

#include "ccc_abi.h"  // CCC_MAX_DEVICE_RANKS
#include "graph.h"
#include "ccc/jit_cache.h"
#include "nvrtc_jit.h"
#include "print_steps.h"
#include "rewrites.h"
#include "step_diagram.h"
#include "sync.h"

namespace ccc {
namespace {

std::string emit_steps(const EmitInput& in) { return print_steps(in.program, in.epilogue); }
// The graphs show what verification and sync planning analyse: first reads resolved to the input.
std::string emit_graph(const EmitInput& in) {
  const StepProgram p = resolve_first_reads(in.program);
  return print_graph(p, build_graph(p, in.in_place));
}
std::string emit_dot(const EmitInput& in) {
  const StepProgram p = resolve_first_reads(in.program);
  std::ostringstream out;
  write_dot(out, p, build_graph(p, in.in_place));
  return out.str();
}
std::string emit_syncs(const EmitInput& in) { return print_syncs(*in.planned); }
// The program as planned (staging included): what runs, and what the waits refer to.
std::string emit_svg(const EmitInput& in) {
  return step_diagram_svg(in.planned->program, in.show_syncs ? &in.planned->sync : nullptr);
}
// `ccc tune --format tsv` with one candidate: this schedule's best parameters and time per size.
std::string emit_cost(const EmitInput& in) {
  const CandidateSchedule candidate{in.planned->program.schedule, &in.planned->program, &in.planned->sync};
  try {
    return format_tune_tsv(tune_table(in.program.collective, in.elem_size, *in.topo, {candidate}, in.cost_grid));
  } catch (const std::invalid_argument& e) {  // e.g. more ranks than the topology has GPUs
    throw std::runtime_error(e.what());
  }
}
std::string emit_cu(const EmitInput& in) { return in.kernel->source; }

// Through the process's JIT cache ($CCC_CACHE_DIR): a second identical compile is a disk hit.
std::string nvrtc(const EmitInput& in, NvrtcTarget target) {
  if (in.plan->nranks > CCC_MAX_DEVICE_RANKS)
    throw std::runtime_error(fmt::format(
        "a GPU kernel has at most {} ranks, not {}: each block keeps a table of its peers in shared memory, and "
        "more would not fit the 48 KiB a block may declare (--emit cu and host runs have no such limit)",
        CCC_MAX_DEVICE_RANKS, in.plan->nranks));
  NvrtcRequest req;
  req.source = in.kernel->source;
  req.name = in.kernel->kernel_name + ".cu";
  req.arch = in.arch;
  req.target = target;
  return *nvrtc_build_cached(JitCache::process_cache(), req);
}
std::string emit_ptx(const EmitInput& in) { return nvrtc(in, NvrtcTarget::Ptx); }
std::string emit_cubin(const EmitInput& in) { return nvrtc(in, NvrtcTarget::Cubin); }

constexpr std::array kEmitTargets{
    EmitTarget{"steps", "the step program: for each step, every rank's ops", Pass::Instantiate, &emit_steps},
    EmitTarget{"graph", "the dependency graph as text: every op and its edges", Pass::Graph, &emit_graph},
    EmitTarget{"dot", "the dependency graph for Graphviz: a row per rank, a column per step", Pass::Graph, &emit_dot},
    EmitTarget{"syncs", "per rank, the waits before each step and why (verifies first)", Pass::Sync, &emit_syncs},
    EmitTarget{"svg", "the step diagram as SVG: a lane per rank, a column per step (verifies first)", Pass::Sync,
               &emit_svg},
    EmitTarget{"cost", "predicted time per size on --topo F, best channels and tile (as ccc tune --format tsv)",
               Pass::Sync, &emit_cost},
    EmitTarget{"cu", "the fused kernel as CUDA C++ (also compiles for the host)", Pass::Emit, &emit_cu},
    EmitTarget{"ptx", "the kernel compiled by NVRTC to PTX for --arch", Pass::Emit, &emit_ptx},
    EmitTarget{"cubin", "the kernel compiled by NVRTC to a cubin for --arch", Pass::Emit, &emit_cubin},
};

}  // namespace

const EmitTarget* find_emit_target(const std::string& name) {
  for (const EmitTarget& t : kEmitTargets)
    if (name == t.name) return &t;
  return nullptr;
}

std::vector<std::string> emit_target_names() {
  std::vector<std::string> names;
  for (const EmitTarget& t : kEmitTargets) names.push_back(t.name);
  return names;
}

std::string emit_target_help(int indent) {
  std::string s;
  for (const EmitTarget& t : kEmitTargets) s += fmt::format("\n{:{}}{:<6} {}", "", indent, t.name, t.help);
  return s;
}

}  // namespace ccc
