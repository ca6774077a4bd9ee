#include "call_tracer.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

namespace ccc {

uint64_t CallTracer::Pending::bytes() const {
  return sizeof(ccc_trace_channel) * static_cast<uint64_t>(channels) * (rank < 0 ? call.nranks : 1);
}

ccc_trace_channel* CallTracer::records(const EmittedKernel& kernel, const CollectiveCall& call, int rank,
                                       void* stream) {
  if (!on()) return nullptr;
  const int n = backend_.nranks(), channels = kernel.channels;
  calls_.resize(n);
  Pending t{calls_[std::max(rank, 0)], {}, rank, channels,
            std::make_unique<ccc_trace_channel[]>(static_cast<size_t>(channels) * (rank < 0 ? n : 1))};
  t.call = {collective_name(call.collective), kernel.schedule, data_type_name(call.dtype), reduce_op_name(call.op),
            call.count, std::max(send_bytes(call, n), recv_bytes(call, n)), n, channels, kernel.tile_bytes,
            kernel.pipeline, kernel.step_labels};
  ccc_trace_channel* records = t.records.get();
  t.device = backend_.trace_alloc(std::max(rank, 0), t.bytes(), stream);
  if (t.device != nullptr) records = static_cast<ccc_trace_channel*>(t.device);
  for (int r = 0; r < n; ++r)  // only now: a refused call is not one of the rank's collectives
    if (rank < 0 || r == rank) ++calls_[r];
  std::lock_guard lock(mutex_);
  pending_.push_back(std::move(t));
  return records;
}

void CallTracer::collect(int rank) {
  std::lock_guard lock(mutex_);
  std::erase_if(pending_, [&](const Pending& t) {
    if (rank >= 0 && t.rank != rank) return false;
    if (t.device != nullptr) backend_.trace_read(std::max(t.rank, 0), t.device, t.records.get(), t.bytes());
    if (t.rank >= 0) {
      log_.add(t.call_index, t.call, t.rank, t.records.get(), t.channels);
    } else {
      for (int r = 0; r < t.call.nranks; ++r)
        log_.add(t.call_index, t.call, r, t.records.get() + static_cast<size_t>(r) * t.channels, t.channels);
    }
    return true;
  });
}

CallTracer::~CallTracer() {
  if (!on()) return;
  try {
    backend_.synchronize(-1);
  } catch (const std::exception&) {
    // A failed collective was the caller's to hear about; its channels' records stay partial.
  }
  try {
    collect(-1);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ccc: warning: trace {}: records lost: {}\n", file_, e.what());
  }
  if (log_.dropped() > 0)
    fmt::print(stderr, "ccc: warning: trace {}: {} step records did not fit (at most {} per channel and call)\n",
               file_, log_.dropped(), CCC_TRACE_CAPACITY);
  if (std::string error; !log_.write(file_, &error)) fmt::print(stderr, "ccc: warning: {}\n", error);
}

}  // namespace ccc
