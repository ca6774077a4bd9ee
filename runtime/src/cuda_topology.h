// The machine's CUDA devices as the cost model's topology detection wants them (DriverProbe,
// topology_detect.h), read through the dlopen'ed driver: the devices of one process, the ranks'
// devices of a multi-process communicator (exchanged over its control channel), and the one
// device of virtual ranks.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
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

// `nranks` virtual ranks on device `ordinal`: each with its share of the device, the ranks
// joined by its memory.
Topology detect_virtual_topology(const CudaDriver& driver, int ordinal, int nranks);

// One rank's device as its own process sees it: the driver's description and NVML's NVLinks
// (nullopt: NVML absent or silent). The ranks of a multi-process communicator all-gather it
// (CudaArena) in a fixed-size encoding, the same layout in every process of one ccc build.
struct RankDevice {
  DriverDevice device;
  std::optional<std::vector<NvlinkEnd>> nvlinks;
};
RankDevice probe_rank_device(const CudaDriver& driver, int ordinal);
inline constexpr size_t kRankDeviceBytes = 128 + 32 + 5 * 4 + 4 + kMaxNvlinks * (2 * 4 + 32);
std::vector<std::byte> encode_rank_device(const RankDevice& d);                // kRankDeviceBytes
RankDevice decode_rank_device(std::span<const std::byte, kRankDeviceBytes> bytes);  // names cut at their field

// The topology of a multi-process communicator's ranks. Ranks on different devices reach each
// other: the arena they all map is device memory opened through CUDA IPC, which works only
// between devices with peer access (CUDA Driver API, cuIpcOpenMemHandle). NVLinks count only
// when every rank's NVML reported its own.
Topology topology_of_ranks(const std::vector<RankDevice>& ranks);

}  // namespace ccc
