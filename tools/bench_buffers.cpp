#include "bench_buffers.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "cuda_backend.h"
#include "cuda_driver.h"

namespace ccc::bench {
namespace {

double wall_clock_per_call(const std::function<void()>& issue, const std::function<void()>& wait, int calls) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) issue();
  wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
}

class HostMemory : public RankMemory {
 public:
  explicit HostMemory(bool zeroed) : zeroed_(zeroed) {}
  void* alloc(int, uint64_t bytes) override {
    blocks_.push_back(zeroed_ ? std::make_unique<uint64_t[]>(bytes / 8 + 1)
                              : std::make_unique_for_overwrite<uint64_t[]>(bytes / 8 + 1));
    return blocks_.back().get();
  }
  void upload(int, void* dst, const void* src, uint64_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(int, void* dst, const void* src, uint64_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(int, void* dst, const void* src, uint64_t bytes) override { std::memcpy(dst, src, bytes); }
  void* stream(int) override { return nullptr; }
  void synchronize(int) override {}
  double time_calls(const std::function<void()>& issue, const std::function<void()>& wait, int calls) override {
    return wall_clock_per_call(issue, wait, calls);
  }
  double time_graph(const std::function<void()>&, int, int) override {
    throw std::runtime_error("CUDA graphs (-G) need the cuda backend");
  }

 private:
  bool zeroed_;
  std::vector<std::unique_ptr<uint64_t[]>> blocks_;
};

class CudaMemory : public RankMemory {
 public:
  explicit CudaMemory(const std::vector<int>& devices) : driver_(CudaDriver::get()) {
    for (int ordinal : devices) {
      Device d;
      driver_.check(driver_.cuDeviceGet(&d.dev, ordinal), "cuDeviceGet");
      driver_.check(driver_.cuDevicePrimaryCtxRetain(&d.ctx, d.dev), "cuDevicePrimaryCtxRetain");
      driver_.check(driver_.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent");
      driver_.check(driver_.cuStreamCreate(&d.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      devices_.push_back(d);
    }
  }
  ~CudaMemory() override {
    for (auto& [rank, p] : allocations_) {
      use(rank);
      driver_.cuMemFree(p);
    }
    for (const Device& d : devices_) {
      driver_.cuCtxSetCurrent(d.ctx);
      driver_.cuStreamSynchronize(d.stream);
      driver_.cuStreamDestroy(d.stream);
      driver_.cuDevicePrimaryCtxRelease(d.dev);
    }
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
    driver_.check(driver_.cuStreamSynchronize(device(rank).stream), "cuStreamSynchronize");
    driver_.check(driver_.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
  }
  void download(int rank, void* dst, const void* src, uint64_t bytes) override {
    use(rank);
    driver_.check(driver_.cuStreamSynchronize(device(rank).stream), "cuStreamSynchronize");
    driver_.check(driver_.cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), "cuMemcpyDtoH");
  }
  void copy(int rank, void* dst, const void* src, uint64_t bytes) override {
    use(rank);
    driver_.check(driver_.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src),
                                            bytes, device(rank).stream),
                  "cuMemcpyDtoDAsync");
  }
  void* stream(int rank) override { return device(rank).stream; }
  void synchronize(int rank) override {
    use(rank);
    driver_.check(driver_.cuStreamSynchronize(device(rank).stream), "cuStreamSynchronize");
  }
  double time_calls(const std::function<void()>& issue, const std::function<void()>& wait, int calls) override {
    if (devices_.size() > 1) return wall_clock_per_call(issue, wait, calls);  // no one stream to time on
    return timed_on_stream([&] {
      for (int i = 0; i < calls; ++i) issue();
    }) / calls;
  }
  double time_graph(const std::function<void()>& issue, int calls, int replays) override {
    if (devices_.size() > 1) throw std::runtime_error("CUDA graphs (-G) are timed on one device (virtual ranks)");
    const Device& d = devices_[0];
    use(0);
    driver_.check(driver_.cuStreamBeginCapture(d.stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    try {
      for (int i = 0; i < calls; ++i) issue();
    } catch (...) {
      CUgraph broken = nullptr;
      driver_.cuStreamEndCapture(d.stream, &broken);
      if (broken != nullptr) driver_.cuGraphDestroy(broken);
      throw;
    }
    CUgraph graph = nullptr;
    driver_.check(driver_.cuStreamEndCapture(d.stream, &graph), "cuStreamEndCapture");
    CUgraphExec exec = nullptr;
    const CUresult instantiated = driver_.cuGraphInstantiate(&exec, graph, 0);
    driver_.cuGraphDestroy(graph);
    driver_.check(instantiated, "cuGraphInstantiate");
    auto launch = [&] { driver_.check(driver_.cuGraphLaunch(exec, d.stream), "cuGraphLaunch"); };
    double seconds = 0;
    try {
      launch();  // the first launch uploads the graph
      seconds = timed_on_stream([&] {
        for (int i = 0; i < replays; ++i) launch();
      });
    } catch (...) {
      driver_.cuGraphExecDestroy(exec);
      throw;
    }
    driver_.cuGraphExecDestroy(exec);
    return seconds / (static_cast<double>(calls) * replays);
  }

 private:
  struct Device {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    CUstream stream = nullptr;
  };
  const Device& device(int rank) const { return devices_[devices_.size() == 1 ? 0 : rank]; }
  void use(int rank) const { driver_.check(driver_.cuCtxSetCurrent(device(rank).ctx), "cuCtxSetCurrent"); }

  // Seconds between CUDA events recorded on device 0's stream before and after `enqueue`.
  template <typename Enqueue>
  double timed_on_stream(Enqueue&& enqueue) {
    use(0);
    const CUstream s = devices_[0].stream;
    CUevent start = nullptr, stop = nullptr;
    driver_.check(driver_.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    driver_.check(driver_.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
    float ms = 0;
    try {
      driver_.check(driver_.cuEventRecord(start, s), "cuEventRecord");
      enqueue();
      use(0);
      driver_.check(driver_.cuEventRecord(stop, s), "cuEventRecord");
      driver_.check(driver_.cuEventSynchronize(stop), "cuEventSynchronize");
      driver_.check(driver_.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    } catch (...) {
      driver_.cuEventDestroy(start);
      driver_.cuEventDestroy(stop);
      throw;
    }
    driver_.cuEventDestroy(start);
    driver_.cuEventDestroy(stop);
    return ms / 1e3;
  }

  const CudaDriver& driver_;
  std::vector<Device> devices_;
  std::vector<std::pair<int, CUdeviceptr>> allocations_;
};

}  // namespace

std::unique_ptr<RankMemory> host_memory(bool zeroed) { return std::make_unique<HostMemory>(zeroed); }
std::unique_ptr<RankMemory> cuda_memory(const std::vector<int>& devices) {
  return std::make_unique<CudaMemory>(devices);
}

std::string describe_cuda_devices() {
  const CudaDriver& d = CudaDriver::get();
  CUdevice dev = 0;
  d.check(d.cuDeviceGet(&dev, 0), "cuDeviceGet");
  char name[256] = {};
  d.check(d.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  int major = 0, minor = 0, version = 0;
  d.check(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  d.check(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  d.check(d.cuDriverGetVersion(&version), "cuDriverGetVersion");
  return fmt::format("{}, {}, {} device{}, driver {}.{}", name, cuda_arch_name(major, minor), d.device_count(),
                     d.device_count() == 1 ? "" : "s", version / 1000, version % 1000 / 10);
}

}  // namespace ccc::bench
