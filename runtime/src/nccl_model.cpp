#include "nccl_model.h"

#include <algorithm>
#include <limits>

namespace ccc {
namespace {

enum NcclProtocol { LL, LL128, Simple, kProtocols };

// NCCL's ring latencies in µs (tuning.cc: baseLat[ring], and hwLat[NVLink or PCI][ring]).
constexpr double kBaseLatency[kProtocols] = {6.6, 14.0, 8.4};
constexpr double kNvlinkHopLatency[kProtocols] = {0.6, 1.9, 3.4};
constexpr double kPciHopLatency[kProtocols] = {1.0, 2.5, 5.7};
// LL's bus bandwidth cap on one node (tuning.cc: llMaxBws, GB/s): Ampere and Hopper, else Volta.
constexpr double kLlMaxBandwidthAmpere = 87.7e9;
constexpr double kLlMaxBandwidthVolta = 39.0e9;

}  // namespace

double nccl_predicted_seconds(Collective collective, int64_t bytes, int nranks, const Topology& topology) {
  if (nranks < 2 || nranks > topology.ngpus() || collective == Collective::AllToAll) return 0;
  // The ring 0 -> 1 -> ... -> N-1 -> 0: its slowest hop sets the bus bandwidth, and PCIe on any
  // hop makes it a PCI ring (NCCL's typeIntra).
  double bus = std::numeric_limits<double>::infinity();
  bool pci = false;
  int arch = std::numeric_limits<int>::max();
  for (int r = 0; r < nranks; ++r) {
    const std::optional<Route> hop = route(topology, r, (r + 1) % nranks);
    if (!hop) return 0;
    bus = std::min(bus, hop->spec.bandwidth);
    const FabricKind kind = hop->via == Route::Via::Link     ? topology.links[hop->index].kind
                            : hop->via == Route::Via::Switch ? topology.switches[hop->index].kind
                                                             : FabricKind::Memory;
    pci = pci || kind == FabricKind::PCIe;
    arch = std::min(arch, topology.gpus[r].arch);
  }
  const int n = nranks;
  const int nsteps = collective == Collective::AllReduce                                              ? 2 * (n - 1)
                     : collective == Collective::ReduceScatter || collective == Collective::AllGather ? n - 1
                                                                                                      : n;
  // Broadcast and reduce pipeline down the ring: one hop of latency (NCCL's sameChannels case).
  const int latency_hops = collective == Collective::Broadcast || collective == Collective::Reduce ? 1 : nsteps;
  const bool quarter_ll = collective == Collective::AllReduce || collective == Collective::Reduce;
  const double ll_max = arch >= 80 ? kLlMaxBandwidthAmpere : kLlMaxBandwidthVolta;
  const double* hop_latency = pci ? kPciHopLatency : kNvlinkHopLatency;
  double best = std::numeric_limits<double>::infinity();
  for (int p = 0; p < kProtocols; ++p) {
    if (p == LL128 && pci) continue;  // NCCL enables LL128 over NVLink only
    double bus_bw = bus;
    if (p == LL) bus_bw = std::min(ll_max, bus * (quarter_ll ? 1.0 / 4 : 1.0 / 3));
    if (p == LL128) bus_bw *= 0.92;
    const double alg_bw = bus_bw * n / nsteps;
    const double latency = (kBaseLatency[p] + latency_hops * hop_latency[p]) * 1e-6;
    best = std::min(best, latency + static_cast<double>(bytes) / alg_bw);
  }
  return topology.gpus.front().launch + best;
}

}  // namespace ccc
