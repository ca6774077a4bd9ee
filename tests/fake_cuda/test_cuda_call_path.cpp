// The CUDA backend's sequence of driver calls, checked against a recording stand-in for libcuda
// (fake_libcuda.cpp, which this executable puts in $CCC_LIBCUDA before the driver is opened). Kernels are
// compiled by NVRTC for real and recorded, never run; what this checks is where and how they are
// enqueued: each rank on its own device and stream when it calls, nothing synchronous while a
// stream captures, the caller's context restored, virtual ranks as one cooperative grid. The GPU
// check (docs/runtime.md) is what runs them.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../unit/rank_processes.h"
#include "ccc/ccc.h"
#include "ccc/errors.h"
#include "ccc/communicator.h"
#include "content_hash.h"
#include "cuda_driver.h"
#include "cuda_topology.h"
#include "schedule_menu.h"
#include "select.h"
#include "shipped_schedules.h"
#include "ccc_abi.h"

#include <fmt/format.h>

extern char** environ;

using namespace ccc;

namespace ccc {
void PrintTo(const KernelChoice& c, std::ostream* os) {
  *os << fmt::format("{}, protocol {}, {} channels, {} B tiles", c.algorithm, protocol_name(c.protocol), c.channels,
                     c.tile_bytes);
}
}  // namespace ccc

namespace {

// The fake's controls. The first use points $CCC_LIBCUDA at the fake, before anything opens
// the driver (CudaDriver::get() reads it once).
struct Fake {
  char* (*take_log)() = nullptr;
  void (*set_capturing)(CUstream, int) = nullptr;
  void (*set_blocks_per_sm)(int) = nullptr;
  void (*last_launch)(ccc_launch_args*) = nullptr;
  void (*set_compute_capability)(int) = nullptr;
};

const Fake& fake() {
  static const Fake f = [] {
    Fake f;
    setenv("CCC_LIBCUDA", CCC_FAKE_LIBCUDA, 1);
    void* lib = dlopen(CCC_FAKE_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return f;
    f.take_log = reinterpret_cast<char* (*)()>(dlsym(lib, "fake_cuda_take_log"));
    f.set_capturing = reinterpret_cast<void (*)(CUstream, int)>(dlsym(lib, "fake_cuda_set_capturing"));
    f.set_blocks_per_sm = reinterpret_cast<void (*)(int)>(dlsym(lib, "fake_cuda_set_blocks_per_sm"));
    f.last_launch = reinterpret_cast<void (*)(ccc_launch_args*)>(dlsym(lib, "fake_cuda_last_launch"));
    f.set_compute_capability = reinterpret_cast<void (*)(int)>(dlsym(lib, "fake_cuda_set_compute_capability"));
    return f;
  }();
  return f;
}

// The driver calls recorded since the last take, one per element.
std::vector<std::string> take_log() {
  char* text = fake().take_log();
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::free(text);
  return lines;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::vector<std::string> calls_named(const std::vector<std::string>& log, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& line : log)
    if (starts_with(line, name + " ")) out.push_back(line);
  return out;
}

// The staging copies and launches of a log, in order, by name.
std::vector<std::string> staging_and_launches(const std::vector<std::string>& log) {
  std::vector<std::string> out;
  for (const std::string& line : log)
    if (starts_with(line, "cuMemcpyAsync") || starts_with(line, "cuLaunchKernel")) out.push_back(line.substr(0, line.find(' ')));
  return out;
}


// Every kernel launch of any kind in `log`.
std::vector<std::string> kernel_launches(const std::vector<std::string>& log) {
  std::vector<std::string> out;
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel"})
    for (const std::string& line : calls_named(log, name)) out.push_back(line);
  return out;
}

// Calls that block the host or are illegal while a stream captures a graph (CUDA Programming
// Guide, "Prohibited and Unhandled Operations" of stream capture).
std::vector<std::string> synchronous_calls(const std::vector<std::string>& log) {
  std::vector<std::string> out;
  for (const char* name : {"cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyHtoD",
                           "cuMemcpyDtoH", "cuMemsetD8", "cuMemAlloc"})
    for (const std::string& line : calls_named(log, name)) out.push_back(line);
  return out;
}

CUstream stream(int i) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(0x1000 * (i + 1))); }

CUcontext primary_context(int device) {
  const CudaDriver& d = CudaDriver::get();
  CUcontext ctx = nullptr;
  d.check(d.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
  return ctx;
}

CUcontext current_context() {
  CUcontext ctx = nullptr;
  CudaDriver::get().check(CudaDriver::get().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  return ctx;
}

// What device_alloc handed out in the running test; the fixture frees it (the driver library is
// closed at exit, before LeakSanitizer could see the fake's own records of it).
std::vector<CUdeviceptr>& test_allocations() {
  static std::vector<CUdeviceptr> allocations;
  return allocations;
}

// `bytes` of (fake) device memory on `device`, freed when the test ends.
void* device_alloc(int device, size_t bytes) {
  const CudaDriver& d = CudaDriver::get();
  d.check(d.cuCtxSetCurrent(primary_context(device)), "cuCtxSetCurrent");
  CUdeviceptr p = 0;
  d.check(d.cuMemAlloc(&p, bytes), "cuMemAlloc");
  test_allocations().push_back(p);
  return reinterpret_cast<void*>(p);
}

class CudaCallPath : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(fake().take_log, nullptr) << "cannot load " << CCC_FAKE_LIBCUDA << ": " << dlerror();
    CudaDriver::get();
    take_log();
  }
  void TearDown() override {
    for (CUdeviceptr p : test_allocations()) EXPECT_EQ(CudaDriver::get().cuMemFree(p), CUDA_SUCCESS);
    test_allocations().clear();
  }
};

constexpr size_t kCount = 4096;

TEST_F(CudaCallPath, EachRankIsEnqueuedOnItsDeviceAndStreamWhenItCalls) {
  const int devlist[2] = {0, 1};
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAll(comms, 2, devlist), cccSuccess) << cccGetLastError(nullptr);
  void* buf[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  for (int r = 0; r < 2; ++r)  // the first call compiles and loads the kernel
    ASSERT_EQ(cccAllReduce(buf[r], buf[r], kCount, cccFloat32, cccSum, comms[r], stream(r)), cccSuccess)
        << cccGetLastError(nullptr);
  // Two devices: the kernel syncs in .sys scope, loaded on each device, and eagerly: with lazy
  // loading its first launch could wait for the kernels already running (the peer's rank).
  const std::vector<std::string> first = take_log();
  const std::vector<std::string> loads = calls_named(first, "cuModuleGetFunction");
  ASSERT_EQ(loads.size(), 2u);
  for (const std::string& load : loads) EXPECT_FALSE(load.ends_with("_gpu")) << load;
  EXPECT_EQ(calls_named(first, "cuFuncLoad"), (std::vector<std::string>{"cuFuncLoad dev=0 function", "cuFuncLoad dev=1 function"}));
  const auto position = [&](const std::string& name) {
    return std::find_if(first.begin(), first.end(), [&](const std::string& c) { return c.rfind(name, 0) == 0; });
  };
  EXPECT_LT(position("cuFuncLoad"), position("cuLaunchKernelEx")) << testing::PrintToString(first);

  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cccAllReduce(buf[r], buf[r], kCount, cccFloat32, cccSum, comms[r], stream(r)), cccSuccess);
    const std::vector<std::string> log = take_log();
    // The fake devices are sm_90: programmatic dependent launch (see ProgrammaticDependentLaunch...).
    const std::vector<std::string> launches = calls_named(log, "cuLaunchKernelEx");
    ASSERT_EQ(kernel_launches(log).size(), 1u) << testing::PrintToString(log);
    ASSERT_EQ(launches.size(), 1u) << testing::PrintToString(log);
    const std::string where = "cuLaunchKernelEx dev=" + std::to_string(r) + " stream=";
    EXPECT_TRUE(starts_with(launches[0], where)) << launches[0];
    EXPECT_NE(launches[0].find(" rank=" + std::to_string(r)), std::string::npos) << launches[0];
    std::ostringstream s;
    s << static_cast<void*>(stream(r));
    EXPECT_NE(launches[0].find("stream=" + s.str()), std::string::npos) << launches[0];
    EXPECT_TRUE(synchronous_calls(log).empty()) << "on the call path: " << testing::PrintToString(log);
  }
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// An allreduce + RMSNorm kernel's blocks (its channels, then its norm blocks) wait for each other
// (Progress::meet_own_channels), so a rank's own grid must fit the device at once: its channels
// are checked against the driver's occupancy for the kernel before anything is queued, as
// virtual ranks' cooperative grids are, and its norm blocks take at most what is left.
TEST_F(CudaCallPath, ARanksRmsNormGridMustFitTheDeviceAtOnce) {
  const int devlist[2] = {0, 1};
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAll(comms, 2, devlist), cccSuccess) << cccGetLastError(nullptr);
  const size_t hidden = 64;
  void* buf[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  void* residual[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  void* weight[2] = {device_alloc(0, hidden * 4), device_alloc(1, hidden * 4)};
  auto call = [&](int r) {
    return cccAllReduceResidualRmsNorm(buf[r], residual[r], weight[r], buf[r], nullptr, kCount / hidden * hidden,
                                       hidden, 1e-6f, cccFloat32, cccSum, comms[r], stream(r));
  };
  for (int r = 0; r < 2; ++r) ASSERT_EQ(call(r), cccSuccess) << cccGetLastError(nullptr);
  // 64 rows: the channels, then a norm block for each further row (rmsnorm_rank_blocks), 64 in all.
  const std::vector<std::string> launches = kernel_launches(take_log());
  ASSERT_EQ(launches.size(), 2u);
  for (const std::string& l : launches) EXPECT_NE(l.find(" grid=64 "), std::string::npos) << l;
  fake().set_blocks_per_sm(0);
  EXPECT_EQ(call(0), cccInvalidArgument);
  EXPECT_NE(std::string(cccGetLastError(comms[0])).find("channels must be co-resident; device 0 holds 0"),
            std::string::npos)
      << cccGetLastError(comms[0]);
  EXPECT_TRUE(kernel_launches(take_log()).empty());
  fake().set_blocks_per_sm(4);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommAbort(c), cccSuccess);
}

