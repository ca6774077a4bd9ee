// ccc::Communicator: collectives over N ranks, compiled for the machine they run on.
//
// One Communicator drives every rank of a single process (like ncclCommInitAll), or, made by
// host_rank, one rank of a communicator whose other ranks are other processes (like
// ncclCommInitRank; host backend, docs/runtime.md "Multi-process communicators"). A collective is
// issued either for every rank at once (all_reduce(...) and friends: one send and one recv buffer
// per rank) or one rank at a time (run_rank: what the C API does when rank i calls): rank i's
// kernel is queued on rank i's stream the moment it is issued, and the ranks meet inside the
// kernel, which learns its peers' buffers there (ccc_abi.h). Backends:
//   host - each rank's stream is a set of persistent worker threads; buffers are host memory.
//          The all-ranks calls return when the collective is done; run_rank returns once the
//          rank's part is queued, and synchronize_rank(i) waits for it.
//   cuda - one rank per CUDA device (or N virtual ranks on one device, launched as one grid);
//          buffers are device memory of the rank's device; calls are asynchronous on the given
//          streams (none: the default stream) and synchronize() reports a failed collective.
// Each call picks a schedule and its channels and tile size (CommOptions::algo, else $CCC_ALGO,
// else the cost model over the topology: CommOptions::topology_file or $CCC_TOPO, else detected
// on CUDA (docs/runtime.md, "Topology"); with no topology, ring), generates and JIT-compiles
// the kernel once per shape (cached in memory and on disk), and launches it.
//
// Every rank must issue the same collectives in the same order with the same count, type, op
// and root. A rank whose peer passed something else fails with Error(Remote) ("a peer called
// with another ..."); a peer that never issues it makes the others fail after the timeout.
// Collectives of one communicator run one after another on each rank: issue them on one stream
// per rank (collectives on two streams of one rank at once would share its progress counters).
//
// Thread safety: calls from several threads are serialised by the communicator (one at a time;
// synchronize_rank waits without holding it, so ranks driven by their own threads never block
// each other). Errors are ccc::Error (errors.h); a call refused for its arguments
// leaves the communicator as it was; after a collective failed, the next synchronize (once no
// rank is running) reports it and resets the ranks' synchronisation state.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ccc/collective_call.h"
#include "ccc/diagnostics.h"
#include "ccc/errors.h"
#include "ccc/jit_cache.h"
#include "ccc/types.h"
#include "ccc/unique_id.h"

