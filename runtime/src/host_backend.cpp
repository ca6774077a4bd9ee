#include "ccc/host_backend.h"

#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include "ccc/collective_types.h"

namespace ccc {

HostKernel load_host_kernel(JitCache& cache, const std::string& source, const std::string& name) {
  HostCompileRequest req;
  req.source = source;
  req.name = name + ".cpp";
  auto object = std::make_shared<const SharedObject>(*host_compile_cached(cache, req));
  auto entry = reinterpret_cast<HostKernel::Entry>(object->symbol(name.c_str()));
  return {std::move(object), entry};
}

HostRanks::HostRanks(int nranks, int max_channels)
    : nranks_(nranks),
      max_channels_(max_channels),
      progress_(static_cast<size_t>(nranks) * max_channels, 0),
      epoch_(nranks, 0),
      error_(nranks, CCC_OK),
      scratch_(nranks) {}

void HostRanks::reset_sync_state() {
  std::fill(progress_.begin(), progress_.end(), 0);
  std::fill(epoch_.begin(), epoch_.end(), 0);
  std::fill(error_.begin(), error_.end(), CCC_OK);
}

void HostRanks::launch(const HostKernel& kernel, int channels, std::span<const void* const> send,
                       std::span<void* const> recv, uint64_t count, uint64_t scratch_bytes,
                       uint64_t timeout_ns) {
  if (channels < 1 || channels > max_channels_)
    throw Error(ErrorKind::Internal, fmt::format("a kernel with {} channels on a communicator "
                                                 "built for at most {}", channels, max_channels_));
  if (scratch_bytes > scratch_bytes_) {
    for (auto& s : scratch_) s = std::make_unique<std::byte[]>(scratch_bytes);
    scratch_bytes_ = scratch_bytes;
  }
  std::vector<ccc_rank_buffers> ranks(nranks_);
  for (int r = 0; r < nranks_; ++r)
    ranks[r] = {send[r], recv[r], scratch_bytes_ != 0 ? scratch_[r].get() : nullptr,
                &progress_[static_cast<size_t>(r) * max_channels_]};

  std::vector<std::thread> blocks;
  blocks.reserve(static_cast<size_t>(nranks_) * channels);
  for (int r = 0; r < nranks_; ++r) {
    const ccc_launch_args args{ranks.data(), count, r, epoch_.data(), error_.data(), timeout_ns};
    for (int c = 0; c < channels; ++c) blocks.emplace_back(kernel.entry, args, c);
  }
  for (std::thread& t : blocks) t.join();

  const std::string failures = launch_failures(error_.data(), nranks_);
  if (failures.empty()) return;
  reset_sync_state();
  throw Error(ErrorKind::Remote, "collective failed: " + failures);
}

}  // namespace ccc
