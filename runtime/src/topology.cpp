// Routes between GPUs, validation, and the writers of the topology text format.
#include "topology.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace ccc {

const char* fabric_kind_name(FabricKind k) {
  switch (k) {
    case FabricKind::NVLink: return "nvlink";
    case FabricKind::NVSwitch: return "nvswitch";
    case FabricKind::PCIe: return "pcie";
    case FabricKind::Memory: return "memory";
  }
  return "?";
}

// Faster wins; at equal bandwidth the lower latency.
static bool better(const LinkSpec& a, const LinkSpec& b) {
  if (a.bandwidth != b.bandwidth) return a.bandwidth > b.bandwidth;
  return a.latency < b.latency;
}

std::optional<Route> route(const Topology& t, int src, int dst) {
  if (src == dst) return Route{Route::Via::Local, src, {t.gpus[src].memory_bandwidth, 0.0}};
  std::optional<Route> best;
  auto offer = [&](Route::Via via, int index, const LinkSpec& spec) {
    if (!best || better(spec, best->spec)) best = Route{via, index, spec};
  };
  for (size_t i = 0; i < t.links.size(); ++i) {
    const DirectLink& l = t.links[i];
    if ((l.a == src && l.b == dst) || (l.a == dst && l.b == src)) offer(Route::Via::Link, static_cast<int>(i), l.spec);
  }
  for (size_t i = 0; i < t.switches.size(); ++i) {
    const auto& g = t.switches[i].gpus;
    if (std::count(g.begin(), g.end(), src) && std::count(g.begin(), g.end(), dst))
      offer(Route::Via::Switch, static_cast<int>(i), t.switches[i].port);
  }
  return best;
}

std::string validate_topology(const Topology& t) {
  const int n = t.ngpus();
  if (n == 0) return "the topology has no GPUs";
  // Reachability by membership lists, not route(): a 4096-GPU file must not take minutes.
  std::vector<std::vector<int>> switches_of(static_cast<size_t>(n));
  for (size_t s = 0; s < t.switches.size(); ++s)
    for (int g : t.switches[s].gpus) switches_of[g].push_back(static_cast<int>(s));
  std::set<std::pair<int, int>> linked;
  for (const DirectLink& l : t.links) linked.insert(std::minmax(l.a, l.b));
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      const auto& sa = switches_of[a];
      const auto& sb = switches_of[b];
      bool shared = std::find_first_of(sa.begin(), sa.end(), sb.begin(), sb.end()) != sa.end();
      if (!shared && !linked.count({a, b}))
        return fmt::format("gpus {} and {} have no P2P path (no link and no shared switch)", a, b);
    }
  return "";
}

static std::string bandwidth_text(double bytes_per_s) { return fmt::format("{:.6g}GB/s", bytes_per_s / 1e9); }
static std::string latency_text(double s) { return fmt::format("{:.6g}us", s * 1e6); }

static std::string gpu_keys(const Gpu& g) {
  return fmt::format("model=\"{}\" arch=sm_{} memory={} reduce={} channel={} channels={} launch={}{}", g.model,
                     g.arch, bandwidth_text(g.memory_bandwidth), bandwidth_text(g.reduce_bandwidth),
                     bandwidth_text(g.channel_bandwidth), g.max_channels, latency_text(g.launch),
                     g.graph_launch ? " graph_launch=" + latency_text(*g.graph_launch) : "");
}

// "0-3,5": runs of consecutive indices collapse to ranges.
static std::string gpu_list_text(const std::vector<int>& gpus) {
  std::string out;
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    while (j + 1 < gpus.size() && gpus[j + 1] == gpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j > i ? fmt::format("{}-{}", gpus[i], gpus[j]) : fmt::format("{}", gpus[i]);
    i = j + 1;
  }
  return out;
}

