// Host emulation's thread blocks (host_block.h): threads as fibers with their own index, real
// block barriers, polls that let the block's other threads run, block-shared memory poisoned per
// run, and a barrier some threads never reach reported instead of hung. The kernels are
// hand-written against the host prelude, as generated ones are.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "fibers.h"
#include "host_backend.h"
#include "launch_errors.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

using namespace ccc;

namespace {

const char* kProbes = R"(#include "ccc_device.h"
using namespace ccc;

// out[t] = blockDim * 10000 + t.
CCC_KERNEL(indices, 0) {
  static_cast<unsigned*>(args.own.output)[thread_index()] = block_threads() * 10000 + thread_index();
}

// Each thread writes its slot of block-shared memory, then reads the slot of the thread before it:
// after a barrier when count != 0, without one when count == 0.
CCC_KERNEL(neighbours, 0) {
  unsigned* shared = block_shared<unsigned, 1024>();
  const unsigned t = thread_index(), n = block_threads();
  shared[t] = t + 1;
  if (args.count != 0) barrier();
  static_cast<unsigned*>(args.own.output)[t] = shared[(t + n - 1) % n];
}

// out[t] = whether every thread's index differs from count (1 or 2), then whether all are true.
CCC_KERNEL(votes, 0) {
  unsigned* out = static_cast<unsigned*>(args.own.output);
  out[thread_index()] = barrier_and(thread_index() != args.count) ? 1 : 2;
  out[1024 + thread_index()] = barrier_and(true) ? 1 : 2;
}

// Threads with an odd index leave; the others wait at a barrier.
CCC_KERNEL(diverges, 0) {
  if (thread_index() % 2 == 1) return;
  barrier();
  static_cast<unsigned*>(args.own.output)[thread_index()] = 1;
}

// A chain of polls: thread t waits for thread t - 1's flag, then raises its own. Thread 0, which
// runs last, starts it, so every other thread polls in vain until the chain reaches it.
CCC_KERNEL(chain, 0) {
  unsigned long long* flags = static_cast<unsigned long long*>(args.own.output);
  const unsigned t = thread_index();
  if (t > 0)
    while (load_acquire(&flags[t - 1]) == 0) relax();
  store_release(&flags[t], t + 1);
}

// What block-shared memory holds before the run writes it, then thread 0 writes it.
CCC_KERNEL(fresh, 0) {
  unsigned* shared = block_shared<unsigned, 4>();
  static_cast<unsigned*>(args.own.output)[thread_index()] = shared[0];
  barrier();
  if (thread_index() == 0) shared[0] = 7;
}
)";

JitCache& memory_cache() {
  static JitCache cache{std::filesystem::path()};
  return cache;
}

// The probe kernel `name`, from one compile of kProbes.
HostEntry probe(const char* name) {
  static const HostKernel probes = load_host_kernel(memory_cache(), kProbes, "indices");
  return reinterpret_cast<HostEntry>(probes.object->symbol(name));
}

// One rank, one channel: the launch a probe gets, with `out` as its output.
struct ProbeLaunch {
  unsigned error = CCC_OK;
  ccc_rank_state state{};
  ccc_launch_args args{};
  explicit ProbeLaunch(void* out, uint64_t count = 0) {
    state.error = &error;
    args.ranks = &state;
    args.own.output = out;
    args.count = count;
    args.rank = 0;
  }
};

const unsigned kThreadCounts[] = {1, 2, 7, 32, 512, 1024};

}  // namespace

TEST(HostBlock, EveryThreadRunsWithItsOwnIndex) {
  const HostEntry entry = probe("indices");
  for (unsigned n : kThreadCounts) {
    std::vector<unsigned> out(kMaxHostBlockThreads, 0);
    ProbeLaunch l(out.data());
    EXPECT_EQ(run_host_block(entry, l.args, 0, 1, n), BlockRun::Ok);
    for (unsigned t = 0; t < kMaxHostBlockThreads; ++t)
      ASSERT_EQ(out[t], t < n ? n * 10000 + t : 0) << n << " threads, thread " << t;
  }
}

TEST(HostBlock, BarriersOrderBlockSharedMemoryAndTheirAbsenceShows) {
  const HostEntry entry = probe("neighbours");
  for (unsigned n : kThreadCounts) {
    std::vector<unsigned> out(n);
    ProbeLaunch with(out.data(), 1);
    run_host_block(entry, with.args, 0, 1, n);
    for (unsigned t = 0; t < n; ++t) ASSERT_EQ(out[t], (t + n - 1) % n + 1) << n << " threads, thread " << t;
    ProbeLaunch without(out.data(), 0);
    run_host_block(entry, without.args, 0, 1, n);
    unsigned wrong = 0;
    for (unsigned t = 0; t < n; ++t) wrong += out[t] != (t + n - 1) % n + 1;
    // Thread t runs before thread t - 1: without the barrier every thread but thread 0 (which
    // runs last) reads the slot before its own unwritten.
    EXPECT_EQ(wrong, n - 1) << n << " threads";
  }
}

