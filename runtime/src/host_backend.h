// The host backend: generated kernels compiled by the system C++ compiler and run against the
// host prelude (device/) by persistent worker threads.
//
// The host prelude exports a kernel as
// `extern "C" void NAME(ccc_launch_args args, int block, const ccc_host_thread* self)`.
// Each rank has a stream: a FIFO of launches that the rank's workers (one thread per channel,
// started when a launch first needs it) run in order, every block of a launch at once, as a CUDA
// stream runs kernels; a block's threads are fibers of its worker (host_block.h). A launch returns as soon as it is queued; ranks meet inside the kernel.
// Idle workers and waiters spin briefly before they sleep: a futex wake costs a context switch
// (most of a small collective's time here), and back-to-back calls find them still awake.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "arena_heap.h"
#include "backend.h"
#include "host_block.h"
#include "host_compile.h"
#include "ccc/jit_cache.h"
#include "ccc_abi.h"

namespace ccc {

class SimEngine;

struct HostKernel {
  std::shared_ptr<const SharedObject> object;  // keeps `entry` loaded
  HostEntry entry = nullptr;
};

// What load_host_kernel compiles for generated `source` whose kernel is named `name` (a warm-up
// compiles the same request ahead, so the load finds it in the cache).
HostCompileRequest host_kernel_request(const std::string& source, const std::string& name);

// Compiles (through `cache`) and loads generated `source`, whose kernel is named `name`.
HostKernel load_host_kernel(JitCache& cache, const std::string& source, const std::string& name);

// A rank's stream: what runs its launches, in the order they were queued. HostStream runs them
// on worker threads; the simulator (sim_engine.h) on fibers in virtual time.
class HostQueue {
 public:
  virtual ~HostQueue() = default;
  // Queues `channels` blocks of `threads` threads of `kernel` with `args`. Throws Error(System)
  // when it cannot (nothing is queued then).
  virtual void enqueue(const HostKernel& kernel, const ccc_launch_args& args, int channels, unsigned threads) = 0;
  // Queues `task`, run in queue order like a launch (a staging copy before or after a kernel).
  virtual void enqueue(std::function<void()> task) = 0;
  // Blocks until every launch queued before the call has finished.
  virtual void wait_idle() = 0;
  virtual bool idle() = 0;
};

// One rank's stream on worker threads: launches run in the order they were queued, each with all
// its blocks on their own threads at once (blocks wait on each other's progress), each block's
// threads as fibers (host_block.h).
class HostStream : public HostQueue {
 public:
  HostStream() = default;
  ~HostStream() override;  // waits for the queued launches, then stops the workers
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Throws Error(System) when a worker thread cannot be started.
  void enqueue(const HostKernel& kernel, const ccc_launch_args& args, int channels, unsigned threads) override;
  void enqueue(std::function<void()> task) override;
  void wait_idle() override;
  bool idle() override;

 private:
  struct Launch {
    HostKernel kernel;
    ccc_launch_args args;
    int channels;
    unsigned threads;            // per block
    std::function<void()> task;  // set: a host task (one block) instead of the kernel
  };
  void start_workers(int count);  // with mutex_ held
  void push(Launch launch);       // with mutex_ held
  void work(int block);
  void start_front();  // with mutex_ held

