#include "real_nccl.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

namespace ccc::nccl {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

// The file an address of a loaded object lives in, and where that object is loaded.
std::string file_of(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "";
}
const void* object_of(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) != 0 ? info.dli_fbase : nullptr;
}

// This library, by its load address (a file name can be relative, or renamed under us): a real
// NCCL must be another object.
bool is_this_library(const void* address) {
  return object_of(address) == object_of(reinterpret_cast<const void*>(&is_this_library));
}

// The nvidia-nccl wheel's library beside every site-packages directory in sight.
std::vector<std::string> wheel_candidates() {
  std::vector<std::string> dirs;
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr) {
    for (const char* python : {"python3.9", "python3.10", "python3.11", "python3.12", "python3.13", "python3.14"})
      dirs.push_back(fmt::format("{}/lib/{}/site-packages", venv, python));
  }
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string_view name = info->dlpi_name != nullptr ? info->dlpi_name : "";
        if (const size_t at = name.find("/site-packages/"); at != std::string_view::npos)
          static_cast<std::vector<std::string>*>(out)->emplace_back(name.substr(0, at + 14));
        return 0;
      },
      &dirs);
  std::vector<std::string> files;
  for (const std::string& dir : dirs) files.push_back(dir + "/nvidia/nccl/lib/" + kSoname);
  return files;
}

// libnccl.so.2 in the directories the dynamic loader searches, for when dlopen(kSoname) finds
// libccc-nccl itself.
std::vector<std::string> library_path_candidates() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("LD_LIBRARY_PATH"); path != nullptr) {
    std::string_view rest = path;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      dirs.emplace_back(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? "" : rest.substr(colon + 1);
    }
  }
  for (const char* dir : {"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                          "/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib64", "/usr/lib"})
    dirs.emplace_back(dir);
  std::vector<std::string> files;
  for (const std::string& dir : dirs)
    if (!dir.empty()) files.push_back(dir + "/" + kSoname);
  return files;
}

// Opens `file` as the real NCCL: a library that is not this one and has ncclGetVersion.
// RTLD_DEEPBIND: a NCCL opened here binds its calls of its own API to itself, not to ours (a NCCL
// the program loaded itself still calls ours: nccl_api.cpp's real_of passes those through).
void* open_real(const std::string& file, std::string& why, int extra_flags = 0) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND | extra_flags);
  if (handle == nullptr) {
    const char* error = dlerror();
    why = error != nullptr ? error : "dlopen failed";
    return nullptr;
  }
  void* version = dlsym(handle, "ncclGetVersion");
  if (version == nullptr || is_this_library(version)) {
    why = version == nullptr ? "it has no ncclGetVersion" : "it is libccc-nccl itself";
    dlclose(handle);
    return nullptr;
  }
  return handle;
}

struct Loaded {
  std::unique_ptr<RealNccl> nccl;
  std::string why_missing;
};

Loaded load() {
  Loaded out;
  std::vector<std::string> tried;
  void* handle = nullptr;
  std::string file, why;
  if (const char* forced = std::getenv("CCC_NCCL_LIB"); forced != nullptr && *forced != '\0') {
    file = forced;
    handle = open_real(file, why);
    if (handle == nullptr) {
      out.why_missing = fmt::format("$CCC_NCCL_LIB={} cannot be used: {}", file, why);
      return out;
    }
  }
  // The program's own NCCL, already loaded (libccc-nccl preloaded in front of it), comes first.
  if (handle == nullptr) handle = open_real(kSoname, why, RTLD_NOLOAD), file = kSoname;
  std::vector<std::string> candidates = wheel_candidates();
  candidates.emplace_back(kSoname);  // the loader's own search
  for (std::string& c : library_path_candidates()) candidates.push_back(std::move(c));
  for (size_t i = 0; handle == nullptr && i < candidates.size(); ++i) {
    file = candidates[i];
    handle = open_real(file, why);
    if (handle == nullptr && why.find("No such file") == std::string::npos) tried.push_back(file + ": " + why);
  }
  if (handle == nullptr) {
    out.why_missing = fmt::format(
        "no real NCCL ({}) was found: set $CCC_NCCL_LIB to its path, or install the "
        "nvidia-nccl-cu13 (or -cu12) wheel{}{}",
        kSoname, tried.empty() ? "" : "; tried ", fmt::join(tried, "; "));
    return out;
  }
  auto nccl = std::make_unique<RealNccl>();
  nccl->path = file_of(dlsym(handle, "ncclGetVersion"));
  // The handle stays open for the process's life: communicators may outlive any owner.
#define CCC_NCCL_RESOLVE(name) nccl->name = reinterpret_cast<decltype(nccl->name)>(dlsym(handle, #name));
  CCC_NCCL_FUNCTIONS(CCC_NCCL_RESOLVE)
#undef CCC_NCCL_RESOLVE
#define CCC_NCCL_TEAM_RESOLVE(name, type) nccl->name = reinterpret_cast<type>(dlsym(handle, #name));
  CCC_NCCL_TEAM_FUNCTIONS(CCC_NCCL_TEAM_RESOLVE)
#undef CCC_NCCL_TEAM_RESOLVE
  out.nccl = std::move(nccl);
  return out;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const RealNccl* RealNccl::get() { return loaded().nccl.get(); }
const std::string& RealNccl::why_missing() { return loaded().why_missing; }

}  // namespace ccc::nccl
