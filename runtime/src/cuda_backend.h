// The CUDA backend: cubins from NVRTC loaded with the driver API (opened with dlopen); one launch
// per rank on the rank's stream when the rank issues its part, or one cooperative grid for N
// virtual ranks on a single device (args.rank == -1). Across processes, one local rank whose
// peers' state lies in a CudaArena (cuda_arena.h), with the same kernels and launch path.
//
// A kernel takes one ccc_launch_args by value: its own rank's buffers and a pointer to the
// communicator's fixed per-rank state (counters, mailboxes, error words), written once when the
// communicator is made. Nothing a launch reads is rewritten by a later call, so a captured graph
// replays with the buffers it captured, and the call path makes no synchronous driver call
// (except growing scratch, which is refused during capture). Collectives are asynchronous on the
// caller's streams; synchronize() waits and reports a rank's error word as Error(Remote).
//
// Every driver call runs with the rank's device's primary context current; the caller's current
// context is restored when a public member returns.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <set>
#include <string>
#include <vector>

#include "backend.h"
#include "ccc_abi.h"
#include "cuda_driver.h"
#include "cuda_registry.h"
#include "nvrtc_jit.h"

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

// What check_buffer() found wrong with a device pointer's allocation, or "" if it is usable:
// `range_start`/`range_size` describe the allocation holding it, `legacy_ipc` whether it is a
// cuMemAlloc/cudaMalloc allocation (the only kind peer access maps), `peers` whether other
// devices read it.
std::string cuda_buffer_problem(uintptr_t p, uint64_t bytes, uintptr_t range_start, uint64_t range_size,
                                bool legacy_ipc, bool peers);

// Whether launches may use programmatic dependent launch where the device has it, from the
// value of $CCC_PDL (null: unset): unset, "" or "1" yes, "0" no; anything else throws
// Error(InvalidArgument).
bool cuda_programmatic_launch_allowed(const char* env);

class CudaArena;

class CudaRanks : public Backend, public PeerRegistry {
 public:
  // One rank per entry of `devices` (CUDA ordinals, peer access enabled between all of them),
  // or, when `virtual_ranks` > 0, that many ranks on devices[0] launched as one grid. Throws
  // NoCudaDevice without a driver, Error(InvalidArgument) for a bad device list.
  CudaRanks(std::vector<int> devices, int virtual_ranks);
  // Multi-process: rank arena.rank() of arena.nranks(), on the arena's device; the peers run in
  // other processes and share their sync state through `arena`, which outlives this. Scratch
  // comes from the arena's heap. A failure is final (synchronize reports it again and again).
  explicit CudaRanks(CudaArena& arena);
  ~CudaRanks() override;
  CudaRanks(const CudaRanks&) = delete;
  CudaRanks& operator=(const CudaRanks&) = delete;

  BackendKind kind() const override { return BackendKind::Cuda; }
  int nranks() const override { return static_cast<int>(ranks_.size()); }
  int local_rank() const override;
  int default_channels() const override { return 0; }
  bool virtual_ranks() const { return virtual_ranks_; }
  // Every rank runs on one device in this process (virtual ranks, or one rank of one device):
  // the kernels' sync operations need only .gpu scope (KernelOptions::one_device). Ranks in
  // other processes (an arena) keep .sys even on one device: the runtime writes their error
  // words from the host while kernels run (abort).
  bool one_device() const override { return arena_ == nullptr && devices_.size() == 1; }
  // Norm blocks where a rank has its device to itself: not for virtual ranks, nor for ranks of
  // several processes on one device (MPS), whose blocks must all be resident together. A launch
  // also takes no more than the device holds at once (CudaRanks::launch).
  int max_rank_blocks() const override;
  const std::string& arch() const { return arch_; }  // of devices[0]; all must match

