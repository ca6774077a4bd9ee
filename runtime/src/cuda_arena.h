// The arena of a multi-process CUDA communicator (docs/runtime.md, "Multi-process"): device
// memory every rank's process maps at one virtual address, so the raw pointers of the launch ABI
// (the ccc_rank_state table, the buffers in a mailbox) mean the same in every process.
//
// Each rank creates its part with cuMemCreate (POSIX file-descriptor handles), exports it, and
// the bootstrap all-gathers the descriptors over its Unix socket (bootstrap.h); every process
// then reserves the whole range at the address the root proposes (cuMemAddressReserve, the hint
// checked: a process where it is taken says so and the root proposes another), imports and maps
// each rank's part at its offset, and gives its device read/write access. A part holds the
// rank's sync state (progress, mailboxes, error word, inbox; zeroed before any rank may start)
// and its heap (scratch, staging, cccCommMemAlloc buffers).
#pragma once

#include <cstdint>
#include <memory>

#include "arena_heap.h"
#include "ccc/unique_id.h"
#include "cuda_driver.h"
#include "cuda_topology.h"

namespace ccc {

class ControlChannel;  // bootstrap.h

// One rank's sync state in device memory, as CudaRanks lays it out (also outside an arena):
// progress[CCC_PROGRESS_WORDS], mailbox[2 * CCC_MAX_CHANNELS], the error word, then (8-byte
// aligned) the inbox of CCC_MAX_CHANNELS * N slots.
struct CudaSyncLayout {
  static const uint64_t kMailbox, kError, kInbox;  // offsets; progress is at 0
  static uint64_t inbox_bytes(int nranks);
  static uint64_t bytes(int nranks);
};

// Where things lie in the arena of `nranks` ranks.
struct CudaArenaLayout {
  uint64_t sync_bytes = 0;   // at the start of each part
  uint64_t heap_offset = 0;  // in each part (ArenaHeap::kAlign-aligned)
  uint64_t heap_bytes = 0;   // at least what was asked
  uint64_t part_bytes = 0;   // a multiple of the allocation granularity
  uint64_t total_bytes = 0;  // nranks parts, rank r's at r * part_bytes
  uint64_t granularity = 0;  // the arena's alignment
};
// Throws Error(InvalidArgument) for a granularity that is not a power of two, Error(System) for
// an arena whose size overflows.
CudaArenaLayout cuda_arena_layout(int nranks, uint64_t heap_bytes, uint64_t granularity);

// The CUDA ordinal of the device current in the calling thread (its current context's), or 0
// without a current context, as cudaGetDevice answers; NCCL's cccCommInitRank takes this one.
int current_cuda_device(const CudaDriver& driver);

class CudaArena {
 public:
  // Joins `id` as rank `rank` of `nranks`, with its part on CUDA device `ordinal`. Returns once
  // every rank has mapped the arena. Throws ccc::Error (Cuda: a driver call failed, named).
  CudaArena(const UniqueId& id, int nranks, int rank, int ordinal, uint64_t heap_bytes, uint64_t timeout_ns);
  ~CudaArena();  // unmaps and releases; the device must be idle
  CudaArena(const CudaArena&) = delete;
  CudaArena& operator=(const CudaArena&) = delete;

  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  int ordinal() const { return ordinal_; }
  const CudaArenaLayout& layout() const { return layout_; }
  CUdeviceptr sync(int rank) const { return base_ + static_cast<uint64_t>(rank) * layout_.part_bytes; }
  ArenaHeap& heap() { return *heap_; }
  // [p, p + bytes) lies inside the arena (any rank's part): peers can read it.
  bool contains(const void* p, uint64_t bytes) const;
  CUdeviceptr base() const { return base_; }
  // The communicator's control channel, kept from the join (bootstrap.h).
  ControlChannel& control() { return *control_; }
  // Every rank's device, as the ranks exchanged them at the join (rank order).
  const std::vector<RankDevice>& devices() const { return devices_; }
  // Another rank's part lives on this rank's device (ranks in processes sharing one GPU, e.g.
  // under MPS), from the PCI bus ids in devices().
  bool device_shared() const { return device_shared_; }

  class Mapper;  // the ArenaMapper of bootstrap.h (cuda_arena.cpp)

 private:
  const CudaDriver& driver_;
  int nranks_, rank_, ordinal_;
  // The device's primary context, retained for the arena's life: the mapping and the handles
  // are released in it, and no other retain (the backend's, the user's runtime) may be the last.
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CudaArenaLayout layout_;
  CUdeviceptr base_ = 0;
  std::unique_ptr<Mapper> mapper_;  // owns the handles and the mapping
  std::unique_ptr<ArenaHeap> heap_;
  std::unique_ptr<ControlChannel> control_;
  std::vector<RankDevice> devices_;
  bool device_shared_ = false;
};

}  // namespace ccc
