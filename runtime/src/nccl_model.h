// NCCL's own performance model, evaluated on a ccc topology: the baseline libccc-nccl routes by
// (a call goes to ccc where ccc's cost model predicts it faster than this) and `ccc tune` shows.
//
// It is NCCL's tuning model (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, as
// in NCCL 2.2x) for its ring on one node, with NCCL's constants: for each protocol (LL, LL128,
// Simple)
//   time = launch + baseLat + hops * hwLat + bytes / algBw,  algBw = busBw * nranks / nsteps
// where nsteps is 2(N-1) for allreduce, N-1 for reduce-scatter and all-gather, N for broadcast
// and reduce; hops is nsteps, but 1 for broadcast and reduce (which pipeline down the ring); and
// busBw is the ring's slowest link (NCCL's nChannels * bwIntra, which its search fills to the
// GPU's NVLink bandwidth), scaled by the protocol: LL carries 8 data bytes per 16 (1/4 of the bus
// for allreduce and reduce, 1/3 otherwise, capped at llMaxBw: 87.7 GB/s from Ampere on), LL128
// 120 of 128 (0.92). The fastest protocol wins, as in NCCL. What it leaves out, so a prediction,
// not NCCL's measured time: NVLS (NVLink SHARP, NCCL's choice for large allreduces on NVSwitch
// machines), trees, PAT, and the per-channel LL128 cap. NCCL's model has no all-to-all (NCCL
// runs it as send/recv): 0 for one. docs/nccl.md.
#pragma once

#include <cstdint>

#include "ccc/types.h"
#include "topology.h"

namespace ccc {

// Seconds NCCL's model predicts for `collective` moving `bytes` (the larger of a rank's send and
// receive bytes, NCCL's nBytes) among GPUs 0..nranks-1 of `topology`. 0 for nranks < 2, more
// ranks than GPUs, a ring hop without a path, or an all-to-all.
double nccl_predicted_seconds(Collective collective, int64_t bytes, int nranks, const Topology& topology);

}  // namespace ccc
