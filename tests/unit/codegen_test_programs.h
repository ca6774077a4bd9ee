// Test-only scaffolding for the code-generation tests: step programs built by hand and a
// conservative sync plan (every rank waits for every peer to finish the previous step). Delete
// once the front end and the sync planner are merged and the tests use schedules/*.sched.
#pragma once

#include "ccc/sync_plan.h"

namespace ccc::testing {

inline int emod(int a, int n) { return ((a % n) + n) % n; }

inline StepProgram empty_program(const char* name, int n, int64_t nchunks) {
  StepProgram p;
  p.file = std::string(name) + ".sched";
  p.schedule = name;
  p.nranks = n;
  p.nchunks = nchunks;
  p.ops.resize(n);
  return p;
}

inline void add_step(StepProgram& p, int phase, std::string label, int line) {
  p.steps.push_back({phase, std::move(label), {line, 5}});
  for (auto& rank : p.ops) rank.emplace_back();
}

inline Op op(OpKind kind, int64_t chunk, int peer, int line, Buffer src = Buffer::Output, Buffer dst = Buffer::Output) {
  return {kind, {chunk, 1}, peer, src, dst, {line, 9}};
}

// Ring: reduce-scatter then all-gather, N - 1 steps each.
inline StepProgram ring_program(int n) {
  StepProgram p = empty_program("ring", n, n);
  p.phases = {{"reduce_scatter", {5, 3}}, {"all_gather", {8, 3}}};
  for (int s = 0; s <= n - 2; ++s) {
    add_step(p, 0, "reduce_scatter s=" + std::to_string(s), 6);
    for (int r = 0; r < n; ++r) p.ops[r].back().push_back(op(OpKind::Reduce, emod(r - s - 1, n), emod(r - 1, n), 6));
  }
  for (int s = 0; s <= n - 2; ++s) {
    add_step(p, 1, "all_gather s=" + std::to_string(s), 9);
    for (int r = 0; r < n; ++r) p.ops[r].back().push_back(op(OpKind::Copy, emod(r - s, n), emod(r - 1, n), 9));
  }
  return p;
}

// One-shot: every rank reduces every peer's chunk 0 in one step (out of place only: it reads
// what the peers overwrite in the same step, which only first touch makes safe).
inline StepProgram oneshot_program(int n) {
  StepProgram p = empty_program("oneshot", n, 1);
  p.phases = {{"direct", {4, 3}}};
  add_step(p, 0, "direct", 4);
  for (int r = 0; r < n; ++r)
    for (int q = 1; q < n; ++q) p.ops[r].back().push_back(op(OpKind::Reduce, 0, emod(r + q, n), 4));
  return p;
}

// Butterfly: recursive halving, then recursive doubling (N a power of two).
inline StepProgram butterfly_program(int n) {
  StepProgram p = empty_program("butterfly", n, n);
  p.phases = {{"reduce_scatter", {5, 3}}, {"all_gather", {11, 3}}};
  int log2n = 0;
  while ((1 << log2n) < n) ++log2n;
  for (int k = 0; k < log2n; ++k) {
    add_step(p, 0, "reduce_scatter k=" + std::to_string(k), 8);
    const int m = n >> (k + 1);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c)
        if ((c ^ r) / m == 0) p.ops[r].back().push_back(op(OpKind::Reduce, c, r ^ m, 8));
  }
  for (int k = 0; k < log2n; ++k) {
    add_step(p, 1, "all_gather k=" + std::to_string(k), 14);
    const int m = 1 << k;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c)
        if ((c ^ r ^ m) / m == 0) p.ops[r].back().push_back(op(OpKind::Copy, c, r ^ m, 14));
  }
  return p;
}

// Before step k every rank waits for every peer to finish step k - 1; before returning, for every
// peer to finish the last step. Correct for any program without same-step hazards.
inline PlannedProgram conservative_plan(StepProgram p) {
  PlannedProgram pp;
  const int n = p.nranks, steps = p.nsteps();
  pp.sync.waits.assign(n, std::vector<std::vector<Wait>>(steps + 1));
  for (int r = 0; r < n; ++r)
    for (int k = 0; k <= steps; ++k)
      for (int q = 0; q < n; ++q)
        if (q != r && (k < steps || steps > 0)) {
          const SyncReason why = k == 0 ? SyncReason::Entry : k == steps ? SyncReason::Exit : SyncReason::RAW;
          pp.sync.waits[r][k].push_back({q, k - 1, why, ""});
          ++pp.sync.cross_rank_edges;
          ++pp.sync.waits_kept;
        }
  pp.program = std::move(p);
  return pp;
}

}  // namespace ccc::testing
