#include "cuda_topology.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace ccc {
namespace {

// The fixed-size record of a RankDevice (kRankDeviceBytes): integers in host order, strings
// NUL-padded and cut at their field.
struct WireLink {
  int32_t version;
  int32_t remote_is_switch;
  char remote_bus_id[32];
};
struct WireDevice {
  char name[128];
  char pci_bus_id[32];
  int32_t cc_major, cc_minor, sm_count, memory_clock_khz, memory_bus_bits;
  int32_t nvlinks;  // -1: no report
  WireLink links[kMaxNvlinks];
};
static_assert(sizeof(WireDevice) == kRankDeviceBytes, "kRankDeviceBytes is WireDevice's size");

template <size_t N>
void put(char (&field)[N], const std::string& text) {
  std::memset(field, 0, N);
  std::memcpy(field, text.data(), std::min(text.size(), N - 1));
}

template <size_t N>
std::string get(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

}  // namespace

DriverProbe probe_cuda_devices(const CudaDriver& driver, const std::vector<int>& ordinals) {
  DriverProbe probe;
  auto attribute = [&](CUdevice dev, CUdevice_attribute a) {
    int v = 0;
    driver.check(driver.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  for (int ordinal : ordinals) {
    CUdevice dev = 0;
    driver.check(driver.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    DriverDevice d;
    char text[256] = {};
    driver.check(driver.cuDeviceGetName(text, sizeof text - 1, dev), "cuDeviceGetName");
    d.name = text;
    driver.check(driver.cuDeviceGetPCIBusId(text, sizeof text - 1, dev), "cuDeviceGetPCIBusId");
    d.pci_bus_id = text;
    d.cc_major = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    d.cc_minor = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    d.sm_count = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d.memory_clock_khz = attribute(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    d.memory_bus_bits = attribute(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    probe.devices.push_back(d);
  }
  const size_t n = ordinals.size();
  probe.can_access_peer.assign(n, std::vector<bool>(n, false));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      int can = a == b;
      if (a != b)
        driver.check(driver.cuDeviceCanAccessPeer(&can, ordinals[a], ordinals[b]), "cuDeviceCanAccessPeer");
      probe.can_access_peer[a][b] = can != 0;
    }
  }
  return probe;
}

Topology detect_cuda_topology(const CudaDriver& driver, const std::vector<int>& ordinals) {
  const DriverProbe probe = probe_cuda_devices(driver, ordinals);
  return topology_from_probe(probe, query_nvlinks(probe, nullptr));
}


Topology detect_virtual_topology(const CudaDriver& driver, int ordinal, int nranks) {
  DriverProbe one = probe_cuda_devices(driver, {ordinal});
  DriverProbe probe;
  probe.devices.assign(static_cast<size_t>(nranks), one.devices[0]);
  probe.can_access_peer.assign(static_cast<size_t>(nranks), std::vector<bool>(static_cast<size_t>(nranks), false));
  return topology_from_probe(probe, std::nullopt);  // one device: its NVLinks join no two ranks
}

RankDevice probe_rank_device(const CudaDriver& driver, int ordinal) {
  RankDevice d;
  try {
    const DriverProbe probe = probe_cuda_devices(driver, {ordinal});
    d.device = probe.devices[0];
    if (std::optional<NvlinkReport> report = query_nvlinks(probe, nullptr)) d.nvlinks = std::move((*report)[0]);
  } catch (const CudaError&) {
    // Detection then falls back to its default rates rather than fail the join; the bus id,
    // which says which ranks share a device, must be there.
    CUdevice dev = 0;
    driver.check(driver.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    char id[64] = {};
    driver.check(driver.cuDeviceGetPCIBusId(id, sizeof id - 1, dev), "cuDeviceGetPCIBusId");
    d.device = DriverDevice{};
    d.device.pci_bus_id = id;
  }
  return d;
}

std::vector<std::byte> encode_rank_device(const RankDevice& d) {
  WireDevice w{};
  put(w.name, d.device.name);
  put(w.pci_bus_id, d.device.pci_bus_id);
  w.cc_major = d.device.cc_major;
  w.cc_minor = d.device.cc_minor;
  w.sm_count = d.device.sm_count;
  w.memory_clock_khz = d.device.memory_clock_khz;
  w.memory_bus_bits = d.device.memory_bus_bits;
  w.nvlinks = -1;
  if (d.nvlinks) {
    w.nvlinks = static_cast<int32_t>(std::min<size_t>(d.nvlinks->size(), kMaxNvlinks));
    for (int32_t i = 0; i < w.nvlinks; ++i) {
      const NvlinkEnd& e = (*d.nvlinks)[static_cast<size_t>(i)];
      w.links[i].version = e.version;
      w.links[i].remote_is_switch = e.remote_is_switch;
      put(w.links[i].remote_bus_id, e.remote_bus_id);
    }
  }
  std::vector<std::byte> bytes(sizeof w);
  std::memcpy(bytes.data(), &w, sizeof w);
  return bytes;
}

RankDevice decode_rank_device(std::span<const std::byte, kRankDeviceBytes> bytes) {
  WireDevice w;
  std::memcpy(&w, bytes.data(), sizeof w);
  RankDevice d;
  d.device = {get(w.name), w.cc_major, w.cc_minor, w.sm_count, w.memory_clock_khz, w.memory_bus_bits, get(w.pci_bus_id)};
  if (w.nvlinks >= 0) {
    d.nvlinks.emplace();
    for (int32_t i = 0; i < std::min<int32_t>(w.nvlinks, kMaxNvlinks); ++i)
      d.nvlinks->push_back({w.links[i].version, get(w.links[i].remote_bus_id), w.links[i].remote_is_switch != 0});
  }
  return d;
}

Topology topology_of_ranks(const std::vector<RankDevice>& ranks) {
  DriverProbe probe;
  NvlinkReport report;
  bool every_report = true;
  for (const RankDevice& r : ranks) {
    probe.devices.push_back(r.device);
    every_report = every_report && r.nvlinks.has_value();
    if (r.nvlinks) report.push_back(*r.nvlinks);
  }
  const size_t n = ranks.size();
  probe.can_access_peer.assign(n, std::vector<bool>(n, true));
  return topology_from_probe(probe, every_report ? std::optional<NvlinkReport>(std::move(report)) : std::nullopt);
}

}  // namespace ccc