  std::mutex mutex_;
  std::condition_variable wake_;  // workers: a launch started, or stop
  std::condition_variable idle_;  // waiters: the queue drained
  std::deque<Launch> queue_;      // front: the running launch
  // Written under mutex_; read without it by spinning workers and waiters.
  std::atomic<uint64_t> started_ = 0;    // launches started so far; workers run each one they see once
  std::atomic<uint64_t> enqueued_ = 0;   // launches queued so far
  std::atomic<uint64_t> completed_ = 0;  // launches finished so far (in queue order)
  int running_ = 0;                      // blocks of the front launch still running
  bool stop_ = false;
  std::vector<std::thread> workers_;  // worker b runs block b of every launch with > b blocks
};

// One rank's state that its peers' kernels read (the targets of its ccc_rank_state), as laid out
// in memory: in the process for HostRanks(n), in the shared arena across processes.
struct HostRankSync {
  unsigned long long progress[CCC_PROGRESS_WORDS];
  ccc_buffers mailbox[2 * CCC_MAX_CHANNELS];
  unsigned error;
};

// The shared memory of a multi-process host communicator (docs/runtime.md): every rank's
// HostRankSync and inbox, then one heap per rank (its scratch, staging and cccCommMemAlloc buffers). Each
// process maps it at the same virtual address, so the raw pointers of the launch ABI (the
// ccc_rank_state table, the buffers in a mailbox) mean the same in every process and the
// generated kernels run unchanged. Only the owning process allocates from a rank's heap.
class HostArena {
 public:
  // The bytes a mapping for `nranks` ranks with `heap_bytes` of heap each needs.
  static uint64_t total_bytes(int nranks, uint64_t heap_bytes);
  // Takes over `mapping` (total_bytes(nranks, heap_bytes) long; unmapped by the destructor).
  HostArena(void* mapping, int nranks, int rank, uint64_t heap_bytes);
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  HostRankSync* sync(int rank) const;
  // Rank `rank`'s inbox (ccc_rank_state::inbox: [CCC_MAX_CHANNELS][N]), right after its sync.
  unsigned long long* inbox(int rank) const;
  // This rank's heap: its scratch, staging and cccCommMemAlloc buffers.
  ArenaHeap& heap() { return heap_; }
  // [p, p + bytes) lies inside the arena (any rank's part): peers can read it.
  bool contains(const void* p, uint64_t bytes) const;

 private:
  std::byte* base_;
  uint64_t bytes_;
  int nranks_, rank_;
  ArenaHeap heap_;  // this rank's
};

// Every rank's state beyond the user's buffers: the fixed table of progress counters, mailboxes
// and error words that kernels read (ccc_abi.h), scratch, and the rank's stream. Counters start
// at zero and are never reset between launches (their values carry the epoch), except after a
// failure, once every stream is idle, as the prelude requires.
//
// Across processes (HostRanks(arena)), one rank is local; its peers run in other processes and
// share the sync state through the arena. Resetting that state after a failure would need every
// process idle at once, so, as NCCL does after an asynchronous error, a failed multi-process
// communicator stays broken: every later synchronize reports the failure again (the caller
// aborts or destroys it).
class HostRanks : public Backend {
 public:
  // Each kernel's blocks run `block_threads` threads (1..kMaxHostBlockThreads).
  HostRanks(int nranks, unsigned block_threads);
  // The same in virtual time: `sim` runs the launches (kind() is Sim), and its clock says how
  // long they took on the GPUs of its topology.
  HostRanks(int nranks, std::shared_ptr<SimEngine> sim);
  // Rank arena.rank() of arena.nranks(); `arena` outlives this.
  HostRanks(HostArena& arena, unsigned block_threads);
  ~HostRanks() override;  // waits for every stream

  BackendKind kind() const override { return sim_ != nullptr ? BackendKind::Sim : BackendKind::Host; }
  SimEngine* sim() const { return sim_.get(); }
  int nranks() const override { return static_cast<int>(ranks_.size()); }
  int local_rank() const override { return arena_ != nullptr ? arena_->rank() : -1; }
  HostArena* arena() const { return arena_; }

  // Host threads run a channel each, on few cores: one per rank. The simulator: what the cost
  // model picks for its GPUs.
  int default_channels() const override { return sim_ != nullptr ? 0 : 1; }
  bool one_device() const override { return false; }
  // The simulator adds norm blocks as a GPU would; plain host emulation a few (they buy nothing
  // on a CPU, each being a thread, but the emulation runs their code).
  int max_rank_blocks() const override { return sim_ != nullptr ? CCC_MAX_CHANNELS : 8; }
  std::unique_ptr<BuiltKernel> build(JitCache& cache, const std::string& source,
                                     const EmittedKernel& kernel) const override;
  int install(std::unique_ptr<BuiltKernel> kernel) override;
  std::function<void()> compile_task(JitCache& cache, const std::string& source,
                                     const EmittedKernel& kernel) const override;
  void check_buffer(int, const void*, uint64_t, const char*) const override {}  // any host memory serves
  void* scratch(int rank, uint64_t bytes, void* /*stream*/) override { return scratch(rank, bytes); }
  void* ll_slots(int rank, uint64_t bytes, void* /*stream*/) override { return ll_slots(rank, bytes); }
  bool peers_read_in_place(const void* p, uint64_t bytes) const override {
    return arena_ == nullptr || arena_->contains(p, bytes);
  }
  ArenaHeap* heap() override { return arena_ != nullptr ? &arena_->heap() : nullptr; }
  bool capturing(void*) const override { return false; }  // no graphs on the host
  void launch(int rank, const RankLaunch& launch) override;
  bool calls_complete() const override { return true; }
  std::string async_error(int rank) override;
  void abort(int rank) override;
  std::optional<double> virtual_seconds() override;
  std::optional<std::string> critical_path() override;

