#include "host_harness.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace ccc::testing {

HostLibrary::HostLibrary(const std::vector<EmittedKernel>& kernels, const std::string& tag, const std::string& prelude_dir) {
  const std::filesystem::path dir = std::filesystem::path(CCC_BINARY_DIR) / "host_kernels";
  std::filesystem::create_directories(dir);
  const std::filesystem::path src = dir / (tag + ".cpp"), lib = dir / (tag + ".so"), log = dir / (tag + ".log");
  {
    std::ofstream out(src);
    out << "#include \"ccc_device.h\"\n";
    for (size_t i = 0; i < kernels.size(); ++i) out << "namespace k" << i << " {\n" << kernels[i].source << "}\n";
  }
  const std::string cmd = std::string(CCC_HOST_CXX) + " -std=c++20 -O2 -fPIC -shared -Wall -Wextra -Werror " CCC_HOST_KERNEL_FLAGS +
                          " -I" + prelude_dir + " " + src.string() + " -o " + lib.string() + " > " + log.string() +
                          " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(log);
    error_ = cmd + "\n" + std::string(std::istreambuf_iterator<char>(in), {});
    return;
  }
  handle_ = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) error_ = dlerror();
}

HostLibrary::~HostLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

HostEntry HostLibrary::entry(const std::string& kernel_name) const {
  return handle_ == nullptr ? nullptr : reinterpret_cast<HostEntry>(dlsym(handle_, kernel_name.c_str()));
}

HostBuffers::HostBuffers(int nranks, uint64_t bytes, uint64_t scratch_bytes, uint64_t offset, bool in_place, uint64_t ll_bytes)
    : in_alloc(nranks), out_alloc(nranks), scratch_alloc(nranks), ll_alloc(nranks), sync(nranks), own(nranks) {
  for (Sync& s : sync) {
    s.inbox.assign(static_cast<size_t>(CCC_MAX_CHANNELS) * nranks, 0);
    state.push_back({s.progress, s.mailbox, &s.error, s.inbox.data(), nullptr});  // one process: no registry
  }
  for (int r = 0; r < nranks; ++r) {
    in_alloc[r].resize(bytes + offset + 64);
    scratch_alloc[r].resize(scratch_bytes + offset + 64);
    if (!in_place) out_alloc[r].resize(bytes + offset + 64);
    unsigned char* in = in_alloc[r].data() + offset;
    own[r].input = in;
    own[r].output = in_place ? in : out_alloc[r].data() + offset;
    own[r].scratch = scratch_bytes == 0 ? nullptr : scratch_alloc[r].data() + offset;
    own[r].call = 1;
    ll_alloc[r].assign(ll_bytes / 8, 0);
    own[r].ll = ll_bytes == 0 ? nullptr : ll_alloc[r].data();
  }
}

double launch_host(HostEntry entry, HostBuffers& b, int channels, uint64_t count, uint64_t timeout_ns,
                   const std::vector<int>& skip, unsigned threads) {
  const int nranks = static_cast<int>(b.own.size());
  std::vector<std::thread> blocks;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < nranks; ++r) {
    if (std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
    const ccc_launch_args args{b.state.data(), b.own[r], nullptr, count, r, timeout_ns, nullptr,
                               b.epilogue.empty() ? ccc_epilogue_args{} : b.epilogue[r], nullptr, channels};
    for (int c = 0; c < channels; ++c)
      blocks.emplace_back(run_host_block, entry, args, c, channels, tsan_block_threads(threads));
  }
  for (std::thread& t : blocks) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ccc::testing
