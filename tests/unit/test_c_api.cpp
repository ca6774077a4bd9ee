// The C API's handle management and argument checks (collectives that run are tested in
// test_communicator.cpp).
#include <gtest/gtest.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ccc/ccc.h"
#include "ccc/jit_cache.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define CCC_HAVE_NCCL_H 1
#endif

namespace {

std::string last_error() { return cccGetLastError(nullptr); }

}  // namespace

TEST(CApi, HandlesKnowTheirRankAndCount) {
  cccComm_t comms[3];
  ASSERT_EQ(cccCommInitAllHost(comms, 3), cccSuccess);
  for (int r = 0; r < 3; ++r) {
    int rank = -1, count = -1;
    EXPECT_EQ(cccCommUserRank(comms[r], &rank), cccSuccess);
    EXPECT_EQ(cccCommCount(comms[r], &count), cccSuccess);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(count, 3);
  }
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

TEST(CApi, UseAfterDestroyIsInvalidUsage) {
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAllHost(comms, 2), cccSuccess);
  ASSERT_EQ(cccCommDestroy(comms[0]), cccSuccess);
  int count = 0;
  EXPECT_EQ(cccCommCount(comms[1], &count), cccSuccess) << "the other rank lives on";
  EXPECT_EQ(cccCommCount(comms[0], &count), cccInvalidUsage);
  EXPECT_EQ(last_error(), "communicator used after cccCommDestroy (or never created)");
  float x = 0;
  EXPECT_EQ(cccAllReduce(&x, &x, 1, cccFloat32, cccSum, comms[0], nullptr), cccInvalidUsage);
  EXPECT_EQ(cccCommDestroy(comms[0]), cccInvalidUsage);
  EXPECT_EQ(cccCommDestroy(comms[1]), cccSuccess);
}

// The enums are NCCL's values, so a shim between the two is a cast (ccc.h promises it).
TEST(CApi, EnumValuesAreNccls) {
#ifdef CCC_HAVE_NCCL_H
  static_assert(cccSuccess == static_cast<int>(ncclSuccess) && cccUnhandledCudaError == static_cast<int>(ncclUnhandledCudaError) &&
                cccSystemError == static_cast<int>(ncclSystemError) && cccInternalError == static_cast<int>(ncclInternalError) &&
                cccInvalidArgument == static_cast<int>(ncclInvalidArgument) && cccInvalidUsage == static_cast<int>(ncclInvalidUsage) &&
                cccRemoteError == static_cast<int>(ncclRemoteError) && cccNumResults == static_cast<int>(ncclNumResults));
  static_assert(cccInt8 == static_cast<int>(ncclInt8) && cccUint8 == static_cast<int>(ncclUint8) &&
                cccInt32 == static_cast<int>(ncclInt32) && cccUint32 == static_cast<int>(ncclUint32) &&
                cccInt64 == static_cast<int>(ncclInt64) && cccUint64 == static_cast<int>(ncclUint64) &&
                cccFloat16 == static_cast<int>(ncclFloat16) && cccFloat32 == static_cast<int>(ncclFloat32) &&
                cccFloat64 == static_cast<int>(ncclFloat64) && cccBfloat16 == static_cast<int>(ncclBfloat16) &&
                cccNumTypes == static_cast<int>(ncclNumTypes));
  static_assert(cccSum == static_cast<int>(ncclSum) && cccProd == static_cast<int>(ncclProd) &&
                cccMax == static_cast<int>(ncclMax) && cccMin == static_cast<int>(ncclMin) &&
                cccAvg == static_cast<int>(ncclAvg) && cccNumOps == static_cast<int>(ncclNumOps));
#else
  // Without NCCL's headers: the values nccl.h (2.28) gives, written out.
  static_assert(cccRemoteError == 6 && cccNumResults == 8);
  static_assert(cccInt8 == 0 && cccUint8 == 1 && cccInt32 == 2 && cccUint32 == 3 && cccInt64 == 4 &&
                cccUint64 == 5 && cccFloat16 == 6 && cccFloat32 == 7 && cccFloat64 == 8 && cccBfloat16 == 9 &&
                cccNumTypes == 12);
  static_assert(cccSum == 0 && cccProd == 1 && cccMax == 2 && cccMin == 3 && cccAvg == 4 && cccNumOps == 5);
#endif
}

