// Where a rank's kernel finds its buffers: the user's own where the kernel (and, across
// processes, its peers) can use them, stand-ins for buffers a rank omitted, and staging through
// the rank's scratch for buffers peers in other processes cannot read.
#pragma once

#include <cstdint>
#include <optional>

#include "backend.h"
#include "ccc/collective_call.h"
#include "ccc_abi.h"
#include "registrations.h"

namespace ccc {

// What a launch of one kernel for one call needs besides the user's buffers.
struct LaunchNeeds {
  uint64_t scratch_bytes = 0;  // EmittedKernel::scratch_bytes
  uint64_t ll_bytes = 0;       // EmittedKernel::ll_bytes (protocol ll's receive slots)
  uint64_t signature = 0;      // ccc_buffers::call: equal on every rank issuing the same call
  bool in_place = false;
};

// A rank's buffers for its launch, and the copies that stage them around it (in its stream's
// order: buffers outside the arena copied in before and out after).
struct PlacedBuffers {
  ccc_buffers own{};
  std::optional<StagingCopy> before, after;
};

// Rank `rank`'s buffers for the kernel, its scratch and LL slots included (from `backend`, for
// a launch on `stream`). A buffer the rank omitted (NULL where NCCL allows it) gets a stand-in,
// as if the rank had passed one of its own: in place the other buffer (an in-place kernel reads
// and writes one), else room after the scratch. The kernel may stage through either buffer, so
// NULL is never passed on. Across processes, a buffer peers cannot read where it is is replaced
// by room after the scratch too, staged by copies (an in-place pair as one region: the kernel
// sees the same overlap); during graph registration a capturing stream's shareable buffers are
// used in place and remembered in `registration` instead.
PlacedBuffers place_buffers(Backend& backend, const LaunchNeeds& needs, const CollectiveCall& call, int rank,
                            const void* send, void* recv, void* stream, GraphRegistration& registration);

}  // namespace ccc
