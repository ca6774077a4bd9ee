#include "ccc/cuda_backend.h"

#include <fmt/format.h>

#include "ccc/collective_types.h"

namespace ccc {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, message);
}

}  // namespace

CudaLaunchShape cuda_launch_shape(int rank, int nranks, int channels, int threads_per_block) {
  const int blocks = rank < 0 ? nranks * channels : channels;
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(threads_per_block)};
}

std::vector<void*> cuda_kernel_params(ccc_launch_args& args) { return {&args}; }

std::string cuda_arch_name(int major, int minor) { return fmt::format("sm_{}{}", major, minor); }

CudaRanks::CudaRanks(std::vector<int> devices, int virtual_ranks, int max_channels)
    : driver_(CudaDriver::get()), virtual_ranks_(virtual_ranks > 0), max_channels_(max_channels) {
  if (devices.empty()) invalid("no CUDA devices given");
  if (virtual_ranks_ && devices.size() != 1)
    invalid(fmt::format("virtual ranks run on one device, got {} devices", devices.size()));
  for (size_t i = 0; i < devices.size(); ++i) {
    const int ordinal = devices[i];
    if (ordinal < 0 || ordinal >= driver_.device_count())
      invalid(fmt::format("CUDA device {} does not exist ({} present)", ordinal, driver_.device_count()));
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == ordinal) invalid(fmt::format("CUDA device {} is listed twice", ordinal));
    Device d;
    d.ordinal = ordinal;
    CUdevice dev = 0;
    driver_.check(driver_.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    driver_.check(driver_.cuDevicePrimaryCtxRetain(&d.context, dev), "cuDevicePrimaryCtxRetain");
    devices_.push_back(d);
    int major = 0, minor = 0;
    driver_.check(driver_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
    driver_.check(driver_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
    const std::string arch = cuda_arch_name(major, minor);
    if (i == 0) arch_ = arch;
    if (arch != arch_)
      invalid(fmt::format("CUDA devices {} ({}) and {} ({}) differ in architecture", devices[0], arch_, ordinal, arch));
  }
  for (const Device& a : devices_) {
    for (const Device& b : devices_) {
      if (a.ordinal == b.ordinal) continue;
      int can = 0;
      driver_.check(driver_.cuDeviceCanAccessPeer(&can, a.ordinal, b.ordinal), "cuDeviceCanAccessPeer");
      if (!can) invalid(fmt::format("CUDA device {} cannot access device {}'s memory (no peer access)", a.ordinal, b.ordinal));
      use(a);
      const CUresult r = driver_.cuCtxEnablePeerAccess(b.context, 0);
      if (r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) driver_.check(r, "cuCtxEnablePeerAccess");
    }
  }
  const int n = virtual_ranks_ ? virtual_ranks : static_cast<int>(devices_.size());
  for (int r = 0; r < n; ++r) rank_device_.push_back(virtual_ranks_ ? 0 : r);
  use(devices_[0]);
  error_ = alloc_zeroed(sizeof(unsigned) * n);
  for (Device& d : devices_) {
    use(d);
    d.rank_table = alloc_zeroed(sizeof(ccc_rank_buffers) * n);
    d.epoch = alloc_zeroed(sizeof(unsigned long long) * n);
  }
  for (int r = 0; r < n; ++r) {
    use(devices_[rank_device_[r]]);
    ranks_.push_back({rank_device_[r], alloc_zeroed(sizeof(unsigned long long) * max_channels), 0});
  }
}

CudaRanks::~CudaRanks() {
  // Best effort: a failing driver at teardown has nothing left to report to.
  for (const Rank& r : ranks_) {
    use(devices_[r.device]);
    driver_.cuMemFree(r.progress);
    if (r.scratch != 0) driver_.cuMemFree(r.scratch);
  }
  for (const Device& d : devices_) {
    use(d);
    driver_.cuMemFree(d.rank_table);
    driver_.cuMemFree(d.epoch);
    if (&d == &devices_[0] && error_ != 0) driver_.cuMemFree(error_);
    for (CUmodule m : d.modules) driver_.cuModuleUnload(m);
    CUdevice dev = 0;
    if (driver_.cuDeviceGet(&dev, d.ordinal) == CUDA_SUCCESS) driver_.cuDevicePrimaryCtxRelease(dev);
  }
}

void CudaRanks::use(const Device& d) const {
  driver_.check(driver_.cuCtxSetCurrent(d.context), "cuCtxSetCurrent");
}

CUdeviceptr CudaRanks::alloc_zeroed(uint64_t bytes) {
  CUdeviceptr p = 0;
  driver_.check(driver_.cuMemAlloc(&p, bytes), "cuMemAlloc");
  driver_.check(driver_.cuMemsetD8(p, 0, bytes), "cuMemsetD8");
  return p;
}

int CudaRanks::load(const std::string& cubin, const std::string& kernel_name) {
  for (Device& d : devices_) {
    use(d);
    CUmodule module = nullptr;
    driver_.check(driver_.cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
    d.modules.push_back(module);
    CUfunction f = nullptr;
    driver_.check(driver_.cuModuleGetFunction(&f, module, kernel_name.c_str()), "cuModuleGetFunction");
    d.functions.push_back(f);
  }
  return static_cast<int>(devices_[0].functions.size()) - 1;
}

void CudaRanks::check_buffer(int rank, const void* p, const char* what) const {
  int ordinal = -1;
  const CUresult r = driver_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                   reinterpret_cast<CUdeviceptr>(p));
  const int expected = devices_[rank_device_[rank]].ordinal;
  if (r != CUDA_SUCCESS)
    invalid(fmt::format("rank {}: {} buffer {} is not CUDA device memory", rank, what, p));
  if (ordinal != expected)
    invalid(fmt::format("rank {}: {} buffer {} is on CUDA device {}, the rank's device is {}", rank,
                        what, p, ordinal, expected));
}

void CudaRanks::launch(int kernel, int channels, int threads, std::span<const void* const> send,
                       std::span<void* const> recv, uint64_t count, uint64_t scratch_bytes,
                       uint64_t timeout_ns, std::span<void* const> streams) {
  const int n = nranks();
  if (channels < 1 || channels > max_channels_)
    throw Error(ErrorKind::Internal, fmt::format("a kernel with {} channels on a communicator "
                                                 "built for at most {}", channels, max_channels_));
  if (virtual_ranks_) {
    int sms = 0;
    CUdevice dev = 0;
    driver_.check(driver_.cuDeviceGet(&dev, devices_[0].ordinal), "cuDeviceGet");
    driver_.check(driver_.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
    if (n * channels > sms)  // every block waits on others: all must be resident at once
      invalid(fmt::format("{} virtual ranks x {} channels need {} co-resident blocks; device {} has {} SMs",
                          n, channels, n * channels, devices_[0].ordinal, sms));
  }
  const bool table_changes = scratch_bytes > scratch_bytes_ || table_.size() != static_cast<size_t>(n) ||
      [&] {
        for (int r = 0; r < n; ++r)
          if (table_[r].input != send[r] || table_[r].output != recv[r]) return true;
        return false;
      }();
  if (table_changes) {
    // Earlier launches may still read the old table or scratch.
    for (const Device& d : devices_) {
      use(d);
      driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
    }
    if (scratch_bytes > scratch_bytes_) {
      for (Rank& r : ranks_) {
        use(devices_[r.device]);
        if (r.scratch != 0) driver_.check(driver_.cuMemFree(r.scratch), "cuMemFree");
        driver_.check(driver_.cuMemAlloc(&r.scratch, scratch_bytes), "cuMemAlloc");
      }
      scratch_bytes_ = scratch_bytes;
    }
    table_.resize(n);
    for (int r = 0; r < n; ++r)
      table_[r] = {send[r], recv[r], reinterpret_cast<void*>(ranks_[r].scratch),
                   reinterpret_cast<unsigned long long*>(ranks_[r].progress)};
    for (const Device& d : devices_) {
      use(d);
      driver_.check(driver_.cuMemcpyHtoD(d.rank_table, table_.data(), sizeof(ccc_rank_buffers) * n), "cuMemcpyHtoD");
    }
  }
  const int launches = virtual_ranks_ ? 1 : n;
  for (int i = 0; i < launches; ++i) {
    const Device& d = devices_[virtual_ranks_ ? 0 : rank_device_[i]];
    use(d);
    ccc_launch_args args{reinterpret_cast<const ccc_rank_buffers*>(d.rank_table), count,
                         virtual_ranks_ ? -1 : i, reinterpret_cast<unsigned long long*>(d.epoch),
                         reinterpret_cast<unsigned*>(error_), timeout_ns};
    const CudaLaunchShape shape = cuda_launch_shape(args.rank, n, channels, threads);
    std::vector<void*> params = cuda_kernel_params(args);
    CUstream stream = streams.empty() ? nullptr : static_cast<CUstream>(streams[i]);
    driver_.check(driver_.cuLaunchKernel(d.functions.at(kernel), shape.grid, 1, 1, shape.block, 1, 1,
                                         0, stream, params.data(), nullptr),
                  "cuLaunchKernel");
  }
}

void CudaRanks::reset_sync_state() {
  const int n = nranks();
  for (const Rank& r : ranks_) {
    use(devices_[r.device]);
    driver_.check(driver_.cuMemsetD8(r.progress, 0, sizeof(unsigned long long) * max_channels_), "cuMemsetD8");
  }
  for (const Device& d : devices_) {
    use(d);
    driver_.check(driver_.cuMemsetD8(d.epoch, 0, sizeof(unsigned long long) * n), "cuMemsetD8");
  }
  use(devices_[0]);
  driver_.check(driver_.cuMemsetD8(error_, 0, sizeof(unsigned) * n), "cuMemsetD8");
  driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
}

void CudaRanks::synchronize() {
  for (const Device& d : devices_) {
    use(d);
    driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
  }
  std::vector<unsigned> errors(nranks());
  use(devices_[0]);
  driver_.check(driver_.cuMemcpyDtoH(errors.data(), error_, sizeof(unsigned) * errors.size()), "cuMemcpyDtoH");
  const std::string failures = launch_failures(errors.data(), nranks());
  if (failures.empty()) return;
  reset_sync_state();
  throw Error(ErrorKind::Remote, "collective failed: " + failures);
}

}  // namespace ccc
