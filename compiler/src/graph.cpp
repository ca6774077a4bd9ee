#include "graph.h"

#include <fmt/format.h>

#include <array>
#include <boost/graph/topological_sort.hpp>
#include <ostream>

#include "describe.h"

namespace ccc {

DepVertex DependencyGraph::vertex(OpRef ref) const {
  return first[ref.rank][ref.step + 1] + (ref.op < 0 ? 0 : ref.op);
}

DependencyGraph build_graph(const StepProgram& p, bool in_place) {
  DependencyGraph dg;
  const int S = p.nsteps();
  dg.first.assign(p.nranks, std::vector<DepVertex>(S + 2));
  // add_vertex(g) then set the bundle: add_vertex(property, g) trips a false -Wuninitialized in
  // GCC 12 under the sanitizers.
  auto vertex = [&](OpRef ref) {
    DepVertex v = boost::add_vertex(dg.g);
    dg.g[v] = ref;
    return v;
  };
  for (int r = 0; r < p.nranks; ++r) {
    dg.first[r][0] = vertex(OpRef{r, -1, -1});
    for (int k = 0; k < S; ++k) {
      dg.first[r][k + 1] = boost::num_vertices(dg.g);
      for (int i = 0; i < static_cast<int>(p.ops[r][k].size()); ++i) vertex(OpRef{r, k, i});
    }
    dg.first[r][S + 1] = vertex(OpRef{r, S, -1});
  }
  // Program order between consecutive non-empty steps, start and end included.
  for (int r = 0; r < p.nranks; ++r) {
    std::vector<DepVertex> prev{dg.start(r)};
    for (int k = 0; k <= S; ++k) {
      int n = k < S ? static_cast<int>(p.ops[r][k].size()) : 1;
      if (n == 0) continue;
      std::vector<DepVertex> cur;
      for (int i = 0; i < n; ++i) cur.push_back(dg.first[r][k + 1] + i);
      for (DepVertex a : prev)
        for (DepVertex b : cur) boost::add_edge(a, b, DepEdge{DepKind::Program, r, Buffer::Output, {}}, dg.g);
      prev = std::move(cur);
    }
  }
  for_each_dependency(p, in_place, [&](const Dependency& d) {
    boost::add_edge(dg.vertex(d.from), dg.vertex(d.to), DepEdge{d.kind, d.owner, d.buffer, d.chunks}, dg.g);
  });
  return dg;
}

std::optional<std::vector<OpRef>> critical_path(const DependencyGraph& dg) {
  const auto& g = dg.g;
  std::vector<DepVertex> order;
  try {
    boost::topological_sort(g, std::back_inserter(order));  // reverse topological order
  } catch (const boost::not_a_dag&) {
    return std::nullopt;
  }
  const size_t n = boost::num_vertices(g);
  std::vector<int64_t> length(n, 0);  // longest op chain starting at v
  std::vector<DepVertex> next(n, n);
  for (DepVertex v : order) {
    int64_t best = 0;
    for (auto [e, e_end] = boost::out_edges(v, g); e != e_end; ++e) {
      DepVertex t = boost::target(*e, g);
      if (next[v] == n || length[t] > best) {
        best = length[t];
        next[v] = t;
      }
    }
    length[v] = best + (g[v].op >= 0 ? 1 : 0);
  }
  std::vector<OpRef> path;
  if (n == 0) return path;
  DepVertex v = order.back();
  for (DepVertex u : order)
    if (length[u] > length[v]) v = u;
  for (; v != n; v = next[v])
    if (g[v].op >= 0) path.push_back(g[v]);
  return path;
}

namespace {

std::string edge_text(const DepEdge& e) {
  if (e.kind == DepKind::Program) return "program";
  return fmt::format("{} rank {}'s {}", dep_kind_name(e.kind), e.owner, describe_chunks(e.buffer, e.chunks));
}

std::string vertex_text(const StepProgram& p, const OpRef& v) {
  std::string head = describe_ref(v, p.nsteps());
  if (v.op < 0) return head;
  const Op& op = p.ops[v.rank][v.step][v.op];
  std::string line = describe_line(p, op.loc);
  return fmt::format("{}: {}{}", head, describe_op(op, v.rank), line.empty() ? "" : " (" + line + ")");
}

}  // namespace

std::string print_graph(const StepProgram& p, const DependencyGraph& dg) {
  const auto& g = dg.g;
  std::array<int64_t, 6> per_kind{};
  for (DepVertex v = 0; v < boost::num_vertices(g); ++v)
    for (auto [e, e_end] = boost::out_edges(v, g); e != e_end; ++e) ++per_kind[static_cast<int>(g[*e].kind)];
  std::string out = fmt::format("graph {} ({}) N={}: {} vertices, {} edges (", p.schedule,
                                collective_name(p.collective), p.nranks, boost::num_vertices(g),
                                boost::num_edges(g));
  for (int k = 0; k < 6; ++k)
    out += fmt::format("{}{} {}", k ? ", " : "", dep_kind_name(static_cast<DepKind>(k)), per_kind[k]);
  out += ")\n";
  if (std::optional<std::vector<OpRef>> path = critical_path(dg)) {
    out += fmt::format("critical path: {} ops:", path->size());
    for (size_t i = 0; i < path->size(); ++i) out += (i ? " -> " : " ") + describe_ref((*path)[i], p.nsteps());
    out += "\n";
  } else {
    out += "critical path: none, the graph has a cycle (see `ccc check`)\n";
  }
  for (DepVertex v = 0; v < boost::num_vertices(g); ++v) {
    out += vertex_text(p, g[v]) + "\n";
    for (auto [e, e_end] = boost::out_edges(v, g); e != e_end; ++e)
      out += fmt::format("  -> {}  {}\n", describe_ref(g[boost::target(*e, g)], p.nsteps()), edge_text(g[*e]));
  }
  return out;
}

namespace {

// The vertices of rank r in layout column c: 0 is its start, k + 1 its ops of step k, nsteps + 1
// its end (vertices are numbered rank by rank in that order, see build_graph).
std::pair<DepVertex, DepVertex> column_vertices(const DependencyGraph& dg, int r, size_t c) {
  const std::vector<DepVertex>& first = dg.first[r];
  return {first[c], c + 1 < first.size() ? first[c + 1] : first[c] + 1};
}

}  // namespace

void write_dot(std::ostream& out, const StepProgram& p, const DependencyGraph& dg) {
  static const char* const kRankColours[] = {"lightblue", "lightyellow", "palegreen", "pink",
                                             "lavender",  "wheat",       "lightcyan", "mistyrose"};
  static const char* const kKindColours[] = {"gray", "blue", "red", "orange", "darkgreen", "purple"};
  const auto& g = dg.g;
  // Hand-written rather than boost::write_graphviz, which has no clusters: a rank is a cluster
  // (a row) and a step a layout rank (a column), so the graph reads as the grid of --emit svg.
  // newrank lets one `rank=same` hold vertices of different clusters. The order of the rows is
  // dot's (it minimises crossings: ring's r3 lands next to r0); each row is labelled.
  std::string s = "digraph G {\nrankdir=LR;\nnewrank=true;\nnode [fontsize=10];\nedge [fontsize=8];\n";
  for (int r = 0; r < p.nranks; ++r) {
    s += fmt::format("subgraph cluster_rank_{0} {{\nlabel=\"rank {0}\";\ncolor=gray;\n", r);
    for (DepVertex v = dg.start(r); v <= dg.end(r); ++v) {
      const OpRef& ref = g[v];
      std::string label = describe_ref(ref, p.nsteps());
      if (ref.op >= 0) label += "\\n" + describe_op(p.ops[ref.rank][ref.step][ref.op], ref.rank);
      s += fmt::format("{}[label=\"{}\", shape={}, style=filled, fillcolor={}];\n", v, label,
                       ref.op < 0 ? "ellipse" : "box", kRankColours[ref.rank % 8]);
    }
    s += "}\n";
  }
  for (size_t c = 0; c < static_cast<size_t>(p.nsteps()) + 2; ++c) {
    std::string same;
    for (int r = 0; r < p.nranks; ++r)
      for (auto [v, end] = column_vertices(dg, r, c); v < end; ++v) same += fmt::format(" {};", v);
    if (!same.empty()) s += fmt::format("{{rank=same;{}}}  // {}\n", same, describe_step(p, static_cast<int>(c) - 1));
  }
  for (DepVertex v = 0; v < boost::num_vertices(g); ++v)
    for (auto [e, e_end] = boost::out_edges(v, g); e != e_end; ++e) {
      const DepEdge& d = g[*e];
      s += fmt::format("{}->{} [label=\"{}\", color={}];\n", v, boost::target(*e, g),
                       d.kind == DepKind::Program ? "" : edge_text(d), kKindColours[static_cast<int>(d.kind)]);
    }
  out << s << "}\n";
}

}  // namespace ccc
