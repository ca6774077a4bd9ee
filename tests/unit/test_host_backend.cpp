// The host backend with hand-written kernels against the launch ABI (generated ones are tested
// through the communicator).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "ccc/errors.h"
#include "launch_errors.h"
#include "host_backend.h"

using namespace ccc;

namespace {

// Each block writes its rank's buffers and, in output[block], the rank's progress counter as the
// launch found it, then bumps it; likewise its inbox slot 0 of channel `block` in
// output[CCC_MAX_CHANNELS + block]. Rank 1 records a timeout when count == 99. Channel 0 of each
// rank sleeps a little first, so the launch order of a stream shows in the counters.
const char* kCounterKernel = R"(#include "ccc_abi.h"
#include <chrono>
#include <thread>
extern "C" void counters(ccc_launch_args args, int block, const ccc_host_thread*) {
  unsigned long long* progress = args.ranks[args.rank].progress;
  if (block == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  static_cast<unsigned long long*>(args.own.output)[block] = progress[block]++;
  unsigned long long* inbox = args.ranks[args.rank].inbox + block * 2;  // 2 ranks
  static_cast<unsigned long long*>(args.own.output)[CCC_MAX_CHANNELS + block] = (*inbox)++;
  if (args.count == 99 && args.rank == 1 && block == 0) *args.ranks[1].error = CCC_ERR_TIMEOUT;
}
)";

JitCache& memory_cache() {
  static JitCache cache{std::filesystem::path()};
  return cache;
}

ccc_buffers buffers_of(void* output) { return {nullptr, output, nullptr, 1, nullptr}; }

// What kCounterKernel writes per rank.
constexpr size_t kOutWords = 2 * CCC_MAX_CHANNELS;

}  // namespace

TEST(HostBackend, StreamsRunTheirLaunchesInOrderWithEveryChannel) {
  const int n = 2, channels = 3;
  std::vector<std::vector<unsigned long long>> out(n, std::vector<unsigned long long>(kOutWords, 77));
  HostRanks ranks(n, 1);
  const HostKernel k = load_host_kernel(memory_cache(), kCounterKernel, "counters");
  for (int launch = 0; launch < 3; ++launch)
    for (int r = 0; r < n; ++r) ranks.launch(r, k, channels, buffers_of(out[r].data()), 1, 0);
  ranks.synchronize(-1);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < channels; ++c)
      EXPECT_EQ(out[r][c], 2u) << "rank " << r << " channel " << c << ": the third launch saw two before it";
  ranks.launch(0, k, 1, buffers_of(out[0].data()), 1, 0);  // fewer channels than workers
  ranks.synchronize(0);
  EXPECT_EQ(out[0][0], 3u);
  EXPECT_EQ(out[0][1], 2u) << "channel 1 does not run a one-channel launch";
}

// A stream's workers that a launch does not need (those past its blocks) may wake for it only
// once it is done and the queue is empty: they must look at nothing then. Many one-block host
// tasks after an eight-block launch (an RMSNorm kernel's norm blocks leave a stream that many
// workers) used to have a late worker read the front of an empty queue and crash.
TEST(HostBackend, IdleWorkersWakingLateFindNothingToRun) {
  const HostKernel nothing =
      load_host_kernel(memory_cache(), "#include \"ccc_abi.h\"\nextern \"C\" void nothing(ccc_launch_args, int, "
                                       "const ccc_host_thread*) {}\n",
                       "nothing");
  HostStream stream;
  std::atomic<int> ran{0};
  for (int round = 0; round < 200; ++round) {
    stream.enqueue(nothing, ccc_launch_args{}, 8, 1);
    for (int t = 0; t < 10; ++t) stream.enqueue([&ran] { ran.fetch_add(1, std::memory_order_relaxed); });
    stream.wait_idle();
  }
  EXPECT_EQ(ran.load(), 2000);
}

