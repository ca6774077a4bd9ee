// The host backend: generated kernels compiled by the system C++ compiler and run with one
// std::thread per (rank, channel) block, against the host prelude (runtime/device/).
//
// The host prelude exports a kernel as `extern "C" void NAME(ccc_launch_args args, int block)`;
// every block of a launch must run concurrently because blocks wait on each other's progress.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ccc/host_compile.h"
#include "ccc/jit_cache.h"
#include "ccc_abi.h"

namespace ccc {

struct HostKernel {
  using Entry = void (*)(ccc_launch_args args, int block);
  std::shared_ptr<const SharedObject> object;  // keeps `entry` loaded
  Entry entry = nullptr;
};

// Compiles (through `cache`) and loads generated `source`, whose kernel is named `name`.
HostKernel load_host_kernel(JitCache& cache, const std::string& source, const std::string& name);

// Per-rank state a launch needs beyond the user's buffers: progress counters, epochs, error
// words, scratch. Counters start at zero and are never reset between launches (their values
// carry the epoch), except after a failed launch, as the prelude requires.
class HostRanks {
 public:
  HostRanks(int nranks, int max_channels);

  int nranks() const { return nranks_; }
  int max_channels() const { return max_channels_; }

  // Runs `kernel` with `channels` blocks per rank on N * channels threads and waits for all.
  // Throws Error(Remote) naming each rank whose error word is set, after zeroing the counters.
  void launch(const HostKernel& kernel, int channels, std::span<const void* const> send,
              std::span<void* const> recv, uint64_t count, uint64_t scratch_bytes,
              uint64_t timeout_ns);

 private:
  void reset_sync_state();

  int nranks_;
  int max_channels_;
  std::vector<unsigned long long> progress_;  // [nranks][max_channels]
  std::vector<unsigned long long> epoch_;     // [nranks]
  std::vector<unsigned int> error_;           // [nranks]
  std::vector<std::unique_ptr<std::byte[]>> scratch_;  // [nranks], scratch_bytes_ each
  uint64_t scratch_bytes_ = 0;
};

}  // namespace ccc
