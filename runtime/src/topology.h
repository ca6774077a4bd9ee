// The machine a collective runs on, as the cost model sees it: GPUs, and the fabrics that carry
// peer loads between them (direct NVLink bundles, and switches: NVSwitch or a PCIe switch).
//
// Rank r of a collective runs on GPU r. Data from GPU a to GPU b takes one route: the direct link
// between them if there is one, otherwise a switch both belong to (the fastest, if several).
// There is no multi-hop routing: peer loads need a direct P2P path.
//
// The text format (docs/topology.md) is what `parse_topology` reads and `format_topology` writes,
// so `ccc topo > my.topo` gives a file `ccc tune --topo my.topo` accepts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ccc/diagnostics.h"

namespace ccc {

// A kernel launch when a topology does not say (`launch=` on a gpus line; detection uses it too).
// Not a measurement of this machine: docs/cost_model.md says where it comes from; the GPU
// check's calibration replaces it.
inline constexpr double kDefaultKernelLaunch = 2.5e-6;

// Per direction: a fabric moves `bandwidth` bytes/s each way at once (NVLink and PCIe are full
// duplex), and a flag written at one end is seen at the other `latency` seconds later.
struct LinkSpec {
  double bandwidth = 0;  // bytes/s
  double latency = 0;    // s
  friend bool operator==(const LinkSpec&, const LinkSpec&) = default;
};

struct Gpu {
  std::string model;              // "H100-SXM5-80GB"; informational
  int arch = 0;                   // compute capability * 10: 80 for sm_80
  double memory_bandwidth = 0;    // bytes/s, local copies
  double reduce_bandwidth = 0;    // bytes/s of reduced data; the model's gamma is its inverse
  double channel_bandwidth = 0;   // bytes/s one channel (thread block) can move
  int max_channels = 0;           // channels the schedule may use on this GPU
  double launch = 0;              // s: one kernel launch, back to back on a stream (the model's
                                  // per-call constant; topology files default it, docs/cost_model.md)
  std::optional<double> graph_launch = std::nullopt;  // s: the same kernel replayed as a node of a CUDA graph
                                       // (`graph_launch=`); unset: as `launch`
  friend bool operator==(const Gpu&, const Gpu&) = default;
};

// Memory: one device's memory, shared by ranks that run on that device (virtual ranks, or
// processes sharing a GPU): a switch whose port is each rank's share of the device's bandwidth.
enum class FabricKind { NVLink, NVSwitch, PCIe, Memory };
const char* fabric_kind_name(FabricKind k);  // "nvlink", "nvswitch", "pcie", "memory"

// A point-to-point bundle of links between GPUs a and b.
struct DirectLink {
  int a = 0;
  int b = 0;
  FabricKind kind = FabricKind::NVLink;
  LinkSpec spec;
  friend bool operator==(const DirectLink&, const DirectLink&) = default;
};

// Every member GPU has one port of `port` bandwidth per direction into the switch.
struct Switch {
  std::string name;
  FabricKind kind = FabricKind::NVSwitch;
  LinkSpec port;
  std::vector<int> gpus;
  friend bool operator==(const Switch&, const Switch&) = default;
};

// Several nodes like the one the GPUs, links and switches describe, joined by a network: each
// node has `nics` NICs of `nic` bandwidth (per direction) and latency, which its GPUs share for
// traffic between nodes (`nodes COUNT nics=K bandwidth=BW latency=T`). One node: no network.
struct Network {
  int nodes = 1;
  int nics = 0;
  LinkSpec nic;
  friend bool operator==(const Network&, const Network&) = default;
};

struct Topology {
  std::string name;
  std::vector<Gpu> gpus;  // one node's
  std::vector<DirectLink> links;
  std::vector<Switch> switches;
  Network network;

  int ngpus() const { return static_cast<int>(gpus.size()); }
  friend bool operator==(const Topology&, const Topology&) = default;
};

// How data gets from one GPU to another. `index` names links[index] or switches[index].
struct Route {
  enum class Via { Local, Link, Switch } via = Via::Local;
  int index = -1;
  LinkSpec spec;  // Local: the GPU's memory bandwidth, no latency
};

// The route from GPU `src` to GPU `dst`, or nullopt when they have no P2P path.
std::optional<Route> route(const Topology& t, int src, int dst);

// A problem that makes a topology unusable (no GPUs, a pair without a P2P path, ...), or "".
std::string validate_topology(const Topology& t);

// Reads the text format; errors go to `diags` as `file:line:col: error: ...`.
std::optional<Topology> parse_topology(const SourceFile& file, Diagnostics& diags);

// Reads and parses the file at `path`; on failure `errors` gets the rendered diagnostics.
std::optional<Topology> load_topology(const std::string& path, std::string& errors);

// Writes the text format (parse_topology(format_topology(t)) == t up to rounding of the units).
std::string format_topology(const Topology& t);

// A short human summary: one line per GPU class and fabric.
std::string describe_topology(const Topology& t);

// Measured constants that replace a topology's (docs/cost_model.md, "Calibration"): written by
// the GPU check, read by `ccc tune --calibration F` and communicators ($CCC_CALIBRATION). A
// value left unset keeps the topology's. The text format, a line each, in any order:
//   calibration device="NVIDIA H200"                          (informational)
//   gpus launch=T graph_launch=T memory=BW reduce=BW channel=BW   (every GPU)
//   fabric latency=T bandwidth=BW                             (every link and switch)
struct Calibration {
  std::string device;
  std::optional<double> launch, graph_launch, memory_bandwidth, reduce_bandwidth, channel_bandwidth;
  std::optional<double> latency, bandwidth;
  friend bool operator==(const Calibration&, const Calibration&) = default;
};
std::optional<Calibration> parse_calibration(const SourceFile& file, Diagnostics& diags);
std::optional<Calibration> load_calibration(const std::string& path, std::string& errors);
std::string format_calibration(const Calibration& c);  // parse_calibration reads it back
void apply_calibration(Topology& t, const Calibration& c);

// Prices every call as a replay from a CUDA graph: each GPU's launch becomes its graph_launch
// (where it has one). `ccc tune --graph`.
void price_graph_replays(Topology& t);

}  // namespace ccc
