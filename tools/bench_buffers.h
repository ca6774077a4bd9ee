// Rank buffers for ccc-bench in host memory or on CUDA devices, behind one interface.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace ccc::bench {

class RankMemory {
 public:
  virtual ~RankMemory() = default;
  // `bytes` of rank `rank`'s memory, freed with the RankMemory.
  virtual void* alloc(int rank, uint64_t bytes) = 0;
  virtual void upload(int rank, void* dst, const void* src, uint64_t bytes) = 0;
  virtual void download(int rank, void* dst, const void* src, uint64_t bytes) = 0;
  // Copies `bytes` within rank `rank`'s memory `iters` times; returns seconds per copy (the
  // bandwidth baseline: memcpy on the host, cuMemcpyDtoD on a device).
  virtual double time_copy(int rank, void* dst, const void* src, uint64_t bytes, int iters) = 0;
};

std::unique_ptr<RankMemory> host_memory();
// Rank r on CUDA device devices[r] (all ranks on devices[0] when devices has one entry).
std::unique_ptr<RankMemory> cuda_memory(const std::vector<int>& devices);

}  // namespace ccc::bench
