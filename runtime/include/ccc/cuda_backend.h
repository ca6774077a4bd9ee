// The CUDA backend: cubins from NVRTC loaded with the driver API (opened with dlopen) and one
// launch per rank, or one grid for N virtual ranks on a single device (args.rank == -1).
//
// A kernel takes one ccc_launch_args by value; its grid is `channels` blocks per launched rank.
// Collectives are asynchronous on the caller's streams; synchronize() waits and reports a rank's
// error word (a peer timeout) as Error(Remote).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ccc/cuda_driver.h"
#include "ccc_abi.h"

namespace ccc {

struct CudaLaunchShape {
  unsigned grid = 0;   // blocks
  unsigned block = 0;  // threads per block
};

// `channels` blocks for one rank, or nranks * channels when rank == -1 (virtual ranks).
CudaLaunchShape cuda_launch_shape(int rank, int nranks, int channels, int threads_per_block);

// The kernelParams array cuLaunchKernel takes for a kernel whose only parameter is `args`.
std::vector<void*> cuda_kernel_params(ccc_launch_args& args);

// "sm_90" from a compute capability.
std::string cuda_arch_name(int major, int minor);

class CudaRanks {
 public:
  // One rank per entry of `devices` (CUDA ordinals, peer access enabled between all of them),
  // or, when `virtual_ranks` > 0, that many ranks on devices[0] launched as one grid. Throws
  // NoCudaDevice without a driver, Error(InvalidArgument) for a bad device list.
  CudaRanks(std::vector<int> devices, int virtual_ranks, int max_channels);
  ~CudaRanks();
  CudaRanks(const CudaRanks&) = delete;
  CudaRanks& operator=(const CudaRanks&) = delete;

  int nranks() const { return static_cast<int>(rank_device_.size()); }
  int max_channels() const { return max_channels_; }
  const std::string& arch() const { return arch_; }  // of devices[0]; all must match

  // Loads a cubin on every device; returns an index for launch().
  int load(const std::string& cubin, const std::string& kernel_name);

  // Throws Error(InvalidArgument) unless `p` is device memory of rank `rank`'s device.
  void check_buffer(int rank, const void* p, const char* what) const;

  // Launches kernel `kernel` for every rank on `streams` (one per rank, may be empty: the
  // default stream) without waiting.
  void launch(int kernel, int channels, int threads, std::span<const void* const> send,
              std::span<void* const> recv, uint64_t count, uint64_t scratch_bytes,
              uint64_t timeout_ns, std::span<void* const> streams);

  // Waits for every rank's device; throws Error(Remote) naming ranks whose error word is set
  // (after zeroing the counters, as the prelude requires).
  void synchronize();

 private:
  struct Device {
    int ordinal = 0;
    CUcontext context = nullptr;
    CUdeviceptr rank_table = 0;  // ccc_rank_buffers[N] as this device's launches read it
    CUdeviceptr epoch = 0;       // unsigned long long[N]
    std::vector<CUfunction> functions;  // by kernel index
    std::vector<CUmodule> modules;
  };
  struct Rank {
    int device = 0;  // index into devices_
    CUdeviceptr progress = 0;  // unsigned long long[max_channels]
    CUdeviceptr scratch = 0;
  };

  void use(const Device& d) const;
  CUdeviceptr alloc_zeroed(uint64_t bytes);
  void reset_sync_state();

  const CudaDriver& driver_;
  bool virtual_ranks_ = false;
  int max_channels_ = 0;
  std::string arch_;
  std::vector<Device> devices_;
  std::vector<int> rank_device_;  // rank -> index into devices_
  std::vector<Rank> ranks_;
  CUdeviceptr error_ = 0;          // unsigned[N] on devices_[0], read by peers over P2P
  uint64_t scratch_bytes_ = 0;
  std::vector<ccc_rank_buffers> table_;  // the last rank table written to the devices
};

}  // namespace ccc
