// The alpha-beta-gamma cost model, evaluated on a step program (and its sync plan when there is
// one) over a topology. docs/cost_model.md derives it and lists its approximations.
//
// Per window (below) and channel, the cost of rank r's step k is
//   tau(r,k) = alpha + transfer + reduced bytes * gamma
//   alpha    the slowest latency among the routes r reads over in that step, plus, given a sync
//            plan, the slowest route latency among its waits (one thread per peer polls them
//            together; entry waits only in the first window);
//   transfer the longest drain time among the fabric resources r's reads use (a resource's
//            bandwidth is shared by every read crossing it in that step, from any rank, and by
//            every channel), at least the bytes r's channel moves / channel bandwidth.
// Channels split every chunk evenly, a channel's slice is cut into tiles, and `pipeline` tiles
// make a window: the unit between two progress updates (the kernel's sync granularity). Windows
// pipeline through the steps:
//   time = launch + fill + (windows - 1) * period
//   fill   = one window through the program: lock-step sum over steps of max over ranks of tau, or,
//            given a sync plan, the longest path through its waits;
//   period = the busiest rank's sum of tau over steps, or the busiest resource's traffic per
//            window, whichever is larger.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "kernel_plan.h"
#include "step_program.h"
#include "sync_plan.h"
#include "topology.h"

namespace ccc {

// Chunks, channel slices and tiles are cut on multiples of this many bytes.
inline constexpr int64_t kCutGranule = 64;

// The blocks of a rank's launch of an RMSNorm kernel (ccc_launch_args::rank_blocks): its
// channels, and then norm blocks, up to one block per row and kMaxRankBlocks in all, so that the
// norm after the exit runs at the rate of that many blocks rather than of the channels alone.
inline constexpr int kMaxRankBlocks = 64;  // CCC_MAX_CHANNELS
// `most`: what the backend allows (Backend::max_rank_blocks; 0: the channels alone).
inline int rmsnorm_rank_blocks(int channels, int64_t rows, int most = kMaxRankBlocks) {
  return static_cast<int>(std::max<int64_t>(channels, std::min<int64_t>(rows, most)));
}

// A fused epilogue as the model prices it (docs/epilogue.md, "Cost"), the simulator's way: the
// completing write reads the rank's residual too (through the GPU's memory), and after the exit
// waits each channel norms its share of the rank's rows, at the block's rate.
struct EpilogueShape {
  Epilogue kind = Epilogue::None;
  int64_t row_bytes = 0;      // ResidualRmsNorm: one row, hidden x the element size
  int elem_size = 1;          // bytes per element (the fp8 output has one byte per element)
  bool residual_out = false;  // the norm writes the pre-norm sums too
  bool quant_out = false;     // and an fp8 copy of its output
  int max_rank_blocks = kMaxRankBlocks;  // norm blocks up to this (Backend::max_rank_blocks)
  // Bytes the norm reads and writes per byte of the rows: each row read twice and written
  // once, then residual_out's and the fp8 output's writes.
  double norm_accesses() const { return (residual_out ? 4.0 : 3.0) + (quant_out ? 1.0 / elem_size : 0.0); }
};

// The kernel parameters the model prices (KernelOptions' channels, tile_bytes and pipeline).
struct CostParams {
  int channels = 1;
  int64_t tile_bytes = 0;  // bytes of one channel's slice of one chunk per tile; 0: the whole
                           // slice is one window (an idealisation for closed forms: kernels
                           // need a real tile size)
  int pipeline = 1;        // tiles per window (per progress update)
  Protocol protocol = Protocol::Simple;  // ll: pushed lines (a read is one latency, remote
                                         // bytes cost twice, no exit waits)
  EpilogueShape epilogue = {};           // fused into the kernel (allreduce only)
};

struct Estimate {
  double time = 0;      // s
  double algbw = 0;     // bytes/s: message bytes / time
  double busbw = 0;     // algbw * bus_factor (nccl-tests' convention)
  int64_t windows = 1;  // windows per channel slice of a chunk
  double fill = 0;      // s: the first window through every step
  double period = 0;    // s: each further window
  double launch = 0;    // s: the kernel launch, part of time
  double epilogue = 0;  // s: the norm's pass after the exit waits, part of time (the residual's
                        // reads are in fill and period)
  // Cross-GPU latencies one after another on the critical path: each wait (the flight of the
  // producer's pushed flag) and each step's reads; the floor a small message cannot beat.
  int64_t serial_latencies = 0;
};

// nccl-tests' busbw factor: allreduce 2(N-1)/N, reduce_scatter, allgather and alltoall (N-1)/N,
// else 1.
double bus_factor(Collective c, int nranks);

// A step program prepared for one topology: routes and per-step fabric loads are worked out
// once (they do not depend on the size), so estimate() prices any size and parameters cheaply.
// Rank r runs on GPU r. `sync` may be null (lock-step). The model copies what it needs.
class CostModel {
 public:
  // Throws std::invalid_argument when the topology has too few GPUs or no path between two
  // ranks, or the sync plan does not match the program.
  CostModel(const StepProgram& program, const SyncPlan* sync, const Topology& topo);
  ~CostModel();
  CostModel(CostModel&&) noexcept;
  CostModel& operator=(CostModel&&) noexcept;

  // `bytes` is the size of the buffer the schedule's chunks partition: the message for
  // allreduce, broadcast and reduce; the whole N-block input of reduce_scatter; the whole
  // N-block output of allgather; the whole N-block send buffer of alltoall. Throws std::invalid_argument on bad params.
  Estimate estimate(int64_t bytes, const CostParams& params) const;

 private:
  double norm_seconds(int64_t bytes, const CostParams& params) const;
  struct Prepared;
  std::unique_ptr<const Prepared> prepared_;
};

// The same epilogue as a kernel of its own after the plain collective (what an unfused stack
// launches: vLLM's fused_add_rms_norm after its allreduce), at its best: one more launch, and
// every buffer read or written once at the GPU's memory bandwidth, its whole grid streaming (the
// allreduce's output and the residual read; the output, residual_out and the fp8 output
// written). The comparison docs/epilogue.md makes: fused against plain + this.
double separate_epilogue_seconds(const Topology& topo, int nranks, int64_t bytes, const EpilogueShape& epilogue);

// CostModel(program, sync, topo).estimate(bytes, params).
Estimate estimate_cost(const StepProgram& program, const SyncPlan* sync, const Topology& topo, int64_t bytes,
                       const CostParams& params);

}  // namespace ccc