// Ranks' threads that need the same new kernel at once build it once: one thread compiles and
// loads it (with the communicator's lock released), the others wait for that build instead of
// loading copies of their own, whose loads could wait on a device for a kernel that waits for
// them. A cache of the test's own, so the kernel is cold.
TEST_F(CudaCallPath, ThreadsThatNeedTheSameNewKernelBuildItOnce) {
  JitCache cache{std::filesystem::path()};
  CommOptions options;
  options.cache = &cache;
  Communicator comm = Communicator::cuda({0, 1}, options);
  void* buf[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  CollectiveCall call;
  call.count = kCount;
  take_log();
  std::latch start(2);
  std::vector<std::thread> ranks;
  std::string errors[2];
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      start.arrive_and_wait();
      try {
        comm.run_rank(call, r, buf[r], buf[r], stream(r));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(errors[0] + errors[1], "");
  const std::vector<std::string> log = take_log();
  EXPECT_EQ(calls_named(log, "cuModuleLoadData").size(), 2u) << "once per device: " << testing::PrintToString(log);
  EXPECT_TRUE(calls_named(log, "cuModuleUnload").empty()) << testing::PrintToString(log);
  EXPECT_EQ(cache.builds(), 1u);
  EXPECT_EQ(kernel_launches(log).size(), 2u);
}

TEST_F(CudaCallPath, TheCallersContextIsRestored) {
  const int devlist[2] = {0, 1};
  cccComm_t comms[2];
  const CudaDriver& d = CudaDriver::get();
  for (CUcontext mine : {static_cast<CUcontext>(nullptr), primary_context(1)}) {
    ASSERT_EQ(d.cuCtxSetCurrent(mine), CUDA_SUCCESS);
    ASSERT_EQ(cccCommInitAll(comms, 2, devlist), cccSuccess) << cccGetLastError(nullptr);
    EXPECT_EQ(current_context(), mine) << "cccCommInitAll";
    void* buf[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
    ASSERT_EQ(d.cuCtxSetCurrent(mine), CUDA_SUCCESS);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(cccAllReduce(buf[r], buf[r], kCount, cccFloat32, cccSum, comms[r], stream(r)), cccSuccess);
      EXPECT_EQ(current_context(), mine) << "cccAllReduce of rank " << r;
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << cccGetLastError(nullptr);
      EXPECT_EQ(current_context(), mine) << "cccCommSynchronize of rank " << r;
    }
    for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
    EXPECT_EQ(current_context(), mine) << "cccCommDestroy";
  }
}

TEST_F(CudaCallPath, NothingSynchronousWhileAStreamCaptures) {
  auto comm = Communicator::cuda({0, 1});
  std::vector<void*> buf = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  const std::vector<const void*> send(buf.begin(), buf.end());
  const std::vector<void*> streams = {stream(0), stream(1)};
  comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);  // compiles and loads
  take_log();
  for (void* s : streams) fake().set_capturing(static_cast<CUstream>(s), 1);
  for (int i = 0; i < 3; ++i) comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
  for (void* s : streams) fake().set_capturing(static_cast<CUstream>(s), 0);
  const std::vector<std::string> log = take_log();
  // Captured launches go without programmatic dependent launch (docs/runtime.md).
  EXPECT_EQ(calls_named(log, "cuLaunchKernel").size(), 6u) << testing::PrintToString(log);
  EXPECT_EQ(kernel_launches(log).size(), 6u) << testing::PrintToString(log);
  EXPECT_TRUE(synchronous_calls(log).empty()) << testing::PrintToString(log);
}

// Programmatic dependent launch (docs/runtime.md): an eager launch on an sm_90 device goes through
// cuLaunchKernelEx with programmatic stream serialization allowed; on sm_80, with $CCC_PDL=0, and
// while the stream captures, through cuLaunchKernel as before. A $CCC_PDL other than 0 or 1 is
// refused when the communicator is made.
TEST_F(CudaCallPath, ProgrammaticDependentLaunchWhereTheDeviceHasIt) {
  ASSERT_NE(fake().set_compute_capability, nullptr);
  std::vector<void*> buf = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  const std::vector<const void*> send(buf.begin(), buf.end());
  const std::vector<void*> streams = {stream(0), stream(1)};
  // The launches of one all_reduce on a communicator made under `cc` and $CCC_PDL=`env` (null: unset).
  auto launches = [&](int cc, const char* env, bool capture) {
    fake().set_compute_capability(cc);
    if (env != nullptr) setenv("CCC_PDL", env, 1);
    auto comm = Communicator::cuda({0, 1});
    unsetenv("CCC_PDL");
    fake().set_compute_capability(90);
    comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);  // compiles and loads
    take_log();
    for (void* s : streams) fake().set_capturing(static_cast<CUstream>(s), capture ? 1 : 0);
    comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
    for (void* s : streams) fake().set_capturing(static_cast<CUstream>(s), 0);
    return kernel_launches(take_log());
  };
  for (const char* env : {static_cast<const char*>(nullptr), "1", ""}) {
    const std::vector<std::string> eager = launches(90, env, false);
    ASSERT_EQ(eager.size(), 2u) << testing::PrintToString(eager);
    for (const std::string& line : eager) {
      EXPECT_TRUE(starts_with(line, "cuLaunchKernelEx ")) << line;
      EXPECT_TRUE(line.ends_with(" programmatic=1")) << line;
    }
  }
  for (const auto& [cc, env, capture] : {std::tuple{80, static_cast<const char*>(nullptr), false},
                                         std::tuple{90, "0", false}, std::tuple{90, static_cast<const char*>(nullptr), true}}) {
    const std::vector<std::string> plain = launches(cc, env, capture);
    EXPECT_EQ(calls_named(plain, "cuLaunchKernel").size(), 2u)
        << "sm_" << cc << " CCC_PDL=" << (env ? env : "(unset)") << (capture ? " capturing" : "") << ": "
        << testing::PrintToString(plain);
    EXPECT_EQ(plain.size(), 2u) << testing::PrintToString(plain);
  }
  setenv("CCC_PDL", "yes", 1);
  try {
    auto comm = Communicator::cuda({0, 1});
    ADD_FAILURE() << "CCC_PDL=yes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("CCC_PDL=yes"), std::string::npos) << e.what();
  }
  unsetenv("CCC_PDL");
}

