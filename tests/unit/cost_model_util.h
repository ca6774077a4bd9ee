// Helpers for the topology, cost-model and selection tests.
#pragma once

#include "ccc/schedule_menu.h"
#include "ccc/step_program.h"
#include "ccc/sync_plan.h"
#include "ccc/topology.h"

namespace ccc::test {

// schedules/<name>.sched instantiated for n ranks (fails the test on error).
StepProgram shipped_program(const char* name, int n);

// Every schedules/*.sched, by name.
std::vector<SourceFile> shipped_schedule_sources();

// The waits of a ring: each step waits on its predecessor's previous step (and the exit on its
// last one).
SyncPlan ring_sync_plan(const StepProgram& ring);

// N GPUs on one switch; no per-channel cap, so closed forms hold with one channel.
Topology uniform_switch(int n, double bandwidth, double latency, double reduce_bandwidth);
// N GPUs, every pair joined by its own direct link.
Topology full_mesh(int n, double bandwidth, double latency, double reduce_bandwidth);

// topologies/<name>.topo, parsed (fails the test on error).
Topology shipped_topology(const char* name);

}  // namespace ccc::test
