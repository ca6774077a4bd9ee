#include "nvrtc_library.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "debug_log.h"

namespace ccc {

namespace {

constexpr const char* kSonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};

std::mutex g_mutex;  // the site-packages list and the one load
std::vector<std::string> g_site_packages;

// Opens `path` and finds every function, or says why not.
bool try_load(const std::string& path, NvrtcLibrary& lib, std::string& why) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    why = e != nullptr ? e : "cannot be opened";
    return false;
  }
  bool complete = true;
  auto find = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && complete) {
      why = fmt::format("lacks {}", name);
      complete = false;
    }
  };
  find(lib.Version, "nvrtcVersion");
  find(lib.GetErrorString, "nvrtcGetErrorString");
  find(lib.CreateProgram, "nvrtcCreateProgram");
  find(lib.DestroyProgram, "nvrtcDestroyProgram");
  find(lib.CompileProgram, "nvrtcCompileProgram");
  find(lib.GetProgramLogSize, "nvrtcGetProgramLogSize");
  find(lib.GetProgramLog, "nvrtcGetProgramLog");
  find(lib.GetPTXSize, "nvrtcGetPTXSize");
  find(lib.GetPTX, "nvrtcGetPTX");
  find(lib.GetCUBINSize, "nvrtcGetCUBINSize");
  find(lib.GetCUBIN, "nvrtcGetCUBIN");
  if (complete && (lib.Version(&lib.major, &lib.minor) != NVRTC_SUCCESS || lib.major < 12)) {
    why = fmt::format("is NVRTC {}.{}; ccc needs 12 or newer", lib.major, lib.minor);
    complete = false;
  }
  if (!complete) {
    dlclose(handle);
    return false;
  }
  lib.path = path;  // the handle stays open for the process's life
  return true;
}

}  // namespace

std::vector<std::string> nvrtc_candidates(const std::vector<std::string>& site_packages) {
  std::vector<std::string> out;
  if (const char* file = std::getenv("CCC_NVRTC"); file != nullptr && *file != '\0') out.push_back(file);
  std::vector<std::string> toolkits;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* dir = std::getenv(var); dir != nullptr && *dir != '\0') toolkits.push_back(dir);
  toolkits.push_back("/usr/local/cuda");
  for (const std::string& t : toolkits)
    for (const char* name : kSonames) out.push_back(fmt::format("{}/lib64/{}", t, name));
  for (const char* name : kSonames) out.push_back(name);  // the loader's own search
  for (const std::string& site : site_packages)
    for (const char* wheel : {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"})
      for (const char* name : kSonames) out.push_back(fmt::format("{}/{}/{}", site, wheel, name));
  return out;
}

NvrtcLibrary load_nvrtc(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& path : candidates) {
    NvrtcLibrary lib;
    std::string why;
    if (try_load(path, lib, why)) return lib;
    tried += fmt::format("\n  {}: {}", path, why);
  }
  throw std::runtime_error(fmt::format(
      "no usable NVRTC (CUDA 12 or 13's libnvrtc; set CCC_NVRTC to its file, or CUDA_HOME to the toolkit). "
      "Tried:{}",
      tried));
}

const NvrtcLibrary* nvrtc_library(std::string* why) {
  static std::once_flag once;
  static NvrtcLibrary lib;
  static bool loaded = false;
  static std::string failure;
  std::call_once(once, [] {
    std::vector<std::string> sites;
    {
      std::lock_guard lock(g_mutex);
      sites = g_site_packages;
    }
    try {
      lib = load_nvrtc(nvrtc_candidates(sites));
      loaded = true;
    } catch (const std::runtime_error& e) {
      failure = e.what();
    }
    debug_info(loaded ? fmt::format("NVRTC {}.{} from {}", lib.major, lib.minor, lib.path) : failure);
  });
  if (!loaded && why != nullptr) *why = failure;
  return loaded ? &lib : nullptr;
}

void add_nvrtc_site_packages(const std::vector<std::string>& dirs) {
  std::lock_guard lock(g_mutex);
  g_site_packages.insert(g_site_packages.end(), dirs.begin(), dirs.end());
}

}  // namespace ccc
