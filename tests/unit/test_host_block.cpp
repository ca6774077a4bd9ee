// Host emulation's thread blocks (host_block.h): threads as fibers with their own index, real
// block barriers, polls that let the block's other threads run, block-shared memory poisoned per
// run, and a barrier some threads never reach reported instead of hung. The kernels are
// hand-written against the host prelude, as generated ones are.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "host_backend.h"
#include "launch_errors.h"

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
