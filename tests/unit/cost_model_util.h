// Helpers for the topology, cost-model and selection tests.
#pragma once

#include "schedule_menu.h"
#include "step_program.h"
#include "sync_plan.h"
#include "topology.h"

namespace ccc::test {

// schedules/<name>.sched instantiated for n ranks (fails the test on error).
StepProgram shipped_program(const char* name, int n);

// Every schedules/*.sched, by name.
std::vector<SourceFile> shipped_schedule_sources();

// schedules/<name>.sched instantiated, verified and sync-planned (out of place) for n ranks.
PlannedProgram shipped_planned(const char* name, int n);

// N GPUs on one switch; no per-channel cap, so closed forms hold with one channel.
Topology uniform_switch(int n, double bandwidth, double latency, double reduce_bandwidth);
// N GPUs, every pair joined by its own direct link.
Topology full_mesh(int n, double bandwidth, double latency, double reduce_bandwidth);

// topologies/<name>.topo, parsed (fails the test on error).
Topology shipped_topology(const char* name);

}  // namespace ccc::test