TEST(HostBackend, ReportsPeerErrorsToEveryFailedRankAndResetsCounters) {
  const int n = 2, channels = 3;
  std::vector<std::vector<unsigned long long>> out(n, std::vector<unsigned long long>(kOutWords));
  HostRanks ranks(n, 1);
  const HostKernel k = load_host_kernel(memory_cache(), kCounterKernel, "counters");
  for (int r = 0; r < n; ++r) ranks.launch(r, k, channels, buffers_of(out[r].data()), 99, 0);
  ranks.synchronize(0);  // rank 0 did not fail
  try {
    ranks.synchronize(1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Remote);
    EXPECT_STREQ(e.what(), "collective failed: rank 1: timed out waiting for a peer (one that has not issued this "
                           "collective, or is still compiling its kernel: warm_up / cccCommWarmUp compiles ahead)");
  }
  ranks.synchronize(1);  // reported once
  for (int r = 0; r < n; ++r) ranks.launch(r, k, channels, buffers_of(out[r].data()), 1, 0);
  ranks.synchronize(-1);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < channels; ++c) {
      EXPECT_EQ(out[r][c], 0u) << "counters zeroed after the failure";
      EXPECT_EQ(out[r][CCC_MAX_CHANNELS + c], 0u) << "inboxes zeroed after the failure";
    }
  EXPECT_THROW(ranks.launch(0, k, CCC_MAX_CHANNELS + 1, buffers_of(out[0].data()), 1, 0), Error);
}

// The reset after a failure restarts the epochs, so it zeroes every ll receive block a rank
// has, not only the newest: a graph captured earlier may still launch with an older one, and a
// line the failed launch left there would carry a flag the restarted epochs reach again.
TEST(HostBackend, AFailureZeroesEveryLlReceiveBlock) {
  const int n = 2, channels = 1;
  std::vector<std::vector<unsigned long long>> out(n, std::vector<unsigned long long>(kOutWords));
  HostRanks ranks(n, 1);
  const HostKernel k = load_host_kernel(memory_cache(), kCounterKernel, "counters");
  auto* older = static_cast<unsigned char*>(ranks.ll_slots(0, 256));
  auto* newer = static_cast<unsigned char*>(ranks.ll_slots(0, 4096));
  ASSERT_NE(older, newer);
  std::memset(older, 0xff, 256);  // lines a failed launch left
  std::memset(newer, 0xff, 4096);
  for (int r = 0; r < n; ++r) ranks.launch(r, k, channels, buffers_of(out[r].data()), 99, 0);
  EXPECT_THROW(ranks.synchronize(-1), Error);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(older[i], 0) << "the older block, byte " << i;
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(newer[i], 0) << "the newest block, byte " << i;
}

TEST(LaunchFailures, NamesEachFailedRankAndItsCause) {
  const unsigned words[] = {CCC_OK, CCC_ERR_TIMEOUT, CCC_ERR_PEER_FAILED, CCC_ERR_BAD_PROGRAM, CCC_ERR_MISMATCH, 77, CCC_ERR_UNREGISTERED};
  EXPECT_EQ(launch_failures(words, 7),
            "rank 1: timed out waiting for a peer (one that has not issued this collective, or is still compiling its "
            "kernel: warm_up / cccCommWarmUp compiles ahead); rank 2: stopped after a peer failed; rank 3: its step program "
            "names a data pass the kernel lacks (a ccc bug); rank 4: a peer called with another collective, count, "
            "type, op, root or placement (in place or out of place; every rank must pass the same); rank 5: error word 77; rank 6: a peer's input or "
            "output is neither arena memory nor a buffer registered with this rank");
  EXPECT_EQ(launch_failures(words, 1), "");
}

TEST(HostBackend, MissingEntryIsAnError) {
  EXPECT_THROW(load_host_kernel(memory_cache(), kCounterKernel, "no_such_kernel"), JitError);
}
