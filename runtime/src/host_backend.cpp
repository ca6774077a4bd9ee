#include "host_backend.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <system_error>
#include <thread>

#include <sys/mman.h>

#include <fmt/format.h>

#include "ccc/errors.h"
#include "launch_errors.h"
#include "sim_engine.h"

namespace ccc {
namespace {

// How long an idle worker or a waiter polls before it sleeps on a condition variable: about the
// cost of the context switch a sleep and wake take, so spinning never costs much more than the
// sleep it may save. Each poll yields, so ranks outnumbering cores still get theirs.
constexpr std::chrono::microseconds kSpinBeforeSleep{50};

constexpr uint64_t kPage = 4096;  // each rank's sync state on pages of its own: no false sharing

uint64_t round_up(uint64_t bytes, uint64_t to) { return (bytes + to - 1) / to * to; }

// Inbox slots of one rank: one per (channel, peer).
uint64_t inbox_slots(int nranks) { return static_cast<uint64_t>(CCC_MAX_CHANNELS) * static_cast<uint64_t>(nranks); }

// A rank's sync state and inbox in the arena, on pages of their own.
uint64_t sync_stride(int nranks) {
  static_assert(sizeof(HostRankSync) % alignof(unsigned long long) == 0, "the inbox follows the sync state");
  return round_up(sizeof(HostRankSync) + inbox_slots(nranks) * sizeof(unsigned long long), kPage);
}

template <typename Pred>
bool spin_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  do {
    if (pred()) return true;
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

}  // namespace

HostCompileRequest host_kernel_request(const std::string& source, const std::string& name) {
  HostCompileRequest req;
  req.source = source;
  req.name = name + ".cpp";
  return req;
}

HostKernel load_host_kernel(JitCache& cache, const std::string& source, const std::string& name) {
  HostKernel kernel;
  host_compile_cached(cache, host_kernel_request(source, name), [&](const std::string& image) {
    auto object = std::make_shared<const SharedObject>(image);
    kernel.entry = reinterpret_cast<HostEntry>(object->symbol(name.c_str()));
    kernel.object = std::move(object);
  });
  return kernel;
}

HostStream::~HostStream() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty(); });
  stop_ = true;
  wake_.notify_all();
  lock.unlock();
  for (std::thread& t : workers_) t.join();
}

void HostStream::start_workers(int count) {
  while (static_cast<int>(workers_.size()) < count) {
    try {
      workers_.emplace_back(&HostStream::work, this, static_cast<int>(workers_.size()));
    } catch (const std::system_error& e) {
      throw Error(ErrorKind::System, fmt::format("cannot start a host worker thread for channel {}: {}",
                                                 workers_.size(), e.what()));
    }
  }
}

void HostStream::push(Launch launch) {
  start_workers(launch.channels);
  queue_.push_back(std::move(launch));
  ++enqueued_;
  if (queue_.size() == 1) start_front();
}

void HostStream::enqueue(const HostKernel& kernel, const ccc_launch_args& args, int channels, unsigned threads) {
  std::lock_guard lock(mutex_);
  push({kernel, args, channels, threads, {}});
}

void HostStream::enqueue(std::function<void()> task) {
  std::lock_guard lock(mutex_);
  push({{}, {}, 1, 1, std::move(task)});
}

void HostStream::start_front() {
  running_ = queue_.front().channels;
  ++started_;
  wake_.notify_all();
}

void HostStream::work(int block) {
  uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (started_ == seen && !stop_) {
      lock.unlock();
      spin_until([&] { return started_.load(std::memory_order_relaxed) > seen; });
      lock.lock();
    }
    wake_.wait(lock, [&] { return started_ > seen || stop_; });
    if (started_ == seen) return;  // stopping, and nothing new
    // A launch with more blocks than this one's index cannot finish without it, so no launch
    // this worker must run is ever skipped; one with fewer blocks is not its business.
    seen = started_;
    // A worker the launch did not need (one with fewer blocks) may wake only once that launch is
    // done and gone: then there is nothing to look at.
    if (queue_.empty()) continue;
    const Launch& launch = queue_.front();
    if (block >= launch.channels) continue;
    const HostEntry entry = launch.kernel.entry;
    const ccc_launch_args args = launch.args;
    const int channels = launch.channels;
    const unsigned threads = launch.threads;
    // The front launch stays queued until its last block is done, and a deque keeps references
    // to its elements across push_back: the task outlives this call.
    const std::function<void()>* task = launch.task ? &launch.task : nullptr;
    lock.unlock();
    if (task != nullptr)
      (*task)();
    else
      run_host_block(entry, args, block, channels, threads);
    lock.lock();
    if (--running_ > 0) continue;
    queue_.pop_front();
    ++completed_;
    if (queue_.empty())
      idle_.notify_all();
    else
      start_front();
  }
}