namespace ccc {

struct CommOptions {
  std::string algo;             // schedule name for every call; empty: $CCC_ALGO, else selection
  std::optional<SourceFile> schedule;  // run this schedule (not a shipped one) for its collective
  // Values for the schedule's `param NAME = E` (docs/dsl.md). Shipped schedules have no
  // parameters, so without `schedule` any define fails the call that instantiates it.
  std::map<std::string, int64_t> defines;
  int channels = 0;             // thread blocks per rank; 0: the selection's choice (host: 1)
  int64_t tile_bytes = 0;       // 0: the selection's choice
  // simple or ll (docs/codegen.md, "Protocols"); unset: the selection's choice. A call larger
  // than kLlMaxBytes with ll fails with InvalidArgument.
  std::optional<Protocol> protocol;
  std::string topology_file;    // for selection; empty: $CCC_TOPO, else detected (CUDA) or none
  // Measured constants (topology.h, Calibration) replacing those of the topology file or the
  // detected topology; empty: $CCC_CALIBRATION, else none.
  std::string calibration_file;
  // A rank waiting longer than this on a peer fails the collective. Unset: $CCC_TIMEOUT
  // (seconds), else kDefaultTimeoutSeconds (10 minutes, PyTorch's default for NCCL: a rank late
  // by an evaluation or a checkpoint must not fail the job). Infinite or longer than a year: wait
  // for ever. Zero, negative or NaN: refused when the communicator is created.
  std::optional<double> timeout_seconds;
  // Host backend: the threads of each thread block (1..1024), run as fibers with their own
  // thread index, real block barriers and parallel waits, as on a GPU. 0: $CCC_HOST_BLOCK_THREADS,
  // else 1, the fastest; the tests run more.
  int host_block_threads = 0;
  // Simulator: run every window, step, wait, barrier and poll but move no data (the data loops
  // return at once; protocol ll's lines still carry theirs), so sizes beyond this machine's
  // memory simulate in seconds with the same virtual times; outputs are left as they were, so nothing may check them. Buffers are
  // still needed, but pages the kernels never touch cost no memory. docs/simulator.md.
  bool sim_timing_only = false;
  // Simulator: price every launch as a replay of a CUDA graph's kernel node (the topology's
  // `graph_launch`, where its GPUs have one) rather than an eager launch; the selection prices
  // calls the same way (`ccc tune --graph`). docs/simulator.md.
  bool sim_graph_replays = false;
  JitCache* cache = nullptr;    // null: JitCache::process_cache()
  // Records a timeline of every collective into this Chrome trace-event JSON file (empty:
  // $CCC_TRACE, else no tracing). Calls run the traced variant of their kernel; the file holds
  // every call's events and is written when the communicator is destroyed (a write that fails
  // is a warning on stderr). docs/tracing.md.
  std::string trace_file;
};

// What a collective call runs: its schedule, channels (thread blocks per rank), tile and
// protocol, as the selection chose them over the communicator's topology (docs/runtime.md,
// "Topology"), or as CommOptions forced them. The host backend without a simulator runs 1
// channel; with no topology the schedule is the collective's ring.
struct KernelChoice {
  std::string algorithm;
  int channels = 0;
  int64_t tile_bytes = 0;
  Protocol protocol = Protocol::Simple;
  friend bool operator==(const KernelChoice&, const KernelChoice&) = default;
};

// What the models predict for one call on the communicator's topology (Communicator::predict).
struct Prediction {
  double ccc_seconds = 0;   // the cost model's time for the kernel choice_for names
  double nccl_seconds = 0;  // NCCL's own tuning model for its ring on the same GPUs (docs/nccl.md)
};

// Host: kernels on host threads. Cuda: on GPUs. Sim: host emulation in virtual time on the GPUs
// of a topology file (docs/simulator.md).
enum class BackendKind { Host, Cuda, Sim };
// A backend's name, as CCC_BACKEND, cccConfig_t::backend, `--backend` and Python spell it:
// "host", "cuda", "sim".
const char* backend_name(BackendKind kind);
// The backend of that name; none for another.
std::optional<BackendKind> backend_named(std::string_view name);
// "\"host\", \"cuda\" or \"sim\"": the names, for an error message.
std::string backend_names();

// The multi-process options beyond CommOptions.
struct RankOptions {
  // Bytes of each rank's heap in the shared arena (scratch, staging of buffers that are not in
  // the arena, mem_alloc). 0: $CCC_ARENA_BYTES, else 64 MiB. Every rank must pass the same.
  uint64_t arena_bytes = 0;
  // cuda_rank: the CUDA device ordinal of this rank. -1: the device of the context current in
  // the calling thread, else 0 (what cudaGetDevice answers; NCCL takes that one too).
  int device = -1;
};

class Communicator {
 public:
  static constexpr int kMaxChannels = 64;  // lowering's limit
  static constexpr double kDefaultTimeoutSeconds = 600;  // CommOptions::timeout_seconds

  // Checks a timeout (see CommOptions::timeout_seconds) and returns it in nanoseconds as the
  // kernels take it (~0: for ever). Throws Error(InvalidArgument) for zero, negative or NaN.
  static uint64_t timeout_ns(std::optional<double> seconds);

  // N ranks on host threads.
  static Communicator host(int nranks, CommOptions options = {});
  // N ranks in virtual time: host emulation, bit for bit, of rank r on GPU r of the topology
  // file (options.topology_file, else $CCC_TOPO; required), whose clock virtual_seconds() reads
  // (docs/simulator.md). Blocks run options.host_block_threads threads (unset: N, 8 to 32).
  static Communicator sim(int nranks, CommOptions options = {});
  // One rank per CUDA device ordinal in `devices`. Throws Error(NoDevice) without a driver.
  static Communicator cuda(std::vector<int> devices, CommOptions options = {});
  // `nranks` virtual ranks on one CUDA device, launched together as one grid (for testing).
  static Communicator cuda_virtual(int device, int nranks, CommOptions options = {});

  // Multi-process (host backend): starts the bootstrap root of a new communicator in this
  // process and returns its id, which every rank's process passes to host_rank (like
  // ncclGetUniqueId). The root serves one communicator; it runs on a thread of its own, which
  // ends once the ranks have joined, or 1.5 x the default timeout after this call if none has
  // come (the id is then released: a rank that comes later is refused).
  static UniqueId unique_id();
  // Rank `rank` of the `nranks`-rank communicator `id`, one rank per process: returns when every
  // rank has joined and mapped the shared arena. Throws Error(Remote) when a rank does not join
  // within the timeout, Error(InvalidArgument/InvalidUsage) for a bad id or ranks that disagree.
  // Only `rank` is local: issue collectives with run_rank(call, rank, ...), wait with
  // synchronize().
  static Communicator host_rank(const UniqueId& id, int nranks, int rank, CommOptions options = {},
                                RankOptions rank_options = {});
  // The same on the CUDA backend, one device per process (RankOptions::device): the arena is
  // device memory every rank's process maps at one address (cuda_arena.h). Collectives run on
  // the caller's stream; buffers outside the arena (anything but mem_alloc's) that the rank has
  // not registered (register_buffer) are staged with cuMemcpyAsync on that stream before and
  // after the kernel. Throws Error(NoDevice) without a
  // driver, Error(Cuda) naming a failed driver call.
  static Communicator cuda_rank(const UniqueId& id, int nranks, int rank, CommOptions options = {},
                                RankOptions rank_options = {});

