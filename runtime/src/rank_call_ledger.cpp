#include "ccc/rank_call_ledger.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

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
                                                const void* recv) {
  const int nranks = static_cast<int>(issued_.size());
  std::vector<BufferExtent> mine;
  if (send != nullptr) mine.push_back({reinterpret_cast<uintptr_t>(send), send_bytes(call, nranks), rank, false});
  if (recv != nullptr) mine.push_back({reinterpret_cast<uintptr_t>(recv), recv_bytes(call, nranks), rank, true});
  std::lock_guard lock(mutex_);
  const auto meeting = meetings_.find(issued_[rank]);
  if (meeting != meetings_.end())
    for (const BufferExtent& peer : meeting->second.extents)
      for (const BufferExtent& own : mine)
        if (buffers_conflict(own, peer)) refuse_overlap(call.collective, own, peer);
  return mine;
}

void RankCallLedger::record(int rank, const std::vector<BufferExtent>& extents) {
  std::lock_guard lock(mutex_);
  const uint64_t index = issued_[rank]++;
  Meeting& meeting = meetings_[index];
  if (++meeting.arrived == static_cast<int>(issued_.size()))
    meetings_.erase(index);  // every rank has issued it: nothing left to check against
  else
    meeting.extents.insert(meeting.extents.end(), extents.begin(), extents.end());
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
