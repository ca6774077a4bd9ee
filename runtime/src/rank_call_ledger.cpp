#include "rank_call_ledger.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "ccc/errors.h"

namespace ccc {

bool buffers_conflict(const BufferExtent& a, const BufferExtent& b) {
  return a.rank != b.rank && (a.written || b.written) && a.begin < b.end() && b.begin < a.end();
}

void refuse_overlap(Collective collective, const BufferExtent& a, const BufferExtent& b) {
  const auto [lo, hi] = std::minmax(a, b, [](const BufferExtent& x, const BufferExtent& y) {
    return std::pair{x.rank, x.written} < std::pair{y.rank, y.written};
  });
  throw Error(ErrorKind::InvalidArgument,
              fmt::format("{}: rank {}'s {} buffer overlaps rank {}'s {} buffer; a buffer that a rank writes "
                          "must not overlap another rank's buffers",
                          collective_name(collective), lo.rank, lo.name(), hi.rank, hi.name()));
}

std::vector<BufferExtent> RankCallLedger::check(const CollectiveCall& call, int rank, const void* send,
                                                const void* recv, const RankEpilogue& epilogue) {
  const int nranks = static_cast<int>(issued_.size());
  const uint64_t elements = call.count * data_type_size(call.dtype);
  std::vector<BufferExtent> mine;
  if (send != nullptr) mine.push_back({reinterpret_cast<uintptr_t>(send), send_bytes(call, nranks), rank, false});
  if (recv != nullptr) mine.push_back({reinterpret_cast<uintptr_t>(recv), recv_bytes(call, nranks), rank, true});
  // The epilogue's: the residual is read (ranks may share it), its outputs written.
  if (epilogue.residual != nullptr)
    mine.push_back({reinterpret_cast<uintptr_t>(epilogue.residual), elements, rank, false, "residual"});
  if (epilogue.residual_out != nullptr)
    mine.push_back({reinterpret_cast<uintptr_t>(epilogue.residual_out), elements, rank, true, "residual_out"});
  if (epilogue.quant_out != nullptr)
    mine.push_back({reinterpret_cast<uintptr_t>(epilogue.quant_out), call.count, rank, true, "quant_out"});
  std::lock_guard lock(mutex_);
  const auto meeting = meetings_.find(issued_[rank]);
  if (meeting != meetings_.end())
    for (const BufferExtent& peer : meeting->second.extents)
      for (const BufferExtent& own : mine)
        if (buffers_conflict(own, peer)) refuse_overlap(call.collective, own, peer);
  return mine;
}

namespace {

// What `a` (rank ra's) and `b` (rank rb's) differ in, as a sentence, or "" if nothing.
std::string difference(const CallShape& a, int ra, const CallShape& b, int rb) {
  const char* what = collective_name(a.collective);
  if (a.collective != b.collective)
    return fmt::format("rank {} called {}, rank {} {}", ra, what, rb, collective_name(b.collective));
  auto differs = [&](const char* name, const std::string& x, const std::string& y) {
    return fmt::format("{}: rank {} passed {} {}, rank {} {} {}", what, ra, name, x, rb, name, y);
  };
  if (a.count != b.count) return differs("count", std::to_string(a.count), std::to_string(b.count));
  if (a.dtype != b.dtype) return differs("type", data_type_name(a.dtype), data_type_name(b.dtype));
  const bool has_op = a.collective != Collective::AllGather && a.collective != Collective::Broadcast &&
                      a.collective != Collective::AllToAll;
  if (has_op && a.op != b.op) return differs("op", reduce_op_name(a.op), reduce_op_name(b.op));
  const bool rooted = a.collective == Collective::Broadcast || a.collective == Collective::Reduce;
  if (rooted && a.root != b.root) return differs("root", std::to_string(a.root), std::to_string(b.root));
  if (a.epilogue != b.epilogue) return differs("epilogue", epilogue_name(a.epilogue), epilogue_name(b.epilogue));
  if (a.epilogue == Epilogue::ResidualRmsNorm) {
    if (a.hidden != b.hidden) return differs("hidden", std::to_string(a.hidden), std::to_string(b.hidden));
    if (a.eps != b.eps) return differs("eps", fmt::format("{}", a.eps), fmt::format("{}", b.eps));
    auto scale = [](const std::optional<float>& s) { return s ? fmt::format("{}", *s) : std::string("none (no fp8 output)"); };
    if (a.quant_scale != b.quant_scale) return differs("fp8 scale", scale(a.quant_scale), scale(b.quant_scale));
  }
  if (a.in_place != b.in_place)
    return fmt::format("{}: rank {} runs {}, rank {} {} (all ranks in place or none)", what, ra,
                       a.in_place ? "in place" : "out of place", rb, b.in_place ? "in place" : "out of place");
  return "";
}

}  // namespace

std::string RankCallLedger::agree(const CallShape& shape, int rank) {
  std::lock_guard lock(mutex_);
  const auto it = meetings_.find(issued_[rank]);
  if (it == meetings_.end() || !it->second.first) return "";  // the first to issue it
  Meeting& meeting = it->second;
  if (meeting.mismatch.empty()) {
    meeting.mismatch = difference(shape, rank, meeting.first->second, meeting.first->first);
    if (meeting.mismatch.empty()) return "";
    for (int r : meeting.ranks) failed_[static_cast<size_t>(r)].push_back(meeting.mismatch);  // issued before
  }
  failed_[static_cast<size_t>(rank)].push_back(meeting.mismatch);
  return meeting.mismatch;
}

std::vector<std::string> RankCallLedger::failed(int rank) {
  std::lock_guard lock(mutex_);
  return std::exchange(failed_[static_cast<size_t>(rank)], {});
}

void RankCallLedger::record(int rank, const std::vector<BufferExtent>& extents, const CallShape& shape) {
  std::lock_guard lock(mutex_);
  const uint64_t index = issued_[rank]++;
  Meeting& meeting = meetings_[index];
  if (!meeting.first) meeting.first.emplace(rank, shape);
  if (++meeting.arrived == static_cast<int>(issued_.size())) {
    meetings_.erase(index);  // every rank has issued it: nothing left to check against
  } else {
    meeting.extents.insert(meeting.extents.end(), extents.begin(), extents.end());
    meeting.ranks.push_back(rank);
  }
}

void RankCallLedger::record_all() {
  std::lock_guard lock(mutex_);
  for (uint64_t& n : issued_) ++n;
}

void RankCallLedger::forget() {
  std::lock_guard lock(mutex_);
  meetings_.clear();
  std::fill(issued_.begin(), issued_.end(), *std::max_element(issued_.begin(), issued_.end()));
}

}  // namespace ccc