  // Builds the kernel with NVRTC for arch() (through `cache`) and loads it on every device.
  std::unique_ptr<BuiltKernel> build(JitCache& cache, const std::string& source,
                                     const EmittedKernel& kernel) const override;
  int install(std::unique_ptr<BuiltKernel> kernel) override;
  std::function<void()> compile_task(JitCache& cache, const std::string& source,
                                     const EmittedKernel& kernel) const override;

  // Throws Error(InvalidArgument) unless [p, p + bytes) is device memory of rank `rank`'s device,
  // in one allocation that the rank's peers can map.
  void check_buffer(int rank, const void* p, uint64_t bytes, const char* what) const override;

  // Rank `rank`'s scratch of at least `bytes`. Growing allocates (the old allocation stays alive
  // for launches still queued), which is refused while `stream` is capturing a graph.
  void* scratch(int rank, uint64_t bytes, void* stream) override;
  // The same for its LL receive slots (ccc_buffers::ll): memory only ll kernels ever write, and
  // only with lines, zeroed when allocated (cuMemsetD8), so no line a launch polls holds anything
  // but a flag of an earlier launch.
  void* ll_slots(int rank, uint64_t bytes, void* stream) override;
  // Across processes: arena memory, or a buffer this rank registered.
  bool peers_read_in_place(const void* p, uint64_t bytes) const override;
  ArenaHeap* heap() override;
  PeerRegistry* peer_registry() override { return arena_ != nullptr ? this : nullptr; }

  // Tracing: zeroed device memory of `bytes` on rank `rank`'s device for a traced launch's
  // records (cuMemAlloc and cuMemsetD8, which may wait for the legacy default stream). Refused
  // while `stream` captures a graph. trace_read copies them into `host` once the device is idle
  // and frees them.
  void* trace_alloc(int rank, uint64_t bytes, void* stream) override;
  void trace_read(int rank, void* records, void* host, uint64_t bytes) override;

  // Queues rank `rank`'s kernel on its stream (null: the default stream) without waiting, the
  // staging copies around it with cuMemcpyAsync. On a device of compute capability 9.0 or newer
  // the kernel goes out with programmatic dependent launch (cuLaunchKernelEx), unless
  // $CCC_PDL=0 or the stream is capturing a graph (docs/runtime.md).
  void launch(int rank, const RankLaunch& launch) override;
  // How many blocks of `threads` threads of loaded kernel `kernel` the (first) device holds at
  // once, as the driver computes it for that kernel's registers and shared memory.
  struct Occupancy {
    int per_sm = 0, sms = 0;
    int64_t blocks() const { return static_cast<int64_t>(per_sm) * sms; }
  };
  Occupancy occupancy(int kernel, int threads) const;
  // The device copy of `bytes` at `data` (virtual_tables_), made on first use, never while
  // `stream` captures.
  CUdeviceptr virtual_table(char kind, const void* data, uint64_t bytes, void* stream);
  bool one_grid() const override { return virtual_ranks_; }
  int64_t grid_blocks(int kernel, int threads) const override { return occupancy(kernel, threads).blocks(); }
  // Virtual ranks: one cooperative grid of N * channels blocks, rank r with launches[r].own.
  // Throws Error(InvalidArgument) when the grid cannot be co-resident on the device.
  void launch_all(std::span<const RankLaunch> launches) override;
  bool calls_complete() const override { return false; }  // asynchronous on the callers' streams

  // Waits for rank `rank`'s device (-1: every rank's); throws Error(Remote) if the rank failed
  // (naming each rank whose error word is set), after every device is idle and the counters
  // and error words are zeroed (as the prelude requires); the other failed ranks report theirs
  // in their own synchronize.
  void synchronize(int rank) override;
  // Multi-process: rank `rank`'s failure so far, without waiting for its kernels ("" if none),
  // read on a stream of its own; Error(InvalidUsage) in one process.
  std::string async_error(int rank) override;
  // Multi-process: marks rank `rank` failed (its error word), so its peers stop waiting for it.
  // Nothing in one process.
  void abort(int rank) override;