// Each C value reaches the type and op it names: max and min of {1, 2, 3} on two ranks differ.
TEST(CApi, EnumValuesSelectTheirTypeAndOp) {
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAllHost(comms, 2), cccSuccess);
  const double in[2][2] = {{1.0, 5.0}, {3.0, 2.0}};
  double out[2][2] = {};
  for (cccRedOp_t op : {cccMax, cccMin}) {
    ASSERT_EQ(cccGroupStart(), cccSuccess);
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(cccAllReduce(in[r], out[r], 2, cccFloat64, op, comms[r], nullptr), cccSuccess) << last_error();
    ASSERT_EQ(cccGroupEnd(), cccSuccess);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
      EXPECT_EQ(out[r][0], op == cccMax ? 3.0 : 1.0);
      EXPECT_EQ(out[r][1], op == cccMax ? 5.0 : 2.0);
    }
  }
  // FP8 by NCCL's values (10): e4m3 bits, 1.5 + 2.25 = 3.75 and 2 + 1 = 3, exact.
  unsigned char f8in[2][2] = {{0x3c, 0x40}, {0x41, 0x38}}, f8out[2][2] = {};
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(cccAllReduce(f8in[r], f8out[r], 2, cccFloat8e4m3, cccSum, comms[r], nullptr), cccSuccess) << last_error();
  ASSERT_EQ(cccGroupEnd(), cccSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
    EXPECT_EQ(f8out[r][0], 0x47);
    EXPECT_EQ(f8out[r][1], 0x44);
  }
  float a[2] = {}, b[2] = {};
  EXPECT_EQ(cccAllReduce(a, b, 2, cccNumTypes, cccSum, comms[0], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "unsupported data type 12");
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

TEST(CApi, RejectsBadArguments) {
  EXPECT_EQ(cccCommInitAllHost(nullptr, 2), cccInvalidArgument);
  cccComm_t comms[2];
  EXPECT_EQ(cccCommInitAllHost(comms, 0), cccInvalidArgument);
  EXPECT_EQ(last_error(), "need at least one rank, got 0");
  // Refused before anything per rank is made or written (comms has room for 2).
  EXPECT_EQ(cccCommInitAllHost(comms, 1 << 20), cccInvalidArgument);
  EXPECT_EQ(last_error(), "a communicator has 1 .. 4096 ranks (the code generator's limit), got 1048576");
  ASSERT_EQ(cccCommInitAllHost(comms, 2), cccSuccess);
  float a[4] = {}, b[4] = {};
  EXPECT_EQ(cccAllReduce(a, b, 4, static_cast<cccDataType_t>(42), cccSum, comms[0], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "unsupported data type 42");
  EXPECT_EQ(cccAllReduce(a, b, 4, cccFloat32, static_cast<cccRedOp_t>(-1), comms[0], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "unsupported reduction op -1");
  EXPECT_EQ(cccAllReduce(a, b, 4, cccFloat32, cccSum, nullptr, nullptr), cccInvalidArgument);
  EXPECT_EQ(cccCommCount(comms[0], nullptr), cccInvalidArgument);
  // Each rank's call is checked on its own: a bad buffer is refused when that rank calls.
  EXPECT_EQ(cccAllReduce(a, nullptr, 4, cccFloat32, cccSum, comms[1], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 1: null recv buffer");
  EXPECT_EQ(cccGroupEnd(), cccInvalidUsage);
  EXPECT_EQ(last_error(), "cccGroupEnd without a matching cccGroupStart");
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.timeoutSeconds = 0;
  cccComm_t other[1];
  EXPECT_EQ(cccCommInitAllHostConfig(other, 1, &config), cccInvalidArgument);
  EXPECT_EQ(last_error(), "timeout 0 s: a timeout must be positive (infinite: wait for ever)");
  config.size = 3;
  EXPECT_EQ(cccCommInitAllHostConfig(other, 1, &config), cccInvalidArgument);
  for (cccComm_t c : comms) cccCommDestroy(c);
}

// The config's traceFile: the clique's calls go to the file when its communicators are destroyed.
TEST(CApi, ConfigTraceFileWritesATrace) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ccc-capi-trace-" + std::to_string(::getpid()) + ".json");
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.algo = "ring";
  config.traceFile = file.c_str();
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAllHostConfig(comms, 2, &config), cccSuccess) << last_error();
  float a[2][64] = {}, b[2][64] = {};
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cccAllReduce(a[r], b[r], 64, cccFloat32, cccSum, comms[r], nullptr), cccSuccess);
  ASSERT_EQ(cccGroupEnd(), cccSuccess);
  for (cccComm_t c : comms) ASSERT_EQ(cccCommDestroy(c), cccSuccess);
  std::ifstream in(file);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::filesystem::remove(file);
  EXPECT_NE(text.find(R"("name":"allreduce")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("name":"wait")"), std::string::npos);
}

namespace {

// A host clique whose waits give up after half a second, every call on `algo` (null: the
// default schedule of each collective).
std::vector<cccComm_t> quick_clique(int n, const char* algo = "ring") {
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.timeoutSeconds = 0.5;
  config.algo = algo;
  std::vector<cccComm_t> comms(n);
  EXPECT_EQ(cccCommInitAllHostConfig(comms.data(), n, &config), cccSuccess) << last_error();
  return comms;
}

// Rank r's input i * (r + 1): the sum over n ranks is i * n(n+1)/2.
std::vector<std::vector<int32_t>> ramp_inputs(int n, size_t count) {
  std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<int32_t>(i * (r + 1));
  return buf;
}

}  // namespace

// Rank 0's call queues its kernel at once: its synchronize waits for the peer that has not
// called yet, then sees the finished collective.
TEST(CApi, EachRankIsQueuedWhenItCalls) {
  const int n = 2;
  const size_t count = 1000;
  std::vector<cccComm_t> comms(n);
  ASSERT_EQ(cccCommInitAllHost(comms.data(), n), cccSuccess);
  auto buf = ramp_inputs(n, count);
  std::atomic<bool> peer_called{false}, synced_before_peer{false};
  std::thread rank0([&] {
    EXPECT_EQ(cccAllReduce(buf[0].data(), buf[0].data(), count, cccInt32, cccSum, comms[0], nullptr), cccSuccess);
    EXPECT_EQ(cccCommSynchronize(comms[0]), cccSuccess) << last_error();
    synced_before_peer = !peer_called;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  peer_called = true;
  EXPECT_EQ(cccAllReduce(buf[1].data(), buf[1].data(), count, cccInt32, cccSum, comms[1], nullptr), cccSuccess);
  EXPECT_EQ(cccCommSynchronize(comms[1]), cccSuccess) << last_error();
  rank0.join();
  EXPECT_FALSE(synced_before_peer) << "rank 0's synchronize returned before its peer called";
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[r][i], static_cast<int32_t>(3 * i)) << r << " " << i;
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// Backend "sim" (the config's, or $CCC_BACKEND) makes cccCommInitAllHost* simulate the clique on
// $CCC_TOPO's GPUs: the results are host emulation's, and cccCommVirtualTime reads the virtual
// time the calls took. Other backends have none; cccCommInitRank refuses "sim" (one process).
TEST(CApi, BackendSimRunsTheCliqueInVirtualTime) {
  ASSERT_EQ(setenv("CCC_TOPO", CCC_SOURCE_DIR "/topologies/dgx-h100.topo", 1), 0);
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.backend = "sim";
  const int n = 2;
  const size_t count = 1000;
  cccComm_t comms[n];
  ASSERT_EQ(cccCommInitAllHostConfig(comms, n, &config), cccSuccess) << last_error();
  auto buf = ramp_inputs(n, count);
  double before = -1, after = -1;
  EXPECT_EQ(cccCommVirtualTime(comms[0], &before), cccSuccess) << last_error();
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), count, cccInt32, cccSum, comms[r], nullptr), cccSuccess) << last_error();
  ASSERT_EQ(cccGroupEnd(), cccSuccess) << last_error();
  for (cccComm_t c : comms) EXPECT_EQ(cccCommSynchronize(c), cccSuccess) << last_error();
  EXPECT_EQ(cccCommVirtualTime(comms[1], &after), cccSuccess) << last_error();
  EXPECT_GE(after - before, 2.5e-6);  // at least dgx-h100.topo's launch
  EXPECT_LT(after - before, 100e-6);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[r][i], static_cast<int32_t>(3 * i)) << r << " " << i;
  EXPECT_EQ(cccCommVirtualTime(comms[0], nullptr), cccInvalidArgument);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);

  config.backend = "host";
  ASSERT_EQ(cccCommInitAllHostConfig(comms, n, &config), cccSuccess) << last_error();
  EXPECT_EQ(cccCommVirtualTime(comms[0], &after), cccInvalidUsage);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
  ASSERT_EQ(unsetenv("CCC_TOPO"), 0);
  config.backend = "sim";
  EXPECT_EQ(cccCommInitAllHostConfig(comms, n, &config), cccInvalidArgument) << "no topology";
  EXPECT_NE(last_error().find("topology"), std::string::npos) << last_error();
  cccUniqueId id{};
  ASSERT_EQ(cccGetUniqueId(&id), cccSuccess);
  cccComm_t comm = nullptr;
  EXPECT_EQ(cccCommInitRankConfig(&comm, 2, id, 0, &config), cccInvalidUsage);
  EXPECT_NE(last_error().find("cccCommInitAllHost"), std::string::npos) << last_error();
}

