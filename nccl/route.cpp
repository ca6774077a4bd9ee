#include "route.h"

#include <fmt/format.h>

#include <bit>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <vector>

#include "debug_log.h"

namespace ccc::nccl {
namespace {

constexpr Collective kCollectives[] = {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                                       Collective::Broadcast, Collective::Reduce,        Collective::AllToAll};

std::optional<Side> side_named(std::string_view name) {
  if (name == "nccl") return Side::Nccl;
  if (name == "ccc") return Side::Ccc;
  if (name == "auto") return Side::Auto;
  return std::nullopt;
}

const char* side_name(Side side) {
  switch (side) {
    case Side::Nccl:
      return "nccl";
    case Side::Ccc:
      return "ccc";
    case Side::Auto:
      return "auto";
  }
  return "?";
}

std::string human_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

}  // namespace

RoutePolicy RoutePolicy::from_environment() {
  const char* text = std::getenv("CCC_NCCL_ROUTE");
  return parse(text != nullptr ? text : "auto");
}

RoutePolicy RoutePolicy::parse(const std::string& text) {
  RoutePolicy policy;
  std::vector<std::pair<Collective, Side>> overrides;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t equals = item.find('=');
    const std::optional<Side> side = side_named(item.substr(equals == std::string_view::npos ? 0 : equals + 1));
    if (!side)
      throw std::invalid_argument(fmt::format("CCC_NCCL_ROUTE=\"{}\": \"{}\" is not a side (nccl, ccc or auto){}", text,
                                              item, equals == std::string_view::npos ? "" : " after the '='"));
    if (equals == std::string_view::npos) {
      policy.sides_.fill(*side);
    } else {
      const std::string_view name = item.substr(0, equals);
      bool found = false;
      for (Collective c : kCollectives)
        if (name == collective_name(c)) overrides.emplace_back(c, *side), found = true;
      if (!found)
        throw std::invalid_argument(fmt::format(
            "CCC_NCCL_ROUTE=\"{}\": \"{}\" is not a collective (allreduce, reduce_scatter, allgather, broadcast, "
            "reduce, alltoall)",
            text, name));
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  for (const auto& [collective, side] : overrides) policy.sides_[static_cast<size_t>(collective)] = side;
  return policy;
}

bool RoutePolicy::uses_ccc() const {
  for (Side s : sides_)
    if (s != Side::Nccl) return true;
  return false;
}

std::string RoutePolicy::canonical() const {
  std::vector<std::string> items;
  for (Collective c : kCollectives)
    items.push_back(fmt::format("{}={}", collective_name(c), side_name(sides_[static_cast<size_t>(c)])));
  return fmt::format("{}", fmt::join(items, ","));
}

RouteDecision decide(Side side, int64_t bytes, double ccc_seconds, double nccl_seconds, uint64_t arena_bytes) {
  if (side == Side::Nccl) return {false, "CCC_NCCL_ROUTE says nccl"};
  if (side == Side::Ccc) return {true, "CCC_NCCL_ROUTE says ccc"};
  // A buffer outside ccc's arena is staged through it, send and receive both, beside the
  // kernel's scratch: past half the arena, leave it to NCCL rather than fail for lack of room.
  if (static_cast<uint64_t>(bytes) * 2 > arena_bytes / 2)
    return {false,
            fmt::format("too large to stage in ccc's arena of {}", human_bytes(static_cast<int64_t>(arena_bytes)))};
  if (ccc_seconds <= 0) return {false, "no topology to predict by (set CCC_TOPO)"};
  if (nccl_seconds <= 0) return {false, "NCCL's tuning model does not price it"};
  const bool to_ccc = ccc_seconds < nccl_seconds;
  return {to_ccc, fmt::format("predicted ccc {:.2f} us, NCCL {:.2f} us", ccc_seconds * 1e6, nccl_seconds * 1e6)};
}

void log_decision(int rank, int nranks, Collective collective, int64_t bytes, const RouteDecision& decision) {
  if (!debug_info_on()) return;
  // The size class: the power of two at or above the bytes.
  const int64_t size_class = bytes <= 1 ? 1 : int64_t{1} << std::bit_width(static_cast<uint64_t>(bytes - 1));
  static std::mutex mutex;
  static std::set<std::tuple<int, int, Collective, int64_t, bool>> logged;
  {
    std::lock_guard lock(mutex);
    if (!logged.emplace(rank, nranks, collective, size_class, decision.to_ccc).second) return;
  }
  debug_info(fmt::format("ccc-nccl rank {} of {}: {} of up to {} -> {} ({})", rank, nranks, collective_name(collective),
                         human_bytes(size_class), decision.to_ccc ? "ccc" : "NCCL", decision.why));
}

}  // namespace ccc::nccl
