// The dependency graph of a step program, as a Boost.Graph.
//
// One vertex per (rank, step, op), plus a virtual start (the rank's inputs are ready) and end (its
// buffers go back to the user) per rank. Edges: program order (every op of a rank's step to every
// op of its next non-empty step; start and end bracket them) and the memory dependencies of
// dependencies.h. The graph is for people (`--emit graph`, `--emit dot`) and for whole-program
// questions (critical path); the sync planner works on the (rank, step) quotient directly.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "dependencies.h"
#include "step_program.h"

namespace ccc {

struct DepEdge {
  DepKind kind = DepKind::Program;
  int owner = 0;                   // memory edges: whose buffer
  Buffer buffer = Buffer::Output;
  ChunkRange chunks;
};

using DepGraphBase = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, OpRef, DepEdge>;
using DepVertex = boost::graph_traits<DepGraphBase>::vertex_descriptor;

struct DependencyGraph {
  DepGraphBase g;
  // first_[r][k + 1]: the vertex of rank r's first op of step k; [r][0] is its start vertex and
  // [r][nsteps + 1] its end vertex.
  std::vector<std::vector<DepVertex>> first;

  DepVertex start(int rank) const { return first[rank].front(); }
  DepVertex end(int rank) const { return first[rank].back(); }
  DepVertex vertex(OpRef ref) const;
};

DependencyGraph build_graph(const StepProgram& p, bool in_place = false);

// The longest chain of ops any execution must run one after another (start/end excluded);
// nullopt when the graph has a cycle (in place, ranks that overwrite in one step what the other
// reads in it: the sync planner stages those).
std::optional<std::vector<OpRef>> critical_path(const DependencyGraph& g);

// Text listing: a summary line (vertex and edge counts per kind, critical path length), then every
// vertex with its outgoing edges.
std::string print_graph(const StepProgram& p, const DependencyGraph& g);

// Graphviz, laid out as a grid: a cluster per rank (`subgraph cluster_rank_R`, a row) and a layout
// rank per step (`rank=same`, a column), start and end columns around them; vertices coloured by
// rank, edges by kind.
void write_dot(std::ostream& out, const StepProgram& p, const DependencyGraph& g);

}  // namespace ccc