TEST(HostBlock, BarrierAndIsTheAndOverTheBlock) {
  const HostEntry entry = probe("votes");
  for (unsigned n : kThreadCounts)
    for (unsigned odd_one : {0u, n - 1, n}) {  // thread 0 votes false, the last one, none
      std::vector<unsigned> out(2048, 0);
      ProbeLaunch l(out.data(), odd_one);
      run_host_block(entry, l.args, 0, 1, n);
      for (unsigned t = 0; t < n; ++t) {
        ASSERT_EQ(out[t], odd_one < n ? 2u : 1u) << n << " threads, false at " << odd_one << ", thread " << t;
        ASSERT_EQ(out[1024 + t], 1u) << "the second barrier starts afresh";
      }
    }
}

TEST(HostBlock, APollLetsTheBlocksOtherThreadsRun) {
  const HostEntry entry = probe("chain");
  for (unsigned n : kThreadCounts) {
    std::vector<unsigned long long> flags(n, 0);
    ProbeLaunch l(flags.data());
    EXPECT_EQ(run_host_block(entry, l.args, 0, 1, n), BlockRun::Ok);
    for (unsigned t = 0; t < n; ++t) ASSERT_EQ(flags[t], t + 1) << n << " threads";
  }
}

TEST(HostBlock, BlockSharedMemoryStartsPoisonedInEveryRun) {
  const HostEntry entry = probe("fresh");
  for (int run = 0; run < 2; ++run) {
    std::vector<unsigned> out(32, 0);
    ProbeLaunch l(out.data());
    run_host_block(entry, l.args, 0, 1, 32);
    for (unsigned v : out) ASSERT_EQ(v, 0xA5A5A5A5u) << "run " << run << ": not what an earlier run left";
  }
}

TEST(HostBlock, ABarrierSomeThreadsLeftIsAnErrorNotAHang) {
  const HostEntry entry = probe("diverges");
  std::vector<unsigned> out(32, 0);
  ProbeLaunch l(out.data());
  EXPECT_EQ(run_host_block(entry, l.args, 0, 1, 32), BlockRun::Diverged);
  EXPECT_EQ(l.error, unsigned{CCC_ERR_BARRIER_DIVERGED});
  EXPECT_EQ(launch_failures(&l.error, 1),
            "rank 0: some threads of a block left the kernel while others waited at a block barrier (a ccc bug)");
  for (unsigned t = 0; t < 32; t += 2) EXPECT_EQ(out[t], 1u) << "the waiting threads were let go";
  // The block's rank keeps its first error.
  l.error = CCC_ERR_TIMEOUT;
  run_host_block(entry, l.args, 0, 1, 32);
  EXPECT_EQ(l.error, unsigned{CCC_ERR_TIMEOUT});
}

// Blocks on several host threads at once, each with its fibers (the stacks come from one pool).
TEST(HostBlock, BlocksOnSeveralHostThreadsRunAtOnce) {
  const HostEntry entry = probe("neighbours");
  const unsigned n = 64;
  std::vector<std::vector<unsigned>> out(8, std::vector<unsigned>(n));
  std::vector<ProbeLaunch> launches;
  launches.reserve(out.size());  // each points into itself
  for (auto& o : out) launches.emplace_back(o.data(), 1);
  std::vector<std::thread> blocks;
  for (auto& l : launches) blocks.emplace_back([&] { run_host_block(entry, l.args, 0, 1, n); });
  for (std::thread& b : blocks) b.join();
  for (const auto& o : out)
    for (unsigned t = 0; t < n; ++t) ASSERT_EQ(o[t], (t + n - 1) % n + 1);
}

#if defined(__SANITIZE_ADDRESS__)
// A fiber's frames that never return leave their redzones poisoned; a stack the pool unmaps must
// leave no poison behind, or whatever is mapped there next (a host kernel's library) reads as a
// stack overflow under AddressSanitizer. Each fiber poisons some of its stack below its frame, as
// such frames do, and the test asks the shadow of every stack that is no longer mapped.
TEST(Fibers, AStackTheyUnmapLeavesNoPoisonBehind) {
  const size_t count = 4096 + 64;  // more than the pool keeps
  std::vector<const char*> deep(count);
  {
    Fibers fibers(count);
    ASSERT_EQ(fibers.size(), count);
    for (size_t i = 0; i < count; ++i)
      fibers.start(i, [&deep, i] {
        char local[64];
        deep[i] = local - 8192;  // below this frame, inside the stack
        ASAN_POISON_MEMORY_REGION(deep[i], 4096);
        __asm__ volatile("" : : "r"(local) : "memory");
      });
    for (size_t i = 0; i < count; ++i) EXPECT_FALSE(fibers.resume(i));
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t unmapped = 0;
  for (const char* p : deep) {
    unsigned char resident;
    void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~(page - 1));
    if (mincore(start, page, &resident) == 0) continue;  // still the pool's
    ++unmapped;
    EXPECT_EQ(__asan_region_is_poisoned(const_cast<char*>(p), 4096), nullptr);
  }
  EXPECT_GE(unmapped, 64u);
}
#endif
