// The CUDA backend across processes on a real device (docs/runtime.md, "Multi-process"): two
// rank processes, both on device 0 (they time-slice it, hence the generous timeout), joined with
// cccCommInitRank on backend "cuda". Each runs an allreduce and an allgather, on arena memory
// (cccCommMemAlloc, read by the peer in place) and on cuMemAlloc memory (staged through the
// arena with cuMemcpyAsync) and on cuMemAlloc memory registered with cccCommRegister (read by
// the peer in place through CUDA IPC), on a stream of its own, and checks its results against
// the reference. The test starts this executable again once per rank (CCC_TEST_RANK_* set), running
// CudaMultiProcess.Rank there; it skips without a device. gpu-bundle/gpu-check.sh runs it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "ccc/ccc.h"
#include "rank_processes.h"
#include "collective_reference.h"
#include "cuda_driver.h"

extern char** environ;

namespace {

using namespace ccc;

constexpr int kRanks = 2;
constexpr double kTimeoutSeconds = 120;  // two processes take turns on one device

std::string hex(const cccUniqueId& id) {
  std::string s;
  char byte[3];
  for (char c : id.internal) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(c));
    s += byte;
  }
  return s;
}

cccUniqueId unhex(const std::string& text) {
  cccUniqueId id{};
  for (size_t i = 0; i < sizeof id.internal && 2 * i + 1 < text.size(); ++i)
    id.internal[i] = static_cast<char>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  return id;
}

// One collective on this rank: inputs uploaded to `send`, the result downloaded from `recv` and
// checked. `send`/`recv` are device memory (the arena's or cuMemAlloc's).
void run_and_check(const CudaDriver& d, cccComm_t comm, CUstream stream, const CollectiveCall& shape, int rank,
                   CUdeviceptr send, CUdeviceptr recv, const std::string& what) {
  const uint64_t es = data_type_size(shape.dtype), sb = send_bytes(shape, kRanks), rb = recv_bytes(shape, kRanks);
  std::vector<std::vector<unsigned char>> inputs(kRanks, std::vector<unsigned char>(sb));
  std::vector<const void*> input_ptrs;
  for (int r = 0; r < kRanks; ++r) {
    fill_input(shape.dtype, r, 7, sb / es, inputs[r].data());
    input_ptrs.push_back(inputs[r].data());
  }
  std::vector<unsigned char> out(rb);
  poison(shape.dtype, rb / es, out.data());
  d.check(d.cuMemcpyHtoD(recv, out.data(), rb), "cuMemcpyHtoD");
  d.check(d.cuMemcpyHtoD(send, inputs[rank].data(), sb), "cuMemcpyHtoD");
  // From pageable memory the copies may still be in flight when they return, and `stream` does
  // not wait for the legacy default stream they run on.
  d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  auto* s = reinterpret_cast<const void*>(send);
  auto* r = reinterpret_cast<void*>(recv);
  cccResult_t result = shape.collective == Collective::AllReduce
                           ? cccAllReduce(s, r, shape.count, cccFloat32, cccSum, comm, stream)
                           : cccAllGather(s, r, shape.count, cccInt32, comm, stream);
  if (result == cccSuccess) result = cccCommSynchronize(comm);
  ASSERT_EQ(result, cccSuccess) << what << ": " << cccGetErrorString(result) << ": " << cccGetLastError(comm);
  d.check(d.cuMemcpyDtoH(out.data(), recv, rb), "cuMemcpyDtoH");
  EXPECT_EQ(count_wrong(shape, kRanks, rank, input_ptrs, out.data()), 0u) << what;
}

