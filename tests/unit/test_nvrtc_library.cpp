// Where ccc finds NVRTC (nvrtc_library.h): the documented order, a wheel's library found where
// PyTorch's pip install puts it, and an error that names every place tried.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nvrtc_library.h"

namespace ccc {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for one scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(NvrtcLibrary, LooksWhereTheDocsSayInThatOrder) {
  ScopedEnv file("CCC_NVRTC", "/opt/mine/libnvrtc.so.12"), home("CUDA_HOME", "/opt/cuda-12.8"), path("CUDA_PATH", nullptr);
  const std::string site = "/venv/lib/python3.11/site-packages";
  const std::vector<std::string> expected = {
      "/opt/mine/libnvrtc.so.12",
      "/opt/cuda-12.8/lib64/libnvrtc.so.13", "/opt/cuda-12.8/lib64/libnvrtc.so.12", "/opt/cuda-12.8/lib64/libnvrtc.so",
      "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so",
      "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
      site + "/nvidia/cu13/lib/libnvrtc.so.13", site + "/nvidia/cu13/lib/libnvrtc.so.12", site + "/nvidia/cu13/lib/libnvrtc.so",
      site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.13", site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
      site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so"};
  EXPECT_EQ(nvrtc_candidates({site}), expected);
}

// A machine whose only NVRTC is a Python wheel's (CUDA 12, as PyTorch's pip install brings it).
TEST(NvrtcLibrary, FindsAWheelsNvrtcAndNamesEveryPlaceItTried) {
  const fs::path site = fs::path(::testing::TempDir()) / "nvrtc-wheel" / "site-packages";
  const fs::path lib = site / "nvidia" / "cuda_nvrtc" / "lib";
  fs::create_directories(lib);
  fs::copy_file(CCC_FAKE_NVRTC, lib / "libnvrtc.so.12", fs::copy_options::overwrite_existing);
  std::vector<std::string> in_the_wheels;  // not the toolkit this machine has
  for (const std::string& c : nvrtc_candidates({site.string()}))
    if (c.rfind(site.string(), 0) == 0) in_the_wheels.push_back(c);
  const NvrtcLibrary found = load_nvrtc(in_the_wheels);
  EXPECT_EQ(found.path, (lib / "libnvrtc.so.12").string());
  EXPECT_EQ(found.major, 12);
  EXPECT_EQ(found.minor, 9);
  try {
    load_nvrtc({"/nowhere/libnvrtc.so.13", "/nowhere/libnvrtc.so.12"});
    FAIL() << "loaded an NVRTC from nowhere";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/nowhere/libnvrtc.so.13: "), std::string::npos) << what;
    EXPECT_NE(what.find("/nowhere/libnvrtc.so.12: "), std::string::npos) << what;
    EXPECT_NE(what.find("CCC_NVRTC"), std::string::npos) << what;
  }
  fs::remove_all(site.parent_path());
}

TEST(NvrtcLibrary, ThisProcessLoadsTheToolkitsNvrtc) {
  std::string why;
  const NvrtcLibrary* lib = nvrtc_library(&why);
  ASSERT_NE(lib, nullptr) << why;
  EXPECT_GE(lib->major, 12);
  EXPECT_FALSE(lib->path.empty());
}

}  // namespace
}  // namespace ccc