// cccCommPredict: the cost model's time for the kernel a call would run, beside NCCL's tuning
// model on the same GPUs (libccc-nccl's baseline); nothing to predict by without a topology.
TEST(CApi, PredictGivesBothModelsTimesOnTheCommunicatorsTopology) {
  ASSERT_EQ(setenv("CCC_TOPO", CCC_SOURCE_DIR "/topologies/dgx-h100.topo", 1), 0);
  const int n = 4;
  cccComm_t comms[n];
  ASSERT_EQ(cccCommInitAllHost(comms, n), cccSuccess) << last_error();
  ASSERT_EQ(unsetenv("CCC_TOPO"), 0);
  double ccc_small = 0, nccl_small = 0, ccc_large = 0, nccl_large = 0;
  ASSERT_EQ(cccCommPredict(comms[1], cccFuncAllReduce, 1, cccFloat32, cccSum, 0, &ccc_small, &nccl_small), cccSuccess)
      << last_error();
  EXPECT_GT(ccc_small, 2.5e-6);  // at least the topology's launch
  EXPECT_GT(nccl_small, 2.5e-6);
  ASSERT_EQ(cccCommPredict(comms[1], cccFuncAllReduce, 64 << 20, cccFloat32, cccSum, 0, &ccc_large, nullptr),
            cccSuccess);
  EXPECT_EQ(cccCommPredict(comms[1], cccFuncAllReduce, 64 << 20, cccFloat32, cccSum, 0, nullptr, &nccl_large),
            cccSuccess);
  EXPECT_GT(ccc_large, 50 * ccc_small);  // 256 MiB over 450 GB/s links: far beyond the latency
  EXPECT_GT(nccl_large, 50 * nccl_small);
  EXPECT_EQ(cccCommPredict(comms[0], static_cast<cccFunc_t>(5), 1, cccFloat32, cccSum, 0, nullptr, nullptr),
            cccInvalidArgument);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);

  ASSERT_EQ(cccCommInitAllHost(comms, n), cccSuccess) << last_error();
  ASSERT_EQ(cccCommPredict(comms[0], cccFuncBroadcast, 10, cccInt8, cccSum, 1, &ccc_small, &nccl_small), cccSuccess);
  EXPECT_EQ(ccc_small, 0);
  EXPECT_EQ(nccl_small, 0);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// cccCommWarmUp puts the kernels the declared calls will run into the process's JIT cache (built,
