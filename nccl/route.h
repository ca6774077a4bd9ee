// Which side runs a collective libccc-nccl is given: ccc's kernel or the real NCCL. docs/nccl.md,
// "Routing".
//
// $CCC_NCCL_ROUTE: a comma-separated list of a default side and per-collective sides, e.g.
// "auto" (the default), "nccl", "ccc", or "auto,allgather=nccl,allreduce=ccc". Collective names
// are ccc's (allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall). Every rank must
// set the same (ncclCommInitRank checks it).
// - nccl: NCCL runs it.
// - ccc: ccc runs every call it can (a built-in op, on a communicator ccc joined).
// - auto: ccc runs a call it can when its cost model predicts it faster than NCCL's own tuning
//   model on the same topology (nccl_model.h), and its buffers fit the arena it stages them in.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "ccc/types.h"

namespace ccc::nccl {

enum class Side { Nccl, Ccc, Auto };

class RoutePolicy {
 public:
  // $CCC_NCCL_ROUTE; throws std::invalid_argument naming what is wrong.
  static RoutePolicy from_environment();
  static RoutePolicy parse(const std::string& text);

  Side side(Collective collective) const { return sides_[static_cast<size_t>(collective)]; }
  // Whether any collective may go to ccc (if not, no ccc communicator is made).
  bool uses_ccc() const;
  // The policy in a canonical spelling, which every rank compares.
  std::string canonical() const;

 private:
  std::array<Side, 6> sides_{Side::Auto, Side::Auto, Side::Auto, Side::Auto, Side::Auto, Side::Auto};
};

// What the decision was made on, for the log.
struct RouteDecision {
  bool to_ccc = false;
  std::string why;
};

// The side of one call that ccc could run (a built-in op, a ccc communicator). `bytes`: the
// larger of the rank's send and receive bytes; `predicted`: ccc's and NCCL's predicted seconds
// (both 0: no topology, so auto keeps NCCL); `arena_bytes`: the ccc arena per rank.
RouteDecision decide(Side side, int64_t bytes, double ccc_seconds, double nccl_seconds, uint64_t arena_bytes);

// $CCC_DEBUG=INFO: one line per (rank of nranks, collective, size class, side), the first time.
void log_decision(int rank, int nranks, Collective collective, int64_t bytes, const RouteDecision& decision);

}  // namespace ccc::nccl
