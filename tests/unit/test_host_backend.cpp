// The host backend with hand-written kernels against the launch ABI (generated ones are tested
// through the communicator).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ccc/collective_types.h"
#include "ccc/host_backend.h"

using namespace ccc;

namespace {

// Out-of-place sum of every rank's u32 input, each channel taking a strided share.
const char* kSumKernel = R"(#include "ccc_abi.h"
extern "C" void sum_u32(ccc_launch_args args, int block) {
  const int nranks = 3, channels = 2;
  unsigned* out = static_cast<unsigned*>(args.ranks[args.rank].output);
  for (unsigned long long i = block; i < args.count; i += channels) {
    unsigned s = 0;
    for (int p = 0; p < nranks; ++p) s += static_cast<const unsigned*>(args.ranks[p].input)[i];
    out[i] = s;
  }
}
)";

// Reports, in output[block], the rank's progress counter as the launch found it, then bumps it;
// rank 1 records a timeout when count == 99.
const char* kCounterKernel = R"(#include "ccc_abi.h"
extern "C" void counters(ccc_launch_args args, int block) {
  unsigned long long* progress = args.ranks[args.rank].progress;
  static_cast<unsigned long long*>(args.ranks[args.rank].output)[block] = progress[block]++;
  if (args.count == 99 && args.rank == 1 && block == 0) args.error[1] = CCC_ERR_TIMEOUT;
}
)";

JitCache& memory_cache() {
  static JitCache cache{std::filesystem::path()};
  return cache;
}

}  // namespace

TEST(HostBackend, RunsEveryRankAndChannel) {
  const int n = 3;
  const uint64_t count = 1001;
  std::vector<std::vector<unsigned>> in(n, std::vector<unsigned>(count)), out(n, std::vector<unsigned>(count, 0xdeadbeef));
  for (int r = 0; r < n; ++r) std::iota(in[r].begin(), in[r].end(), 1000u * r);
  std::vector<const void*> send;
  std::vector<void*> recv;
  for (int r = 0; r < n; ++r) send.push_back(in[r].data()), recv.push_back(out[r].data());
  HostRanks ranks(n, 4);
  ranks.launch(load_host_kernel(memory_cache(), kSumKernel, "sum_u32"), 2, send, recv, count, 0, 1'000'000'000);
  for (int r = 0; r < n; ++r)
    for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(out[r][i], 3 * i + 3000) << "rank " << r << " i " << i;
}

TEST(HostBackend, ReportsPeerErrorsAndResetsCounters) {
  const int n = 2, channels = 3;
  std::vector<std::vector<unsigned long long>> out(n, std::vector<unsigned long long>(channels));
  std::vector<const void*> send(n, nullptr);
  std::vector<void*> recv;
  for (auto& o : out) recv.push_back(o.data());
  HostRanks ranks(n, channels);
  const HostKernel k = load_host_kernel(memory_cache(), kCounterKernel, "counters");
  ranks.launch(k, channels, send, recv, 1, 0, 0);
  ranks.launch(k, channels, send, recv, 1, 0, 0);
  EXPECT_EQ(out[1][2], 1u) << "counters persist between launches";
  try {
    ranks.launch(k, channels, send, recv, 99, 0, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Remote);
    EXPECT_STREQ(e.what(), "collective failed: rank 1: timed out waiting for a peer");
  }
  ranks.launch(k, channels, send, recv, 1, 0, 0);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < channels; ++c) EXPECT_EQ(out[r][c], 0u) << "counters zeroed after the failure";
  EXPECT_THROW(ranks.launch(k, channels + 1, send, recv, 1, 0, 0), Error);
}

TEST(LaunchFailures, NamesEachFailedRankAndItsCause) {
  const unsigned words[] = {CCC_OK, CCC_ERR_TIMEOUT, CCC_ERR_PEER_FAILED, CCC_ERR_BAD_PROGRAM, 77};
  EXPECT_EQ(launch_failures(words, 5),
            "rank 1: timed out waiting for a peer; rank 2: stopped after a peer failed; rank 3: its step program "
            "names a data pass the kernel lacks (a ccc bug); rank 4: error word 77");
  EXPECT_EQ(launch_failures(words, 1), "");
}

TEST(HostBackend, MissingEntryIsAnError) {
  EXPECT_THROW(load_host_kernel(memory_cache(), kSumKernel, "no_such_kernel"), JitError);
}
