// A stand-in for libnvidia-ml.so.1, loaded through $CCC_LIBNVML by the topology tests: the NVLinks
// of an NVSwitch machine like a DGX H100, whose GPUs are the fake libcuda's (fake_libcuda.cpp:
// device d at PCI bus id 0000:(0x10 + d):00.0). Each GPU has $FAKE_NVML_SWITCH_LINKS (default 18)
// active NVLink 4 links, each to an NVSwitch. Only the calls ccc makes (topology_detect.cpp), with
// NVML's signatures; the layouts are NVML's.
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotFound = 6;
constexpr int kDeviceTypeSwitch = 2;  // nvmlIntNvLinkDeviceType_t: NVML_NVLINK_DEVICE_TYPE_SWITCH

struct PciInfo {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

// A device handle is its fake libcuda ordinal + 1 (never null).
int ordinal(void* handle) { return static_cast<int>(reinterpret_cast<long>(handle)) - 1; }

unsigned switch_links() {
  const char* env = std::getenv("FAKE_NVML_SWITCH_LINKS");
  return env != nullptr ? static_cast<unsigned>(std::atoi(env)) : 18u;
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  unsigned domain = 0, bus = 0, dev = 0, function = 0;
  if (bus_id == nullptr || std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4) return kInvalidArgument;
  if (domain != 0 || bus < 0x10 || bus >= 0x10 + 64 || dev != 0 || function != 0) return kNotFound;
  *device = reinterpret_cast<void*>(static_cast<long>(bus - 0x10 + 1));
  return kSuccess;
}

int nvmlDeviceGetNvLinkState(void* device, unsigned link, unsigned* active) {
  if (ordinal(device) < 0) return kInvalidArgument;
  *active = link < switch_links() ? 1 : 0;
  return kSuccess;
}

int nvmlDeviceGetNvLinkVersion(void*, unsigned, unsigned* version) {
  *version = 4;
  return kSuccess;
}

// Every link ends at one of four NVSwitch chips.
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void*, unsigned link, PciInfo* pci) {
  std::memset(pci, 0, sizeof *pci);
  pci->bus = 0xc0 + link % 4;
  std::snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
  return kSuccess;
}

int nvmlDeviceGetNvLinkRemoteDeviceType(void*, unsigned, int* type) {
  *type = kDeviceTypeSwitch;
  return kSuccess;
}

}  // extern "C"