TEST_F(CudaCallPath, VirtualRanksAreOneCooperativeGrid) {
  auto comm = Communicator::cuda_virtual(0, 4);
  std::vector<void*> buf;
  for (int r = 0; r < 4; ++r) buf.push_back(device_alloc(0, kCount * 4));
  const std::vector<const void*> send(buf.begin(), buf.end());
  const std::vector<void*> streams(4, stream(0));
  comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
  // Every rank on one device: the kernel syncs in .gpu scope (KernelOptions::one_device).
  std::vector<std::string> log = take_log();
  const std::vector<std::string> loads = calls_named(log, "cuModuleGetFunction");
  ASSERT_EQ(loads.size(), 1u) << testing::PrintToString(log);
  EXPECT_TRUE(loads[0].ends_with("_gpu")) << loads[0];

  comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
  log = take_log();
  const std::vector<std::string> launches = calls_named(log, "cuLaunchCooperativeKernel");
  ASSERT_EQ(launches.size(), 1u) << testing::PrintToString(log);
  EXPECT_EQ(kernel_launches(log).size(), 1u) << "cooperative, and nothing else: " << testing::PrintToString(log);
  EXPECT_NE(launches[0].find(" rank=-1"), std::string::npos) << launches[0];
  EXPECT_TRUE(synchronous_calls(log).empty()) << "same buffers again: " << testing::PrintToString(log);

  // A grid the device cannot hold at once is refused before anything is queued.
  fake().set_blocks_per_sm(0);
  try {
    comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("co-resident blocks; device 0 holds 0"), std::string::npos) << e.what();
  }
  fake().set_blocks_per_sm(4);
  log = take_log();
  EXPECT_TRUE(calls_named(log, "cuLaunchCooperativeKernel").empty()) << testing::PrintToString(log);

  // New buffers while capturing: the immutable table for them cannot be made; say so.
  std::vector<void*> other;
  for (int r = 0; r < 4; ++r) other.push_back(device_alloc(0, kCount * 4));
  take_log();
  fake().set_capturing(stream(0), 1);
  try {
    comm.all_reduce(std::vector<const void*>(other.begin(), other.end()), other, kCount, DataType::F32,
                    ReduceOp::Sum, streams);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidUsage);
    EXPECT_NE(std::string(e.what()).find("before capturing"), std::string::npos) << e.what();
  }
  fake().set_capturing(stream(0), 0);
  EXPECT_TRUE(synchronous_calls(take_log()).empty());
}

// Virtual ranks take as many channels as the device holds blocks of their kernel at once (the
// driver's occupancy for it), instead of refusing the selection's choice: 64 ranks x 4 channels
// on a device that holds 132 blocks run with 2.
TEST_F(CudaCallPath, VirtualRanksTakeAsManyChannelsAsTheDeviceHolds) {
  constexpr int n = 64;
  auto comm = Communicator::cuda_virtual(0, n);
  std::vector<void*> buf;
  for (int r = 0; r < n; ++r) buf.push_back(device_alloc(0, kCount * 4));
  const std::vector<const void*> send(buf.begin(), buf.end());
  const std::vector<void*> streams(n, stream(0));
  fake().set_blocks_per_sm(1);
  comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
  fake().set_blocks_per_sm(4);
  const std::vector<std::string> log = take_log();
  const std::vector<std::string> launches = calls_named(log, "cuLaunchCooperativeKernel");
  ASSERT_EQ(launches.size(), 1u) << testing::PrintToString(log);
  EXPECT_NE(launches[0].find(" grid=128 "), std::string::npos) << launches[0];
}

}  // namespace

