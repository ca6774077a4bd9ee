// What a communicator needs of the machine its ranks run on: load a kernel, give each rank its
// scratch, launch a rank, wait, report and abort. HostRanks (host_backend.h: kernels on host
// threads) and CudaRanks (cuda_backend.h: kernels on GPUs) implement it; the communicator
// (communicator.cpp) holds one and never asks which. A new backend is one class implementing
// this and a constructor of Communicator that makes it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "ccc/communicator.h"  // BackendKind
#include "ccc/errors.h"
#include "ccc/jit_cache.h"
#include "ccc_abi.h"
#include "cuda_registry.h"
#include "emit_cuda.h"

namespace ccc {

class ArenaHeap;

// A stream-ordered copy around a kernel (staging a buffer outside the multi-process arena).
struct StagingCopy {
  void* to = nullptr;
  const void* from = nullptr;
  uint64_t bytes = 0;
};

// One rank's launch of a loaded kernel.
struct RankLaunch {
  int kernel = -1;         // what Backend::load returned
  int channels = 0;        // the kernel's channels: blocks of the rank (and norm_blocks)
  int block_threads = 0;   // threads per block
  ccc_buffers own;         // the rank's buffers, scratch and LL slots
  ccc_epilogue_args epilogue{};  // an epilogue kernel's operands (ccc_launch_args::epilogue), else zeros
  uint64_t count = 0;      // the kernel's `count`
  uint64_t timeout_ns = 0;
  void* stream = nullptr;  // the rank's stream (CUDA), null: the default
  ccc_trace_channel* trace = nullptr;  // records a traced kernel fills in (Backend::trace_alloc), or null
  const StagingCopy* before = nullptr;  // copies queued just before and after the kernel, or null
  const StagingCopy* after = nullptr;
  int norm_blocks = 0;     // an RMSNorm kernel's blocks past its channels (ccc_launch_args::rank_blocks)
};

// Buffers that peers in other processes open where they are (a multi-process CUDA communicator:
// cuda_registry.h); Backend::peer_registry() is null where there is no such thing.
class PeerRegistry {
 public:
  virtual ~PeerRegistry() = default;
  // Collective: registers the local rank's [p, p + bytes); returns the handle for deregister.
  virtual void* register_buffer(void* p, uint64_t bytes) = 0;
  // Any number of the local rank's buffers as one registration (Communicator::end_graph_registration).
  virtual void* register_buffers(std::span<const CudaRegistry::Buffer> buffers, const char* what,
                                 const std::function<void()>& precondition) = 0;
  virtual void deregister_buffer(void* handle) = 0;
  // [p, p + bytes) lies inside a buffer the local rank registered.
  virtual bool registered(const void* p, uint64_t bytes) const = 0;
  // The allocation holding p can be shared with other processes (CUDA IPC).
  virtual bool shareable(const void* p) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  virtual int nranks() const = 0;
  // A multi-process communicator's rank in this process; -1 when this process holds every rank.
  virtual int local_rank() const = 0;
  bool multi_process() const { return local_rank() >= 0; }

  // ---- kernels
  // The channels a call takes when neither the caller nor a cost model chooses (0: the kernel's
  // default). The host runs a channel as a thread on few cores, so there one per rank.
  virtual int default_channels() const = 0;
  // Every rank is on one device in this process (KernelOptions::one_device: .gpu scope).
  virtual bool one_device() const = 0;
  // The most blocks a rank's launch of an RMSNorm kernel may take, its channels and then norm
  // blocks (rmsnorm_rank_blocks); 0: the channels alone, where norm blocks would not fit beside
  // other ranks' blocks on one device.
  virtual int max_rank_blocks() const = 0;
  // A kernel build() compiled and loaded, not yet in the backend's table; destroyed untaken, it
  // unloads what it loaded.
  struct BuiltKernel {
    virtual ~BuiltKernel() = default;
  };
  // Compiles `source` (the kernel's, perhaps traced) through `cache` and loads it, touching
  // nothing a launch on another thread reads: the communicator calls it with its lock released,
  // since compiling takes seconds and loading a module may wait for the kernels running on a
  // device, which may wait for a peer whose thread needs that lock to launch (docs/runtime.md,
  // "Threads").
  virtual std::unique_ptr<BuiltKernel> build(JitCache& cache, const std::string& source,
                                             const EmittedKernel& kernel) const = 0;
  // Takes a built kernel into the table: the handle RankLaunch::kernel takes.
  virtual int install(std::unique_ptr<BuiltKernel> kernel) = 0;
  // The compile build() would do, as a task that needs nothing of the backend (a warm-up thread
  // runs it): it fills the cache only.
  virtual std::function<void()> compile_task(JitCache& cache, const std::string& source,
                                             const EmittedKernel& kernel) const = 0;

