// NCCL's own performance model, evaluated on a ccc topology: the baseline libccc-nccl routes by
// (a call goes to ccc where ccc's cost model predicts it faster than this) and `ccc tune` shows.
//
// It is NCCL's tuning model (src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, as
// in NCCL 2.2x) for its ring, on one node or across a topology's network, with NCCL's constants:
// on one node, for each protocol (LL, LL128, Simple)
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
#include <optional>

#include "ccc/types.h"
#include "topology.h"

namespace ccc {

// A ring as NCCL's model sees it.
struct NcclRing {
  int nranks = 0;
  int nodes = 1;               // > 1: the ring crosses a network nodes x (nranks / nodes) ranks wide
  double bus = 0;              // bytes/s: the slowest hop within a node (NCCL's nChannels * bwIntra)
  bool pci = false;            // a hop within a node is PCIe (NCCL's PCI latencies, no LL128)
  int arch = 0;                // the GPUs' compute capability x 10
  double network_bus = 0;      // bytes/s the ring's channels get between nodes: every NIC of a node
  double network_latency = 0;  // s: a NIC's, beside NCCL's network step
  double launch = 0;           // s: one kernel launch
};

// Seconds NCCL's model predicts for `collective` moving `bytes` (the larger of a rank's send and
// receive bytes, NCCL's nBytes) around `ring`; 0 for fewer than 2 ranks or an all-to-all. Across
// nodes, as tuning.cc has it: network steps (2 x nodes for an allreduce, nodes - 1 for
// reduce-scatter and all-gather, at most the ring's steps) pay NCCL's network latency and the
// NIC's (twice for Simple, whose flush NCCL charges), the others at least
// NCCL's host overhead per network step; LL gets 1/4 of the bus, capped at 39 GB/s; LL128 0.7 of
// it with one rank per node.
double nccl_ring_seconds(Collective collective, int64_t bytes, const NcclRing& ring);

// NCCL's ring over `nranks` ranks of `topology`: within one node, GPUs 0..nranks-1; across its
// network's nodes, every GPU of every node (nranks = nodes x GPUs). nullopt for another count or
// a hop without a path.
std::optional<NcclRing> nccl_ring_of(const Topology& topology, int nranks);

// nccl_ring_seconds on nccl_ring_of(topology, nranks); 0 where there is no such ring.
double nccl_predicted_seconds(Collective collective, int64_t bytes, int nranks, const Topology& topology);

}  // namespace ccc
