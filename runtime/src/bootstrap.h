// The bootstrap of a multi-process host communicator (docs/runtime.md, "Multi-process").
//
// bootstrap_unique_id starts a root on a thread of the calling process: it listens on TCP (the
// id carries its address and port, and a random session tag) and on an abstract Unix-domain
// socket named after the tag (nothing in the file system). Every rank connects to the root over
// TCP and says who it is; the root checks that the ranks agree (tag, rank count, arena size,
// distinct ranks), creates the arena (a memfd, so nothing in /dev/shm either), hands each rank
// its descriptor over the Unix socket (SCM_RIGHTS), and proposes an address that every rank then
// maps it at (MAP_FIXED_NOREPLACE). If any rank cannot, the root proposes another, a bounded
// number of times. Every wait has a deadline: the root waits the ranks' timeout from the first
// rank's arrival, a rank a half more (so that the root's message why, such as the ranks that
// never joined, reaches it first).
#pragma once

#include <cstdint>
#include <memory>

#include "ccc/communicator.h"
#include "ccc/host_backend.h"

namespace ccc {

UniqueId bootstrap_unique_id();

struct JoinRequest {
  int nranks = 0;
  int rank = 0;
  uint64_t heap_bytes = 0;  // each rank's heap in the arena
  uint64_t timeout_ns = 0;  // ~0: for ever
};

// Joins the communicator `id` and returns the arena, mapped at the address every rank mapped it
// at. Throws ccc::Error saying why it failed.
std::unique_ptr<HostArena> bootstrap_join(const UniqueId& id, const JoinRequest& request);

}  // namespace ccc
