#include "ccc/graph.h"

#include <fmt/format.h>

#include <array>
// Boost's edge iterator trips a false -Wmaybe-uninitialized in GCC 12 (inside write_graphviz).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/graph/graphviz.hpp>
#pragma GCC diagnostic pop
#include <boost/graph/topological_sort.hpp>
#include <ostream>

#include "ccc/describe.h"

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

void write_dot(std::ostream& out, const StepProgram& p, const DependencyGraph& dg) {
  static const char* const kRankColours[] = {"lightblue", "lightyellow", "palegreen", "pink",
                                             "lavender",  "wheat",       "lightcyan", "mistyrose"};
  static const char* const kKindColours[] = {"gray", "blue", "red", "orange", "darkgreen", "purple"};
  const auto& g = dg.g;
  auto vertex_writer = [&](std::ostream& os, DepVertex v) {
    const OpRef& ref = g[v];
    std::string label = describe_ref(ref, p.nsteps());
    if (ref.op >= 0) label += "\\n" + describe_op(p.ops[ref.rank][ref.step][ref.op], ref.rank);
    os << fmt::format("[label=\"{}\", shape={}, style=filled, fillcolor={}]", label,
                      ref.op < 0 ? "ellipse" : "box", kRankColours[ref.rank % 8]);
  };
  auto edge_writer = [&](std::ostream& os, boost::graph_traits<DepGraphBase>::edge_descriptor e) {
    const DepEdge& d = g[e];
    std::string label = d.kind == DepKind::Program ? "" : edge_text(d);
    os << fmt::format("[label=\"{}\", color={}]", label, kKindColours[static_cast<int>(d.kind)]);
  };
  auto graph_writer = [](std::ostream& os) { os << "rankdir=TB;\nnode [fontsize=10];\nedge [fontsize=8];\n"; };
  boost::write_graphviz(out, g, vertex_writer, edge_writer, graph_writer);
}

}  // namespace ccc
