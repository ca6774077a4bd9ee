// One rank's communicator as libccc-nccl hands it out (ncclComm_t): the real NCCL's communicator,
// and ccc's over the same ranks when they share one node. docs/nccl.md.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <string>
#include <vector>

#include "ccc/ccc.h"
#include "hierarchy_model.h"
#include "schedule_menu.h"
#include "topology.h"
#include "real_nccl.h"
#include "route.h"

namespace ccc::nccl {

// Prices an allreduce across nodes both ways, ccc's hierarchy against NCCL's ring
// (hierarchy_model.h), on the topology $CCC_TOPO describes, for `auto` (each size once).
class HierarchyPredictor {
 public:
  explicit HierarchyPredictor(Topology topology);
  HierarchyRow row(int64_t bytes, int elem_size);

 private:
  Topology topology_;
  ScheduleMenu reduce_scatter_, all_gather_;
  std::mutex mutex_;
  std::map<std::pair<int64_t, int>, HierarchyRow> rows_;
};

}  // namespace ccc::nccl

struct ncclComm {
  ncclComm_t real = nullptr;  // the real NCCL's handle (its own struct, never dereferenced here)
  cccComm_t ccc = nullptr;    // over the ranks of this rank's node; null: every call goes to NCCL
  int rank = 0;
  int nranks = 0;
  // Ranks on several nodes (nodes > 1): the rank's place on its node, and `rail`, the real NCCL's
  // communicator of the ranks with its local index on every node (the step between nodes of a
  // hierarchical allreduce).
  int nodes = 1;
  int local_rank = 0;
  int local_ranks = 0;
  ncclComm_t rail = nullptr;
  std::shared_ptr<ccc::nccl::HierarchyPredictor> hierarchy;  // auto across nodes: the model; null: NCCL
  ccc::nccl::RoutePolicy policy;
  bool ccc_host = false;     // ccc's host backend: no stream orders its calls, so they finish before returning
  uint64_t arena_bytes = 0;  // ccc's arena per rank, which staged buffers must fit
};

namespace ccc::nccl {

// Thrown by the shim's own checks; the result it maps to and a message for ncclGetLastError.
struct ShimError {
  ncclResult_t result;
  std::string message;
};

// What each rank tells the others before ccc's communicator is made.
struct RankCard {
  char node[128];    // node_name(): $CCC_NODE_ID, else the host name and boot id
  char policy[128];  // RoutePolicy::canonical(), and what the models read: backend, topology, calibration
  uint64_t arena_bytes;
};
// Fills a card's text field, a name too long for it told apart by its hash.
void copy_text(char (&to)[128], const std::string& text);
// Where a rank stands among the nodes, by the cards: nodes numbered in order of their first rank.
struct NodePlace {
  int node = 0;
  int nodes = 1;
  int local_rank = 0;
  int local_ranks = 1;
  int leader = 0;    // the node's first rank, which names its ccc communicator
  bool even = true;  // every node holds as many ranks
};
// Rank `rank`'s place. Throws ShimError(ncclInvalidUsage) naming the first rank whose route policy
// or arena differs: every rank must route every call alike.
NodePlace node_place(const std::vector<RankCard>& cards, int rank);

// The real NCCL, or a ShimError saying why there is none.
const RealNccl& real_nccl();

// A communicator of ours, before NCCL's is made: the route policy and ccc's settings from the
// environment (ShimError for a bad one).
ncclComm make_shim();

// The communicators this library handed out, told apart from NCCL's own, which reach its
// functions too (nccl_api.cpp, real_of).
void register_comm(ncclComm* comm);
void unregister_comm(ncclComm* comm);
bool is_ours(const ncclComm* comm);

// Makes ccc's communicator for `comm` (whose real communicator is up) when the policy may use
// ccc: over the ranks of each node, and, when the ranks span nodes that hold as many each, the
// rail communicators (ncclCommSplit by local index). A collective call on every rank of the
// communicator, which exchanges the node names, the route policies and ccc's unique ids through
// the real NCCL (all-gathers on a stream of its own). Ranks that disagree on the policy fail with
// ncclInvalidUsage; a ccc communicator that fails on any rank is given up on every rank, which
// then route everything to NCCL (logged). A node is $CCC_NODE_ID, else the host name and boot
// id; $CCC_NCCL_RANKS_PER_NODE=K (for tests) puts rank r on node r / K.
void attach_ccc(ncclComm& comm);

// The same for the communicators of one ncclCommInitAll call (one process, one node).
void attach_ccc_all(ncclComm* const* comms, int ndev, const int* devlist);

}  // namespace ccc::nccl