void HostStream::wait_idle() {
  const uint64_t target = enqueued_;
  auto done = [&] { return completed_.load(std::memory_order_relaxed) >= target; };
  if (spin_until(done)) {
    std::lock_guard lock(mutex_);  // pairs with the worker's unlock: its writes are visible
    return;
  }
  std::unique_lock lock(mutex_);
  idle_.wait(lock, done);
}

bool HostStream::idle() {
  std::lock_guard lock(mutex_);
  return queue_.empty();
}

uint64_t HostArena::total_bytes(int nranks, uint64_t heap_bytes) {
  return static_cast<uint64_t>(nranks) * (sync_stride(nranks) + round_up(heap_bytes, kPage));
}

HostArena::HostArena(void* mapping, int nranks, int rank, uint64_t heap_bytes)
    : base_(static_cast<std::byte*>(mapping)), bytes_(total_bytes(nranks, heap_bytes)), nranks_(nranks),
      rank_(rank),
      heap_(reinterpret_cast<uintptr_t>(base_ + static_cast<uint64_t>(nranks) * sync_stride(nranks) +
                                        static_cast<uint64_t>(rank) * round_up(heap_bytes, kPage)),
            round_up(heap_bytes, kPage)) {}

HostArena::~HostArena() { munmap(base_, bytes_); }

HostRankSync* HostArena::sync(int rank) const {
  return reinterpret_cast<HostRankSync*>(base_ + static_cast<uint64_t>(rank) * sync_stride(nranks_));
}

unsigned long long* HostArena::inbox(int rank) const {
  return reinterpret_cast<unsigned long long*>(reinterpret_cast<std::byte*>(sync(rank)) + sizeof(HostRankSync));
}

bool HostArena::contains(const void* p, uint64_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(base_);
  return at >= base && at - base <= bytes_ && bytes <= bytes_ - (at - base);
}

HostRanks::HostRanks(int nranks, unsigned block_threads) : HostRanks(nranks, block_threads, nullptr) {}

HostRanks::HostRanks(int nranks, std::shared_ptr<SimEngine> sim) : HostRanks(nranks, 1, std::move(sim)) {
  block_threads_ = sim_->block_threads();
}

HostRanks::HostRanks(int nranks, unsigned block_threads, std::shared_ptr<SimEngine> sim)
    : sim_(std::move(sim)), block_threads_(block_threads), owned_sync_(std::make_unique<HostRankSync[]>(nranks)) {
  for (int r = 0; r < nranks; ++r) {
    ranks_.push_back(std::make_unique<Rank>());
    Rank& rank = *ranks_.back();
    rank.sync = &owned_sync_[r];
    rank.owned_inbox.assign(inbox_slots(nranks), 0);
    rank.inbox = rank.owned_inbox.data();
    if (sim_ != nullptr) {
      sim_->place(r, rank.sync, sizeof(HostRankSync), SimMemory::Sync);
      sim_->place(r, rank.inbox, inbox_slots(nranks) * sizeof(unsigned long long), SimMemory::Inbox);
      rank.stream = sim_->stream(r);
    } else {
      rank.stream = std::make_unique<HostStream>();
    }
  }
  for (auto& r : ranks_) table_.push_back({r->sync->progress, r->sync->mailbox, &r->sync->error, r->inbox, nullptr});
}

// Every process builds the same table (the arena lies at one address in all of them), so it
// needs no place in the arena itself.
HostRanks::HostRanks(HostArena& arena, unsigned block_threads) : arena_(&arena), block_threads_(block_threads) {
  for (int r = 0; r < arena.nranks(); ++r) {
    ranks_.push_back(std::make_unique<Rank>());
    ranks_.back()->sync = arena.sync(r);
    ranks_.back()->inbox = arena.inbox(r);
    ranks_.back()->stream = std::make_unique<HostStream>();
  }
  for (auto& r : ranks_) table_.push_back({r->sync->progress, r->sync->mailbox, &r->sync->error, r->inbox, nullptr});
}

HostRanks::~HostRanks() {
  for (auto& r : ranks_) r->stream->wait_idle();
}

