#include "topology_detect.h"

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <numeric>

#include <fmt/format.h>

namespace ccc {
namespace {

// Rates no API reports (docs/topology.md, "Detected topologies").
constexpr double kPcieLatency = 2.5e-6;
constexpr double kPcieBandwidth = 24e9;   // x16 Gen4 peer traffic after protocol overhead
constexpr double kFallbackMemory = 1e12;  // when the driver reports no memory clock
constexpr int kMaxChannels = 32;

// A flag in the device's own memory, seen by a rank on the same device: a far-L2 hit, the
// simulator's local_load (docs/cost_model.md).
constexpr double kMemoryLatency = 250e-9;
// A replay from a CUDA graph on sm_90 (H100, H200): the figure dgx-h100.topo uses.
constexpr double kGraphLaunchSm90 = 1.3e-6;

double nvlink_rate(int version) { return version >= 5 ? 50e9 : version == 1 ? 20e9 : 25e9; }
// One way, through NVLink or NVSwitch: H100's as dgx-h100.topo has it, A100's as dgx-a100.topo.
double nvlink_latency(int arch) { return arch >= 90 ? 0.8e-6 : 1e-6; }
double channel_rate(int arch) { return arch >= 90 ? 25e9 : 20e9; }

// The GPU as one of `sharers` ranks on the device sees it: its share of the memory and the SMs.
Gpu gpu_from(const DriverDevice& d, int sharers) {
  Gpu g;
  g.model = d.name;
  g.arch = d.cc_major * 10 + d.cc_minor;
  double memory = 2.0 * d.memory_clock_khz * 1e3 * d.memory_bus_bits / 8;  // double data rate
  g.memory_bandwidth = (memory > 0 ? memory : kFallbackMemory) / sharers;
  g.reduce_bandwidth = g.memory_bandwidth / 2;  // a reduce reads and writes its destination
  g.channel_bandwidth = channel_rate(g.arch);
  g.max_channels = std::clamp(d.sm_count / sharers, 1, kMaxChannels);
  g.launch = kDefaultKernelLaunch;
  if (g.arch == 90) g.graph_launch = kGraphLaunchSm90;
  return g;
}

// The device rank `i` runs on, by PCI bus id (as given, where it does not parse; a rank without
// one is a device of its own).
std::string device_key(const DriverProbe& probe, int i) {
  const std::string& id = probe.devices[static_cast<size_t>(i)].pci_bus_id;
  if (std::string key = normalize_bus_id(id); !key.empty()) return key;
  return id.empty() ? fmt::format("rank {}", i) : id;
}

// Minimal NVML declarations (the toolkit here ships no nvml.h); layouts as in NVML's API.
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlDeviceTypeSwitch = 2;

class Nvml {
 public:
  ~Nvml() {
    if (initialized_) shutdown_();
    if (lib_) dlclose(lib_);
  }

