// One rank's heap in a multi-process arena (docs/runtime.md, "Multi-process"): first-fit blocks
// of a fixed range, 256-byte aligned, coalesced when freed. The host arena (memory of this
// process) and the CUDA arena (device addresses, never dereferenced here) share it: it only does
// arithmetic on the range's addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace ccc {

class ArenaHeap {
 public:
  static constexpr uint64_t kAlign = 256;  // more than the kernels' 16-byte vectors need

  // The heap [base, base + bytes).
  ArenaHeap(uintptr_t base, uint64_t bytes);
  ArenaHeap(const ArenaHeap&) = delete;
  ArenaHeap& operator=(const ArenaHeap&) = delete;

  uint64_t bytes() const { return bytes_; }
  // `bytes` of the heap (0 counts as 1). Throws Error(System) naming `what` when it has no room.
  void* allocate(uint64_t bytes, const char* what);
  // Returns a block allocate() gave; Error(InvalidArgument) for any other pointer.
  void free(void* p);

 private:
  uintptr_t base_;
  uint64_t bytes_;
  std::mutex mutex_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, coalesced
  std::map<uint64_t, uint64_t> used_;  // offset -> bytes
};

}  // namespace ccc
