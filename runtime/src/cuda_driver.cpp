#include "cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

namespace ccc {

namespace {
#define CCC_STRINGIFY(x) #x
#define CCC_EXPANDED_NAME(x) CCC_STRINGIFY(x)  // after cuda.h's versioning macros
}  // namespace

std::unique_ptr<CudaDriver> CudaDriver::open(const std::string& library) {
  std::unique_ptr<CudaDriver> d(new CudaDriver);
  d->library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (d->library_ == nullptr)
    throw NoCudaDevice(fmt::format("no CUDA device: cannot load the driver ({})", dlerror()));
#define CCC_CUDA_DRIVER_LOAD(name)                                                         \
  d->name = reinterpret_cast<decltype(d->name)>(dlsym(d->library_, CCC_EXPANDED_NAME(name))); \
  if (d->name == nullptr)                                                                  \
    throw NoCudaDevice(fmt::format("no CUDA device: {} lacks {} (driver too old?)", library,   \
                                   CCC_EXPANDED_NAME(name)));
  CCC_CUDA_DRIVER_FUNCTIONS(CCC_CUDA_DRIVER_LOAD)
#undef CCC_CUDA_DRIVER_LOAD
  d->cuFuncLoad = reinterpret_cast<decltype(d->cuFuncLoad)>(dlsym(d->library_, "cuFuncLoad"));
  if (CUresult r = d->cuInit(0); r != CUDA_SUCCESS) {
    const char* text = nullptr;
    d->cuGetErrorString(r, &text);
    throw NoCudaDevice(fmt::format("no CUDA device: cuInit failed ({})", text ? text : "unknown error"));
  }
  if (d->cuDeviceGetCount(&d->device_count_) != CUDA_SUCCESS || d->device_count_ == 0)
    throw NoCudaDevice("no CUDA device: the driver reports none");
  return d;
}

const CudaDriver& CudaDriver::get() {
  // Opened once; a failure is remembered and rethrown with the same message.
  static std::once_flag once;
  static std::unique_ptr<CudaDriver> driver;
  static std::string failure;
  std::call_once(once, [] {
    const char* library = std::getenv("CCC_LIBCUDA");
    try {
      driver = open(library != nullptr && *library != '\0' ? library : "libcuda.so.1");
    } catch (const NoCudaDevice& e) {
      failure = e.what();
    }
  });
  if (!driver) throw NoCudaDevice(failure);
  return *driver;
}

CudaDriver::~CudaDriver() {
  if (library_ != nullptr) dlclose(library_);
}

void CudaDriver::check(CUresult r, const char* what) const {
  if (r == CUDA_SUCCESS) return;
  const char* text = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  throw CudaError(fmt::format("{}: {}", what, text != nullptr ? text : fmt::format("CUDA error {}", static_cast<int>(r))));
}

}  // namespace ccc
