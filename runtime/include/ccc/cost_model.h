// The alpha-beta-gamma cost model, evaluated on a step program (and its sync plan when there is
// one) over a topology. docs/cost_model.md derives it and lists its approximations.
//
// Per tile, the cost of rank r's step k is
//   tau(r,k) = alpha + transfer + reduced bytes * gamma
// where alpha is the slowest latency among the routes r reads over or waits on in that step,
// transfer is the longest drain time among the fabric resources r's reads use (a resource's
// bandwidth is shared by every read crossing it in that step, from any rank), and at least
// r's bytes / (channels * channel bandwidth). Channels split every chunk evenly, tiles split a
// channel's slice; tiles pipeline through the steps:
//   time = fill + (tiles - 1) * period
//   fill   = one tile through the program: lock-step sum over steps of max over ranks of tau, or,
//            given a sync plan, the longest path through its waits;
//   period = the busiest rank's sum of tau over steps, or the busiest resource's traffic per
//            tile, whichever is larger.
#pragma once

#include <cstdint>

#include "ccc/step_program.h"
#include "ccc/sync_plan.h"
#include "ccc/topology.h"

namespace ccc {

// Chunks, channel slices and tiles are cut on multiples of this many bytes.
inline constexpr int64_t kCutGranule = 64;

struct CostParams {
  int channels = 1;
  int64_t tile_bytes = 0;  // bytes of one channel's slice of one chunk per tile; 0 = one tile
};

struct Estimate {
  double time = 0;      // s
  double algbw = 0;     // bytes/s: message bytes / time
  double busbw = 0;     // algbw * bus_factor (nccl-tests' convention)
  int64_t tiles = 1;    // tiles per channel slice of a chunk
  double fill = 0;      // s: the first tile through every step
  double period = 0;    // s: each further tile
};

// nccl-tests' busbw factor: allreduce 2(N-1)/N, reduce_scatter and allgather (N-1)/N, else 1.
double bus_factor(Collective c, int nranks);

// Predicts one run of `program` on GPUs 0..nranks-1 of `topo`. `bytes` is the size of the
// buffer the schedule's chunks partition: the message for allreduce, broadcast and reduce; the
// whole N-block input of reduce_scatter; the whole N-block output of allgather. `sync` may be
// null (lock-step). Throws std::invalid_argument when the topology has too few GPUs or no path
// between two ranks, when the sync plan does not match the program, or on bad params.
Estimate estimate_cost(const StepProgram& program, const SyncPlan* sync, const Topology& topo, int64_t bytes,
                       const CostParams& params);

}  // namespace ccc
