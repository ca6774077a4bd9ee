#include "bench_buffers.h"

#include <chrono>
#include <cstring>

#include "ccc/cuda_driver.h"

namespace ccc::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class HostMemory : public RankMemory {
 public:
  void* alloc(int, uint64_t bytes) override {
    blocks_.push_back(std::make_unique<uint64_t[]>(bytes / 8 + 1));
    return blocks_.back().get();
  }
  void upload(int, void* dst, const void* src, uint64_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(int, void* dst, const void* src, uint64_t bytes) override { std::memcpy(dst, src, bytes); }
  double time_copy(int, void* dst, const void* src, uint64_t bytes, int iters) override {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) std::memcpy(dst, src, bytes);
    return seconds_since(start) / iters;
  }

 private:
  std::vector<std::unique_ptr<uint64_t[]>> blocks_;
};

class CudaMemory : public RankMemory {
 public:
  explicit CudaMemory(const std::vector<int>& devices) : driver_(CudaDriver::get()) {
    for (int ordinal : devices) {
      CUdevice dev = 0;
      driver_.check(driver_.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
      CUcontext ctx = nullptr;
      driver_.check(driver_.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      devices_.push_back({dev, ctx});
    }
  }
  ~CudaMemory() override {
    for (auto& [rank, p] : allocations_) {
      use(rank);
      driver_.cuMemFree(p);
    }
    for (const Device& d : devices_) driver_.cuDevicePrimaryCtxRelease(d.dev);
  }
  void* alloc(int rank, uint64_t bytes) override {
    use(rank);
    CUdeviceptr p = 0;
    driver_.check(driver_.cuMemAlloc(&p, bytes), "cuMemAlloc");
    allocations_.push_back({rank, p});
    return reinterpret_cast<void*>(p);
  }
  void upload(int rank, void* dst, const void* src, uint64_t bytes) override {
    use(rank);
    driver_.check(driver_.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
  }
  void download(int rank, void* dst, const void* src, uint64_t bytes) override {
    use(rank);
    driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
    driver_.check(driver_.cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), "cuMemcpyDtoH");
  }
  double time_copy(int rank, void* dst, const void* src, uint64_t bytes, int iters) override {
    use(rank);
    driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
    CUevent start = nullptr, stop = nullptr;
    driver_.check(driver_.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    driver_.check(driver_.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
    driver_.check(driver_.cuEventRecord(start, nullptr), "cuEventRecord");
    for (int i = 0; i < iters; ++i)
      driver_.check(driver_.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst),
                                              reinterpret_cast<CUdeviceptr>(src), bytes, nullptr),
                    "cuMemcpyDtoDAsync");
    driver_.check(driver_.cuEventRecord(stop, nullptr), "cuEventRecord");
    driver_.check(driver_.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    driver_.check(driver_.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    driver_.cuEventDestroy(start);
    driver_.cuEventDestroy(stop);
    return ms / 1e3 / iters;
  }

 private:
  struct Device {
    CUdevice dev;
    CUcontext ctx;
  };
  void use(int rank) const {
    const Device& d = devices_[devices_.size() == 1 ? 0 : rank];
    driver_.check(driver_.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent");
  }
  const CudaDriver& driver_;
  std::vector<Device> devices_;
  std::vector<std::pair<int, CUdeviceptr>> allocations_;
};

}  // namespace

std::unique_ptr<RankMemory> host_memory() { return std::make_unique<HostMemory>(); }
std::unique_ptr<RankMemory> cuda_memory(const std::vector<int>& devices) {
  return std::make_unique<CudaMemory>(devices);
}

}  // namespace ccc::bench