  // The same by backend, where the caller chooses one at run time (CCC_BACKEND, --backend):
  // every rank in this process (host, sim, or cuda on devices 0 .. nranks - 1), or this
  // process's rank (host_rank, cuda_rank; the simulator keeps every rank in one process and is
  // refused with Error(InvalidUsage)).
  static Communicator create(BackendKind backend, int nranks, CommOptions options = {});
  static Communicator create_rank(BackendKind backend, const UniqueId& id, int nranks, int rank,
                                  CommOptions options = {}, RankOptions rank_options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  int size() const;
  BackendKind backend() const;

  using Sends = std::span<const void* const>;
  using Recvs = std::span<void* const>;
  using Streams = std::span<void* const>;

  void all_reduce(Sends send, Recvs recv, uint64_t count, DataType dtype, ReduceOp op,
                  Streams streams = {});
  // The fused allreduce + residual (Epilogue::Residual): recv = allreduce(send) + residual, the
  // residual added once per element in the kernel where the schedule completes that element, so
  // nothing runs after the collective. residual: `count` elements per rank, read only, not
  // overlapping any recv (docs/epilogue.md).
  void all_reduce_residual(Sends send, Sends residual, Recvs recv, uint64_t count, DataType dtype, ReduceOp op,
                           Streams streams = {});
  // Then RMSNorm (Epilogue::ResidualRmsNorm): with s the above, recv = s / sqrt(mean(s^2) + eps)
  // * weight over each row of `hidden` elements (count = rows x hidden), after the collective's
  // last write, in the same kernel; residual_out (empty: none) gets s. weight: `hidden` elements
  // per rank. f32, f16 and bf16.
  void all_reduce_residual_rmsnorm(Sends send, Sends residual, Sends weight, Recvs recv, Recvs residual_out,
                                   uint64_t count, uint64_t hidden, float eps, DataType dtype, ReduceOp op,
                                   Streams streams = {});
  // And the output quantised to fp8 too: quant_out (`count` bytes of f8e4m3 per rank) gets
  // e4m3(recv * (1 / scale)), rounded to nearest even, saturating at +-448 (CollectiveCall::quant_scale).
  void all_reduce_residual_rmsnorm_fp8(Sends send, Sends residual, Sends weight, Recvs recv, Recvs residual_out,
                                       Recvs quant_out, uint64_t count, uint64_t hidden, float eps, float scale,
                                       DataType dtype, ReduceOp op, Streams streams = {});
  // send holds size() * recv_count elements per rank; recv gets the rank's block.
  void reduce_scatter(Sends send, Recvs recv, uint64_t recv_count, DataType dtype, ReduceOp op,
                      Streams streams = {});
  // recv holds size() * send_count elements per rank.
  void all_gather(Sends send, Recvs recv, uint64_t send_count, DataType dtype,
                  Streams streams = {});
  void broadcast(Sends send, Recvs recv, uint64_t count, DataType dtype, int root,
                 Streams streams = {});
  void reduce(Sends send, Recvs recv, uint64_t count, DataType dtype, ReduceOp op, int root,
              Streams streams = {});
  // send and recv hold size() blocks of `count` elements per rank (MPI_Alltoall's sendcount):
  // block p of rank r's recv is block r of rank p's send. Out of place only.
  void all_to_all(Sends send, Recvs recv, uint64_t count, DataType dtype, Streams streams = {});
  // Any of the above, spelled as a CollectiveCall.
  void run(const CollectiveCall& call, Streams streams = {});

  // Rank `rank`'s part of `call` (its collective, count, dtype, op, root, epilogue; the buffer
  // spans are not read): queues the rank's kernel on `stream` (cuda; null: the default stream) or
  // on the rank's worker threads (host) and returns without waiting for the peers. `epilogue`:
  // the rank's operands, where call.epilogue has one.
  void run_rank(const CollectiveCall& call, int rank, const void* send, void* recv, void* stream = nullptr,
                const RankEpilogue& epilogue = {});

  // Waits for every rank's outstanding work; throws Error(Remote) if a collective failed.
  void synchronize();
  // Waits for rank `rank`'s outstanding work; throws Error(Remote) if its collective failed.
  void synchronize_rank(int rank);

  // Sim: the virtual seconds, since the communicator was made, at which the last work queued so
  // far ends on its GPUs (after synchronize(): every call's). Differences between two readings
  // time what was queued in between, as CUDA events would. Error(InvalidUsage) on other backends.
  double virtual_seconds();
  // Sim: why the launch that ended last (after synchronize(): the last call's) took its time:
  // the chain of moments that set its end, from its launch (waits that ended on a peer's store,
  // barriers that waited for their last thread, the stores), one line each, in µs since the
  // launch (docs/simulator.md). Error(InvalidUsage) on other backends.
  std::string critical_path();

  // The kernel `call` would run (its buffers are not looked at).
  KernelChoice choice_for(const CollectiveCall& call) const;
  // What the cost model predicts for `call`, and what NCCL's published tuning model predicts for
  // the same call on the same GPUs (libccc-nccl routes a call to ccc where the first is smaller).
  // Both 0 without a topology (docs/runtime.md, "Topology"); ccc_seconds 0 when CommOptions gave
  // the schedule itself (CommOptions::schedule).
  Prediction predict(const CollectiveCall& call) const;

  // Compiles ahead the kernels that calls of these shapes will run (collective, count, dtype,
  // op, root; the buffers are not looked at; `in_place`: calls whose send and recv are one
  // buffer), so their first call finds them in the JIT cache instead of paying NVRTC or the
  // host compiler (about 0.3 s per kernel cold; with a disk cache, later processes start warm).
  // Shapes that select the same kernel compile once. Background (the default): returns at once
  // and compiles on a thread of the communicator's; a call whose kernel is still compiling waits
  // for that compile alone, and a compile that fails is reported by the call that needs it.
  // Wait: compiles on the calling thread and throws Error(Compile) if one fails.
  enum class WarmUp { Background, Wait };
  void warm_up(const std::vector<CollectiveCall>& shapes, bool in_place = false, WarmUp mode = WarmUp::Background);

  // Memory in the multi-process arena (host_rank and cuda_rank communicators only; device memory
  // on cuda): buffers peers read in place, with no staging copy. Error(System) when the rank's
  // heap has no room.
  void* mem_alloc(uint64_t bytes);
  void mem_free(void* p);

  // Registers a buffer the user already has (cccCommRegister; docs/runtime.md, "Buffers.") and
  // returns its handle for deregister_buffer. CUDA across processes (cuda_rank): collective,
  // every rank registers one buffer of its own in the same call; the peers open it through CUDA
  // IPC and its collectives then use it in place instead of staging it (cuda_registry.h). One
  // process (host, cuda, cuda_virtual): nothing to exchange, the ranks share an address space;
  // the handle is only checked by deregister_buffer. Host across processes (host_rank):
  // Error(InvalidUsage), since another process cannot map malloc memory (cccCommMemAlloc gives
  // memory used in place). Error(InvalidArgument) for a null buffer or 0 bytes.
  void* register_buffer(void* p, uint64_t bytes);
  // Error(InvalidArgument) for a handle register_buffer did not give (or already taken back).
  void deregister_buffer(void* handle);

  // Registration for CUDA graphs (cccCommGraphRegisterBegin/End; docs/runtime.md, "Buffers.").
  // Registration for CUDA graphs, as cccCommGraphRegisterBegin / End (ccc.h says what each
  // does and when it fails, as Error(InvalidUsage) here): begin starts the mode on this rank,
  // captured collectives use the buffers they can in place, and end (collective, once the
  // captures have ended) registers them, returning a handle for deregister_buffer.
  void begin_graph_registration();
  void* end_graph_registration();

  // Rank `rank`'s failure so far, without waiting ("" if none). Host backend, and the CUDA
  // backend across processes (the error words read on a stream of their own, so a kernel still
  // waiting does not hold the answer up); Error(InvalidUsage) for CUDA in one process.
  std::string async_error(int rank);
  // Marks rank `rank` failed (host backend, and CUDA across processes), so its peers stop waiting
  // for it and fail at once instead of after the timeout, and its own later calls fail; the CUDA
  // backend in one process does nothing. Destroying follows (cccCommAbort).
  void abort_rank(int rank);

  // Releases everything (after writing the trace, if tracing); any later call throws
  // Error(InvalidUsage). In a process forked after the communicator was made, every call but
  // this one throws Error(InvalidUsage), and this one (or the destructor) only drops the handle:
  // the communicator is the parent's.
  void destroy();

 private:
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  Impl& live() const;  // throws Error(InvalidUsage) after destroy, or in a forked child
  void forget_if_forked();
  std::unique_ptr<Impl> impl_;
};

}  // namespace ccc
