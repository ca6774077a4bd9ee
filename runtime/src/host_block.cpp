#include "host_block.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>

// Fibers switch stacks behind the sanitizers' backs unless told (the fiber APIs of
// <sanitizer/common_interface_defs.h> and <sanitizer/tsan_interface.h>).
#if defined(__SANITIZE_ADDRESS__)
#define CCC_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CCC_ASAN_FIBERS 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CCC_TSAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CCC_TSAN_FIBERS 1
#endif
#endif
#ifdef CCC_ASAN_FIBERS
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef CCC_TSAN_FIBERS
#include <sanitizer/tsan_interface.h>
#endif

namespace ccc {
namespace {

namespace bc = boost::context;

// A fiber's stack. Generated kernels keep little on theirs (block-shared tables are thread-local
// arrays); AddressSanitizer's redzones make frames several times larger.
#ifdef CCC_ASAN_FIBERS
constexpr size_t kStackBytes = size_t{1} << 20;
#else
constexpr size_t kStackBytes = size_t{256} << 10;
#endif

// The block runs of the calling host thread, counted: each run's id (ccc_host_thread::launch),
// from 1. block_shared() keeps its arrays and the id it last saw per host thread too, so ids need
// only differ within one (and no counter is shared between the workers of a launch).
thread_local unsigned long long block_runs = 0;

// Fiber stacks, kept from one block run to the next (the test harness starts a host thread per
// block and launch; the host backend's workers live long). Each is mapped with a guard page below
// it, reserving no swap: only the pages a kernel touches cost memory.
class StackPool {
 public:
  // Up to `count` stacks, as far as memory allows (at least none).
  std::vector<bc::stack_context> take(size_t count) {
    std::vector<bc::stack_context> stacks;
    {
      std::lock_guard lock(mutex_);
      while (stacks.size() < count && !free_.empty()) {
        stacks.push_back(free_.back());
        free_.pop_back();
      }
    }
    while (stacks.size() < count) {
      void* p = mmap(nullptr, kStackBytes + page(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) break;
      if (mprotect(p, page(), PROT_NONE) != 0) {
        munmap(p, kStackBytes + page());
        break;
      }
      bc::stack_context s;
      s.size = kStackBytes;
      s.sp = static_cast<std::byte*>(p) + page() + kStackBytes;  // stacks grow down from sp
      stacks.push_back(s);
    }
    return stacks;
  }
  // Keeps up to kKept stacks for later runs; unmaps the rest.
  void give_back(const std::vector<bc::stack_context>& stacks) {
    std::lock_guard lock(mutex_);
    for (const bc::stack_context& s : stacks) {
      if (free_.size() < kKept)
        free_.push_back(s);
      else
        unmap(s);
    }
  }

 private:
  static constexpr size_t kKept = 4096;
  static size_t page() {
    static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return bytes;
  }
  static void unmap(const bc::stack_context& s) {
    munmap(static_cast<std::byte*>(s.sp) - s.size - page(), s.size + page());
  }
  std::mutex mutex_;
  std::vector<bc::stack_context> free_;
};

// Never destroyed: a host thread may still run a block while the process exits.
StackPool& stack_pool() {
  static StackPool* pool = new StackPool;
  return *pool;
}

// Boost.Context's StackAllocator: hands a fiber the stack its Block took from the pool (and gives
// back, once the block has run).
struct BlockStack {
  bc::stack_context stack;
  bc::stack_context allocate() { return stack; }
  void deallocate(bc::stack_context&) noexcept {}
};

// One block run's threads and their turns.
class Block {
 public:
  // `stacks`: one per thread.
  Block(HostEntry entry, const ccc_launch_args& args, int block, std::vector<bc::stack_context> stacks)
      : entry_(entry), args_(args), block_(block), threads_(static_cast<unsigned>(stacks.size())),
        stacks_(std::move(stacks)), state_(threads_, State::Runnable), fibers_(threads_) {
    const unsigned long long launch = ++block_runs;
    for (unsigned i = 0; i < threads_; ++i) self_.push_back({i, threads_, launch, this, &Block::barrier_and, &Block::relax});
  }

  BlockRun run() {
#ifdef CCC_TSAN_FIBERS
    tsan_scheduler_ = __tsan_get_current_fiber();
    for (unsigned i = 0; i < threads_; ++i) tsan_threads_.push_back(__tsan_create_fiber(0));
#endif
    for (unsigned i = 0; i < threads_; ++i)
      fibers_[i] = bc::fiber(std::allocator_arg, BlockStack{stacks_[i]}, [this, i](bc::fiber&& scheduler) {
        entered();
        scheduler_ = std::move(scheduler);
        entry_(args_, block_, &self_[i]);
        leaving(/*finished=*/true);
        return std::move(scheduler_);
      });
    for (unsigned finished = 0; finished < threads_;) {
      relaxed_ = false;
      for (unsigned i = threads_; i-- > 0;) {
        if (state_[i] != State::Runnable) continue;
        switch_to(i);
        if (fibers_[i]) continue;
        state_[i] = State::Finished;
        ++finished;
        --live_;
        // Everyone still in the kernel waits at a barrier no one else will reach.
        if (waiting_ > 0 && waiting_ == live_) {
          diverged_ = true;
          release();
        }
      }
      if (relaxed_) std::this_thread::yield();  // every runnable thread is polling
    }
#ifdef CCC_TSAN_FIBERS
    for (void* f : tsan_threads_) __tsan_destroy_fiber(f);
#endif
    stack_pool().give_back(stacks_);
    return diverged_ ? BlockRun::Diverged : BlockRun::Ok;
  }

