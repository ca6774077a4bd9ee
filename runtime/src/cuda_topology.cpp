#include "cuda_topology.h"

namespace ccc {

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

}  // namespace ccc
