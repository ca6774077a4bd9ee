// Choosing a schedule and its parameters for one collective call, by the cost model.
//
// The runtime instantiates every shipped schedule of the collective for its N (front end:
// run_front_end, then the sync planner when there is one) and passes them as candidates; for a
// message size, select_schedule evaluates each candidate over a grid of channel counts and tile
// sizes and returns the fastest prediction. Nothing here knows any algorithm by name: which
// schedule wins at which size follows from the topology and the step programs alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model.h"

namespace ccc {

struct CandidateSchedule {
  std::string name;                  // what CCC_ALGO names it by, e.g. "ring"
  const StepProgram* program = nullptr;  // instantiated for the communicator's rank count
  const SyncPlan* sync = nullptr;    // optional: waits sharpen the estimate
};

struct Choice {
  const CandidateSchedule* candidate = nullptr;  // points into the candidates passed in
  CostParams params;
  Estimate estimate;
  bool forced = false;  // chosen by CCC_ALGO / SelectOptions::algo, not by the model
  const std::string& name() const { return candidate->name; }
};

struct SelectOptions {
  std::string algo;               // force this schedule; empty: the CCC_ALGO variable, if set
  std::vector<int> channels;      // grid to search; empty: 1, 2, 4, ... up to the GPUs' max
  std::vector<int64_t> tiles;     // tile sizes to search; empty: kDefaultTiles
  int pipeline = 2;               // tiles per progress update the kernels are built with
  std::vector<Protocol> protocols;  // to search; empty: simple, and ll up to kLlMaxBytes
  double tolerance = 0.01;        // prefer fewer channels, then fewer windows, within this of the best
  EpilogueShape epilogue;         // a fused allreduce's epilogue, priced with each candidate
};

// Tile sizes the kernels are built with (KernelOptions::tile_bytes: multiples of 64).
inline const std::vector<int64_t> kDefaultTiles = {16 << 10, 64 << 10, 256 << 10, 1 << 20};

// The best parameters of every candidate of `collective`, in candidate order (others skipped).
// `bytes` is sized as for estimate_cost and must be a multiple of `elem_size` (1, 2, 4 or 8);
// the model charges by bytes, so the element size only validates the call.
// Throws std::invalid_argument on bad arguments or candidates of differing rank counts.
std::vector<Choice> tune_candidates(Collective collective, int64_t bytes, int elem_size, const Topology& topo,
                                    const std::vector<CandidateSchedule>& candidates,
                                    const SelectOptions& options = {});

// The fastest candidate, or the one SelectOptions::algo (else CCC_ALGO) names, with its best
// parameters. Throws std::invalid_argument when no candidate fits or the forced name matches none
// (the message lists the names there are).
Choice select_schedule(Collective collective, int64_t bytes, int elem_size, const Topology& topo,
                       const std::vector<CandidateSchedule>& candidates, const SelectOptions& options = {});

// `ccc tune`: one row per size, 8 bytes (with a norm epilogue: one row) to 1 GiB by doubling,
// every candidate's best predicted time and the choice; with an epilogue, also the unfused
// alternative: the plain collective's choice, then the epilogue as a kernel of its own
// (separate_epilogue_seconds).
struct TuneRow {
  int64_t bytes = 0;
  std::vector<Choice> per_schedule;
  Choice choice;
  double unfused = 0;  // s; 0 without an epilogue
};
std::vector<TuneRow> tune_table(Collective collective, int elem_size, const Topology& topo,
                                const std::vector<CandidateSchedule>& candidates, const SelectOptions& options = {});
std::string format_tune_table(const std::vector<TuneRow>& rows, const std::string& title);

// The same rows for scripts and spreadsheets: a header line, then one tab-separated line per size
// describing the choice: bytes, schedule, protocol, time_us, busbw_gbps, serial_latencies,
// channels, tile_bytes (0: the whole slice), launch_us, and with an epilogue epilogue_us (the
// norm's pass, part of time_us) and unfused_us. The protocol is the choice's: "simple"
// (progress counters, then peer loads) or "ll" (pushed lines of data and flag).
std::string format_tune_tsv(const std::vector<TuneRow>& rows);

}  // namespace ccc
