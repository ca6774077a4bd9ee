// The CUDA driver API, opened at run time with dlopen (libcuda.so.1, or $CCC_LIBCUDA), so that
// the library, `ccc` and the tests start on machines without a driver and report "no CUDA
// device" cleanly. cuda.h supplies the types and signatures only; nothing links against libcuda.
#pragma once

#include <cuda.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace ccc {

// A driver call failed; what() names the call and the driver's error.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// No usable driver or device: libcuda missing, cuInit failing (e.g. the toolkit's stub library),
// or zero devices.
class NoCudaDevice : public CudaError {
 public:
  using CudaError::CudaError;
};

// Every driver entry point ccc uses. cuda.h maps some names to versioned symbols
// (cuMemAlloc -> cuMemAlloc_v2); the members and dlsym follow the same mapping.
#define CCC_CUDA_DRIVER_FUNCTIONS(X)                                                        \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)    \
  X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceGetPCIBusId) X(cuDeviceCanAccessPeer)  \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)               \
  X(cuCtxEnablePeerAccess) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)        \
  X(cuModuleGetFunction) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)       \
  X(cuMemcpyDtoH) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuPointerGetAttribute)           \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize)            \
  X(cuEventElapsedTime) X(cuEventDestroy) X(cuCtxGetCurrent) X(cuLaunchCooperativeKernel)    \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) X(cuStreamIsCapturing) X(cuStreamCreate)      \
  X(cuStreamDestroy) X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate)     \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)                                   \
  /* multi-process: the arena every rank maps (cuda_arena.h), staging, abort */               \
  X(cuCtxGetDevice) X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease)          \
  X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle) X(cuMemAddressReserve)    \
  X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemcpyAsync)            \
  X(cuMemsetD32Async) X(cuMemcpyDtoHAsync)                                                   \
  /* multi-process: registering the user's buffers (cccCommRegister, cuda_registry.h) */      \
  X(cuMemGetAddressRange) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)   \
  /* programmatic dependent launch (cuda_backend.cpp); a CUDA 12.0 driver or newer */          \
  X(cuLaunchKernelEx)

class CudaDriver {
 public:
  // The process-wide driver, opened and initialised on first use; throws NoCudaDevice.
  static const CudaDriver& get();
  // Opens `library` and initialises it (tests use this to exercise the failure paths).
  static std::unique_ptr<CudaDriver> open(const std::string& library);

  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  // Throws CudaError("<what>: <driver error string>") unless r is CUDA_SUCCESS.
  void check(CUresult r, const char* what) const;

  int device_count() const { return device_count_; }

#define CCC_CUDA_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  CCC_CUDA_DRIVER_FUNCTIONS(CCC_CUDA_DRIVER_MEMBER)
#undef CCC_CUDA_DRIVER_MEMBER
  // Optional (a CUDA 12.4 driver or newer; null before): loads a function now rather than at
  // its first launch (CudaRanks::load).
  decltype(&::cuFuncLoad) cuFuncLoad = nullptr;

 private:
  CudaDriver() = default;
  void* library_ = nullptr;
  int device_count_ = 0;
};

// Saves the calling thread's current context and restores it when it goes (best effort: a
// failing driver at that point has nothing left to report to), so that a public entry point that
// switches contexts leaves the caller's as it was.
class CudaContextGuard {
 public:
  explicit CudaContextGuard(const CudaDriver& driver) : driver_(driver) {
    driver_.check(driver_.cuCtxGetCurrent(&saved_), "cuCtxGetCurrent");
  }
  ~CudaContextGuard() { driver_.cuCtxSetCurrent(saved_); }
  CudaContextGuard(const CudaContextGuard&) = delete;
  CudaContextGuard& operator=(const CudaContextGuard&) = delete;

 private:
  const CudaDriver& driver_;
  CUcontext saved_ = nullptr;
};

}  // namespace ccc
