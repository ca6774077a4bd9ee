#include "arena_heap.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "ccc/errors.h"  // Error

namespace ccc {

ArenaHeap::ArenaHeap(uintptr_t base, uint64_t bytes) : base_(base), bytes_(bytes) {
  if (bytes_ > 0) free_[0] = bytes_;
}

void* ArenaHeap::allocate(uint64_t bytes, const char* what) {
  const uint64_t size = (std::max<uint64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {  // first fit
    if (it->second < size) continue;
    const auto [at, room] = *it;
    free_.erase(it);
    if (room > size) free_[at + size] = room - size;
    used_[at] = size;
    return reinterpret_cast<void*>(base_ + at);
  }
  throw Error(ErrorKind::System,
              fmt::format("the multi-process arena has no room for {} bytes of {} (each rank's heap holds {} bytes: "
                          "raise cccConfig_t.arenaBytes or $CCC_ARENA_BYTES)", bytes, what, bytes_));
}

void ArenaHeap::free(void* p) {
  std::lock_guard lock(mutex_);
  // As integers: p may point anywhere; an address below the heap wraps to an offset never used.
  const auto offset = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p) - base_);
  const auto it = used_.find(offset);
  if (it == used_.end())
    throw Error(ErrorKind::InvalidArgument, "pointer was not allocated from this communicator's arena (or was freed)");
  uint64_t at = it->first, size = it->second;
  used_.erase(it);
  if (auto next = free_.find(at + size); next != free_.end()) {  // merge with the block after
    size += next->second;
    free_.erase(next);
  }
  if (auto prev = free_.lower_bound(at); prev != free_.begin() && std::prev(prev)->first + std::prev(prev)->second == at) {
    std::prev(prev)->second += size;  // and with the one before
    return;
  }
  free_[at] = size;
}

}  // namespace ccc
