// Front-end speed: parse + instantiate the ring schedule for N ranks. N = 4096 measures how fast
// the oversized program (33.5 M ops) is refused. Numbers: docs/performance.md.
#include <benchmark/benchmark.h>

#include "pipeline.h"

namespace {

void BM_ParseInstantiateRing(benchmark::State& state) {
  ccc::Diagnostics read_diags;
  std::optional<ccc::SourceFile> file = ccc::read_source(CCC_SOURCE_DIR "/schedules/ring.sched", read_diags);
  if (!file) {
    state.SkipWithError("cannot read schedules/ring.sched");
    return;
  }
  const int n = static_cast<int>(state.range(0));
  int64_t ops = 0;
  bool refused = false;
  for (auto _ : state) {
    ccc::Diagnostics diags;
    std::optional<ccc::StepProgram> p = ccc::run_front_end(*file, {n, 0}, diags);
    refused = !p;
    ops = p ? p->num_ops() : 0;
    benchmark::DoNotOptimize(p);
  }
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["refused"] = refused ? 1 : 0;
  state.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ParseInstantiateRing)->Arg(8)->Arg(64)->Arg(512)->Arg(4096)->Unit(benchmark::kMicrosecond);

}  // namespace
