// The driver is opened with dlopen: without one, everything reports "no CUDA device" cleanly.
#include <gtest/gtest.h>

#include <filesystem>

#include "cuda_driver.h"

using namespace ccc;

namespace {

std::string open_failure(const std::string& library) {
  try {
    CudaDriver::open(library);
  } catch (const NoCudaDevice& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CudaDriver, MissingLibraryIsNoCudaDevice) {
  const std::string what = open_failure("libcuda-that-does-not-exist.so.1");
  EXPECT_EQ(what.rfind("no CUDA device: cannot load the driver", 0), 0u) << what;
}

TEST(CudaDriver, ToolkitStubLibraryIsNoCudaDevice) {
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub)) GTEST_SKIP() << "no stub driver at " << stub;
  const std::string what = open_failure(stub);
  EXPECT_EQ(what.rfind("no CUDA device: cuInit failed", 0), 0u) << what;
}

TEST(CudaDriver, ProcessDriverFailsTheSameWayEveryTime) {
  try {
    const CudaDriver& d = CudaDriver::get();
    GTEST_SKIP() << "a CUDA driver with " << d.device_count() << " device(s) is present";
  } catch (const NoCudaDevice& first) {
    try {
      CudaDriver::get();
      FAIL() << "the second get() succeeded";
    } catch (const NoCudaDevice& second) {
      EXPECT_STREQ(first.what(), second.what());
    }
  }
}
