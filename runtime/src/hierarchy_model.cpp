#include "hierarchy_model.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "nccl_model.h"

namespace ccc {

HierarchyRow hierarchy_row(int64_t bytes, int elem_size, const Topology& topology,
                           const std::vector<CandidateSchedule>& reduce_scatter,
                           const std::vector<CandidateSchedule>& all_gather, const SelectOptions& options) {
  const Network& net = topology.network;
  if (net.nodes < 2) throw std::invalid_argument("the topology has one node: no network to cross");
  const int per_node = topology.ngpus();
  const std::optional<NcclRing> everyone = nccl_ring_of(topology, net.nodes * per_node);
  if (!everyone) throw std::invalid_argument("no ring through every GPU of a node");
  // A rail: one rank per node, its local index's share of the node's NICs.
  NcclRing rail = *everyone;
  rail.nranks = rail.nodes = net.nodes;
  rail.network_bus = net.nic.bandwidth * net.nics / per_node;
  HierarchyRow row;
  row.bytes = bytes;
  row.reduce_scatter = select_schedule(Collective::ReduceScatter, bytes, elem_size, topology, reduce_scatter, options);
  row.rail = nccl_ring_seconds(Collective::AllReduce, bytes / per_node, rail);
  row.all_gather = select_schedule(Collective::AllGather, bytes, elem_size, topology, all_gather, options);
  row.hierarchical = row.reduce_scatter.estimate.time + row.rail + row.all_gather.estimate.time;
  row.nccl = nccl_ring_seconds(Collective::AllReduce, bytes, *everyone);
  return row;
}

std::vector<HierarchyRow> hierarchy_table(int elem_size, const Topology& topology,
                                          const std::vector<CandidateSchedule>& reduce_scatter,
                                          const std::vector<CandidateSchedule>& all_gather,
                                          const SelectOptions& options) {
  const int64_t unit = int64_t{topology.ngpus()} * elem_size;
  int64_t smallest = 8;
  while (smallest < unit) smallest *= 2;
  std::vector<HierarchyRow> rows;
  for (int64_t bytes = smallest; bytes <= (int64_t{1} << 30); bytes *= 2)
    if (bytes % unit == 0) rows.push_back(hierarchy_row(bytes, elem_size, topology, reduce_scatter, all_gather, options));
  return rows;
}

std::string format_hierarchy_table(const std::vector<HierarchyRow>& rows, const std::string& title) {
  std::string out = fmt::format(
      "# {}\n# predicted time in us: NCCL's ring over every rank, and ccc's hierarchy (reduce-scatter in the node,\n"
      "# NCCL's allreduce of the rank's block on its rail between the nodes, all-gather in the node)\n",
      title);
  out += fmt::format("{:>12} {:>12} {:>12} {:>24} {:>10} {:>24}  choice\n", "bytes", "nccl_ring", "hierarchical",
                     "reduce_scatter", "rail", "all_gather");
  for (const HierarchyRow& row : rows) {
    auto step = [](const Choice& c) { return fmt::format("{:.2f} {}", c.estimate.time * 1e6, c.name()); };
    out += fmt::format("{:>12} {:>12.2f} {:>12.2f} {:>24} {:>10.2f} {:>24}  {}\n", row.bytes, row.nccl * 1e6,
                       row.hierarchical * 1e6, step(row.reduce_scatter), row.rail * 1e6, step(row.all_gather),
                       row.hierarchical_wins() ? "hierarchical" : "nccl_ring");
  }
  return out;
}

}  // namespace ccc