  // Multi-process, collective (cuda_registry.h): registers the local rank's [p, p + bytes), which
  // its collectives then use in place; returns the handle for deregister_buffer.
  void* register_buffer(void* p, uint64_t bytes) override;
  // The same for any number of buffers of the local rank (none on some ranks) as one
  // registration, e.g. those captured graphs use in place (Communicator::end_graph_registration).
  void* register_buffers(std::span<const CudaRegistry::Buffer> buffers, const char* what,
                         const std::function<void()>& precondition) override;
  void deregister_buffer(void* handle) override;
  // [p, p + bytes) lies inside a buffer the local rank registered (always false in one process).
  bool registered(const void* p, uint64_t bytes) const override;
  // The allocation holding device pointer p can be shared through CUDA IPC (cudaMalloc memory).
  bool shareable(const void* p) const override;
  bool capturing(void* stream) const override;

 private:
  struct Device {
    int ordinal = 0;
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUdeviceptr state = 0;  // ccc_rank_state[N] as this device's launches read it
    bool programmatic_launch = false;  // compute capability 9.0 or newer: has PDL
    std::vector<CUfunction> functions;  // by kernel index
    std::vector<CUmodule> modules;
  };
  // Device memory that grows by new allocations (scratch, LL slots).
  struct Pool {
    std::vector<CUdeviceptr> blocks;  // back(): the current one
    std::vector<uint64_t> sizes;      // each block's bytes
    std::set<CUdeviceptr> captured;   // arena: blocks a captured graph launches with (kept)
    uint64_t bytes = 0;
  };
  struct Rank {
    int device = 0;           // index into devices_
    CUdeviceptr sync = 0;     // progress[CCC_PROGRESS_WORDS], mailbox[2 * CCC_MAX_CHANNELS], error,
                              // inbox[CCC_MAX_CHANNELS * N] (sync_bytes)
    Pool scratch, ll;
    std::string failure;      // a failure found by a synchronize, until this rank's reports it
  };
  // `pool` of rank `rank`, grown to at least `bytes`; `zero`: a new allocation is zeroed.
  void* grow(int rank, Pool Rank::*pool, uint64_t bytes, void* stream, const char* what, bool zero);

  // On every device, or none.
  std::unique_ptr<BuiltKernel> load_cubin(const std::string& cubin, const std::string& kernel_name) const;
  NvrtcRequest nvrtc_request(const std::string& source, const EmittedKernel& kernel) const;
  void synchronize_all();
  void add_device(int ordinal);
  void write_tables();  // table_ into every device's `state`
  void publish_registry();  // the registry's current table into this rank's state (arena mode)
  std::vector<unsigned> arena_error_words();  // every rank's, read on control_
  void use(const Device& d) const;
  CUdeviceptr alloc_zeroed(uint64_t bytes);
  void read_failures();  // every device idle: error words into failure, then zero the state

  const CudaDriver& driver_;
  CudaArena* arena_ = nullptr;    // multi-process
  CUstream control_ = nullptr;    // multi-process: a non-blocking stream for the error words
  std::unique_ptr<CudaRegistry> registry_;  // multi-process: the local rank's (its table entry's)
  bool virtual_ranks_ = false;
  // Read once, at creation; off too where ranks of the communicator share a device: a parked
  // successor grid would hold room a peer's blocks need to become resident (docs/runtime.md).
  bool pdl_ = cuda_programmatic_launch_allowed(std::getenv("CCC_PDL"));
  std::string arch_;
  std::vector<Device> devices_;
  std::vector<Rank> ranks_;
  std::vector<ccc_rank_state> table_;  // the fixed state, as written to every device
  // Virtual ranks: one immutable device table per buffer set ('b': ccc_buffers) and epilogue set
  // ('e': ccc_epilogue_args), keyed by the kind and the table's bytes.
  std::map<std::string, CUdeviceptr> virtual_tables_;
};

}  // namespace ccc