// One rank's part, in a process of its own.
TEST(CudaMultiProcess, Rank) {
  const char* id_text = std::getenv("CCC_TEST_RANK_ID");
  if (id_text == nullptr) GTEST_SKIP() << "a rank of CudaMultiProcess.TwoRanksOnOneDevice, which starts it";
  const int rank = std::atoi(std::getenv("CCC_TEST_RANK"));
  const CudaDriver& d = CudaDriver::get();
  // As a framework's rank would: its device's context current (cudaSetDevice) before the init.
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  d.check(d.cuDeviceGet(&dev, 0), "cuDeviceGet");
  d.check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  d.check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.backend = "cuda";
  config.timeoutSeconds = kTimeoutSeconds;
  cccComm_t comm = nullptr;
  const cccResult_t init = cccCommInitRankConfig(&comm, kRanks, unhex(id_text), rank, &config);
  ASSERT_EQ(init, cccSuccess) << cccGetErrorString(init) << ": " << cccGetLastError(nullptr);
  CUstream stream = nullptr;
  d.check(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  const uint64_t count = (1 << 20) + 3;  // not a whole number of tiles
  const CollectiveCall allreduce{Collective::AllReduce, count, DataType::F32, ReduceOp::Sum, -1, {}, {}};
  const CollectiveCall allgather{Collective::AllGather, 4099, DataType::I32, ReduceOp::Sum, -1, {}, {}};
  for (const CollectiveCall& shape : {allreduce, allgather}) {
    const uint64_t sb = send_bytes(shape, kRanks), rb = recv_bytes(shape, kRanks);
    const std::string name = collective_name(shape.collective);
    // In the arena: the peer reads these in place.
    void* arena_send = nullptr;
    void* arena_recv = nullptr;
    ASSERT_EQ(cccCommMemAlloc(comm, &arena_send, sb), cccSuccess) << cccGetLastError(comm);
    ASSERT_EQ(cccCommMemAlloc(comm, &arena_recv, rb), cccSuccess) << cccGetLastError(comm);
    run_and_check(d, comm, stream, shape, rank, reinterpret_cast<CUdeviceptr>(arena_send),
                  reinterpret_cast<CUdeviceptr>(arena_recv), name + " on arena memory");
    EXPECT_EQ(cccCommMemFree(comm, arena_send), cccSuccess);
    EXPECT_EQ(cccCommMemFree(comm, arena_recv), cccSuccess);
    // Outside it: staged in and out on the stream.
    CUdeviceptr send = 0, recv = 0;
    d.check(d.cuMemAlloc(&send, sb), "cuMemAlloc");
    d.check(d.cuMemAlloc(&recv, rb), "cuMemAlloc");
    run_and_check(d, comm, stream, shape, rank, send, recv, name + " on cuMemAlloc memory (staged)");
    if (shape.collective == Collective::AllReduce)  // and in place, staged as one region
      run_and_check(d, comm, stream, shape, rank, recv, recv, name + " in place on cuMemAlloc memory (staged)");
    // Registered (cccCommRegister, collective): used in place, the peer reading it through CUDA
    // IPC at an address of its own, translated by its kernel's registry.
    void* send_handle = nullptr;
    void* recv_handle = nullptr;
    ASSERT_EQ(cccCommRegister(comm, reinterpret_cast<void*>(send), sb, &send_handle), cccSuccess) << cccGetLastError(comm);
    ASSERT_EQ(cccCommRegister(comm, reinterpret_cast<void*>(recv), rb, &recv_handle), cccSuccess) << cccGetLastError(comm);
    run_and_check(d, comm, stream, shape, rank, send, recv, name + " on registered cuMemAlloc memory (in place)");
    EXPECT_EQ(cccCommDeregister(comm, recv_handle), cccSuccess) << cccGetLastError(comm);
    EXPECT_EQ(cccCommDeregister(comm, send_handle), cccSuccess) << cccGetLastError(comm);
    d.cuMemFree(send);
    d.cuMemFree(recv);
  }
  cccResult_t async = cccInternalError;
  EXPECT_EQ(cccCommGetAsyncError(comm, &async), cccSuccess);
  EXPECT_EQ(async, cccSuccess);
  EXPECT_EQ(cccCommDestroy(comm), cccSuccess);
  d.cuStreamDestroy(stream);
  d.cuDevicePrimaryCtxRelease(dev);
}

TEST(CudaMultiProcess, TwoRanksOnOneDevice) {
  if (std::getenv("CCC_TEST_RANK_ID") != nullptr) GTEST_SKIP() << "inside a rank";
  try {
    CudaDriver::get();
  } catch (const NoCudaDevice& e) {
    GTEST_SKIP() << e.what();
  }
  cccUniqueId id{};
  ASSERT_EQ(cccGetUniqueId(&id), cccSuccess) << cccGetLastError(nullptr);
  test::run_rank_processes(
      kRanks, "CudaMultiProcess.Rank",
      [&](int r) { return std::vector<std::string>{"CCC_TEST_RANK_ID=" + hex(id), "CCC_TEST_RANK=" + std::to_string(r)}; },
      std::chrono::seconds(220), "two ranks on one device");
}

}  // namespace
