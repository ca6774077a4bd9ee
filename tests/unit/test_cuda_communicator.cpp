// The CUDA backend end to end on a real device: N virtual ranks on one device (one grid), and
// one rank per device where there are two, checked against the reference. Every test skips with
// the reason on machines without a CUDA device; gpu-bundle/gpu-check.sh runs them on one.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "collective_reference.h"
#include "ccc/communicator.h"
#include "cuda_driver.h"
#include "shipped_schedules.h"

using namespace ccc;

namespace {

const int kRanks = 8;

const CudaDriver* driver_or_skip_reason(std::string& reason) {
  try {
    return &CudaDriver::get();
  } catch (const NoCudaDevice& e) {
    reason = e.what();
    return nullptr;
  }
}

#define CCC_REQUIRE_GPU(driver)                      \
  std::string skip_reason;                           \
  const CudaDriver* driver = driver_or_skip_reason(skip_reason); \
  if (driver == nullptr) GTEST_SKIP() << skip_reason

// Device memory on device `ordinal`'s primary context (made current), freed at scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaDriver& d, uint64_t bytes, int ordinal = 0) : d_(d) {
    d_.check(d_.cuDeviceGet(&dev_, ordinal), "cuDeviceGet");
    d_.check(d_.cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    use();
    d_.check(d_.cuMemAlloc(&p_, bytes), "cuMemAlloc");
  }
  ~DeviceBuffer() {
    d_.cuCtxSetCurrent(ctx_);
    d_.cuMemFree(p_);
    d_.cuDevicePrimaryCtxRelease(dev_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* get() const { return reinterpret_cast<unsigned char*>(p_); }
  void use() const { d_.check(d_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); }

 private:
  const CudaDriver& d_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUdeviceptr p_ = 0;
};

void upload(const CudaDriver& d, const void* dst, const void* src, uint64_t bytes) {
  d.check(d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
}

// Every rank's device buffers for one call of `shape`, laid out as NCCL's calls are (in place:
// recv is the rank's block of send for reduce_scatter, send the rank's block of recv for
// allgather, the same buffer otherwise), with the host inputs kept for the check.
class DeviceCollective {
 public:
  DeviceCollective(const CudaDriver& d, const CollectiveCall& shape, int n, bool in_place, int devices = 1)
      : d_(d), call_(shape), n_(n) {
    const uint64_t in = send_bytes(shape, n), out = recv_bytes(shape, n);
    const uint64_t block = shape.count * data_type_size(shape.dtype);
    for (int r = 0; r < n; ++r) {
      buffers_.push_back(std::make_unique<DeviceBuffer>(d, in + out, devices == 1 ? 0 : r));
      unsigned char* base = buffers_.back()->get();
      unsigned char* send = in_place && shape.collective == Collective::AllGather ? base + r * block : base;
      unsigned char* recv = !in_place ? base + in : shape.collective == Collective::ReduceScatter ? base + r * block : base;
      send_.push_back(send);
      recv_.push_back(recv);
    }
    call_.send = send_;
    call_.recv = recv_;
    inputs_.assign(n, std::vector<unsigned char>(in));
  }
  const CollectiveCall& call() const { return call_; }
  // Poisons every output, then writes fresh inputs (in place they overlap: inputs win).
  void prepare(uint64_t salt) {
    const uint64_t elem = data_type_size(call_.dtype), out = recv_bytes(call_, n_);
    std::vector<unsigned char> poisoned(out);
    poison(call_.dtype, out / elem, poisoned.data());
    for (int r = 0; r < n_; ++r) {
      buffers_[r]->use();
      upload(d_, recv_[r], poisoned.data(), out);
      fill_input(call_.dtype, r, salt, inputs_[r].size() / elem, inputs_[r].data());
      upload(d_, send_[r], inputs_[r].data(), inputs_[r].size());
    }
  }
  // Wrong elements over every rank's output, against the inputs of the last prepare.
  uint64_t wrong_elements() const {
    std::vector<unsigned char> host(recv_bytes(call_, n_));
    std::vector<const void*> inputs;
    for (const auto& in : inputs_) inputs.push_back(in.data());
    uint64_t wrong = 0;
    for (int r = 0; r < n_; ++r) {
      buffers_[r]->use();
      d_.check(d_.cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(recv_[r]), host.size()), "cuMemcpyDtoH");
      wrong += count_wrong(call_, n_, r, inputs, host.data());
    }
    return wrong;
  }

 private:
  const CudaDriver& d_;
  CollectiveCall call_;
  int n_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::vector<const void*> send_;
  std::vector<void*> recv_;
  std::vector<std::vector<unsigned char>> inputs_;
};

CollectiveCall shape_of(Collective collective, uint64_t count, DataType dtype, ReduceOp op) {
  CollectiveCall call;
  call.collective = collective;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.root = collective == Collective::Broadcast || collective == Collective::Reduce ? 3 : -1;
  return call;
}

Communicator virtual_ranks(const std::string& algo) {
  CommOptions o;
  o.algo = algo;
  return Communicator::cuda_virtual(0, kRanks, o);
}

// Runs `shape` once on fresh buffers and returns the wrong elements over all ranks.
uint64_t check_once(const CudaDriver& d, Communicator& comm, const CollectiveCall& shape, bool in_place) {
  DeviceCollective buffers(d, shape, comm.size(), in_place);
  buffers.prepare(shape.count);
  comm.run(buffers.call());
  comm.synchronize();
  return buffers.wrong_elements();
}

}  // namespace

// An odd count: vector bodies and scalar tails; root 3 for broadcast and reduce.
TEST(CudaCommunicator, EveryShippedScheduleInPlaceAndNot) {
  CCC_REQUIRE_GPU(d);
  for (const ShippedSchedule& s : shipped_schedules()) {
    Communicator comm = virtual_ranks(s.name);
    for (bool in_place : {false, true}) {
      if (in_place && s.collective == Collective::AllToAll) continue;  // refused (Communicator.AllToAllRefusesInPlace)
      EXPECT_EQ(check_once(*d, comm, shape_of(s.collective, 100003, DataType::F32, ReduceOp::Sum), in_place), 0u)
          << collective_name(s.collective) << " " << s.name << (in_place ? " in place" : "");
    }
  }
}

// NCCL-legal NULLs, send off the root of a broadcast and recv off the root of a reduce, out of
// place and in place: the runtime's stand-ins (scratch room, or the rank's other buffer) are
// device memory.
TEST(CudaCommunicator, NullBuffersWhereNcclAllowsThem) {
  CCC_REQUIRE_GPU(d);
  for (Collective c : {Collective::Broadcast, Collective::Reduce}) {
    Communicator comm = virtual_ranks(c == Collective::Broadcast ? "ring_broadcast" : "ring_reduce");
    for (bool in_place : {false, true}) {
      DeviceCollective buffers(*d, shape_of(c, 100003, DataType::F32, ReduceOp::Sum), comm.size(), in_place);
      buffers.prepare(7);
      CollectiveCall call = buffers.call();
      std::vector<const void*> send(call.send.begin(), call.send.end());
      std::vector<void*> recv(call.recv.begin(), call.recv.end());
      for (int r = 0; r < comm.size(); ++r) {
        if (r == call.root) continue;
        if (c == Collective::Broadcast) send[r] = nullptr;
        else recv[r] = nullptr;
      }
      call.send = send;
      call.recv = recv;
      comm.run(call);
      comm.synchronize();
      EXPECT_EQ(buffers.wrong_elements(), 0u) << collective_name(c) << (in_place ? " in place" : "");
    }
  }
}

TEST(CudaCommunicator, EveryDataTypeAndEveryOp) {
  CCC_REQUIRE_GPU(d);
  Communicator comm = virtual_ranks("ring");
  for (DataType t : kAllDataTypes)
    EXPECT_EQ(check_once(*d, comm, shape_of(Collective::AllReduce, 65537, t, ReduceOp::Sum), false), 0u)
        << data_type_name(t);
  for (DataType t : {DataType::F32, DataType::BF16})
    for (ReduceOp op : kAllReduceOps)
      EXPECT_EQ(check_once(*d, comm, shape_of(Collective::AllReduce, 65537, t, op), true), 0u)
          << data_type_name(t) << " " << reduce_op_name(op);
}

// The same buffers again with new inputs, new buffers (a new buffer set), then the first again:
// nothing of an earlier call's buffers may leak into a later one.
TEST(CudaCommunicator, RepeatedCallsOnTheSameAndOnNewBuffers) {
  CCC_REQUIRE_GPU(d);
  Communicator comm = virtual_ranks("ring");
  const CollectiveCall shape = shape_of(Collective::AllReduce, 262147, DataType::F32, ReduceOp::Sum);
  DeviceCollective first(*d, shape, kRanks, false);
  for (uint64_t salt = 1; salt <= 5; ++salt) {
    first.prepare(salt);
    comm.run(first.call());
    comm.synchronize();
    EXPECT_EQ(first.wrong_elements(), 0u) << "same buffers, call " << salt;
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(check_once(*d, comm, shape, i % 2 == 1), 0u) << "new buffers, call " << i;
  first.prepare(99);
  comm.run(first.call());
  comm.synchronize();
  EXPECT_EQ(first.wrong_elements(), 0u) << "the first buffers after others";
}

// One call captured in a CUDA graph (global capture mode, as PyTorch's default) and replayed 100
// times, each with new inputs written into the captured buffers.
TEST(CudaCommunicator, GraphCaptureReplayedAHundredTimes) {
  CCC_REQUIRE_GPU(d);
  Communicator comm = virtual_ranks("ring");
  DeviceCollective buffers(*d, shape_of(Collective::AllReduce, 65537, DataType::F32, ReduceOp::Sum), kRanks, false);
  CUstream stream = nullptr;
  d->check(d->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const std::vector<void*> streams(kRanks, stream);
  buffers.prepare(0);
  comm.run(buffers.call(), streams);  // loads the kernel and sizes the scratch before capture
  comm.synchronize();
  ASSERT_EQ(buffers.wrong_elements(), 0u) << "eager";
  d->check(d->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  comm.run(buffers.call(), streams);
  CUgraph graph = nullptr;
  d->check(d->cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  CUgraphExec exec = nullptr;
  d->check(d->cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  uint64_t failed_replays = 0;
  for (uint64_t replay = 1; replay <= 100; ++replay) {
    buffers.prepare(replay);
    d->check(d->cuGraphLaunch(exec, stream), "cuGraphLaunch");
    d->check(d->cuStreamSynchronize(stream), "cuStreamSynchronize");
    comm.synchronize();
    failed_replays += buffers.wrong_elements() != 0;
  }
  EXPECT_EQ(failed_replays, 0u) << "of 100 replays";
  d->cuGraphExecDestroy(exec);
  d->cuGraphDestroy(graph);
  d->cuStreamDestroy(stream);
}

// Rank 1 never issues the collective: rank 0 must fail within the timeout, not hang or succeed.
// Ranks on one device are one grid, launched together, so this needs two devices.
TEST(CudaCommunicator, ARankThatNeverLaunchesTimesOut) {
  CCC_REQUIRE_GPU(d);
  if (d->device_count() < 2) GTEST_SKIP() << "needs two CUDA devices (virtual ranks are one grid, launched together)";
  CommOptions o;
  o.timeout_seconds = 2;
  Communicator comm = Communicator::cuda({0, 1}, o);
  DeviceCollective buffers(*d, shape_of(Collective::AllReduce, 4096, DataType::F32, ReduceOp::Sum), 2, false, 2);
  buffers.prepare(1);
  const CollectiveCall& c = buffers.call();
  comm.run_rank(c, 0, c.send[0], c.recv[0]);
  try {
    comm.synchronize_rank(0);
    FAIL() << "rank 0 succeeded without its peer";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Remote) << e.what();
    EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
  }
}

TEST(CudaCommunicator, RejectsHostMemory) {
  CCC_REQUIRE_GPU(d);
  Communicator comm = Communicator::cuda_virtual(0, 2);
  std::vector<float> a(16), b(16);
  const void* send[] = {a.data(), b.data()};
  void* recv[] = {a.data(), b.data()};
  try {
    comm.all_reduce(send, recv, 16, DataType::F32, ReduceOp::Sum);
    FAIL() << "host memory accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("is not CUDA device memory"), std::string::npos) << e.what();
  }
}

TEST(CudaCommunicator, WithoutADeviceCreationFailsCleanly) {
  std::string reason;
  if (driver_or_skip_reason(reason) != nullptr) GTEST_SKIP() << "a CUDA device is present";
  try {
    Communicator::cuda_virtual(0, 4);
    FAIL() << "created without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NoDevice);
    EXPECT_EQ(std::string(e.what()).rfind("no CUDA device", 0), 0u) << e.what();
  }
}