  bool open(std::string* why) {
    const char* path = std::getenv("CCC_LIBNVML");  // a stand-in, for tests
    lib_ = dlopen(path != nullptr && *path != '\0' ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return fail(why, fmt::format("NVML not available ({})", dlerror()));
    bool ok = sym("nvmlInit_v2", init_) && sym("nvmlShutdown", shutdown_) &&
              sym("nvmlDeviceGetHandleByPciBusId_v2", by_bus_id_) && sym("nvmlDeviceGetNvLinkState", state_) &&
              sym("nvmlDeviceGetNvLinkVersion", version_) &&
              sym("nvmlDeviceGetNvLinkRemotePciInfo_v2", remote_pci_);
    if (!ok) return fail(why, "libnvidia-ml.so.1 lacks the NVLink queries");
    sym("nvmlDeviceGetNvLinkRemoteDeviceType", remote_type_);  // newer drivers only
    if (int rc = init_(); rc != kNvmlSuccess) return fail(why, fmt::format("nvmlInit failed (NVML error {})", rc));
    initialized_ = true;
    return true;
  }

  std::optional<std::vector<NvlinkEnd>> links(const std::string& bus_id, std::string* why) {
    nvmlDevice_t dev = nullptr;
    if (int rc = by_bus_id_(bus_id.c_str(), &dev); rc != kNvmlSuccess) {
      fail(why, fmt::format("NVML does not know device {} (NVML error {})", bus_id, rc));
      return std::nullopt;
    }
    std::vector<NvlinkEnd> out;
    for (unsigned link = 0; link < kMaxNvlinks; ++link) {
      unsigned active = 0, version = 0;
      nvmlPciInfo_t pci{};
      if (state_(dev, link, &active) != kNvmlSuccess || !active) continue;  // absent or down
      if (version_(dev, link, &version) != kNvmlSuccess || remote_pci_(dev, link, &pci) != kNvmlSuccess) continue;
      NvlinkEnd end{static_cast<int>(version), normalize_bus_id(pci.busId), false};
      int type = -1;
      if (remote_type_ && remote_type_(dev, link, &type) == kNvmlSuccess) end.remote_is_switch = type == kNvmlDeviceTypeSwitch;
      out.push_back(end);
    }
    return out;
  }

 private:
  static bool fail(std::string* why, std::string text) {
    if (why) *why = std::move(text);
    return false;
  }
  template <typename F>
  bool sym(const char* name, F& fn) {
    fn = reinterpret_cast<F>(dlsym(lib_, name));
    return fn != nullptr;
  }

  void* lib_ = nullptr;
  bool initialized_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_id_)(const char*, nvmlDevice_t*) = nullptr;
  int (*state_)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
  int (*version_)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
  int (*remote_pci_)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  int (*remote_type_)(nvmlDevice_t, unsigned, int*) = nullptr;
};

}  // namespace

std::string normalize_bus_id(const std::string& id) {
  unsigned parts[4] = {};
  const char* p = id.data();
  const char* end = id.data() + id.size();
  const char separators[] = {':', ':', '.'};
  for (int i = 0; i < 4; ++i) {
    auto [next, ec] = std::from_chars(p, end, parts[i], 16);
    if (ec != std::errc()) return "";
    bool last = i == 3;
    if (last ? next != end : (next == end || *next != separators[i])) return "";
    p = next + 1;
  }
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", parts[0], parts[1], parts[2], parts[3]);
}

std::optional<NvlinkReport> query_nvlinks(const DriverProbe& probe, std::string* why) {
  Nvml nvml;
  if (!nvml.open(why)) return std::nullopt;
  NvlinkReport report;
  for (const DriverDevice& d : probe.devices) {
    auto links = nvml.links(d.pci_bus_id, why);
    if (!links) return std::nullopt;
    report.push_back(std::move(*links));
  }
  return report;
}

Topology topology_from_probe(const DriverProbe& probe, const std::optional<NvlinkReport>& nvlinks) {
  Topology t;
  t.name = "detected";
  const int n = static_cast<int>(probe.devices.size());
  // Ranks on one device share its memory, its SMs and its links.
  std::map<std::string, std::vector<int>> on_device;
  for (int i = 0; i < n; ++i) on_device[device_key(probe, i)].push_back(i);
  auto sharers = [&](int i) { return static_cast<int>(on_device.at(device_key(probe, i)).size()); };
  for (int i = 0; i < n; ++i) t.gpus.push_back(gpu_from(probe.devices[i], sharers(i)));
  for (const auto& [device, ranks] : on_device) {
    if (ranks.size() < 2) continue;
    const std::string name = t.switches.empty() ? "memory" : fmt::format("memory{}", t.switches.size());
    t.switches.push_back(Switch{name, FabricKind::Memory, {t.gpus[ranks[0]].memory_bandwidth, kMemoryLatency}, ranks});
  }

  if (nvlinks && static_cast<int>(nvlinks->size()) == n) {
    Switch nvswitch{"nvswitch", FabricKind::NVSwitch, {0, 0}, {}};
    for (int i = 0; i < n; ++i) {
      const int arch = t.gpus[i].arch;
      double to_switch = 0;
      std::map<int, double> to_gpu;  // by rank
      for (const NvlinkEnd& e : (*nvlinks)[i]) {
        if (e.remote_is_switch) {
          to_switch += nvlink_rate(e.version);
        } else if (auto it = on_device.find(normalize_bus_id(e.remote_bus_id)); it != on_device.end()) {
          for (int j : it->second)
            if (device_key(probe, j) != device_key(probe, i)) to_gpu[j] += nvlink_rate(e.version);
        }
      }
      if (to_switch > 0) {
        to_switch /= sharers(i);
        nvswitch.gpus.push_back(i);
        double port = nvswitch.port.bandwidth;
        nvswitch.port.bandwidth = port > 0 ? std::min(port, to_switch) : to_switch;
        nvswitch.port.latency = std::max(nvswitch.port.latency, nvlink_latency(arch));
      }
      for (auto [j, rate] : to_gpu)
        if (j > i)
          t.links.push_back(DirectLink{i, j, FabricKind::NVLink,
                                       {rate / std::max(sharers(i), sharers(j)), nvlink_latency(arch)}});
    }
    if (nvswitch.gpus.size() >= 2) t.switches.push_back(nvswitch);
  }

  // Peer access over PCIe: devices that reach each other, directly or through a common peer,
  // share one PCIe switch.
  std::vector<int> group(static_cast<size_t>(n));
  std::iota(group.begin(), group.end(), 0);
  auto root = [&](int g) {
    while (group[g] != g) g = group[g];
    return g;
  };
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b && a < static_cast<int>(probe.can_access_peer.size()) &&
          b < static_cast<int>(probe.can_access_peer[a].size()) && probe.can_access_peer[a][b])
        group[root(b)] = root(a);
  int groups = 0;
  for (int g = 0; g < n; ++g) {
    Switch pcie{groups ? fmt::format("pcie{}", groups) : "pcie", FabricKind::PCIe, {kPcieBandwidth, kPcieLatency}, {}};
    for (int i = 0; i < n; ++i)
      if (root(i) == g) pcie.gpus.push_back(i);
    if (pcie.gpus.size() < 2) continue;
    t.switches.push_back(pcie);
    ++groups;
  }
  return t;
}

}  // namespace ccc
