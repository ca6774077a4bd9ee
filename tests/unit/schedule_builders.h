// Step programs built directly in C++ for the cost-model and selection tests, so they do not
// depend on the front end. Each follows the algorithm its shipped schedule describes.
#pragma once

#include "ccc/step_program.h"
#include "ccc/sync_plan.h"
#include "ccc/topology.h"

namespace ccc::test {

StepProgram build_ring(int n);       // reduce-scatter then all-gather, N-1 steps each, chunks N
StepProgram build_oneshot(int n);    // one step: every rank reduces every peer's input, chunks 1
StepProgram build_twoshot(int n);    // reduce own chunk from all peers' inputs, then gather, chunks N
StepProgram build_butterfly(int n);  // recursive halving then doubling, N a power of two
StepProgram build_tree(int n);       // binomial reduce to rank 0, then binomial broadcast; N pow2

// The ring's waits: each step waits on its predecessor's previous step.
SyncPlan ring_sync_plan(const StepProgram& ring);

// N GPUs on one switch; no per-channel cap, so closed forms hold with one channel.
Topology uniform_switch(int n, double bandwidth, double latency, double reduce_bandwidth);
// N GPUs, every pair joined by its own direct link.
Topology full_mesh(int n, double bandwidth, double latency, double reduce_bandwidth);

// The shipped topology file topologies/<name>.topo, parsed (fails the test on error).
Topology shipped_topology(const char* name);

}  // namespace ccc::test
