#include "schedule_builders.h"

#include <gtest/gtest.h>

namespace ccc::test {
namespace {

StepProgram empty_program(const char* name, int n, int64_t chunks, int nsteps) {
  StepProgram p;
  p.file = "<builder>";
  p.schedule = name;
  p.nranks = n;
  p.nchunks = chunks;
  p.phases = {{"main", {}}};
  p.steps.assign(static_cast<size_t>(nsteps), StepInfo{});
  p.ops.assign(static_cast<size_t>(n), std::vector<std::vector<Op>>(static_cast<size_t>(nsteps)));
  return p;
}

Op op(OpKind kind, int64_t begin, int64_t count, int peer, Buffer src = Buffer::Output) {
  return Op{kind, {begin, count}, peer, src, Buffer::Output, {}};
}

int log2_exact(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return l;
}

}  // namespace

StepProgram build_ring(int n) {
  StepProgram p = empty_program("ring", n, n, 2 * (n - 1));
  for (int r = 0; r < n; ++r) {
    int prev = (r - 1 + n) % n;
    for (int s = 0; s < n - 1; ++s) {
      p.ops[r][s].push_back(op(OpKind::Reduce, ((r - s - 1) % n + n) % n, 1, prev));
      p.ops[r][n - 1 + s].push_back(op(OpKind::Copy, ((r - s) % n + n) % n, 1, prev));
    }
  }
  return p;
}

StepProgram build_oneshot(int n) {
  StepProgram p = empty_program("oneshot", n, 1, 1);
  for (int r = 0; r < n; ++r)
    for (int q = 1; q < n; ++q) p.ops[r][0].push_back(op(OpKind::Reduce, 0, 1, (r + q) % n, Buffer::Input));
  return p;
}

StepProgram build_twoshot(int n) {
  StepProgram p = empty_program("twoshot", n, n, 2);
  for (int r = 0; r < n; ++r)
    for (int q = 1; q < n; ++q) {
      int peer = (r + q) % n;
      p.ops[r][0].push_back(op(OpKind::Reduce, r, 1, peer, Buffer::Input));
      p.ops[r][1].push_back(op(OpKind::Copy, peer, 1, peer));
    }
  return p;
}

StepProgram build_butterfly(int n) {
  int levels = log2_exact(n);
  StepProgram p = empty_program("butterfly", n, n, 2 * levels);
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < levels; ++k) {
      int half = n >> (k + 1);  // reduce-scatter: keep my half of the current block
      p.ops[r][k].push_back(op(OpKind::Reduce, r / half * half, half, r ^ half));
      int got = 1 << k;  // all-gather: fetch the partner's block
      p.ops[r][levels + k].push_back(op(OpKind::Copy, (r ^ got) / got * got, got, r ^ got));
    }
  return p;
}

StepProgram build_tree(int n) {
  int levels = log2_exact(n);
  StepProgram p = empty_program("tree", n, 1, 2 * levels);
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < levels; ++k) {
      int stride = 1 << k;
      if (r % (2 * stride) == 0) p.ops[r][k].push_back(op(OpKind::Reduce, 0, 1, r + stride));
      int span = n >> (k + 1);
      if (r % (2 * span) == span) p.ops[r][levels + k].push_back(op(OpKind::Copy, 0, 1, r - span));
    }
  return p;
}

SyncPlan ring_sync_plan(const StepProgram& ring) {
  SyncPlan s;
  int n = ring.nranks;
  s.waits.assign(static_cast<size_t>(n), std::vector<std::vector<Wait>>(static_cast<size_t>(ring.nsteps() + 1)));
  for (int r = 0; r < n; ++r)
    for (int k = 0; k <= ring.nsteps(); ++k)
      s.waits[r][k].push_back(Wait{(r - 1 + n) % n, k - 1, SyncReason::RAW, ""});
  return s;
}

static Topology uniform_gpus(int n, double reduce_bandwidth) {
  Topology t;
  t.name = "uniform";
  t.gpus.assign(static_cast<size_t>(n), Gpu{"test", 90, 1e15, reduce_bandwidth, 1e15, 64});
  return t;
}

Topology uniform_switch(int n, double bandwidth, double latency, double reduce_bandwidth) {
  Topology t = uniform_gpus(n, reduce_bandwidth);
  Switch s{"sw", FabricKind::NVSwitch, {bandwidth, latency}, {}};
  for (int g = 0; g < n; ++g) s.gpus.push_back(g);
  t.switches.push_back(s);
  return t;
}

Topology full_mesh(int n, double bandwidth, double latency, double reduce_bandwidth) {
  Topology t = uniform_gpus(n, reduce_bandwidth);
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) t.links.push_back(DirectLink{a, b, FabricKind::NVLink, {bandwidth, latency}});
  return t;
}

Topology shipped_topology(const char* name) {
  std::string errors;
  auto t = load_topology(std::string(CCC_SOURCE_DIR) + "/topologies/" + name + ".topo", errors);
  EXPECT_TRUE(t.has_value()) << errors;
  return t.value_or(Topology{});
}

}  // namespace ccc::test
