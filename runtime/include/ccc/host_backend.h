// The host backend: generated kernels compiled by the system C++ compiler and run against the
// host prelude (runtime/device/) by persistent worker threads.
//
// The host prelude exports a kernel as `extern "C" void NAME(ccc_launch_args args, int block)`.
// Each rank has a stream: a FIFO of launches that the rank's workers (one thread per channel,
// started when a launch first needs it) run in order, every block of a launch at once, as a CUDA
// stream runs kernels. A launch returns as soon as it is queued; ranks meet inside the kernel.
// Idle workers and waiters spin briefly before they sleep: a futex wake costs a context switch
// (most of a small collective's time here), and back-to-back calls find them still awake.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

// What load_host_kernel compiles for generated `source` whose kernel is named `name` (a warm-up
// compiles the same request ahead, so the load finds it in the cache).
HostCompileRequest host_kernel_request(const std::string& source, const std::string& name);

// Compiles (through `cache`) and loads generated `source`, whose kernel is named `name`.
HostKernel load_host_kernel(JitCache& cache, const std::string& source, const std::string& name);

// One rank's stream: launches run in the order they were queued, each with all its blocks on
// their own threads at once (blocks wait on each other's progress).
class HostStream {
 public:
  HostStream() = default;
  ~HostStream();  // waits for the queued launches, then stops the workers
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Queues `channels` blocks of `kernel` with `args`. Throws Error(System) when a worker thread
  // cannot be started (nothing is queued then).
  void enqueue(const HostKernel& kernel, const ccc_launch_args& args, int channels);
  // Blocks until every launch queued before the call has finished.
  void wait_idle();
  bool idle();

 private:
  struct Launch {
    HostKernel kernel;
    ccc_launch_args args;
    int channels;
  };
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

// Every rank's state beyond the user's buffers: the fixed table of progress counters, mailboxes
// and error words that kernels read (ccc_abi.h), scratch, and the rank's stream. Counters start
// at zero and are never reset between launches (their values carry the epoch), except after a
// failure, once every stream is idle, as the prelude requires.
class HostRanks {
 public:
  explicit HostRanks(int nranks);
  ~HostRanks();  // waits for every stream

  int nranks() const { return static_cast<int>(ranks_.size()); }

  // Rank `rank`'s scratch of at least `bytes` for a launch queued next. A larger size gets a new
  // allocation; the old one stays alive for launches still queued (until the communicator goes).
  void* scratch(int rank, uint64_t bytes);
  // Queues rank `rank`'s part of a collective on its stream and returns. `trace`: [channels]
  // records a traced kernel fills in (ccc_abi.h), or null.
  void launch(int rank, const HostKernel& kernel, int channels, const ccc_buffers& own,
              uint64_t count, uint64_t timeout_ns, ccc_trace_channel* trace = nullptr);
  // Waits for rank `rank`'s stream. Throws Error(Remote) if the rank failed; the sync state is
  // reset once every stream is idle.
  void synchronize(int rank);
  // Waits for every stream; throws Error(Remote) naming each failed rank, after the reset.
  void synchronize();

 private:
  struct Rank {
    unsigned long long progress[CCC_MAX_CHANNELS] = {};
    ccc_buffers mailbox[2 * CCC_MAX_CHANNELS] = {};
    unsigned error = CCC_OK;
    std::vector<unsigned long long> inbox;  // [CCC_MAX_CHANNELS][N], as ccc_rank_state::inbox
    std::vector<std::unique_ptr<std::byte[]>> scratch;  // back(): the current one
    uint64_t scratch_bytes = 0;
    std::string failure;  // why its last failed launch failed, until a synchronize reports it
    // A synchronize reported this rank's failure while peers still ran, and the rank has launched
    // nothing since: the reset that follows must not report the same failure a second time.
    bool reported_early = false;
    HostStream stream;
  };
  // Moves every set error word into its rank's `failure` and zeroes the sync state, once no
  // stream has work; with mutex_ held.
  void reset_if_idle();

  std::mutex mutex_;  // the table's sync state across streams (reset), scratch
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<ccc_rank_state> table_;  // [N], fixed after construction
};

}  // namespace ccc
