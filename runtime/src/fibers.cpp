#include "fibers.h"

#include <cstddef>
#include <mutex>
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
#include <sanitizer/asan_interface.h>
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
#ifdef CCC_ASAN_FIBERS
    // A fiber's outermost frames never return (it leaves by switching stacks), so their
    // redzones stay poisoned in AddressSanitizer's shadow, which munmap does not clear. A
    // library mapped here later (a host kernel's .so) would read as a stack overflow.
    ASAN_UNPOISON_MEMORY_REGION(static_cast<std::byte*>(s.sp) - s.size, s.size);
#endif
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

// Boost.Context's StackAllocator: hands a fiber the stack its Fibers took from the pool (which
// gives it back once they are done).
struct PoolStack {
  bc::stack_context stack;
  bc::stack_context allocate() { return stack; }
  void deallocate(bc::stack_context&) noexcept {}
};

}  // namespace

struct Fibers::State {
  std::vector<bc::stack_context> stacks;
  std::vector<bc::fiber> fibers;  // each while it waits for its turn; empty once finished
  bc::fiber scheduler;            // the scheduler, while a fiber has its turn
#ifdef CCC_TSAN_FIBERS
  void* tsan_scheduler = nullptr;
  std::vector<void*> tsan_fibers;
#endif
#ifdef CCC_ASAN_FIBERS
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
#endif

  // A fiber's first turn begins.
  void entered() {
#ifdef CCC_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack, &scheduler_stack_bytes);
#endif
  }
  // A fiber's turn ends: it waits (the caller then switches), or it has left its body (its
  // stack is then released as control returns to the scheduler).
  void leaving(bool finished) {
#ifdef CCC_TSAN_FIBERS
    __tsan_switch_to_fiber(tsan_scheduler, 0);
#endif
#ifdef CCC_ASAN_FIBERS
    if (finished) __sanitizer_start_switch_fiber(nullptr, scheduler_stack, scheduler_stack_bytes);
#else
    (void)finished;
#endif
  }
};

Fibers::Fibers(size_t count) : state_(std::make_unique<State>()) {
  state_->stacks = stack_pool().take(count);
  state_->fibers.resize(state_->stacks.size());
#ifdef CCC_TSAN_FIBERS
  state_->tsan_scheduler = __tsan_get_current_fiber();
  for (size_t i = 0; i < state_->stacks.size(); ++i) state_->tsan_fibers.push_back(__tsan_create_fiber(0));
#endif
}

Fibers::~Fibers() {
#ifdef CCC_TSAN_FIBERS
  for (void* f : state_->tsan_fibers) __tsan_destroy_fiber(f);
#endif
  stack_pool().give_back(state_->stacks);
}

size_t Fibers::size() const { return state_->stacks.size(); }

void Fibers::start(size_t i, std::function<void()> body) {
  State& s = *state_;
  s.fibers[i] = bc::fiber(std::allocator_arg, PoolStack{s.stacks[i]}, [&s, body = std::move(body)](bc::fiber&& scheduler) {
    s.entered();
    s.scheduler = std::move(scheduler);
    body();
    s.leaving(/*finished=*/true);
    return std::move(s.scheduler);
  });
}

bool Fibers::resume(size_t i) {
  State& s = *state_;
#ifdef CCC_TSAN_FIBERS
  __tsan_switch_to_fiber(s.tsan_fibers[i], 0);
#endif
#ifdef CCC_ASAN_FIBERS
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, static_cast<const std::byte*>(s.stacks[i].sp) - s.stacks[i].size,
                                 s.stacks[i].size);
#endif
  s.fibers[i] = std::move(s.fibers[i]).resume();
#ifdef CCC_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  return static_cast<bool>(s.fibers[i]);
}

void Fibers::suspend(size_t /*i*/) {
  State& s = *state_;
  s.leaving(/*finished=*/false);
#ifdef CCC_ASAN_FIBERS
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, s.scheduler_stack, s.scheduler_stack_bytes);
  s.scheduler = std::move(s.scheduler).resume();
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  s.scheduler = std::move(s.scheduler).resume();
#endif
}

}  // namespace ccc
