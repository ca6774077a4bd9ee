// ccc's allreduce across the nodes of a topology's network, as libccc-nccl runs it (docs/nccl.md,
// "Beyond one node"): ccc's reduce-scatter within each node, NCCL's allreduce of each rank's
// block between the nodes on the rail of its local index, ccc's all-gather within the node;
// against NCCL's ring over every rank. `ccc tune --topo` on a topology with nodes shows both.
// Predictions: ccc's cost model for the steps within a node, NCCL's tuning model (nccl_model.h)
// for the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "select.h"
#include "topology.h"

namespace ccc {

struct HierarchyRow {
  int64_t bytes = 0;    // the allreduce's, per rank
  Choice reduce_scatter;  // ccc's best within a node
  double rail = 0;      // s: NCCL's allreduce of a rank's block (bytes / ranks per node) between nodes
  Choice all_gather;
  double hierarchical = 0;  // s: the three steps, one after another on one stream
  double nccl = 0;          // s: NCCL's ring over every rank of every node
  bool hierarchical_wins() const { return hierarchical < nccl; }
};

// One size. `bytes` must split into whole elements over the ranks of a node; `reduce_scatter` and
// `all_gather`: every shipped schedule of those collectives for the ranks of one node. Throws
// std::invalid_argument when the topology has one node or no schedule fits.
HierarchyRow hierarchy_row(int64_t bytes, int elem_size, const Topology& topology,
                           const std::vector<CandidateSchedule>& reduce_scatter,
                           const std::vector<CandidateSchedule>& all_gather, const SelectOptions& options = {});

// One row per size, from the smallest the node's ranks split into whole elements to 1 GiB, by
// doubling. `reduce_scatter` and `all_gather`: every shipped schedule of those collectives for the
// ranks of one node. Throws std::invalid_argument when the topology has one node or no schedule
// fits.
std::vector<HierarchyRow> hierarchy_table(int elem_size, const Topology& topology,
                                          const std::vector<CandidateSchedule>& reduce_scatter,
                                          const std::vector<CandidateSchedule>& all_gather,
                                          const SelectOptions& options = {});
std::string format_hierarchy_table(const std::vector<HierarchyRow>& rows, const std::string& title);

}  // namespace ccc