 private:
  enum class State : unsigned char { Runnable, AtBarrier, Finished };

  static int barrier_and(const ccc_host_thread* self, int p) {
    Block& b = *static_cast<Block*>(self->block);
    b.all_ = b.all_ && p != 0;
    if (++b.waiting_ == b.live_) {
      b.diverged_ = b.diverged_ || b.live_ < b.threads_;  // some left instead of arriving
      b.result_ = b.all_;
      b.release();
    } else {
      b.state_[self->index] = State::AtBarrier;
    }
    // The last to arrive waits its turn too: the threads after a barrier then start in the usual
    // order (thread 0 last), not with whoever happened to arrive last.
    b.suspend(self->index);
    // result_ still holds this barrier's outcome: the next barrier cannot complete before this
    // thread, now runnable, arrives at it.
    return b.result_;
  }

  static void relax(const ccc_host_thread* self) {
    Block& b = *static_cast<Block*>(self->block);
    b.relaxed_ = true;
    b.suspend(self->index);
  }

  void release() {
    for (State& s : state_)
      if (s == State::AtBarrier) s = State::Runnable;
    waiting_ = 0;
    all_ = true;
  }

  // The scheduler hands thread i its turn; back when the thread waits or has finished.
  void switch_to(unsigned i) {
#ifdef CCC_TSAN_FIBERS
    __tsan_switch_to_fiber(tsan_threads_[i], 0);
#endif
#ifdef CCC_ASAN_FIBERS
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, static_cast<const std::byte*>(stacks_[i].sp) - stacks_[i].size,
                                   stacks_[i].size);
#endif
    fibers_[i] = std::move(fibers_[i]).resume();
#ifdef CCC_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  }

  // Thread i gives its turn back to the scheduler; returns when it has the next one.
  void suspend(unsigned i) {
    (void)i;
    leaving(/*finished=*/false);
#ifdef CCC_ASAN_FIBERS
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, scheduler_stack_, scheduler_stack_bytes_);
    scheduler_ = std::move(scheduler_).resume();
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
    scheduler_ = std::move(scheduler_).resume();
#endif
  }

  // A thread's first turn begins.
  void entered() {
#ifdef CCC_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_, &scheduler_stack_bytes_);
#endif
  }

  // A thread's turn ends: it waits (the caller then switches), or it has left the kernel (its
  // fiber's stack is then released as control returns to the scheduler).
  void leaving(bool finished) {
#ifdef CCC_TSAN_FIBERS
    __tsan_switch_to_fiber(tsan_scheduler_, 0);
#endif
#ifdef CCC_ASAN_FIBERS
    if (finished) __sanitizer_start_switch_fiber(nullptr, scheduler_stack_, scheduler_stack_bytes_);
#else
    (void)finished;
#endif
  }

  HostEntry entry_;
  const ccc_launch_args& args_;
  int block_;
  unsigned threads_;
  std::vector<bc::stack_context> stacks_;  // [threads_], the pool's
  std::vector<ccc_host_thread> self_;
  std::vector<State> state_;
  std::vector<bc::fiber> fibers_;  // each thread while it waits; empty once it has finished
  bc::fiber scheduler_;            // the scheduler, while a thread has its turn
  unsigned live_ = threads_;       // threads still in the kernel
  unsigned waiting_ = 0;           // of them, at the barrier
  bool all_ = true;                // the barrier's predicate over those arrived so far
  bool result_ = true;             // the last completed barrier's
  bool relaxed_ = false;           // a thread polled in vain this round
  bool diverged_ = false;
#ifdef CCC_TSAN_FIBERS
  void* tsan_scheduler_ = nullptr;
  std::vector<void*> tsan_threads_;
#endif
#ifdef CCC_ASAN_FIBERS
  const void* scheduler_stack_ = nullptr;
  size_t scheduler_stack_bytes_ = 0;
#endif
};

// One thread: no fibers, no turns.
int single_barrier_and(const ccc_host_thread*, int p) { return p; }
void single_relax(const ccc_host_thread*) { std::this_thread::yield(); }

}  // namespace

BlockRun run_host_block(HostEntry entry, const ccc_launch_args& args, int block, int channels, unsigned threads) {
  threads = std::clamp(threads, 1u, kMaxHostBlockThreads);
  std::vector<bc::stack_context> stacks;
  if (threads > 1) stacks = stack_pool().take(threads);
  if (stacks.size() <= 1) {
    if (!stacks.empty()) stack_pool().give_back(stacks);
    const ccc_host_thread self{0, 1, ++block_runs, nullptr, &single_barrier_and, &single_relax};
    entry(args, block, &self);
    return BlockRun::Ok;
  }
  Block b(entry, args, block, std::move(stacks));
  if (b.run() == BlockRun::Ok) return BlockRun::Ok;
  // The block's rank keeps its first error, as the prelude's record_error does.
  const int rank = args.rank >= 0 ? args.rank : block / channels;
  unsigned expected = CCC_OK;
  std::atomic_ref<unsigned>(*args.ranks[rank].error).compare_exchange_strong(expected, CCC_ERR_BARRIER_DIVERGED);
  return BlockRun::Diverged;
}

}  // namespace ccc
