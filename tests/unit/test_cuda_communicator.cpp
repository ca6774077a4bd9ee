// The CUDA backend end to end: N virtual ranks on one device (one grid), checked against the
// reference. Skips with the reason on machines without a CUDA device (scripts/gpu-check.sh runs
// it on one).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ccc/collective_reference.h"
#include "ccc/communicator.h"
#include "ccc/cuda_driver.h"

using namespace ccc;

namespace {

const CudaDriver* driver_or_skip_reason(std::string& reason) {
  try {
    return &CudaDriver::get();
  } catch (const NoCudaDevice& e) {
    reason = e.what();
    return nullptr;
  }
}

// Device memory on device 0's primary context, freed at scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaDriver& d, uint64_t bytes) : d_(d) {
    d_.check(d_.cuDeviceGet(&dev_, 0), "cuDeviceGet");
    CUcontext ctx = nullptr;
    d_.check(d_.cuDevicePrimaryCtxRetain(&ctx, dev_), "cuDevicePrimaryCtxRetain");
    d_.check(d_.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    d_.check(d_.cuMemAlloc(&p_, bytes), "cuMemAlloc");
  }
  ~DeviceBuffer() {
    d_.cuMemFree(p_);
    d_.cuDevicePrimaryCtxRelease(dev_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(p_); }
  void upload(const void* src, uint64_t bytes) { d_.check(d_.cuMemcpyHtoD(p_, src, bytes), "cuMemcpyHtoD"); }
  void download(void* dst, uint64_t bytes) { d_.check(d_.cuMemcpyDtoH(dst, p_, bytes), "cuMemcpyDtoH"); }

 private:
  const CudaDriver& d_;
  CUdevice dev_ = 0;
  CUdeviceptr p_ = 0;
};

}  // namespace

TEST(CudaCommunicator, AllReduceOnVirtualRanks) {
  std::string reason;
  const CudaDriver* d = driver_or_skip_reason(reason);
  if (d == nullptr) GTEST_SKIP() << reason;
  const int n = 8;
  const uint64_t count = 1000003;
  for (const char* algo : {"ring", "twoshot", "oneshot"}) {
    for (DataType t : {DataType::F32, DataType::BF16, DataType::I32}) {
      CommOptions o;
      o.algo = algo;
      Communicator comm = Communicator::cuda_virtual(0, n, o);
      const uint64_t bytes = count * data_type_size(t);
      std::vector<std::unique_ptr<DeviceBuffer>> in, out;
      std::vector<std::vector<unsigned char>> host_in(n, std::vector<unsigned char>(bytes));
      std::vector<unsigned char> host_out(bytes);
      std::vector<const void*> send, inputs;
      std::vector<void*> recv;
      for (int r = 0; r < n; ++r) {
        in.push_back(std::make_unique<DeviceBuffer>(*d, bytes));
        out.push_back(std::make_unique<DeviceBuffer>(*d, bytes));
        fill_input(t, r, 3, count, host_in[r].data());
        in[r]->upload(host_in[r].data(), bytes);
        poison(t, count, host_out.data());
        out[r]->upload(host_out.data(), bytes);
        send.push_back(in[r]->get());
        recv.push_back(out[r]->get());
        inputs.push_back(host_in[r].data());
      }
      comm.all_reduce(send, recv, count, t, ReduceOp::Sum);
      comm.synchronize();
      CollectiveCall call;
      call.count = count;
      call.dtype = t;
      for (int r = 0; r < n; ++r) {
        out[r]->download(host_out.data(), bytes);
        EXPECT_EQ(count_wrong(call, n, r, inputs, host_out.data()), 0u) << algo << " " << data_type_name(t) << " rank " << r;
      }
    }
  }
}

TEST(CudaCommunicator, RejectsHostMemory) {
  std::string reason;
  if (driver_or_skip_reason(reason) == nullptr) GTEST_SKIP() << reason;
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