  // ---- memory
  // Throws Error(InvalidArgument) unless [p, p + bytes) is memory rank `rank`'s kernel can use.
  virtual void check_buffer(int rank, const void* p, uint64_t bytes, const char* what) const = 0;
  // Rank `rank`'s scratch (LL receive slots) of at least `bytes` for its next launch on `stream`.
  virtual void* scratch(int rank, uint64_t bytes, void* stream) = 0;
  virtual void* ll_slots(int rank, uint64_t bytes, void* stream) = 0;
  // Multi-process: whether peers read [p, p + bytes) where it is (arena memory, a registered
  // buffer); else it is staged through the arena. Always true in one process.
  virtual bool peers_read_in_place(const void* p, uint64_t bytes) const = 0;
  // Multi-process: this rank's heap in the shared arena (mem_alloc); null in one process.
  virtual ArenaHeap* heap() = 0;
  virtual PeerRegistry* peer_registry() { return nullptr; }
  // `stream` is capturing a graph.
  virtual bool capturing(void* stream) const = 0;

  // ---- launches
  // Queues rank `rank`'s launch on its stream and returns.
  virtual void launch(int rank, const RankLaunch& launch) = 0;
  // Whether every rank's launch is one grid (virtual ranks on one GPU): then run launches them
  // together with launch_all, and a rank cannot issue its part alone.
  virtual bool one_grid() const { return false; }
  // one_grid(): how many blocks of `threads` threads of kernel `kernel` the grid holds at once.
  virtual int64_t grid_blocks(int /*kernel*/, int /*threads*/) const { throw rank_by_rank(); }
  // one_grid(): every rank's launch at once, launches[r] rank r's; rank 0's trace and stream
  // serve the grid.
  virtual void launch_all(std::span<const RankLaunch> /*launches*/) { throw rank_by_rank(); }
  // A call that issues every rank's part returns once they are done (the host: its callers
  // expect results, and there is no stream to wait on).
  virtual bool calls_complete() const = 0;
  // Waits for rank `rank` (-1: every rank); throws Error(Remote) naming the ranks that failed.
  virtual void synchronize(int rank) = 0;
  // Rank `rank`'s failure so far, without waiting ("" if none).
  virtual std::string async_error(int rank) = 0;
  // Marks rank `rank` failed, so its peers stop waiting for it.
  virtual void abort(int rank) = 0;

  // The simulator's clock (Communicator::virtual_seconds), or nullopt: no virtual time here.
  virtual std::optional<double> virtual_seconds() { return std::nullopt; }
  // The simulator's critical path of the launch that ended last (Communicator::critical_path).
  virtual std::optional<std::string> critical_path() { return std::nullopt; }

  // ---- tracing
  // Where a traced launch of rank `rank` writes `bytes` of records; null: host memory serves.
  virtual void* trace_alloc(int /*rank*/, uint64_t /*bytes*/, void* /*stream*/) { return nullptr; }
  // Copies trace_alloc's records into `host` (the rank is idle) and frees them.
  virtual void trace_read(int /*rank*/, void* /*records*/, void* /*host*/, uint64_t /*bytes*/) {}

 private:
  static Error rank_by_rank() { return Error(ErrorKind::Internal, "this backend launches rank by rank, not one grid"); }
};

}  // namespace ccc
