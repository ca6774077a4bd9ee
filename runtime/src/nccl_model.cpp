#include "nccl_model.h"

#include <algorithm>
#include <limits>

namespace ccc {
namespace {

enum NcclProtocol { LL, LL128, Simple, kProtocols };

// NCCL's ring latencies in µs (tuning.cc: baseLat[ring], and hwLat[NVLink, PCI or NET][ring]).
constexpr double kBaseLatency[kProtocols] = {6.6, 14.0, 8.4};
constexpr double kNvlinkHopLatency[kProtocols] = {0.6, 1.9, 3.4};
constexpr double kPciHopLatency[kProtocols] = {1.0, 2.5, 5.7};
constexpr double kNetHopLatency[kProtocols] = {2.7, 4.0, 14.0};
// The host's cost of posting a network step (getNetOverhead: an x86 Intel CPU), thrice for Simple.
constexpr double kNetOverhead = 1.0;
// LL's bus bandwidth cap (tuning.cc: llMaxBws, GB/s): one node of Ampere or Hopper, else Volta;
// several nodes (an Intel host).
constexpr double kLlMaxBandwidthAmpere = 87.7e9;
constexpr double kLlMaxBandwidthVolta = 39.0e9;
constexpr double kLlMaxBandwidthNodes = 39.0e9;

}  // namespace

double nccl_ring_seconds(Collective collective, int64_t bytes, const NcclRing& ring) {
  const int n = ring.nranks;
  if (n < 2 || collective == Collective::AllToAll) return 0;
  const bool nodes = ring.nodes > 1;
  const int nsteps = collective == Collective::AllReduce ? 2 * (n - 1)
                     : collective == Collective::ReduceScatter || collective == Collective::AllGather ? n - 1
                                                                                                      : n;
  // NCCL counts 2 x nodes network steps in an allreduce of 2(N-1) steps, more than the ring has
  // with one rank per node: no more than its steps here.
  const int inter_steps = std::min(nsteps, !nodes                                 ? 0
                                           : collective == Collective::AllReduce ? 2 * ring.nodes
                                           : collective == Collective::ReduceScatter ||
                                                   collective == Collective::AllGather
                                               ? ring.nodes - 1
                                               : ring.nodes);
  const int intra_steps = nsteps - inter_steps;
  const bool rooted = collective == Collective::Broadcast || collective == Collective::Reduce;
  const bool quarter_ll = nodes || collective == Collective::AllReduce || collective == Collective::Reduce;
  const double ll_max = nodes ? kLlMaxBandwidthNodes : ring.arch >= 80 ? kLlMaxBandwidthAmpere : kLlMaxBandwidthVolta;
  const double* intra_latency = ring.pci ? kPciHopLatency : kNvlinkHopLatency;
  const double bus = nodes ? std::min(ring.bus, ring.network_bus) : ring.bus;
  const bool one_per_node = nodes && n == ring.nodes;
  double best = std::numeric_limits<double>::infinity();
  for (int p = 0; p < kProtocols; ++p) {
    if (p == LL128 && ring.pci) continue;  // NCCL enables LL128 over NVLink only
    double bus_bw = bus;
    if (p == LL) bus_bw = std::min(ll_max, bus * (quarter_ll ? 1.0 / 4 : 1.0 / 3));
    if (p == LL128) bus_bw *= one_per_node ? 0.7 : 0.92;
    const double alg_bw = bus_bw * n / nsteps;
    double latency = kBaseLatency[p];
    if (!nodes) {
      latency += (rooted ? 1 : nsteps) * intra_latency[p];  // broadcast and reduce pipeline down the ring
    } else {
      const double overhead = kNetOverhead * (p == Simple ? 3 : 1);
      const double network = kNetHopLatency[p] + ring.network_latency * 1e6 * (p == Simple ? 2 : 1);
      latency += intra_steps * std::max(intra_latency[p], overhead) + inter_steps * network;
    }
    best = std::min(best, latency * 1e-6 + static_cast<double>(bytes) / alg_bw);
  }
  return ring.launch + best;
}

std::optional<NcclRing> nccl_ring_of(const Topology& topology, int nranks) {
  const int per_node = topology.ngpus();
  const int nodes = topology.network.nodes;
  if (nranks < 2 || (nodes == 1 && nranks > per_node) || (nodes > 1 && nranks != nodes * per_node))
    return std::nullopt;
  NcclRing ring;
  ring.nranks = nranks;
  ring.nodes = nodes;
  ring.launch = topology.gpus.front().launch;
  ring.bus = std::numeric_limits<double>::infinity();
  ring.arch = std::numeric_limits<int>::max();
  // Within a node the ring runs 0 -> 1 -> ... (every GPU of the node when there are several):
  // its slowest hop sets the bus, and PCIe on any hop makes it a PCI ring (NCCL's typeIntra).
  const int ring_gpus = nodes > 1 ? per_node : nranks;
  for (int r = 0; r < ring_gpus && ring_gpus > 1; ++r) {
    const std::optional<Route> hop = route(topology, r, (r + 1) % ring_gpus);
    if (!hop) return std::nullopt;
    ring.bus = std::min(ring.bus, hop->spec.bandwidth);
    const FabricKind kind = hop->via == Route::Via::Link     ? topology.links[hop->index].kind
                            : hop->via == Route::Via::Switch ? topology.switches[hop->index].kind
                                                             : FabricKind::Memory;
    ring.pci = ring.pci || kind == FabricKind::PCIe;
  }
  for (int r = 0; r < per_node; ++r) ring.arch = std::min(ring.arch, topology.gpus[r].arch);
  // Between nodes NCCL's rings leave through every NIC at once (one channel or more per NIC).
  ring.network_bus = topology.network.nics * topology.network.nic.bandwidth;
  ring.network_latency = topology.network.nic.latency;
  return ring;
}

double nccl_predicted_seconds(Collective collective, int64_t bytes, int nranks, const Topology& topology) {
  const std::optional<NcclRing> ring = nccl_ring_of(topology, nranks);
  return ring ? nccl_ring_seconds(collective, bytes, *ring) : 0;
}

}  // namespace ccc