  // Rank `rank`'s scratch of at least `bytes` for a launch queued next. A larger size gets a new
  // allocation; the old one stays alive for launches still queued (until the communicator goes).
  void* scratch(int rank, uint64_t bytes);
  // The same for its LL receive slots (ccc_buffers::ll): memory only ll kernels ever write, and
  // only with lines, zeroed when allocated, so no line a launch polls holds anything but a flag
  // of an earlier launch.
  void* ll_slots(int rank, uint64_t bytes);
  // Queues rank `rank`'s part of a collective on its stream and returns. `trace`: [channels]
  // records a traced kernel fills in (ccc_abi.h), or null.
  // `before`/`after`: host tasks queued just before and after the kernel (staging copies).
  // `epilogue`: an epilogue kernel's operands (ccc_launch_args::epilogue).
  void launch(int rank, const HostKernel& kernel, int channels, const ccc_buffers& own,
              uint64_t count, uint64_t timeout_ns, ccc_trace_channel* trace = nullptr,
              std::function<void()> before = {}, std::function<void()> after = {},
              const ccc_epilogue_args& epilogue = {});
  // Waits for rank `rank`'s stream (-1: every stream). Throws Error(Remote) if the rank failed
  // (naming each failed rank); the sync state is reset once every stream is idle.
  void synchronize(int rank) override;
  // async_error: what the rank's error words say now. abort: sets the rank's error word, so its
  // peers stop waiting for it and fail at once, and its own later launches return at once.

 private:
  // Memory that grows by new allocations (scratch, LL slots).
  struct Pool {
    std::vector<std::unique_ptr<std::byte[]>> blocks;  // in-process: back() is the current one
    std::vector<uint64_t> sizes;                       // in-process: each block's bytes
    std::vector<void*> arena_blocks;                   // across processes: in the arena
    uint64_t bytes = 0;
  };
  struct Rank {
    HostRankSync* sync = nullptr;
    unsigned long long* inbox = nullptr;                // [CCC_MAX_CHANNELS][N]: ccc_rank_state::inbox
    std::vector<unsigned long long> owned_inbox;        // in-process: where `inbox` points
    Pool scratch, ll;
    std::string failure;  // why its last failed launch failed, until a synchronize reports it
    // A synchronize reported this rank's failure while peers still ran, and the rank has launched
    // nothing since: the reset that follows must not report the same failure a second time.
    bool reported_early = false;
    std::unique_ptr<HostQueue> stream;
  };
  // `pool` of rank `rank`, grown to at least `bytes` (zeroed: every byte of a new allocation).
  void* grow(int rank, Pool Rank::*pool, uint64_t bytes, const char* what);
  // Moves every set error word into its rank's `failure` and zeroes the sync state, once no
  // stream has work; with mutex_ held.
  void reset_if_idle();
  // Every rank's error word, read now.
  std::vector<unsigned> error_words() const;

  void synchronize_all();
  HostRanks(int nranks, unsigned block_threads, std::shared_ptr<SimEngine> sim);

  HostArena* arena_ = nullptr;
  std::shared_ptr<SimEngine> sim_;  // the simulator, or null; outlives the ranks' streams
  unsigned block_threads_;
  std::vector<HostKernel> kernels_;  // install()'s, by handle
  std::unique_ptr<HostRankSync[]> owned_sync_;  // in-process: every rank's
  std::mutex mutex_;  // the table's sync state across streams (reset), scratch
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<ccc_rank_state> table_;  // [N], fixed after construction
};

}  // namespace ccc
