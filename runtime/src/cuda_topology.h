// The machine's CUDA devices as the cost model's topology detection wants them (DriverProbe,
// topology_detect.h), read through the dlopen'ed driver.
#pragma once

#include <vector>

#include "cuda_driver.h"
#include "topology.h"
#include "topology_detect.h"

namespace ccc {

// Names, compute capability, SM count, memory clock and bus, PCI bus id and peer access of the
// devices `ordinals`, in that order (rank r on ordinals[r]).
DriverProbe probe_cuda_devices(const CudaDriver& driver, const std::vector<int>& ordinals);

// probe_cuda_devices plus NVML's NVLink report when NVML is there.
Topology detect_cuda_topology(const CudaDriver& driver, const std::vector<int>& ordinals);

}  // namespace ccc