void* HostRanks::scratch(int rank, uint64_t bytes) { return grow(rank, &Rank::scratch, bytes, "scratch and staging"); }

void* HostRanks::ll_slots(int rank, uint64_t bytes) { return grow(rank, &Rank::ll, bytes, "LL receive slots"); }

void* HostRanks::grow(int rank, Pool Rank::*pool, uint64_t bytes, const char* what) {
  std::lock_guard lock(mutex_);
  Rank& r = *ranks_.at(rank);
  Pool& p = r.*pool;
  if (bytes > p.bytes) {
    // Doubling bounds what the kept allocations add up to at twice the largest. In the arena, an
    // exact fit first: its heap is fixed, and a doubled block might not fit where this one does.
    uint64_t size = std::max(bytes, 2 * p.bytes);
    if (arena_ != nullptr) {
      // Blocks no queued launch uses any more go back to the heap.
      if (r.stream->idle()) {
        for (void* block : p.arena_blocks) arena_->heap().free(block);
        p.arena_blocks.clear();
      }
      size = bytes;
      p.arena_blocks.push_back(arena_->heap().allocate(size, what));
      std::memset(p.arena_blocks.back(), 0, size);  // the heap's blocks come back used
    } else {
      p.blocks.push_back(std::make_unique<std::byte[]>(size));  // value-initialised: zero
      p.sizes.push_back(size);
      if (sim_ != nullptr)
        sim_->place(rank, p.blocks.back().get(), size, pool == &Rank::ll ? SimMemory::LlLines : SimMemory::Other);
    }
    p.bytes = size;
  }
  if (arena_ != nullptr) return p.arena_blocks.empty() ? nullptr : p.arena_blocks.back();
  return p.blocks.empty() ? nullptr : p.blocks.back().get();
}

void HostRanks::launch(int rank, const HostKernel& kernel, int channels, const ccc_buffers& own,
                       uint64_t count, uint64_t timeout_ns, ccc_trace_channel* trace,
                       std::function<void()> before, std::function<void()> after,
                       const ccc_epilogue_args& epilogue) {
  if (channels < 1 || channels > CCC_MAX_CHANNELS)
    throw Error(ErrorKind::Internal, fmt::format("a kernel with {} channels; the launch ABI allows "
                                                 "at most {}", channels, CCC_MAX_CHANNELS));
  const ccc_launch_args args{table_.data(), own, nullptr, count, rank, timeout_ns, trace, epilogue, nullptr, channels};
  std::lock_guard lock(mutex_);  // not while a reset zeroes the counters
  Rank& r = *ranks_.at(rank);
  r.reported_early = false;  // if the error word is still set, this launch fails too: report it
  if (before) r.stream->enqueue(std::move(before));
  r.stream->enqueue(kernel, args, channels, block_threads_);
  if (after) r.stream->enqueue(std::move(after));
}

std::optional<double> HostRanks::virtual_seconds() {
  if (sim_ == nullptr) return std::nullopt;
  return sim_->now();
}

std::optional<std::string> HostRanks::critical_path() {
  if (sim_ == nullptr) return std::nullopt;
  return sim_->critical_path();
}

std::vector<unsigned> HostRanks::error_words() const {
  std::vector<unsigned> words;
  for (const auto& r : ranks_) words.push_back(std::atomic_ref<unsigned>(r->sync->error).load());
  return words;
}

std::string HostRanks::async_error(int rank) {
  std::lock_guard lock(mutex_);
  std::vector<unsigned> words = error_words();
  if (words.at(rank) == CCC_OK) return {};
  // The peers' words too, where they are this rank's peers in other processes: they name who
  // failed first. In one process they are reported by their own ranks.
  if (arena_ == nullptr)
    for (size_t i = 0; i < words.size(); ++i)
      if (static_cast<int>(i) != rank) words[i] = CCC_OK;
  return launch_failures(words.data(), static_cast<int>(words.size()));
}

void HostRanks::abort(int rank) {
  std::lock_guard lock(mutex_);
  unsigned expected = CCC_OK;
  std::atomic_ref<unsigned>(ranks_.at(rank)->sync->error).compare_exchange_strong(expected, CCC_ERR_ABORTED);
}