std::string format_topology(const Topology& t) {
  std::string out = fmt::format("name {}\n", t.name.empty() ? "unnamed" : t.name);
  if (t.gpus.empty()) return out;
  // The first GPU's properties go on `gpus`; a GPU that differs gets its own `gpu` line.
  out += fmt::format("gpus {} {}\n", t.ngpus(), gpu_keys(t.gpus[0]));
  for (int i = 1; i < t.ngpus(); ++i)
    if (!(t.gpus[i] == t.gpus[0])) out += fmt::format("gpu {} {}\n", i, gpu_keys(t.gpus[i]));
  for (const DirectLink& l : t.links)
    out += fmt::format("link {} {} kind={} bandwidth={} latency={}\n", l.a, l.b, fabric_kind_name(l.kind),
                       bandwidth_text(l.spec.bandwidth), latency_text(l.spec.latency));
  for (const Switch& s : t.switches)
    out += fmt::format("switch {} kind={} gpus={} bandwidth={} latency={}\n", s.name, fabric_kind_name(s.kind),
                       gpu_list_text(s.gpus), bandwidth_text(s.port.bandwidth), latency_text(s.port.latency));
  if (t.network.nodes > 1)
    out += fmt::format("nodes {} nics={} bandwidth={} latency={}\n", t.network.nodes, t.network.nics,
                       bandwidth_text(t.network.nic.bandwidth), latency_text(t.network.nic.latency));
  return out;
}

std::string describe_topology(const Topology& t) {
  std::string out = fmt::format("topology {}: {} GPUs\n", t.name, t.ngpus());
  for (int i = 0; i < t.ngpus();) {
    int j = i;
    while (j + 1 < t.ngpus() && t.gpus[j + 1] == t.gpus[i]) ++j;
    const Gpu& g = t.gpus[i];
    out += fmt::format("  gpu {}: {} sm_{}, memory {}, {} channels of {}\n",
                       j > i ? fmt::format("{}-{}", i, j) : fmt::format("{}", i), g.model, g.arch,
                       bandwidth_text(g.memory_bandwidth), g.max_channels, bandwidth_text(g.channel_bandwidth));
    i = j + 1;
  }
  for (const DirectLink& l : t.links)
    out += fmt::format("  {} link {} <-> {}: {} per direction, latency {}\n", fabric_kind_name(l.kind), l.a, l.b,
                       bandwidth_text(l.spec.bandwidth), latency_text(l.spec.latency));
  for (const Switch& s : t.switches)
    out += fmt::format("  {} switch {} over gpus {}: {} per port and direction, latency {}\n",
                       fabric_kind_name(s.kind), s.name, gpu_list_text(s.gpus), bandwidth_text(s.port.bandwidth),
                       latency_text(s.port.latency));
  if (t.network.nodes > 1)
    out += fmt::format("  {} nodes like this one, {} NICs each: {} per NIC and direction, latency {}\n",
                       t.network.nodes, t.network.nics, bandwidth_text(t.network.nic.bandwidth),
                       latency_text(t.network.nic.latency));
  return out;
}

std::string format_calibration(const Calibration& c) {
  std::string out;
  if (!c.device.empty()) out += fmt::format("calibration device=\"{}\"\n", c.device);
  std::string gpus, fabric;
  auto add = [](std::string& line, const char* key, const std::optional<double>& v, std::string (*text)(double)) {
    if (v) line += fmt::format(" {}={}", key, text(*v));
  };
  add(gpus, "launch", c.launch, latency_text);
  add(gpus, "graph_launch", c.graph_launch, latency_text);
  add(gpus, "memory", c.memory_bandwidth, bandwidth_text);
  add(gpus, "reduce", c.reduce_bandwidth, bandwidth_text);
  add(gpus, "channel", c.channel_bandwidth, bandwidth_text);
  add(fabric, "latency", c.latency, latency_text);
  add(fabric, "bandwidth", c.bandwidth, bandwidth_text);
  if (!gpus.empty()) out += "gpus" + gpus + "\n";
  if (!fabric.empty()) out += "fabric" + fabric + "\n";
  return out;
}

void apply_calibration(Topology& t, const Calibration& c) {
  for (Gpu& g : t.gpus) {
    g.launch = c.launch.value_or(g.launch);
    if (c.graph_launch) g.graph_launch = c.graph_launch;
    g.memory_bandwidth = c.memory_bandwidth.value_or(g.memory_bandwidth);
    g.reduce_bandwidth = c.reduce_bandwidth.value_or(g.reduce_bandwidth);
    g.channel_bandwidth = c.channel_bandwidth.value_or(g.channel_bandwidth);
  }
  auto fabric = [&c](LinkSpec& spec) {
    spec.latency = c.latency.value_or(spec.latency);
    spec.bandwidth = c.bandwidth.value_or(spec.bandwidth);
  };
  for (DirectLink& l : t.links) fabric(l.spec);
  for (Switch& s : t.switches) fabric(s.port);
}

void price_graph_replays(Topology& t) {
  for (Gpu& g : t.gpus) g.launch = g.graph_launch.value_or(g.launch);
}

}  // namespace ccc
