// The simulator: host emulation with virtual time (docs/simulator.md). The same generated kernels
// run against the host prelude, bit for bit as in plain host emulation, but every thread of every
// block of every rank is a fiber of one host thread, and each has a virtual clock that the
// prelude's primitives advance (ccc_abi.h, ccc_sim_hooks): loads of synchronisation words (a round
// trip to the memory that holds them), stores (visible one way later; a release only after the
// thread's earlier stores), block barriers (the latest thread, plus the barrier), polls (a wait
// ends when the awaited value became visible, not when the host happened to look) and data passes
// (bytes serialised on every memory and link they cross, at the topology's bandwidths).
//
// The fibers run in the order of their clocks (a conservative discrete-event simulation): a
// thread that is about to read what others write waits until no thread is behind it, so it sees
// exactly the stores visible at its time, and the virtual times of a run do not depend on how the
// host scheduled anything. A rank's launches run in order on its stream, each starting a launch
// overhead after the one before it ended.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "host_backend.h"
#include "topology.h"

namespace ccc {

// What the simulator charges beyond the topology file's constants: measured properties of the GPU
// itself, not of the interconnect (docs/cost_model.md, "The simulator's constants", names each
// source).
struct SimConstants {
  double local_load = 0;   // s: a strong load of a word in the GPU's own memory, issue to value
  double local_store = 0;  // s: a store to the GPU's own memory until another SM's load sees it
  double barrier = 0;      // s: a block barrier once the last thread has arrived
  double issue = 0;        // s: issuing one primitive (a load, a store, a pass's setup)
};
SimConstants default_sim_constants();

// What a placed range of memory holds (HostRanks' layout): for naming words in reports.
enum class SimMemory { Sync, Inbox, LlLines, Other };

class SimEngine {
 public:
  // Rank r runs on GPU r of `topology` (which has at least `nranks` GPUs, every pair reachable).
  // Each block runs `block_threads` threads; without `move_data` the kernels' data loops skip
  // their loads and stores (timing only: ccc_sim_hooks::move_data). Starts the simulation thread.
  SimEngine(Topology topology, int nranks, unsigned block_threads, bool move_data = true,
            SimConstants constants = default_sim_constants());
  ~SimEngine();  // waits for every queued launch, then stops the thread
  SimEngine(const SimEngine&) = delete;
  SimEngine& operator=(const SimEngine&) = delete;

  // Rank `rank`'s stream (HostRanks runs the rank's launches and tasks there).
  std::unique_ptr<HostQueue> stream(int rank);
  // [p, p + bytes) is memory of rank `rank`'s GPU (its sync state, inbox, LL slots): loads and
  // stores of words there are priced by the distance from the accessing rank. Words outside
  // every placed range count as the accessing rank's own.
  void place(int rank, const void* p, uint64_t bytes, SimMemory kind);
  // The critical path of the launch that ended last: the chain of moments that set its end
  // (waits that ended on a store, barriers that waited for their last thread, the stores), one
  // line each, from its launch, in µs since then. Empty before any launch ended.
  std::string critical_path();
  // Virtual seconds since the engine began: when the last work of any rank queued so far ended
  // (the streams are idle; otherwise what has ended so far).
  double now();

  const Topology& topology() const;
  unsigned block_threads() const;

  struct Impl;  // the engine's state (sim_engine.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ccc