// or read from the disk cache), so the calls themselves fill nothing.
TEST(CApi, WarmUpLoadsWhatTheCallsRunAhead) {
  const int n = 2;
  std::vector<cccComm_t> comms(n);
  ASSERT_EQ(cccCommInitAllHost(comms.data(), n), cccSuccess);
  ccc::JitCache& cache = ccc::JitCache::process_cache();
  const size_t counts[] = {100, 1000};  // a shape no other test in this process uses
  const uint64_t before = cache.fills();
  ASSERT_EQ(cccCommWarmUp(comms[1], cccFuncReduce, counts, 2, cccUint8, cccMax, 1, /*inPlace*/ 1, /*blocking*/ 1),
            cccSuccess) << last_error();
  const uint64_t warmed = cache.fills();
  EXPECT_GT(warmed, before) << "the warm-up loaded nothing";
  EXPECT_EQ(cccCommWarmUp(comms[0], cccFuncReduce, counts, 2, cccUint8, cccMax, 1, 1, /*blocking*/ 0), cccSuccess);
  for (size_t count : counts) {
    std::vector<std::vector<uint8_t>> buf(n, std::vector<uint8_t>(count));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<uint8_t>(i * (r + 3));
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(cccReduce(buf[r].data(), buf[r].data(), count, cccUint8, cccMax, 1, comms[r], nullptr), cccSuccess)
          << last_error();
    for (cccComm_t c : comms) ASSERT_EQ(cccCommSynchronize(c), cccSuccess) << last_error();
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(buf[1][i], std::max(static_cast<uint8_t>(i * 3), static_cast<uint8_t>(i * 4))) << i;
  }
  EXPECT_EQ(cache.fills(), warmed) << "a call loaded a kernel the warm-up should have";

  EXPECT_EQ(cccCommWarmUp(comms[0], static_cast<cccFunc_t>(99), counts, 2, cccFloat32, cccSum, 0, 0, 1), cccInvalidArgument);
  EXPECT_EQ(last_error(), "unknown collective 99");
  EXPECT_EQ(cccCommWarmUp(comms[0], cccFuncAllReduce, nullptr, 1, cccFloat32, cccSum, 0, 0, 1), cccInvalidArgument);
  EXPECT_EQ(cccCommWarmUp(comms[0], cccFuncAllReduce, counts, -1, cccFloat32, cccSum, 0, 0, 1), cccInvalidArgument);
  EXPECT_EQ(cccCommWarmUp(comms[0], cccFuncBroadcast, counts, 1, cccFloat32, cccSum, /*root*/ 2, 0, 1), cccInvalidArgument);
  EXPECT_NE(last_error().find("root 2 is not a rank"), std::string::npos) << last_error();
  EXPECT_EQ(cccCommWarmUp(comms[0], cccFuncAllReduce, nullptr, 0, cccFloat32, cccSum, 0, 0, 1), cccSuccess);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
  EXPECT_EQ(cccCommWarmUp(comms[0], cccFuncAllReduce, counts, 1, cccFloat32, cccSum, 0, 0, 1), cccInvalidUsage);
}