void HostRanks::reset_if_idle() {
  if (arena_ != nullptr) return;  // across processes a failure is final (host_backend.h)
  for (auto& r : ranks_)
    if (!r->stream->idle()) return;
  const std::vector<unsigned> words = error_words();
  bool any = false;
  for (unsigned w : words) any = any || w != CCC_OK;
  if (!any) return;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = *ranks_[i];
    if (words[i] != CCC_OK && !r.reported_early) r.failure = launch_failures(words.data(), static_cast<int>(words.size()));
    r.reported_early = false;
  }
  // Every stream is idle: no kernel reads the state while it is zeroed. The epochs start again
  // from zero, so the ll receive slots are zeroed too, every block (graphs may still use older
  // ones): a line a failed launch left would otherwise carry a flag the restarted epochs reach
  // again (ProtocolLl::ll_flag).
  for (auto& r : ranks_) {
    for (size_t b = 0; b < r->ll.blocks.size(); ++b) std::memset(r->ll.blocks[b].get(), 0, r->ll.sizes[b]);
    std::fill(std::begin(r->sync->progress), std::end(r->sync->progress), 0);
    std::fill(r->inbox, r->inbox + inbox_slots(nranks()), 0);
    r->sync->error = CCC_OK;
  }
}

namespace {

struct HostBuiltKernel final : Backend::BuiltKernel {
  explicit HostBuiltKernel(HostKernel k) : kernel(std::move(k)) {}
  HostKernel kernel;
};

}  // namespace

std::unique_ptr<Backend::BuiltKernel> HostRanks::build(JitCache& cache, const std::string& source,
                                                       const EmittedKernel& kernel) const {
  return std::make_unique<HostBuiltKernel>(load_host_kernel(cache, source, kernel.kernel_name));
}

int HostRanks::install(std::unique_ptr<BuiltKernel> kernel) {
  kernels_.push_back(std::move(static_cast<HostBuiltKernel&>(*kernel).kernel));
  return static_cast<int>(kernels_.size()) - 1;
}

std::function<void()> HostRanks::compile_task(JitCache& cache, const std::string& source,
                                              const EmittedKernel& kernel) const {
  // Loading (dlopen, dropped at once) proves the object, as the call's load would.
  return [&cache, req = host_kernel_request(source, kernel.kernel_name)] {
    host_compile_cached(cache, req, [](const std::string& image) { SharedObject check(image); });
  };
}

void HostRanks::launch(int rank, const RankLaunch& l) {
  auto task = [](const StagingCopy* c) -> std::function<void()> {
    if (c == nullptr) return {};
    return [c = *c] { std::memcpy(c.to, c.from, c.bytes); };
  };
  launch(rank, kernels_.at(static_cast<size_t>(l.kernel)), l.channels + l.norm_blocks, l.own, l.count, l.timeout_ns,
         l.trace, task(l.before), task(l.after), l.epilogue);
}

void HostRanks::synchronize(int rank) {
  if (rank < 0) return synchronize_all();
  ranks_.at(rank)->stream->wait_idle();
  if (arena_ != nullptr) {
    if (std::string failure = async_error(rank); !failure.empty())
      throw Error(ErrorKind::Remote, "collective failed: " + failure +
                                         " (a multi-process communicator stays failed: abort or destroy it)");
    return;
  }
  std::lock_guard lock(mutex_);
  reset_if_idle();
  Rank& r = *ranks_[rank];
  // Failed, but a peer is still running: the failure stays in the error word (later launches of
  // this rank return at once) until the streams are idle and a synchronize resets it.
  if (r.failure.empty() && std::atomic_ref<unsigned>(r.sync->error).load() != CCC_OK) {
    std::vector<unsigned> words(ranks_.size(), CCC_OK);
    words[rank] = std::atomic_ref<unsigned>(r.sync->error).load();
    r.reported_early = true;
    throw Error(ErrorKind::Remote, "collective failed (peers still running): " +
                                       launch_failures(words.data(), static_cast<int>(words.size())));
  }
  if (r.failure.empty()) return;
  const std::string failure = std::move(r.failure);
  r.failure.clear();
  throw Error(ErrorKind::Remote, "collective failed: " + failure);
}

void HostRanks::synchronize_all() {
  for (auto& r : ranks_) r->stream->wait_idle();
  std::lock_guard lock(mutex_);
  reset_if_idle();
  std::string failure;
  for (auto& r : ranks_) {
    if (failure.empty()) failure = r->failure;
    r->failure.clear();
  }
  if (!failure.empty()) throw Error(ErrorKind::Remote, "collective failed: " + failure);
}

}  // namespace ccc