// NCCL-legal NULLs (send off the root of a broadcast, recv off the root of a reduce) reach the
// kernel as device memory: the runtime's stand-in, never NULL or host memory.
TEST_F(CudaCallPath, NullBuffersWhereNcclAllowsThemBecomeDeviceMemory) {
  const int devlist[2] = {0, 1};
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAll(comms, 2, devlist), cccSuccess) << cccGetLastError(nullptr);
  void* in[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  void* out[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  take_log();
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(cccBroadcast(r == 0 ? in[r] : nullptr, out[r], kCount, cccFloat32, 0, comms[r], stream(r)), cccSuccess)
        << cccGetLastError(nullptr);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(cccReduce(in[r], r == 0 ? out[r] : nullptr, kCount, cccFloat32, cccSum, 0, comms[r], stream(r)),
              cccSuccess)
        << cccGetLastError(nullptr);
  const std::vector<std::string> log = take_log();
  const std::vector<std::string> launches = kernel_launches(log);
  ASSERT_EQ(launches.size(), 4u) << testing::PrintToString(log);
  for (const std::string& launch : launches)
    EXPECT_NE(launch.find(" input=device output=device"), std::string::npos) << launch;
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

namespace {

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// A cached cubin whose header and checksum are right but which the driver refuses is rebuilt and
// renamed over the entry (it failed every run, never rebuilt).
TEST_F(CudaCallPath, ACachedCubinThatDoesNotLoadIsRebuilt) {
  std::string pattern = (std::filesystem::temp_directory_path() / "ccc-fake-cache-XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const std::filesystem::path dir = pattern;
  void* buf[2] = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  const std::vector<const void*> send(buf, buf + 2);
  const std::vector<void*> recv(buf, buf + 2);
  auto run_once = [&] {
    JitCache cache(dir);
    CommOptions o;
    o.cache = &cache;
    Communicator comm = Communicator::cuda({0, 1}, o);
    comm.all_reduce(send, recv, kCount, DataType::F32, ReduceOp::Sum);
  };
  run_once();
  std::map<std::filesystem::path, std::string> good;
  for (const auto& e : std::filesystem::directory_iterator(dir)) good[e.path()] = read_bytes(e.path());
  ASSERT_FALSE(good.empty());
  const std::string junk = "not a cubin";
  std::string header = "CCCJIT1\n";
  for (uint64_t v : {uint64_t{junk.size()}, checksum64(junk)})
    for (int i = 0; i < 8; ++i) header.push_back(static_cast<char>(v >> (8 * i)));
  for (const auto& [path, bytes] : good) std::ofstream(path, std::ios::binary | std::ios::trunc) << header << junk;

  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(run_once());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("does not load"), std::string::npos) << err;
  for (const auto& [path, bytes] : good) EXPECT_EQ(read_bytes(path), bytes) << path << " was not replaced";
  std::filesystem::remove_all(dir);
}

// Tracing on CUDA (docs/tracing.md): a traced call allocates and zeroes its records (the one
// synchronous exception, documented) and reads nothing back; the records come back, and are
// freed, at the synchronize. A capturing stream is refused before anything is launched.
TEST_F(CudaCallPath, TracedCallsReadTheirRecordsBackAtTheSynchronize) {
  CommOptions options;
  options.trace_file = (std::filesystem::temp_directory_path() / "ccc-fake-cuda-trace.json").string();
  options.channels = 2;
  auto comm = Communicator::cuda({0, 1}, options);
  std::vector<void*> buf = {device_alloc(0, kCount * 4), device_alloc(1, kCount * 4)};
  const std::vector<const void*> send(buf.begin(), buf.end());
  const std::vector<void*> streams = {stream(0), stream(1)};
  comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);  // compiles and loads
  comm.synchronize();
  take_log();

  comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
  std::vector<std::string> log = take_log();
  const std::string records = std::to_string(2 * sizeof(ccc_trace_channel));
  EXPECT_EQ(kernel_launches(log).size(), 2u) << testing::PrintToString(log);
  EXPECT_EQ(calls_named(log, "cuMemAlloc").size(), 2u) << testing::PrintToString(log);
  EXPECT_EQ(calls_named(log, "cuMemsetD8").size(), 2u) << testing::PrintToString(log);
  for (const std::string& c : calls_named(log, "cuMemsetD8")) EXPECT_NE(c.find(records), std::string::npos) << c;
  EXPECT_TRUE(calls_named(log, "cuMemcpyDtoH").empty()) << "read back on the call path: " << testing::PrintToString(log);

  comm.synchronize();
  log = take_log();
  const std::vector<std::string> copies = calls_named(log, "cuMemcpyDtoH");  // error words, then records
  EXPECT_EQ(std::count_if(copies.begin(), copies.end(), [&](const std::string& c) { return c.ends_with(" " + records); }), 2)
      << testing::PrintToString(log);

  for (void* s : streams) fake().set_capturing(static_cast<CUstream>(s), 1);
  try {
    comm.all_reduce(send, buf, kCount, DataType::F32, ReduceOp::Sum, streams);
    ADD_FAILURE() << "a traced call was captured";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidUsage);
    EXPECT_NE(std::string(e.what()).find("graph capture"), std::string::npos) << e.what();
  }
  for (void* s : streams) fake().set_capturing(static_cast<CUstream>(s), 0);
  EXPECT_TRUE(kernel_launches(take_log()).empty());
  comm.destroy();
  std::filesystem::remove(options.trace_file);
}

namespace {

// A one-rank multi-process CUDA communicator (its root and its only rank in this process): the
// arena's join, then what a call on memory outside the arena enqueues.
TEST_F(CudaCallPath, AcrossProcessesBuffersOutsideTheArenaAreStagedOnTheCallersStream) {
  const UniqueId id = Communicator::unique_id();
  const CudaDriver& d = CudaDriver::get();
  ASSERT_EQ(d.cuCtxSetCurrent(primary_context(1)), CUDA_SUCCESS);  // the rank's device: the current one
  RankOptions rank_options;
  rank_options.arena_bytes = 1 << 20;
  auto comm = Communicator::cuda_rank(id, 1, 0, {}, rank_options);
  std::vector<std::string> log = take_log();
  const std::vector<std::string> created = calls_named(log, "cuMemCreate");
  ASSERT_EQ(created.size(), 1u) << testing::PrintToString(log);
  EXPECT_NE(created[0].find("device=1"), std::string::npos) << created[0];
  EXPECT_EQ(calls_named(log, "cuMemAddressReserve"), std::vector<std::string>{"cuMemAddressReserve dev=1 at the hint"});
  EXPECT_EQ(calls_named(log, "cuMemSetAccess").size(), 1u) << testing::PrintToString(log);

  void* user = device_alloc(1, kCount * 4);
  void* arena = comm.mem_alloc(kCount * 4);
  const CUstream s = stream(0);
  comm.run_rank({Collective::AllReduce, kCount, DataType::F32, ReduceOp::Sum, -1, {}, {}}, 0, user, user, s);
  take_log();  // the first call compiles and loads
  fake().set_capturing(s, 1);  // scratch comes from the arena's heap: nothing to refuse
  comm.run_rank({Collective::AllReduce, kCount, DataType::F32, ReduceOp::Sum, -1, {}, {}}, 0, user, user, s);
  comm.run_rank({Collective::AllReduce, kCount, DataType::F32, ReduceOp::Sum, -1, {}, {}}, 0, arena, arena, s);
  fake().set_capturing(s, 0);
  log = take_log();
  // Captured: without programmatic dependent launch (docs/runtime.md).
  EXPECT_EQ(staging_and_launches(log), (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernel", "cuMemcpyAsync", "cuLaunchKernel"}))
      << "staged in, run, staged out; arena memory in place: " << testing::PrintToString(log);
  std::ostringstream name;
  name << static_cast<void*>(s);
  for (const std::string& line : calls_named(log, "cuMemcpyAsync"))
    EXPECT_NE(line.find("bytes=" + std::to_string(kCount * 4) + " stream=" + name.str()), std::string::npos) << line;
  EXPECT_TRUE(synchronous_calls(log).empty()) << testing::PrintToString(log);

  EXPECT_EQ(comm.async_error(0), "");
  comm.abort_rank(0);  // on a stream of its own: not behind the kernels
  log = take_log();
  const std::vector<std::string> aborts = calls_named(log, "cuMemsetD32Async");
  ASSERT_EQ(aborts.size(), 1u) << testing::PrintToString(log);
  EXPECT_EQ(aborts[0].find("stream=" + name.str()), std::string::npos) << aborts[0];
  EXPECT_NE(comm.async_error(0).find("aborted"), std::string::npos) << comm.async_error(0);
  try {
    comm.synchronize();
    ADD_FAILURE() << "an aborted rank's synchronize fails";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Remote);
    EXPECT_NE(std::string(e.what()).find("stays failed"), std::string::npos) << e.what();
  }
  comm.mem_free(arena);
  EXPECT_THROW(comm.mem_free(arena), Error) << "freed twice";
}

}  // namespace

// ---- cccCommRegister (docs/runtime.md, "Buffers.") ----

namespace {

// The registry table the last launch's rank reads from now on: its state's pointer, which a
// registration switches (the fake's device memory is host memory).
const ccc_registry* launched_registry() {
  ccc_launch_args args{};
  fake().last_launch(&args);
  return args.ranks == nullptr ? nullptr : args.ranks[args.rank].registry;
}

ccc_launch_args last_launch() {
  ccc_launch_args args{};
  fake().last_launch(&args);
  return args;
}

template <typename Body>
void expect_error(ErrorKind kind, const std::string& text, Body&& body) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one saying \"" << text << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// A multi-process CUDA communicator of one rank (its root in this process) on device 0, an
// allreduce of kCount floats and a user buffer of twice its size.
struct OneRank {
  Communicator comm;
  CollectiveCall call;
  std::byte* user;
  CUstream stream;
};

OneRank one_rank() {
  const CudaDriver& d = CudaDriver::get();
  d.check(d.cuCtxSetCurrent(primary_context(0)), "cuCtxSetCurrent");
  RankOptions rank_options;
  rank_options.arena_bytes = 1 << 20;
  return {Communicator::cuda_rank(Communicator::unique_id(), 1, 0, {}, rank_options),
          {Collective::AllReduce, kCount, DataType::F32, ReduceOp::Sum, -1, {}, {}},
          static_cast<std::byte*>(device_alloc(0, 2 * kCount * 4)), stream(0)};
}

// Memory a captured graph launches with stays its own: a small staged allreduce captured, a
// larger one run eagerly (the scratch grows), a synchronize, then cccCommMemAlloc of the same
// size. That allocation used to be the captured scratch block itself, which the replayed graph
// would stage into.
TEST_F(CudaCallPath, AcrossProcessesScratchACapturedGraphUsesIsNeverHandedOutAgain) {
  OneRank r = one_rank();
  r.comm.run_rank(r.call, 0, r.user, r.user, r.stream);  // compiles, loads, sizes the scratch
  CollectiveCall larger = r.call;
  larger.count = 2 * kCount;
  fake().set_capturing(r.stream, 1);
  r.comm.run_rank(r.call, 0, r.user, r.user, r.stream);
  fake().set_capturing(r.stream, 0);
  const auto* captured = static_cast<const std::byte*>(last_launch().own.scratch);
  ASSERT_NE(captured, nullptr);
  r.comm.run_rank(larger, 0, r.user, r.user, r.stream);  // a new, larger block
  ASSERT_NE(static_cast<const std::byte*>(last_launch().own.scratch), captured);
  r.comm.synchronize();
  auto* mine = static_cast<std::byte*>(r.comm.mem_alloc(kCount * 4));
  EXPECT_TRUE(mine + kCount * 4 <= captured || mine >= captured + kCount * 4)
      << "cccCommMemAlloc handed out the scratch a captured graph stages into";
  r.comm.mem_free(mine);
}

// One rank (its root in this process): the registry the launches read, in-place use of a
// registered buffer, and the errors that need no peer.
TEST_F(CudaCallPath, AcrossProcessesARegisteredBufferIsUsedInPlaceAndUnregisteredOnesStillStaged) {
  OneRank one = one_rank();
  Communicator& comm = one.comm;
  const CollectiveCall& call = one.call;
  std::byte* const user = one.user;
  const CUstream s = one.stream;
  comm.run_rank(call, 0, user, user, s);  // compiles and loads
  const ccc_registry* registry = launched_registry();
  ASSERT_NE(registry, nullptr) << "a multi-process rank reads a registry";
  EXPECT_EQ(registry->count, 0u);
  EXPECT_GT(registry->shared_bytes, 0u) << "the arena is the shared range";
  take_log();

  void* handle = comm.register_buffer(user, kCount * 4);
  ASSERT_NE(handle, nullptr);
  comm.run_rank(call, 0, user, user, s);
  std::vector<std::string> log = take_log();
  EXPECT_EQ(staging_and_launches(log), std::vector<std::string>{"cuLaunchKernelEx"}) << testing::PrintToString(log);
  EXPECT_EQ(last_launch().own.input, user) << "the kernel reads the registered buffer itself";
  EXPECT_EQ(last_launch().own.output, user);
  // Past the registered range (the allocation's second half): staged as before.
  comm.run_rank(call, 0, user + kCount * 4, user + kCount * 4, s);
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernelEx", "cuMemcpyAsync"}));
  EXPECT_EQ(launched_registry()->count, 0u) << "one rank: no peer allocation to open";

  // Neither call while a stream captures: the rank's device cannot be synchronised then.
  fake().set_capturing(s, 1);
  expect_error(ErrorKind::InvalidUsage, "captures a graph", [&] { comm.register_buffer(user, 4); });
  expect_error(ErrorKind::InvalidUsage, "captures a graph", [&] { comm.deregister_buffer(handle); });
  fake().set_capturing(s, 0);

  std::vector<float> host(16);
  expect_error(ErrorKind::InvalidArgument, "buff is null", [&] { comm.register_buffer(nullptr, 4); });
  expect_error(ErrorKind::InvalidArgument, "size is 0", [&] { comm.register_buffer(user, 0); });
  expect_error(ErrorKind::InvalidArgument, "is not CUDA device memory", [&] { comm.register_buffer(host.data(), 64); });
  void* other_device = device_alloc(1, 64);
  expect_error(ErrorKind::InvalidArgument, "is on CUDA device 1, the rank's device is 0",
               [&] { comm.register_buffer(other_device, 64); });
  expect_error(ErrorKind::InvalidArgument, "run past the end of the allocation",
               [&] { comm.register_buffer(user, 2 * kCount * 4 + 1); });
  expect_error(ErrorKind::InvalidArgument, "is not a handle cccCommRegister gave",
               [&] { comm.deregister_buffer(host.data()); });

  void* arena = comm.mem_alloc(64);
  void* arena_handle = comm.register_buffer(arena, 64);  // shared already: nothing to open
  comm.deregister_buffer(arena_handle);
  comm.mem_free(arena);

  comm.deregister_buffer(handle);
  expect_error(ErrorKind::InvalidArgument, "deregistered already", [&] { comm.deregister_buffer(handle); });
  take_log();
  comm.run_rank(call, 0, user, user, s);
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernelEx", "cuMemcpyAsync"}))
      << "deregistered: staged again";
  comm.synchronize();
}

// `bytes` of cuMemCreate memory on device 0 (what CUDA IPC cannot share), mapped and readable;
// unmapped and released with the returned guard.
struct VmmBuffer {
  CUdeviceptr at = 0;
  size_t bytes = 0;
  CUmemGenericAllocationHandle handle{};
  explicit VmmBuffer(size_t size) : bytes(size) {
    const CudaDriver& d = CudaDriver::get();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    d.check(d.cuMemCreate(&handle, bytes, &prop, 0), "cuMemCreate");
    d.check(d.cuMemAddressReserve(&at, bytes, 0, 0, 0), "cuMemAddressReserve");
    d.check(d.cuMemMap(at, bytes, 0, handle, 0), "cuMemMap");
  }
  ~VmmBuffer() {
    const CudaDriver& d = CudaDriver::get();
    d.cuMemUnmap(at, bytes);
    d.cuMemAddressFree(at, bytes);
    d.cuMemRelease(handle);
  }
  void* get() const { return reinterpret_cast<void*>(at); }
};

// Graph registration on one rank (its peers' part is CudaRegister's "graph" scenario): under
// capture an unregistered cudaMalloc buffer is used in place and remembered, other memory is
// still staged, and the end registers what was remembered.
TEST_F(CudaCallPath, AcrossProcessesCapturedBuffersAreUsedInPlaceAndRegisteredWhenTheCaptureEnds) {
  const CudaDriver& d = CudaDriver::get();
  OneRank one = one_rank();
  Communicator& comm = one.comm;
  const CollectiveCall& call = one.call;
  std::byte* const user = one.user;
  const CUstream s = one.stream;
  comm.run_rank(call, 0, user, user, s);  // compiles, loads and sizes the scratch before capturing
  comm.synchronize();

  // Without the mode a capture stages, as before.
  fake().set_capturing(s, 1);
  take_log();
  comm.run_rank(call, 0, user, user, s);
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernel", "cuMemcpyAsync"}));
  fake().set_capturing(s, 0);

  comm.begin_graph_registration();
  comm.run_rank(call, 0, user, user, s);  // not capturing: staged
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernelEx", "cuMemcpyAsync"}));
  fake().set_capturing(s, 1);
  comm.run_rank(call, 0, user, user, s);
  std::vector<std::string> log = take_log();
  EXPECT_EQ(staging_and_launches(log), std::vector<std::string>{"cuLaunchKernel"}) << testing::PrintToString(log);
  EXPECT_TRUE(synchronous_calls(log).empty()) << testing::PrintToString(log);
  EXPECT_EQ(last_launch().own.input, user) << "the captured kernel reads the user's buffer itself";
  // Out of place, two buffers of one allocation: both in place.
  comm.run_rank(call, 0, user, user + kCount * 4, s);
  EXPECT_EQ(staging_and_launches(take_log()), std::vector<std::string>{"cuLaunchKernel"});
  EXPECT_EQ(last_launch().own.output, user + kCount * 4);
  // Memory CUDA IPC cannot share is staged even now.
  VmmBuffer vmm(1 << 21);
  comm.run_rank(call, 0, vmm.get(), vmm.get(), s);
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernel", "cuMemcpyAsync"}));
  expect_error(ErrorKind::InvalidUsage, "do not nest", [&] { comm.begin_graph_registration(); });
  // The end would synchronise the device, which invalidates a capture: refused first (the
  // capture still ends well), and the mode ends (nothing registered; capture those again).
  fake().set_capturing(s, 0);
  ASSERT_EQ(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  take_log();
  expect_error(ErrorKind::InvalidUsage, "still captures a graph", [&] { comm.end_graph_registration(); });
  EXPECT_TRUE(synchronous_calls(take_log()).empty());
  CUgraph graph = nullptr;
  EXPECT_EQ(d.cuStreamEndCapture(s, &graph), CUDA_SUCCESS) << "not invalidated";
  d.cuGraphDestroy(graph);
  // Registering now does synchronise, and the driver invalidates the capture (the fake as well).
  ASSERT_EQ(d.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  expect_error(ErrorKind::InvalidUsage, "captures a graph", [&] { comm.register_buffer(user, 4); });
  EXPECT_EQ(d.cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  fake().set_capturing(s, 1);
  comm.run_rank(call, 0, user, user, s);
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernel", "cuMemcpyAsync"}))
      << "the mode ended with the failed end";
  expect_error(ErrorKind::InvalidUsage, "no cccCommGraphRegisterBegin", [&] { comm.end_graph_registration(); });

  comm.begin_graph_registration();
  comm.run_rank(call, 0, user, user, s);
  comm.run_rank(call, 0, user, user + kCount * 4, s);
  EXPECT_EQ(staging_and_launches(take_log()), (std::vector<std::string>{"cuLaunchKernel", "cuLaunchKernel"}));
  fake().set_capturing(s, 0);
  void* handle = comm.end_graph_registration();
  ASSERT_NE(handle, nullptr);
  take_log();
  for (std::byte* at : {user, user + kCount * 4}) {  // eager, both captured buffers registered now: in place
    comm.run_rank(call, 0, at, at, s);
    EXPECT_EQ(staging_and_launches(take_log()), std::vector<std::string>{"cuLaunchKernelEx"});
  }
  fake().set_capturing(s, 1);
  comm.run_rank(call, 0, user, user, s);  // the mode ended, but the buffer is registered
  EXPECT_EQ(staging_and_launches(take_log()), std::vector<std::string>{"cuLaunchKernel"});
  auto* other = static_cast<std::byte*>(device_alloc(0, kCount * 4));
  comm.run_rank(call, 0, other, other, s);  // the mode ended: a new buffer is staged
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernel", "cuMemcpyAsync"}));
  fake().set_capturing(s, 0);

  comm.deregister_buffer(handle);
  take_log();
  comm.run_rank(call, 0, user, user, s);
  EXPECT_EQ(staging_and_launches(take_log()),
            (std::vector<std::string>{"cuMemcpyAsync", "cuLaunchKernelEx", "cuMemcpyAsync"}))
      << "deregistered: staged again";
  expect_error(ErrorKind::InvalidArgument, "deregistered already", [&] { comm.deregister_buffer(handle); });
  // An end with nothing captured still registers (nothing) and gives a handle.
  comm.begin_graph_registration();
  void* empty = comm.end_graph_registration();
  ASSERT_NE(empty, nullptr);
  comm.deregister_buffer(empty);
  // A remembered buffer freed before the end fails it, and the mode ends with it.
  comm.begin_graph_registration();
  CUdeviceptr gone = 0;
  ASSERT_EQ(d.cuMemAlloc(&gone, kCount * 4), CUDA_SUCCESS);
  fake().set_capturing(s, 1);
  comm.run_rank(call, 0, reinterpret_cast<void*>(gone), reinterpret_cast<void*>(gone), s);
  fake().set_capturing(s, 0);
  comm.synchronize();
  ASSERT_EQ(d.cuMemFree(gone), CUDA_SUCCESS);
  expect_error(ErrorKind::InvalidArgument, "is not CUDA device memory", [&] { comm.end_graph_registration(); });
  comm.begin_graph_registration();
  comm.deregister_buffer(comm.end_graph_registration());
  comm.synchronize();
}

// In one process there is nothing to exchange: registering succeeds, and only the handle is checked.
// A registration never rewrites the registry table a launch may still read (a graph replayed
// from another thread while this one registers): it writes the other of two tables and switches
// the rank's pointer. Marked here through the fake's host-visible device memory: the table the
// last launch read keeps its mark across the next registration and deregistration.
TEST_F(CudaCallPath, ARegistrationNeverRewritesTheRegistryALaunchMayRead) {
  OneRank r = one_rank();
  void* first = r.comm.register_buffer(r.user, kCount * 4);
  r.comm.run_rank(r.call, 0, r.user, r.user, r.stream);
  auto* read = const_cast<ccc_registry*>(launched_registry());
  ASSERT_NE(read, nullptr);
  read->reserved = 0x5eadu;  // "a launch is reading this table"
  void* second = r.comm.register_buffer(r.user + kCount * 4, kCount * 4);
  EXPECT_EQ(read->reserved, 0x5eadu) << "the registration rewrote the table a launch may read";
  r.comm.run_rank(r.call, 0, r.user, r.user, r.stream);
  auto* next = const_cast<ccc_registry*>(launched_registry());
  EXPECT_NE(next, read) << "the next launch reads the new table";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(next) >> 32, reinterpret_cast<uintptr_t>(read) >> 32)
      << "the two tables differ in their low 32 bits only";
  next->reserved = 0x5eadu;
  r.comm.deregister_buffer(second);
  EXPECT_EQ(next->reserved, 0x5eadu) << "the deregistration rewrote the table a launch may read";
  r.comm.deregister_buffer(first);
}

TEST_F(CudaCallPath, InOneProcessRegisteringSucceedsWithNothingToDo) {
  cccComm_t comms[2] = {};
  ASSERT_EQ(cccCommInitAll(comms, 2, nullptr), cccSuccess) << cccGetLastError(nullptr);
  void* buffer = device_alloc(0, 256);
  take_log();
  void* handle = nullptr;
  ASSERT_EQ(cccCommRegister(comms[0], buffer, 256, &handle), cccSuccess) << cccGetLastError(comms[0]);
  EXPECT_NE(handle, nullptr);
  EXPECT_TRUE(take_log().empty()) << "no driver call";
  EXPECT_EQ(cccCommRegister(comms[0], buffer, 256, nullptr), cccInvalidArgument);
  EXPECT_EQ(cccCommRegister(comms[0], nullptr, 256, &handle), cccInvalidArgument);
  EXPECT_EQ(cccCommDeregister(comms[1], handle), cccSuccess) << "the handles of one clique share registrations";
  void* graph = nullptr;
  EXPECT_EQ(cccCommGraphRegisterBegin(comms[0]), cccSuccess);
  EXPECT_EQ(cccCommGraphRegisterEnd(comms[0], nullptr), cccInvalidArgument);
  ASSERT_EQ(cccCommGraphRegisterEnd(comms[0], &graph), cccSuccess) << cccGetLastError(comms[0]);
  EXPECT_TRUE(take_log().empty()) << "no driver call";
  EXPECT_EQ(cccCommDeregister(comms[0], graph), cccSuccess);
  EXPECT_EQ(cccCommDeregister(comms[0], handle), cccInvalidArgument);
  EXPECT_NE(std::string(cccGetLastError(comms[0])).find("deregistered already"), std::string::npos)
      << cccGetLastError(comms[0]);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// Across processes: this executable again, once per rank (CudaRegister.Rank), each on its own
// copy of the fake driver; the fake's IPC maps a peer's memfd at an address of the reader's.
std::string hex(const UniqueId& id) {
  std::string s;
  for (unsigned char c : id.bytes) s += fmt::format("{:02x}", c);
  return s;
}

UniqueId unhex(const std::string& text) {
  UniqueId id{};
  for (size_t i = 0; i < id.bytes.size() && 2 * i + 1 < text.size(); ++i)
    id.bytes[i] = static_cast<decltype(id.bytes)::value_type>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  return id;
}

// Runs `scenario` on `n` rank processes; each must pass (exit 0, not skipped).
void run_ranks(int n, const std::string& scenario) {
  const UniqueId id = Communicator::unique_id();
  test::run_rank_processes(
      n, "CudaRegister.Rank",
      [&](int r) {
        return std::vector<std::string>{"CCC_TEST_REG_ID=" + hex(id), "CCC_TEST_REG_RANK=" + std::to_string(r),
                                        "CCC_TEST_REG_NRANKS=" + std::to_string(n), "CCC_TEST_REG_SCENARIO=" + scenario};
      },
      std::chrono::seconds(240), fmt::format("{}, {} ranks", scenario, n));
}

TEST(CudaRegister, AcrossTwoAndThreeProcessesPeersOpenEachOthersBuffersAndCollectivesUseThemInPlace) {
  if (std::getenv("CCC_TEST_REG_ID") != nullptr) GTEST_SKIP() << "inside a rank";
  for (int n : {2, 3}) run_ranks(n, "register");
}

TEST(CudaRegister, BuffersCapturedInPlaceAreRegisteredAcrossProcessesWhenTheCaptureEnds) {
  if (std::getenv("CCC_TEST_REG_ID") != nullptr) GTEST_SKIP() << "inside a rank";
  for (int n : {2, 3}) run_ranks(n, "graph");
}

TEST(CudaRegister, APeerThatNeverRegistersFailsTheOthersWithinTheTimeout) {
  if (std::getenv("CCC_TEST_REG_ID") != nullptr) GTEST_SKIP() << "inside a rank";
  run_ranks(3, "silent");
}

TEST(CudaRegister, APeerThatNeverEndsItsGraphRegistrationFailsTheOthersWithinTheTimeout) {
  if (std::getenv("CCC_TEST_REG_ID") != nullptr) GTEST_SKIP() << "inside a rank";
  run_ranks(3, "silent-graph");
}

std::vector<std::string> lines_named(const std::string& name) { return calls_named(take_log(), name); }

// The "graph" scenario: rank 0 captures collectives on two buffers in two allocations, the
// others on two buffers of one allocation (so the ranks share different numbers of
// allocations); the end registers them.
void capture_and_register(cccComm_t comm, int rank, int n, std::byte* buf, size_t bytes) {
  const CudaDriver& d = CudaDriver::get();
  CUdeviceptr extra = 0;
  ASSERT_EQ(d.cuMemAlloc(&extra, bytes), CUDA_SUCCESS);
  ASSERT_EQ(d.cuMemsetD8(extra, static_cast<unsigned char>('a' + rank), bytes), CUDA_SUCCESS);
  auto* second = rank == 0 ? reinterpret_cast<std::byte*>(extra) : buf;
  const CUstream s = stream(0);
  ASSERT_EQ(cccAllReduce(buf, buf, kCount, cccFloat32, cccSum, comm, s), cccSuccess);  // compiles before capturing
  ASSERT_EQ(cccCommSynchronize(comm), cccSuccess) << cccGetLastError(comm);

  ASSERT_EQ(cccCommGraphRegisterBegin(comm), cccSuccess) << cccGetLastError(comm);
  fake().set_capturing(s, 1);
  take_log();
  for (std::byte* b : {buf, second})
    ASSERT_EQ(cccAllReduce(b, b, kCount, cccFloat32, cccSum, comm, s), cccSuccess) << cccGetLastError(comm);
  std::vector<std::string> log = take_log();
  EXPECT_TRUE(calls_named(log, "cuMemcpyAsync").empty()) << "in place: " << testing::PrintToString(log);
  EXPECT_EQ(last_launch().own.input, second);
  // One rank still capturing fails every rank's end, with nothing registered, and ends the mode.
  if (rank != n - 1) fake().set_capturing(s, 0);
  void* handle = nullptr;
  EXPECT_EQ(cccCommGraphRegisterEnd(comm, &handle), cccInvalidUsage)
      << cccGetLastError(comm);
  const std::string why = cccGetLastError(comm);
  EXPECT_NE(why.find(rank == n - 1 ? "still captures a graph" : fmt::format("rank {}'s call failed", n - 1)),
            std::string::npos) << why;
  EXPECT_TRUE(lines_named("cuIpcOpenMemHandle").empty());

  // Captured again: two buffers of one allocation on the ranks but 0 (each allocation opened once).
  ASSERT_EQ(cccCommGraphRegisterBegin(comm), cccSuccess) << cccGetLastError(comm);
  fake().set_capturing(s, 1);
  if (rank != 0) second = buf + kCount * 4;
  for (std::byte* b : {buf, second})
    ASSERT_EQ(cccAllReduce(b, b, kCount, cccFloat32, cccSum, comm, s), cccSuccess) << cccGetLastError(comm);
  EXPECT_TRUE(calls_named(take_log(), "cuMemcpyAsync").empty());
  fake().set_capturing(s, 0);
  ASSERT_EQ(cccCommGraphRegisterEnd(comm, &handle), cccSuccess) << cccGetLastError(comm);
  // Rank 0 shares two allocations, every other rank one; each opens its peers'.
  const size_t peer_allocations = rank == 0 ? n - 1 : n;
  EXPECT_EQ(lines_named("cuIpcOpenMemHandle").size(), peer_allocations);
  ASSERT_EQ(cccAllReduce(buf, buf, kCount, cccFloat32, cccSum, comm, s), cccSuccess);
  const ccc_registry* registry = launched_registry();
  ASSERT_NE(registry, nullptr);
  ASSERT_EQ(registry->count, peer_allocations);
  std::string seen;  // the first byte of each peer allocation, read through this process's mapping
  for (unsigned i = 0; i < registry->count; ++i) seen += *reinterpret_cast<const char*>(registry->entries[i].local_base);
  std::sort(seen.begin(), seen.end());
  std::string expected;
  for (int r = 0; r < n; ++r)
    if (r != rank) expected += static_cast<char>('A' + r);
  if (rank != 0) expected += 'a';  // rank 0's second allocation
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
  EXPECT_TRUE(calls_named(take_log(), "cuMemcpyAsync").empty()) << "registered: in place outside capture too";
  ASSERT_EQ(cccCommSynchronize(comm), cccSuccess) << cccGetLastError(comm);

  ASSERT_EQ(cccCommDeregister(comm, handle), cccSuccess) << cccGetLastError(comm);
  EXPECT_EQ(lines_named("cuIpcCloseMemHandle").size(), peer_allocations);
  EXPECT_EQ(launched_registry()->count, 0u);
  // Nothing captured on any rank: no allocations to exchange, and the ranks still agree.
  ASSERT_EQ(cccCommGraphRegisterBegin(comm), cccSuccess) << cccGetLastError(comm);
  ASSERT_EQ(cccCommGraphRegisterEnd(comm, &handle), cccSuccess) << cccGetLastError(comm);
  EXPECT_TRUE(lines_named("cuIpcOpenMemHandle").empty());
  ASSERT_EQ(cccCommDeregister(comm, handle), cccSuccess) << cccGetLastError(comm);
  d.cuMemFree(extra);
}

// One rank's part of run_ranks, in a process of its own.
TEST(CudaRegister, Rank) {
  const char* id_text = std::getenv("CCC_TEST_REG_ID");
  if (id_text == nullptr) GTEST_SKIP() << "a rank of the CudaRegister tests, which start it";
  ASSERT_NE(fake().take_log, nullptr);
  const int rank = std::atoi(std::getenv("CCC_TEST_REG_RANK"));
  const int n = std::atoi(std::getenv("CCC_TEST_REG_NRANKS"));
  const std::string scenario = std::getenv("CCC_TEST_REG_SCENARIO");
  const CudaDriver& d = CudaDriver::get();
  ASSERT_EQ(d.cuCtxSetCurrent(primary_context(0)), CUDA_SUCCESS);
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.backend = "cuda";
  // Silent: short, but not so short that the ranks' start-up skew fails the join.
  const bool silent = scenario.starts_with("silent");
  config.timeoutSeconds = silent ? 3.0 : 60.0;
  config.arenaBytes = 1 << 20;
  cccComm_t comm = nullptr;
  cccUniqueId id{};
  const UniqueId unique = unhex(id_text);
  std::memcpy(id.internal, unique.bytes.data(), sizeof id.internal);
  ASSERT_EQ(cccCommInitRankConfig(&comm, n, id, rank, &config), cccSuccess) << cccGetLastError(nullptr);

  // Each rank's buffer holds its rank number, so a reader can tell whose bytes it maps.
  CUdeviceptr mine = 0;
  const size_t bytes = 2 * kCount * 4;
  ASSERT_EQ(d.cuMemAlloc(&mine, bytes), CUDA_SUCCESS);
  ASSERT_EQ(d.cuMemsetD8(mine, static_cast<unsigned char>('A' + rank), bytes), CUDA_SUCCESS);
  auto* buf = reinterpret_cast<std::byte*>(mine);
  void* handle = nullptr;

  if (silent) {  // "silent": cccCommRegister; "silent-graph": cccCommGraphRegisterEnd
    const bool graph = scenario == "silent-graph";
    const char* call = graph ? "cccCommGraphRegisterEnd" : "cccCommRegister";
    if (rank == n - 1) {  // never calls; stays until the others have given up
      std::this_thread::sleep_for(std::chrono::seconds(8));
    } else {
      const auto start = std::chrono::steady_clock::now();
      if (graph) {
        ASSERT_EQ(cccCommGraphRegisterBegin(comm), cccSuccess) << cccGetLastError(comm);
      }
      EXPECT_EQ(graph ? cccCommGraphRegisterEnd(comm, &handle) : cccCommRegister(comm, buf, bytes, &handle),
                cccRemoteError);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 6.0) << "within 1.5 x the 3 s timeout, not a hang";
      EXPECT_NE(std::string(cccGetLastError(comm)).find(fmt::format("rank {} did not take part in {}", n - 1, call)),
                std::string::npos) << cccGetLastError(comm);
    }
    EXPECT_EQ(cccCommDestroy(comm), cccSuccess);
    d.cuMemFree(mine);
    return;
  }

  if (scenario == "graph") {
    capture_and_register(comm, rank, n, buf, bytes);
    EXPECT_EQ(cccCommDestroy(comm), cccSuccess);
    d.cuMemFree(mine);
    return;
  }

  take_log();
  ASSERT_EQ(cccCommRegister(comm, buf, kCount * 4, &handle), cccSuccess) << cccGetLastError(comm);
  EXPECT_EQ(lines_named("cuIpcOpenMemHandle").size(), static_cast<size_t>(n - 1)) << "one per peer";
  // A collective on the registered buffer: in place, no staging copy; the launch's registry
  // lists every peer's allocation, mapped here at an address of this process's.
  const CUstream s = stream(0);
  ASSERT_EQ(cccAllReduce(buf, buf, kCount, cccFloat32, cccSum, comm, s), cccSuccess) << cccGetLastError(comm);
  std::vector<std::string> log = take_log();
  EXPECT_TRUE(calls_named(log, "cuMemcpyAsync").empty()) << testing::PrintToString(log);
  // Every rank here is on the fake's device 0: a shared device, so no programmatic launch.
  EXPECT_EQ(calls_named(log, "cuLaunchKernel").size(), 1u) << testing::PrintToString(log);
  EXPECT_TRUE(calls_named(log, "cuLaunchKernelEx").empty()) << testing::PrintToString(log);
  {
    // Nor norm blocks for an RMSNorm call (64 rows): its grid is the plain call's, its channels.
    const std::string plain = kernel_launches(log).at(0);
    CUdeviceptr residual = 0, weight = 0;
    ASSERT_EQ(d.cuMemAlloc(&residual, kCount * 4), CUDA_SUCCESS);
    ASSERT_EQ(d.cuMemAlloc(&weight, 64 * 4), CUDA_SUCCESS);
    ASSERT_EQ(cccAllReduceResidualRmsNorm(buf, reinterpret_cast<void*>(residual), reinterpret_cast<void*>(weight), buf,
                                          nullptr, kCount, 64, 1e-6f, cccFloat32, cccSum, comm, s),
              cccSuccess)
        << cccGetLastError(comm);
    const std::vector<std::string> fused = kernel_launches(take_log());
    ASSERT_EQ(fused.size(), 1u);
    auto grid = [](const std::string& l) { return l.substr(l.find(" grid="), l.find(' ', l.find(" grid=") + 1) - l.find(" grid=")); };
    EXPECT_EQ(grid(fused[0]), grid(plain)) << fused[0] << " against " << plain;
    ASSERT_EQ(cccCommSynchronize(comm), cccSuccess) << cccGetLastError(comm);
    d.cuMemFree(residual);
    d.cuMemFree(weight);
  }
  EXPECT_EQ(last_launch().own.input, buf);
  const ccc_registry* registry = launched_registry();
  ASSERT_NE(registry, nullptr);
  ASSERT_EQ(registry->count, static_cast<unsigned>(n - 1));
  std::vector<int> owners;
  for (unsigned i = 0; i < registry->count; ++i) {
    const ccc_registration& e = registry->entries[i];
    owners.push_back(e.owner);
    EXPECT_NE(e.owner, rank);
    EXPECT_EQ(e.bytes, bytes);
    EXPECT_NE(e.local_base, e.owner_base) << "mapped elsewhere here: translation is needed";
    const auto* local = reinterpret_cast<const unsigned char*>(e.local_base);
    EXPECT_EQ(local[0], 'A' + e.owner);
    EXPECT_EQ(local[bytes - 1], 'A' + e.owner) << "the owner's bytes, read through local_base";
  }
  std::sort(owners.begin(), owners.end());
  std::vector<int> peers;
  for (int r = 0; r < n; ++r)
    if (r != rank) peers.push_back(r);
  EXPECT_EQ(owners, peers);
  // The owner's later writes show through the peers' mappings (the same pages).
  ASSERT_EQ(cccCommSynchronize(comm), cccSuccess) << cccGetLastError(comm);
  // Unregistered memory still stages.
  CUdeviceptr plain = 0;
  ASSERT_EQ(d.cuMemAlloc(&plain, kCount * 4), CUDA_SUCCESS);
  take_log();
  ASSERT_EQ(cccAllReduce(reinterpret_cast<void*>(plain), reinterpret_cast<void*>(plain), kCount, cccFloat32, cccSum,
                         comm, s), cccSuccess);
  EXPECT_EQ(calls_named(take_log(), "cuMemcpyAsync").size(), 2u) << "staged in and out";
  ASSERT_EQ(cccCommSynchronize(comm), cccSuccess) << cccGetLastError(comm);

  // A second buffer in the same allocation: the peers map it once (a reference more).
  void* second = nullptr;
  ASSERT_EQ(cccCommRegister(comm, buf + kCount * 4, kCount * 4, &second), cccSuccess) << cccGetLastError(comm);
  EXPECT_TRUE(lines_named("cuIpcOpenMemHandle").empty()) << "opened once";
  EXPECT_EQ(launched_registry()->count, static_cast<unsigned>(n - 1));

  // A rank with a bad handle fails every rank's deregistration, with nothing removed.
  const cccResult_t bad = cccCommDeregister(comm, rank == 1 ? static_cast<void*>(&config) : second);
  EXPECT_EQ(bad, rank == 1 ? cccInvalidArgument : cccInvalidUsage) << cccGetLastError(comm);
  if (rank != 1) {
    EXPECT_NE(std::string(cccGetLastError(comm)).find("rank 1's call failed"), std::string::npos) << cccGetLastError(comm);
  }
  EXPECT_EQ(launched_registry()->count, static_cast<unsigned>(n - 1));
  // Ranks deregistering the buffers of different registrations all fail, with nothing removed.
  EXPECT_EQ(cccCommDeregister(comm, rank == 0 ? handle : second), cccInvalidUsage) << cccGetLastError(comm);
  EXPECT_NE(std::string(cccGetLastError(comm)).find("every rank must deregister"), std::string::npos)
      << cccGetLastError(comm);
  EXPECT_TRUE(lines_named("cuIpcCloseMemHandle").empty());
  EXPECT_EQ(launched_registry()->count, static_cast<unsigned>(n - 1));
  // So does one whose buffer is not device memory.
  std::vector<float> host(16);
  void* refused = nullptr;
  EXPECT_EQ(cccCommRegister(comm, rank == 0 ? static_cast<void*>(host.data()) : buf, 64, &refused),
            rank == 0 ? cccInvalidArgument : cccInvalidUsage) << cccGetLastError(comm);
  EXPECT_TRUE(lines_named("cuIpcOpenMemHandle").empty()) << "nothing opened";
  // And one registering while a stream captures.
  fake().set_capturing(s, rank == 0 ? 1 : 0);
  void* during = nullptr;
  EXPECT_EQ(cccCommRegister(comm, buf, 64, &during), cccInvalidUsage) << cccGetLastError(comm);
  EXPECT_NE(std::string(cccGetLastError(comm)).find("captures a graph"), std::string::npos) << cccGetLastError(comm);
  fake().set_capturing(s, 0);

  // Deregistering the second keeps the mapping (the first still holds it); the first closes it.
  take_log();
  ASSERT_EQ(cccCommDeregister(comm, second), cccSuccess) << cccGetLastError(comm);
  EXPECT_TRUE(lines_named("cuIpcCloseMemHandle").empty());
  EXPECT_EQ(launched_registry()->count, static_cast<unsigned>(n - 1));
  ASSERT_EQ(cccCommDeregister(comm, handle), cccSuccess) << cccGetLastError(comm);
  EXPECT_EQ(lines_named("cuIpcCloseMemHandle").size(), static_cast<size_t>(n - 1));
  EXPECT_EQ(launched_registry()->count, 0u);
  take_log();
  ASSERT_EQ(cccAllReduce(buf, buf, kCount, cccFloat32, cccSum, comm, s), cccSuccess);
  EXPECT_EQ(calls_named(take_log(), "cuMemcpyAsync").size(), 2u) << "deregistered: staged again";
  ASSERT_EQ(cccCommSynchronize(comm), cccSuccess) << cccGetLastError(comm);
  EXPECT_EQ(cccCommDestroy(comm), cccSuccess);
  d.cuMemFree(plain);
  d.cuMemFree(mine);
}

// Topology everywhere (docs/runtime.md, "Topology"): the kernel ccc tune's table chooses for an
// allreduce of bf16 at each of its sizes, 8 B to 1 GiB, over `topology` at `n` ranks.
std::vector<std::pair<int64_t, KernelChoice>> tune_choices(const Topology& topology, int n) {
  std::vector<SourceFile> files;
  for (const ShippedSchedule& s : shipped_schedules()) files.push_back(s.file);
  ScheduleMenu menu(Collective::AllReduce, n, files);
  std::vector<std::pair<int64_t, KernelChoice>> out;
  for (const TuneRow& row : tune_table(Collective::AllReduce, 2, topology, menu.candidates())) {
    const CostParams& p = row.choice.params;
    out.emplace_back(row.bytes, KernelChoice{row.choice.name(), p.channels, p.tile_bytes, p.protocol});
  }
  return out;
}

// What `comm` runs for an allreduce of `bytes` of bf16.
KernelChoice allreduce_choice(const Communicator& comm, int64_t bytes) {
  CollectiveCall call;
  call.dtype = DataType::BF16;
  call.count = static_cast<uint64_t>(bytes / 2);
  return comm.choice_for(call);
}

// 8 rank processes on a fake NVSwitch machine (8 fake H100s; NVML's stand-in reports 18 NVLink 4
// links from each into NVSwitches) detect it from the devices they exchange, and choose, at
// every size `ccc tune --topo topologies/dgx-h100.topo` prints, what it chooses.
TEST(CudaTopology, EightRankProcessesOnAnNvswitchMachineChooseAsCccTuneDoesForDgxH100) {
  if (std::getenv("CCC_TEST_TOPO_ID") != nullptr) GTEST_SKIP() << "inside a rank";
  const UniqueId id = Communicator::unique_id();
  test::run_rank_processes(
      8, "CudaTopology.Rank",
      [&](int r) {
        return std::vector<std::string>{"CCC_TEST_TOPO_ID=" + hex(id), "CCC_TEST_TOPO_RANK=" + std::to_string(r),
                                        "FAKE_CUDA_DEVICES=8", std::string("CCC_LIBNVML=") + CCC_FAKE_NVML,
                                        "CCC_TOPO=", "CCC_CALIBRATION=", "CCC_ALGO="};
      },
      std::chrono::seconds(240), "8 rank processes on a fake NVSwitch machine");
}

// One rank of the test above, in a process of its own.
TEST(CudaTopology, Rank) {
  const char* id_text = std::getenv("CCC_TEST_TOPO_ID");
  if (id_text == nullptr) GTEST_SKIP() << "a rank of CudaTopology's test, which starts it";
  ASSERT_NE(fake().take_log, nullptr);
  constexpr int n = 8;
  const int rank = std::atoi(std::getenv("CCC_TEST_TOPO_RANK"));
  CommOptions options;
  options.timeout_seconds = 60;
  RankOptions where;
  where.device = rank;
  where.arena_bytes = 1 << 20;
  Communicator comm = Communicator::cuda_rank(unhex(id_text), n, rank, options, where);
  std::string errors;
  const std::optional<Topology> dgx = load_topology(CCC_SOURCE_DIR "/topologies/dgx-h100.topo", errors);
  ASSERT_TRUE(dgx) << errors;
  std::set<std::string> schedules;
  for (const auto& [bytes, tuned] : tune_choices(*dgx, n)) {
    EXPECT_EQ(allreduce_choice(comm, bytes), tuned) << bytes << " B: rank " << rank;
    schedules.insert(tuned.algorithm);
  }
  EXPECT_GE(schedules.size(), 2u) << "the sizes span more than one schedule";
}

// Virtual ranks choose over their device's topology: the ranks joined by its memory, each with
// its share of it and of the SMs.
TEST_F(CudaCallPath, VirtualRanksChooseOverTheirDevicesTopology) {
  constexpr int n = 8;
  const Topology topology = detect_virtual_topology(CudaDriver::get(), 0, n);
  ASSERT_EQ(topology.switches.size(), 1u);
  EXPECT_EQ(topology.switches[0].kind, FabricKind::Memory);
  EXPECT_EQ(topology.gpus[0].max_channels, 132 / n);
  auto comm = Communicator::cuda_virtual(0, n);
  std::set<std::string> schedules;
  for (const auto& [bytes, tuned] : tune_choices(topology, n)) {
    EXPECT_EQ(allreduce_choice(comm, bytes), tuned) << bytes << " B";
    schedules.insert(tuned.algorithm);
  }
  EXPECT_GE(schedules.size(), 2u) << "not the ring of a communicator without a topology";
}

}  // namespace