TEST(CApi, GroupsQueueTheirCallsAtGroupEnd) {
  const int n = 3;
  const size_t count = 999;
  std::vector<cccComm_t> comms(n);
  ASSERT_EQ(cccCommInitAllHost(comms.data(), n), cccSuccess);
  auto buf = ramp_inputs(n, count);
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), count, cccInt32, cccSum, comms[r], nullptr), cccSuccess);
  EXPECT_EQ(cccGroupEnd(), cccSuccess);
  EXPECT_EQ(buf[0][1], 1) << "nothing runs before the outermost cccGroupEnd";
  EXPECT_EQ(cccGroupEnd(), cccSuccess);
  for (int r = 0; r < n; ++r) EXPECT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[r][i], static_cast<int32_t>(6 * i)) << r << " " << i;
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// The fused allreduce + residual: recv = sum + residual, in place of send too; a residual that
// is null, misaligned or overlaps recv is refused when its rank calls, as is a rank whose peer
// called the plain allreduce (another kernel: CCC_ERR_MISMATCH, every rank fails).
TEST(CApi, AllReduceResidualAddsTheResidualOnce) {
  const int n = 3;
  const size_t count = 1001;
  std::vector<cccComm_t> comms(n);
  ASSERT_EQ(cccCommInitAllHost(comms.data(), n), cccSuccess);
  std::vector<std::vector<float>> in(n, std::vector<float>(count)), out(n, std::vector<float>(count, -1.0f));
  std::vector<std::vector<float>> residual(n, std::vector<float>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      in[r][i] = static_cast<float>((r + 1) * (i % 7));
      residual[r][i] = 0.5f * static_cast<float>(i % 5);  // the same on every rank
    }
  for (bool in_place : {false, true}) {
    ASSERT_EQ(cccGroupStart(), cccSuccess);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(cccAllReduceResidual(in[r].data(), residual[r].data(), in_place ? in[r].data() : out[r].data(), count,
                                     cccFloat32, cccSum, comms[r], nullptr),
                cccSuccess)
          << last_error();
    ASSERT_EQ(cccGroupEnd(), cccSuccess);
    for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ((in_place ? in : out)[r][i], 6.0f * static_cast<float>(i % 7) + 0.5f * static_cast<float>(i % 5))
            << (in_place ? "in place, " : "") << "rank " << r << " element " << i;
  }
  float* misaligned = reinterpret_cast<float*>(reinterpret_cast<char*>(residual[0].data()) + 1);
  EXPECT_EQ(cccAllReduceResidual(in[0].data(), nullptr, out[0].data(), count, cccFloat32, cccSum, comms[0], nullptr),
            cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 0: null residual buffer");
  EXPECT_EQ(cccAllReduceResidual(in[0].data(), misaligned, out[0].data(), count, cccFloat32, cccSum, comms[0], nullptr),
            cccInvalidArgument);
  EXPECT_NE(last_error().find("residual buffer 0x"), std::string::npos) << last_error();
  EXPECT_EQ(cccAllReduceResidual(in[0].data(), out[0].data() + 3, out[0].data(), count, cccFloat32, cccSum, comms[0],
                                 nullptr),
            cccInvalidArgument);
  EXPECT_NE(last_error().find("the residual buffer overlaps recv"), std::string::npos) << last_error();
  // Rank 0 fused, the others plain: another kernel, so every rank fails (nobody waits for ever).
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  EXPECT_EQ(cccAllReduceResidual(in[0].data(), residual[0].data(), out[0].data(), count, cccFloat32, cccSum, comms[0],
                                 nullptr),
            cccSuccess);
  for (int r = 1; r < n; ++r)
    EXPECT_EQ(cccAllReduce(in[r].data(), out[r].data(), count, cccFloat32, cccSum, comms[r], nullptr), cccSuccess);
  cccGroupEnd();
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(cccCommSynchronize(comms[r]), cccSuccess) << "rank " << r;
    EXPECT_NE(last_error().find("allreduce: rank 1 passed epilogue none, rank 0 epilogue residual"), std::string::npos)
        << last_error();
  }
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// Allreduce + residual + RMSNorm: recv is the norm of each row of the sum with the residual,
// times the weight; residualOut the sum itself. The shape's errors come back at the call.
TEST(CApi, AllReduceResidualRmsNormNormalisesEachRow) {
  const int n = 2;
  const size_t hidden = 3, rows = 2, count = rows * hidden;
  std::vector<cccComm_t> comms(n);
  ASSERT_EQ(cccCommInitAllHost(comms.data(), n), cccSuccess);
  const float in[2][6] = {{1, 2, 3, 4, 5, 6}, {0, 1, 0, -1, 0, 1}}, residual[6] = {1, 1, 1, 1, 1, 1};
  const float weight[3] = {1, 2, 0.5f};
  float out[2][6] = {}, sums[2][6] = {};
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(cccAllReduceResidualRmsNorm(in[r], residual, weight, out[r], sums[r], count, hidden, 1e-6f, cccFloat32,
                                          cccSum, comms[r], nullptr),
              cccSuccess)
        << last_error();
  ASSERT_EQ(cccGroupEnd(), cccSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
  for (size_t row = 0; row < rows; ++row) {
    double s[3], squares = 0;
    for (size_t j = 0; j < hidden; ++j) {
      s[j] = in[0][row * hidden + j] + in[1][row * hidden + j] + 1;
      squares += s[j] * s[j];
    }
    const double scale = 1 / std::sqrt(squares / hidden + 1e-6);
    for (int r = 0; r < n; ++r)
      for (size_t j = 0; j < hidden; ++j) {
        EXPECT_EQ(sums[r][row * hidden + j], static_cast<float>(s[j])) << "rank " << r;
        EXPECT_NEAR(out[r][row * hidden + j], s[j] * scale * weight[j], 1e-6) << "rank " << r << " row " << row;
      }
  }
  auto call = [&](size_t c, size_t h, float eps, cccDataType_t t, const float* w, float* res_out) {
    return cccAllReduceResidualRmsNorm(in[0], residual, w, out[0], res_out, c, h, eps, t, cccSum, comms[0], nullptr);
  };
  EXPECT_EQ(call(count, 4, 1e-6f, cccFloat32, weight, nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: epilogue residual-rmsnorm: count 6 is not a whole number of rows of hidden 4");
  EXPECT_EQ(call(count, 0, 1e-6f, cccFloat32, weight, nullptr), cccInvalidArgument);
  EXPECT_EQ(call(count, hidden, -1.0f, cccFloat32, weight, nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: epilogue residual-rmsnorm: eps -1 must be finite and not negative");
  EXPECT_EQ(call(count, hidden, 1e-6f, cccFloat64, weight, nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: epilogue residual-rmsnorm: normalises f32, f16 or bf16, not f64");
  EXPECT_EQ(call(count, hidden, 1e-6f, cccFloat32, nullptr, nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 0: null weight buffer");
  EXPECT_EQ(call(count, hidden, 1e-6f, cccFloat32, weight, out[0] + 1), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 0: residual_out overlaps recv");
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// The fp8 output: every element of quantOut is the rank's normalised output times 1 / scale,
// converted as the toolkit's __nv_cvt_float_to_fp8 does with __NV_SATFINITE (values past 448
// saturate); the bad scales and buffers are refused, and ranks that disagree on the scale (or on
// hidden) fail together, naming it.
TEST(CApi, AllReduceResidualRmsNormFp8QuantisesTheOutput) {
  const int n = 2;
  const size_t hidden = 4, rows = 2, count = rows * hidden;
  const float scale = 0.01f;
  std::vector<cccComm_t> comms(n);
  ASSERT_EQ(cccCommInitAllHost(comms.data(), n), cccSuccess);
  const float in[2][8] = {{1, 2, 3, 4, 5, 6, 7, 8}, {0, 1, 0, -1, 0, 1, 0, -3}}, residual[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const float weight[8] = {1, -2, 0.5f, 9, 1, 1, 1, 1};  // 9: past 448 / 100 for some rows; 8: for hidden 8
  float out[2][8] = {}, sums[2][8] = {};
  uint8_t quant[2][8] = {};
  ASSERT_EQ(cccGroupStart(), cccSuccess);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(cccAllReduceResidualRmsNormFp8(in[r], residual, weight, out[r], sums[r], quant[r], count, hidden, 1e-6f,
                                             scale, cccFloat32, cccSum, comms[r], nullptr),
              cccSuccess)
        << last_error();
  ASSERT_EQ(cccGroupEnd(), cccSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
  int saturated = 0;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      const float scaled = out[r][i] * (1.0f / scale);
      saturated += std::fabs(scaled) > 448;
      EXPECT_EQ(quant[r][i], __nv_cvt_float_to_fp8(scaled, __NV_SATFINITE, __NV_E4M3)) << "rank " << r << " at " << i;
      EXPECT_EQ(out[r][i], out[0][i]);
    }
  EXPECT_GT(saturated, 0);
  auto call = [&](float s, void* q) {
    return cccAllReduceResidualRmsNormFp8(in[0], residual, weight, out[0], nullptr, q, count, hidden, 1e-6f, s, cccFloat32,
                                          cccSum, comms[0], nullptr);
  };
  EXPECT_EQ(call(0.0f, quant[0]), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: epilogue residual-rmsnorm: fp8 scale 0 must be finite and positive");
  EXPECT_EQ(call(INFINITY, quant[0]), cccInvalidArgument);
  EXPECT_EQ(call(scale, nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 0: null quant_out buffer (the fp8 output)");
  EXPECT_EQ(call(scale, reinterpret_cast<uint8_t*>(out[0]) + 3), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 0: quant_out overlaps recv");
  // Issued rank by rank, a rank's fp8 output or pre-norm sums must not land in a peer's buffers
  // either: the later rank is refused, naming both, and may call again.
  EXPECT_EQ(call(scale, quant[0]), cccSuccess) << last_error();
  EXPECT_EQ(cccAllReduceResidualRmsNormFp8(in[1], residual, weight, out[1], sums[1], quant[0] + 2, count, hidden,
                                           1e-6f, scale, cccFloat32, cccSum, comms[1], nullptr),
            cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 0's quant_out buffer overlaps rank 1's quant_out buffer; a buffer that a "
                          "rank writes must not overlap another rank's buffers");
  EXPECT_EQ(cccAllReduceResidualRmsNormFp8(in[1], residual, weight, out[1], out[0], quant[1], count, hidden,
                                           1e-6f, scale, cccFloat32, cccSum, comms[1], nullptr),
            cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 0's recv buffer overlaps rank 1's residual_out buffer; a buffer that a "
                          "rank writes must not overlap another rank's buffers");
  EXPECT_EQ(cccAllReduceResidualRmsNormFp8(in[1], residual, weight, out[1], sums[1], quant[1], count, hidden, 1e-6f,
                                           scale, cccFloat32, cccSum, comms[1], nullptr),
            cccSuccess)
      << last_error();
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
  // Rank 1 asks for another scale: both fail, each told what differs.
  EXPECT_EQ(call(scale, quant[0]), cccSuccess) << last_error();
  EXPECT_EQ(cccAllReduceResidualRmsNormFp8(in[1], residual, weight, out[1], nullptr, quant[1], count, hidden, 1e-6f,
                                           2 * scale, cccFloat32, cccSum, comms[1], nullptr),
            cccSuccess);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(cccCommSynchronize(comms[r]), cccRemoteError) << "rank " << r;
    EXPECT_NE(last_error().find("allreduce: rank 1 passed fp8 scale 0.02, rank 0 fp8 scale 0.01"), std::string::npos)
        << last_error();
  }
  EXPECT_EQ(call(scale, quant[0]), cccSuccess) << last_error();
  EXPECT_EQ(cccAllReduceResidualRmsNormFp8(in[1], residual, weight, out[1], nullptr, quant[1], count, 2 * hidden,
                                           1e-6f, scale, cccFloat32, cccSum, comms[1], nullptr),
            cccSuccess)
      << last_error();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(cccCommSynchronize(comms[r]), cccRemoteError) << "rank " << r;
    EXPECT_NE(last_error().find("allreduce: rank 1 passed hidden 8, rank 0 hidden 4"), std::string::npos)
        << last_error();
  }
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// Ranks that disagree on the count: every rank that called gets an error, none succeeds without
// the work, and the clique is usable again afterwards. Repeated: a rank whose synchronize runs
// while its peers are still failing reports the failure then, and only then (a later reset
// once reported it a second time, on the next good call).
TEST(CApi, MismatchedCountsFailEveryRank) {
  const int n = 3;
  std::vector<cccComm_t> comms = quick_clique(n);
  for (int round = 0; round < 10; ++round) {
    auto buf = ramp_inputs(n, 4096);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), r == 1 ? 2048 : 4096, cccInt32, cccSum, comms[r], nullptr),
                cccSuccess);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(cccCommSynchronize(comms[r]), cccRemoteError) << "rank " << r;
      EXPECT_NE(last_error().find("collective failed"), std::string::npos) << last_error();
    }
    buf = ramp_inputs(n, 4096);
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), 4096, cccInt32, cccSum, comms[r], nullptr), cccSuccess);
    for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << "round " << round << ": " << last_error();
    EXPECT_EQ(buf[2][100], 600);
  }
  for (cccComm_t c : comms) cccCommDestroy(c);
}

// Every argument that must agree is compared across the ranks of one process as they issue
// the collective, so every rank fails, and at once, even where a rank reads nothing from the
// peer that disagrees: 2 ranks that each named themselves the broadcast's root used to succeed
// with different data, and with 3 ranks (roots 0, 1, 1) rank 1 succeeded while the others timed
// out. The communicator works again after. (Across processes the kernels compare: the
// "roots" case of test_multiprocess.cpp.)
TEST(CApi, ArgumentsThatDifferFailEveryRankAtOnceNamingTheDifference) {
  struct Case {
    int n;
    std::function<cccResult_t(int r, int32_t* buf, cccComm_t comm)> call;
    std::string why;
  };
  const std::vector<Case> cases = {
      {2, [](int r, int32_t* b, cccComm_t c) { return cccBroadcast(b, b, 1000, cccInt32, r, c, nullptr); },
       "broadcast: rank 1 passed root 1, rank 0 root 0"},
      {3, [](int r, int32_t* b, cccComm_t c) { return cccBroadcast(b, b, 1000, cccInt32, r == 0 ? 0 : 1, c, nullptr); },
       "broadcast: rank 1 passed root 1, rank 0 root 0"},
      {3, [](int r, int32_t* b, cccComm_t c) { return cccAllReduce(b, b, 1000, cccInt32, r == 2 ? cccMax : cccSum, c, nullptr); },
       "allreduce: rank 2 passed op max, rank 0 op sum"},
      {2, [](int r, int32_t* b, cccComm_t c) { return cccReduce(b, r == 0 ? b : b + 1000, 1000, cccInt32, cccSum, 0, c, nullptr); },
       "reduce: rank 1 runs out of place, rank 0 in place"},
      {2, [](int r, int32_t* b, cccComm_t c) { return cccAllReduce(b, b, 1000, r == 0 ? cccInt32 : cccUint32, cccSum, c, nullptr); },
       "allreduce: rank 1 passed type u32, rank 0 type i32"},
  };
  for (const Case& c : cases) {
    std::vector<cccComm_t> comms = quick_clique(c.n, nullptr);
    for (int round = 0; round < 2; ++round) {
      auto buf = ramp_inputs(c.n, 2000);
      for (int r = 0; r < c.n; ++r) EXPECT_EQ(c.call(r, buf[r].data(), comms[r]), cccSuccess) << c.why;
      const auto start = std::chrono::steady_clock::now();  // the kernels are compiled by now
      for (int r = 0; r < c.n; ++r) {
        EXPECT_EQ(cccCommSynchronize(comms[r]), cccRemoteError) << c.why << ": rank " << r;
        EXPECT_NE(last_error().find(c.why), std::string::npos) << last_error();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400)) << "not the timeout";
      buf = ramp_inputs(c.n, 2000);
      for (int r = 0; r < c.n; ++r)
        EXPECT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), 1000, cccInt32, cccSum, comms[r], nullptr), cccSuccess);
      for (int r = 0; r < c.n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << c.why << ": " << last_error();
      EXPECT_EQ(buf[0][7], 7 * c.n * (c.n + 1) / 2);
    }
    for (cccComm_t comm : comms) cccCommDestroy(comm);
  }
}

// Ranks that call one by one never meet in one call, yet their buffers must not overlap: the
// rank whose call completes an overlap is refused with both ranks named, nothing queued, and may
// call again with a buffer of its own; a refusal that is never made good fails the others within
// the timeout and leaves the clique usable.
TEST(CApi, BuffersOverlappingAcrossRanksRefuseTheLaterRank) {
  const int n = 2;
  std::vector<cccComm_t> comms = quick_clique(n);
  for (bool retry : {true, false}) {
    auto buf = ramp_inputs(n, 1000);
    buf[0].resize(2000);  // room for rank 1's misplaced send below
    ASSERT_EQ(cccAllReduce(buf[0].data(), buf[0].data(), 1000, cccInt32, cccSum, comms[0], nullptr), cccSuccess);
    // Rank 1 reads its input from rank 0's buffer, which rank 0 writes.
    EXPECT_EQ(cccAllReduce(buf[0].data() + 500, buf[1].data(), 1000, cccInt32, cccSum, comms[1], nullptr),
              cccInvalidArgument);
    EXPECT_EQ(last_error(), "allreduce: rank 0's recv buffer overlaps rank 1's send buffer; a buffer that a rank "
                            "writes must not overlap another rank's buffers");
    EXPECT_EQ(buf[0][1], 1) << "the refused call wrote nothing";
    if (retry) {
      ASSERT_EQ(cccAllReduce(buf[1].data(), buf[1].data(), 1000, cccInt32, cccSum, comms[1], nullptr), cccSuccess);
      for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
      EXPECT_EQ(buf[0][7], 21);
      EXPECT_EQ(buf[1][7], 21);
    } else {
      EXPECT_EQ(cccCommSynchronize(comms[0]), cccRemoteError);
      EXPECT_NE(last_error().find("timed out"), std::string::npos) << last_error();
      EXPECT_EQ(cccCommSynchronize(comms[1]), cccSuccess) << "rank 1 queued nothing";
    }
  }
  // Sends may be shared; a collective every rank has issued does not hold back the next one,
  // whose ranks swap their recv buffers.
  auto in = ramp_inputs(1, 1000);
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(1000));
  for (int round = 0; round < 2; ++round) {
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(cccAllReduce(in[0].data(), out[(r + round) % n].data(), 1000, cccInt32, cccSum, comms[r], nullptr),
                cccSuccess) << last_error();
    for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
    EXPECT_EQ(out[round % n][7], 14);
  }
  for (cccComm_t c : comms) cccCommDestroy(c);
}

// A rank that never calls, or whose handle is destroyed: the others fail within the timeout.
TEST(CApi, AMissingRankFailsTheOthersWithinTheTimeout) {
  for (bool destroy : {false, true}) {
    const int n = 3;
    std::vector<cccComm_t> comms = quick_clique(n);
    if (destroy) {
      EXPECT_EQ(cccCommDestroy(comms[2]), cccSuccess);
    }
    auto buf = ramp_inputs(n, 100);
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), 100, cccInt32, cccSum, comms[r], nullptr), cccSuccess);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(cccCommSynchronize(comms[r]), cccRemoteError) << "rank " << r;
      EXPECT_NE(last_error().find("timed out"), std::string::npos) << last_error();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    for (int r = 0; r < (destroy ? 2 : 3); ++r) cccCommDestroy(comms[r]);
  }
}

// The fused epilogue's kernel waits as the plain one does: a rank that never calls fails the
// others within the timeout, and the norm (after the exit waits) never runs on what they hold.
TEST(CApi, AMissingRankFailsTheFusedAllReduceWithinTheTimeout) {
  const int n = 3;
  std::vector<cccComm_t> comms = quick_clique(n);
  std::vector<std::vector<float>> in(n, std::vector<float>(8, 1.0f)), out(n, std::vector<float>(8, -1.0f));
  std::vector<float> residual(8, 0.5f), weight(4, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(cccAllReduceResidualRmsNorm(in[r].data(), residual.data(), weight.data(), out[r].data(), nullptr, 8, 4,
                                          1e-6f, cccFloat32, cccSum, comms[r], nullptr),
              cccSuccess);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(cccCommSynchronize(comms[r]), cccRemoteError) << "rank " << r;
    EXPECT_NE(last_error().find("timed out"), std::string::npos) << last_error();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (cccComm_t c : comms) cccCommDestroy(c);
}

// A child forked from a process with a communicator shares the parent's memory and none of its
// threads: its calls are refused (they would otherwise queue work nobody runs, or, across
// processes, write into the arena the parent and its peers use), its destroy drops only its
// handles, and the parent's ranks go on with the right values.
TEST(CApi, AForkedChildIsRefusedAndLeavesTheParentAlone) {
  const int n = 2;
  std::vector<cccComm_t> comms = quick_clique(n);
  auto buf = ramp_inputs(n, 1000);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), 1000, cccInt32, cccSum, comms[r], nullptr), cccSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a child that hangs in a call fails the test instead of holding it up
    auto mine = ramp_inputs(n, 1000);
    int code = 0;
    int count = 0;
    if (cccAllReduce(mine[0].data(), mine[0].data(), 1000, cccInt32, cccSum, comms[0], nullptr) != cccInvalidUsage ||
        last_error().find("forked") == std::string::npos)
      code |= 1;
    if (cccCommCount(comms[1], &count) != cccInvalidUsage) code |= 2;
    if (cccCommAbort(comms[1]) != cccInvalidUsage) code |= 4;
    for (cccComm_t c : comms)
      if (cccCommDestroy(c) != cccSuccess) code |= 8;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit 1: a call was not refused, 2: a query, 4: abort, 8: destroy";
  buf = ramp_inputs(n, 1000);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), 1000, cccInt32, cccSum, comms[r], nullptr), cccSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << last_error();
  EXPECT_EQ(buf[1][100], 300);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

TEST(CApi, ErrorStringsAndNoDevice) {
  EXPECT_STREQ(cccGetErrorString(cccSuccess), "no error");
  EXPECT_STREQ(cccGetErrorString(cccInvalidUsage), "invalid usage");
  // A refused connection or a full arena is a system error too: the string does not blame CUDA.
  EXPECT_EQ(std::string(cccGetErrorString(cccSystemError)).find("CUDA"), std::string::npos);
  EXPECT_STREQ(cccGetErrorString(static_cast<cccResult_t>(99)), "unknown result code");
  cccComm_t comms[1];
  const cccResult_t r = cccCommInitAll(comms, 1, nullptr);
  if (r == cccSuccess) {
    cccCommDestroy(comms[0]);
    GTEST_SKIP() << "a CUDA device is present";
  }
  EXPECT_EQ(r, cccSystemError);
  EXPECT_EQ(last_error().rfind("no CUDA device", 0), 0u) << last_error();
}
