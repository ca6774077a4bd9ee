#include "ccc/host_backend.h"

#include <atomic>
#include <chrono>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "ccc/collective_types.h"

namespace ccc {
namespace {

// How long an idle worker or a waiter polls before it sleeps on a condition variable: about the
// cost of the context switch a sleep and wake take, so spinning never costs much more than the
// sleep it may save. Each poll yields, so ranks outnumbering cores still get theirs.
constexpr std::chrono::microseconds kSpinBeforeSleep{50};

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
    kernel.entry = reinterpret_cast<HostKernel::Entry>(object->symbol(name.c_str()));
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

void HostStream::enqueue(const HostKernel& kernel, const ccc_launch_args& args, int channels) {
  std::lock_guard lock(mutex_);
  while (static_cast<int>(workers_.size()) < channels) {
    try {
      workers_.emplace_back(&HostStream::work, this, static_cast<int>(workers_.size()));
    } catch (const std::system_error& e) {
      throw Error(ErrorKind::System, fmt::format("cannot start a host worker thread for channel {}: {}",
                                                 workers_.size(), e.what()));
    }
  }
  queue_.push_back({kernel, args, channels});
  ++enqueued_;
  if (queue_.size() == 1) start_front();
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
    const Launch& launch = queue_.front();
    if (block >= launch.channels) continue;
    const HostKernel::Entry entry = launch.kernel.entry;
    const ccc_launch_args args = launch.args;
    lock.unlock();
    entry(args, block);
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

HostRanks::HostRanks(int nranks) {
  for (int r = 0; r < nranks; ++r) {
    ranks_.push_back(std::make_unique<Rank>());
    Rank& rank = *ranks_.back();
    rank.inbox.assign(static_cast<size_t>(CCC_MAX_CHANNELS) * nranks, 0);
    table_.push_back({rank.progress, rank.mailbox, &rank.error, rank.inbox.data()});
  }
}

HostRanks::~HostRanks() {
  for (auto& r : ranks_) r->stream.wait_idle();
}

void* HostRanks::scratch(int rank, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  Rank& r = *ranks_.at(rank);
  if (bytes > r.scratch_bytes) {
    // Doubling bounds what the kept allocations add up to at twice the largest.
    const uint64_t size = std::max(bytes, 2 * r.scratch_bytes);
    r.scratch.push_back(std::make_unique<std::byte[]>(size));
    r.scratch_bytes = size;
  }
  return r.scratch.empty() ? nullptr : r.scratch.back().get();
}

void HostRanks::launch(int rank, const HostKernel& kernel, int channels, const ccc_buffers& own,
                       uint64_t count, uint64_t timeout_ns, ccc_trace_channel* trace) {
  if (channels < 1 || channels > CCC_MAX_CHANNELS)
    throw Error(ErrorKind::Internal, fmt::format("a kernel with {} channels; the launch ABI allows "
                                                 "at most {}", channels, CCC_MAX_CHANNELS));
  const ccc_launch_args args{table_.data(), own, nullptr, count, rank, timeout_ns, trace};
  std::lock_guard lock(mutex_);  // not while a reset zeroes the counters
  Rank& r = *ranks_.at(rank);
  r.reported_early = false;  // if the error word is still set, this launch fails too: report it
  r.stream.enqueue(kernel, args, channels);
}

void HostRanks::reset_if_idle() {
  for (auto& r : ranks_)
    if (!r->stream.idle()) return;
  std::vector<unsigned> words;
  for (auto& r : ranks_) words.push_back(r->error);
  bool any = false;
  for (unsigned w : words) any = any || w != CCC_OK;
  if (!any) return;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = *ranks_[i];
    if (words[i] != CCC_OK && !r.reported_early) r.failure = launch_failures(words.data(), static_cast<int>(words.size()));
    r.reported_early = false;
  }
  // Every stream is idle: no kernel reads the state while it is zeroed.
  for (auto& r : ranks_) {
    std::fill(std::begin(r->progress), std::end(r->progress), 0);
    std::fill(r->inbox.begin(), r->inbox.end(), 0);
    r->error = CCC_OK;
  }
}

void HostRanks::synchronize(int rank) {
  ranks_.at(rank)->stream.wait_idle();
  std::lock_guard lock(mutex_);
  reset_if_idle();
  Rank& r = *ranks_[rank];
  // Failed, but a peer is still running: the failure stays in the error word (later launches of
  // this rank return at once) until the streams are idle and a synchronize resets it.
  if (r.failure.empty() && std::atomic_ref<unsigned>(r.error).load() != CCC_OK) {
    std::vector<unsigned> words(ranks_.size(), CCC_OK);
    words[rank] = std::atomic_ref<unsigned>(r.error).load();
    r.reported_early = true;
    throw Error(ErrorKind::Remote, "collective failed (peers still running): " +
                                       launch_failures(words.data(), static_cast<int>(words.size())));
  }
  if (r.failure.empty()) return;
  const std::string failure = std::move(r.failure);
  r.failure.clear();
  throw Error(ErrorKind::Remote, "collective failed: " + failure);
}

void HostRanks::synchronize() {
  for (auto& r : ranks_) r->stream.wait_idle();
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
