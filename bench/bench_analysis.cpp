// Analysis speed on the ring schedule (2N(N-1) ops): dependency graph, verification, sync planning,
// and verify + plan together (what `ccc check` adds to the front end). The program is instantiated
// once, outside the timing. Numbers and complexity: docs/performance.md.
#include <benchmark/benchmark.h>

#include "graph.h"
#include "pipeline.h"
#include "sync.h"
#include "verify.h"

namespace {

std::optional<ccc::StepProgram> ring(benchmark::State& state) {
  ccc::Diagnostics diags;
  std::optional<ccc::SourceFile> file = ccc::read_source(CCC_SOURCE_DIR "/schedules/ring.sched", diags);
  std::optional<ccc::StepProgram> p;
  if (file) p = ccc::run_front_end(*file, {static_cast<int>(state.range(0)), 0}, diags);
  if (!p) state.SkipWithError("cannot instantiate schedules/ring.sched");
  return p;
}

void report_ops(benchmark::State& state, const ccc::StepProgram& p) {
  state.counters["ops"] = static_cast<double>(p.num_ops());
}

void BM_BuildGraphRing(benchmark::State& state) {
  std::optional<ccc::StepProgram> p = ring(state);
  if (!p) return;
  for (auto _ : state) benchmark::DoNotOptimize(ccc::build_graph(*p));
  report_ops(state, *p);
}

void BM_VerifyRing(benchmark::State& state) {
  std::optional<ccc::StepProgram> p = ring(state);
  if (!p) return;
  for (auto _ : state) {
    ccc::Diagnostics diags;
    if (!ccc::verify(*p, diags)) state.SkipWithError("ring does not verify");
  }
  report_ops(state, *p);
}

void BM_PlanSyncsRing(benchmark::State& state) {
  std::optional<ccc::StepProgram> p = ring(state);
  if (!p) return;
  int64_t waits = 0;
  for (auto _ : state) {
    ccc::Diagnostics diags;
    std::optional<ccc::PlannedProgram> planned = ccc::plan_syncs(*p, {}, diags);
    if (!planned) state.SkipWithError("ring has no sync plan");
    waits = planned ? planned->sync.waits_kept : 0;
  }
  report_ops(state, *p);
  state.counters["waits"] = static_cast<double>(waits);
}

void BM_VerifyAndPlanRing(benchmark::State& state) {
  std::optional<ccc::StepProgram> p = ring(state);
  if (!p) return;
  for (auto _ : state) {
    ccc::Diagnostics diags;
    benchmark::DoNotOptimize(ccc::run_analysis(*p, {}, diags));
  }
  report_ops(state, *p);
}

BENCHMARK(BM_BuildGraphRing)->Arg(8)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VerifyRing)->Arg(8)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlanSyncsRing)->Arg(8)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VerifyAndPlanRing)->Arg(8)->Arg(64)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace
