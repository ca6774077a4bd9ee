// Topology detection. The cost model links no CUDA library: the runtime, which loads the driver
// with dlopen, fills a DriverProbe; NVML (libnvidia-ml.so.1, also loaded with dlopen) adds the
// NVLink wiring when it is installed. topology_from_probe turns both into a Topology.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology.h"

namespace ccc {

// One device as the CUDA driver describes it.
struct DriverDevice {
  std::string name;           // cuDeviceGetName
  int cc_major = 0;           // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
  int cc_minor = 0;           // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
  int sm_count = 0;           // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  int memory_clock_khz = 0;   // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
  int memory_bus_bits = 0;    // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
  std::string pci_bus_id;     // cuDeviceGetPCIBusId, e.g. "0000:18:00.0"
};

struct DriverProbe {
  std::vector<DriverDevice> devices;                // rank r runs on devices[r]
  std::vector<std::vector<bool>> can_access_peer;   // [a][b]: cuDeviceCanAccessPeer
};

// One active NVLink of a device, as NVML reports it.
struct NvlinkEnd {
  int version = 0;                // nvmlDeviceGetNvLinkVersion: 1..5
  std::string remote_bus_id;      // nvmlDeviceGetNvLinkRemotePciInfo_v2
  bool remote_is_switch = false;  // nvmlDeviceGetNvLinkRemoteDeviceType == NVSwitch
};
using NvlinkReport = std::vector<std::vector<NvlinkEnd>>;  // [device], in DriverProbe order
inline constexpr unsigned kMaxNvlinks = 18;  // NVML's NVML_NVLINK_MAX_LINKS

// Asks NVML about the active NVLinks of the probed devices. nullopt, with the reason in `why`,
// when libnvidia-ml.so.1 ($CCC_LIBNVML, for tests: a stand-in) is absent or NVML fails (then
// detection falls back to PCIe only).
std::optional<NvlinkReport> query_nvlinks(const DriverProbe& probe, std::string* why);

// "0000:18:00.0" and NVML's "00000000:18:00.0" both become "0000:18:00.0"; "" if malformed.
std::string normalize_bus_id(const std::string& id);

// The topology of the probed devices, one GPU per entry of probe.devices (a rank). Entries with
// one PCI bus id are ranks on one device: each gets its share of the device's memory bandwidth,
// SMs and links, and they make a switch of kind memory. NVLinks to an NVSwitch make one switch
// whose port is the slowest member's link count times the per-link rate of its NVLink version;
// NVLinks between two GPUs make a direct link; devices with peer access make a PCIe switch.
// Rates neither API reports come from constants documented in docs/topology.md.
Topology topology_from_probe(const DriverProbe& probe, const std::optional<NvlinkReport>& nvlinks);

}  // namespace ccc
