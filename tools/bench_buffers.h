// Rank buffers, streams and timers for ccc-bench, in host memory or on CUDA devices, behind one
// interface.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ccc::bench {

class RankMemory {
 public:
  virtual ~RankMemory() = default;
  // `bytes` of rank `rank`'s memory, freed with the RankMemory.
  virtual void* alloc(int rank, uint64_t bytes) = 0;
  virtual void upload(int rank, void* dst, const void* src, uint64_t bytes) = 0;
  virtual void download(int rank, void* dst, const void* src, uint64_t bytes) = 0;
  // Copies `bytes` within rank `rank`'s memory, on its stream (the bandwidth baseline: memcpy on
  // the host, cuMemcpyDtoDAsync on a device).
  virtual void copy(int rank, void* dst, const void* src, uint64_t bytes) = 0;
  // The stream rank `rank`'s work goes on (nullptr on the host), and a wait for it.
  virtual void* stream(int rank) = 0;
  virtual void synchronize(int rank) = 0;
  // Seconds per call over `calls` calls of `issue`: CUDA events around them on a single
  // device's stream, else the wall clock up to the end of `wait`.
  virtual double time_calls(const std::function<void()>& issue, const std::function<void()>& wait, int calls) = 0;
  // Seconds per call when `calls` calls of `issue`, captured in a CUDA graph, are replayed
  // `replays` times (nccl-tests' -G), timed with CUDA events. Throws std::runtime_error where
  // there are no graphs (the host, several devices).
  virtual double time_graph(const std::function<void()>& issue, int calls, int replays) = 0;
};

// Host memory, zeroed unless `zeroed` is false: then a page nothing writes costs no memory (the
// simulator's timing-only mode, which moves no data).
std::unique_ptr<RankMemory> host_memory(bool zeroed = true);
// Rank r on CUDA device devices[r] (all ranks on devices[0] when devices has one entry).
std::unique_ptr<RankMemory> cuda_memory(const std::vector<int>& devices);

// One line on the CUDA devices ("NVIDIA H200, sm_90, 1 device, driver 13.0"); throws
// NoCudaDevice saying why there is none.
std::string describe_cuda_devices();

}  // namespace ccc::bench
