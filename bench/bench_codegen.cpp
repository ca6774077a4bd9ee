// Code generation: lowering + emission time, and cold NVRTC compile time (cubin, sm_90) of each
// shipped allreduce schedule at N = 8, f32 sum, default parameters.
#include <benchmark/benchmark.h>

#include <stdexcept>

#include "emit_cuda.h"
#include "lower.h"
#include "nvrtc_compile.h"
#include "pipeline.h"
#include "sync.h"
#include "verify.h"

namespace ccc {
namespace {

const char* const kSchedules[] = {"ring", "oneshot", "twoshot", "butterfly", "tree", "dbtree"};

PlannedProgram planned(const char* name, int nranks = 8) {
  Diagnostics diags;
  std::optional<SourceFile> file = read_source(std::string(CCC_SOURCE_DIR) + "/schedules/" + name + ".sched", diags);
  std::optional<StepProgram> program = file ? run_front_end(*file, {nranks, 0}, diags) : std::nullopt;
  std::optional<PlannedProgram> pp = program && verify(*program, diags) ? plan_syncs(*program, {}, diags) : std::nullopt;
  if (!pp) throw std::runtime_error(diags.render(file ? &*file : nullptr));
  return *pp;
}

KernelPlan lowered(const PlannedProgram& pp) {
  Diagnostics diags;
  std::optional<KernelPlan> plan = lower(pp, {}, diags);
  if (!plan) throw std::runtime_error(diags.render(nullptr));
  return std::move(*plan);
}

void BM_LowerAndEmit(benchmark::State& state) {
  const PlannedProgram pp = planned(kSchedules[state.range(0)]);
  for (auto _ : state) benchmark::DoNotOptimize(emit_cuda(lowered(pp)).source.size());
  state.SetLabel(kSchedules[state.range(0)]);
}
BENCHMARK(BM_LowerAndEmit)->DenseRange(0, 5)->Unit(benchmark::kMicrosecond);

void BM_NvrtcCubinSm90(benchmark::State& state) {
  NvrtcRequest req;
  req.source = emit_cuda(lowered(planned(kSchedules[state.range(0)]))).source;
  for (auto _ : state) {
    NvrtcOutput out = nvrtc_compile(req);
    if (!out.ok) state.SkipWithError(out.log.c_str());
  }
  state.SetLabel(kSchedules[state.range(0)]);
}
BENCHMARK(BM_NvrtcCubinSm90)->DenseRange(0, 5)->Iterations(3)->Unit(benchmark::kMillisecond);

// Ring against N: with its ranks sharing one table, the source and the compile stay flat.
void BM_NvrtcCubinSm90RingRanks(benchmark::State& state) {
  NvrtcRequest req;
  req.source = emit_cuda(lowered(planned("ring", static_cast<int>(state.range(0))))).source;
  for (auto _ : state) {
    NvrtcOutput out = nvrtc_compile(req);
    if (!out.ok) state.SkipWithError(out.log.c_str());
  }
  state.counters["source_bytes"] = static_cast<double>(req.source.size());
}
BENCHMARK(BM_NvrtcCubinSm90RingRanks)->Arg(8)->Arg(72)->Arg(256)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ccc
