#include "sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <boost/container/small_vector.hpp>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/graph/topological_sort.hpp>

#include "dependencies.h"
#include "describe.h"
#include "rewrites.h"
#include "small_sort.h"
#include "verify.h"

namespace ccc {

const char* sync_reason_name(SyncReason r) {
  switch (r) {
    case SyncReason::RAW: return "RAW";
    case SyncReason::WAR: return "WAR";
    case SyncReason::WAW: return "WAW";
    case SyncReason::Entry: return "entry";
    case SyncReason::Exit: return "exit";
    case SyncReason::LlSlots: return "ll";
  }
  return "?";
}

namespace {

// A cross-rank dependency seen from its waiting (rank, step): wait for `peer` to finish `step`.
struct Candidate {
  int peer = 0;
  int step = -1;
  SourceLoc loc;  // the DSL op behind the wait (wait_for)
  DepKind kind = DepKind::RAW;
  Buffer buffer = Buffer::Output;
  ChunkRange chunks;
};

using RankGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
// Most (rank, step) nodes wait for one to three peers: keep those inline, not on the heap.
using Candidates = boost::container::small_vector<Candidate, 3>;

// Vector clocks of the last `levels` steps: row(k, r)[q] is the latest step of rank q that rank r
// knows has finished once r finishes step k (-1: q has started, -2: nothing known), for the
// `held` ranks 0 .. held - 1 (all of them, or rank 0 alone when every rank's clock is rank 0's
// rotated). Narrow clocks halve the memory traffic of the merges, the planner's O(N)-per-wait
// inner loop.
template <class Clock>
class ClockWindow {
 public:
  ClockWindow(int nranks, int held, int64_t levels)
      : n_(nranks), held_(held), levels_(levels), clocks_(static_cast<size_t>(levels) * held * nranks) {}

  Clock* row(int level, int r) { return clocks_.data() + offset(level, r); }
  const Clock* row(int level, int r) const { return clocks_.data() + offset(level, r); }
  // Whether row(level, ...) is still held while step k is being planned.
  bool holds(int level, int k) const { return k - level < levels_; }

  // out = elementwise max of the sources (at least one), written so the compiler vectorises it.
  void merge(Clock* out, const std::vector<const Clock*>& sources) const {
    if (sources.size() == 1) {
      std::copy(sources[0], sources[0] + n_, out);
      return;
    }
    max_into(out, sources[0], sources[1], n_);
    for (size_t i = 2; i < sources.size(); ++i) max_into(out, out, sources[i], n_);
  }

  // out[q] = max(out[q], b[(q - shift) mod N]): a clock merged with rank 0's row seen from rank
  // `shift` (its rotation), as two straight runs.
  void max_rotated_into(Clock* out, const Clock* b, int shift) const {
    max_into(out + shift, out + shift, b, n_ - shift);
    max_into(out, out, b + (n_ - shift), shift);
  }

 private:
  size_t offset(int level, int r) const {
    const size_t slot = static_cast<size_t>((level + 1) % levels_);
    return (slot * static_cast<size_t>(held_) + static_cast<size_t>(r)) * static_cast<size_t>(n_);
  }
  [[gnu::optimize("tree-vectorize")]] static void max_into(Clock* out, const Clock* a, const Clock* b, int n) {
    for (int q = 0; q < n; ++q) out[q] = a[q] > b[q] ? a[q] : b[q];
  }

  int n_;
  int held_;
  int64_t levels_;
  std::vector<Clock> clocks_;
};

class Planner {
 public:
  Planner(const StepProgram& p, const SyncOptions& o, Diagnostics& d)
      : p_(p), opt_(o), d_(d), S_(p.nsteps()), nodes_(static_cast<size_t>(S_ + 1) * p.nranks) {}

  // Collects the candidate waits; false (with diagnostics) on hazards no wait can order.
  bool collect() {
    int errors = 0;
    for_each_dependency(p_, opt_.in_place, [&](const Dependency& dep) {
      if (dep.kind == DepKind::Program || dep.kind == DepKind::WAW) return;
      if (opt_.in_place && dep.kind == DepKind::RAW && dep.buffer == Buffer::Input) {
        if (errors++ == 0) report_clobbered_input(dep);
        return;
      }
      if (dep.from.rank == dep.to.rank) {
        if (dep.kind == DepKind::WAR && dep.from.step == dep.to.step && errors++ == 0) report_local_hazard(dep);
        return;
      }
      ++cross_edges_;
      add({dep.from.rank, dep.from.step, op_loc(dep), dep.kind, dep.buffer, dep.chunks}, dep.to.rank, dep.to.step);
    });
    return errors == 0;
  }

  // Ranks of each step in an order that respects the step's internal waits; false on a cycle,
  // with the (rank, step) pairs whose writes are caught in one in `cyclic`.
  bool order_steps(std::vector<std::pair<int, int>>& cyclic) {
    order_.assign(S_ + 1, {});
    internal_.assign(S_ + 1, 0);
    for (int k = 0; k <= S_; ++k) {
      RankGraph g(p_.nranks);
      bool any = false;
      for (int r = 0; r < p_.nranks; ++r)
        for (const Candidate& c : node(r, k))
          if (c.step == k) {
            boost::add_edge(c.peer, r, g);
            any = true;
          }
      if (!any) {
        for (int r = 0; r < p_.nranks; ++r) order_[k].push_back(r);
        continue;
      }
      internal_[k] = 1;
      std::vector<int> comp(p_.nranks);
      int ncomp = boost::strong_components(g, comp.data());
      if (ncomp < p_.nranks) {
        std::vector<int> size(ncomp, 0);
        for (int c : comp) ++size[c];
        for (int r = 0; r < p_.nranks; ++r)
          if (size[comp[r]] > 1) cyclic.emplace_back(r, k);
        if (cycle_step_ < 0) {
          cycle_step_ = k;
          cycle_comp_ = comp;
        }
        continue;
      }
      std::vector<RankGraph::vertex_descriptor> rev;
      boost::topological_sort(g, std::back_inserter(rev));
      order_[k].assign(rev.rbegin(), rev.rend());
    }
    return cyclic.empty();
  }

  // Explains the first cycle found by order_steps.
  void report_cycle(const std::string& why_not) {
    const int k = cycle_step_;
    // Walk waits backwards inside the component until a rank repeats.
    std::vector<int> seen(p_.nranks, -1), path;
    int r = static_cast<int>(std::find_if(cycle_comp_.begin(), cycle_comp_.end(),
                                          [&](int c) { return std::count(cycle_comp_.begin(), cycle_comp_.end(), c) > 1; }) -
                             cycle_comp_.begin());
    std::vector<const Candidate*> via;
    while (seen[r] < 0) {
      seen[r] = static_cast<int>(path.size());
      path.push_back(r);
      const Candidate* next = nullptr;
      for (const Candidate& c : node(r, k))
        if (c.step == k && cycle_comp_[c.peer] == cycle_comp_[r]) next = &c;
      via.push_back(next);
      r = next->peer;
    }
    std::string chain;
    for (size_t i = static_cast<size_t>(seen[r]); i < path.size(); ++i)
      chain += fmt::format("{}rank {} waits for rank {} ({})", i == static_cast<size_t>(seen[r]) ? "" : ", ", path[i],
                           via[i]->peer, wait_why(wait_for(*via[i]), p_.steps, p_.file));
    d_.error(p_.steps[k].loc, fmt::format("deadlock at {}: ranks overwrite in this step what a peer still reads in it: {}",
                                          describe_step(p_, k), chain));
    d_.note({}, "staging cannot break the cycle: " + why_not +
                    "; write the step's results to scratch and copy them to the output in a later step");
  }

  SyncPlan reduce() {
    if (S_ + 2 < std::numeric_limits<int16_t>::max()) return reduce_with<int16_t>();
    return reduce_with<int32_t>();
  }

 private:
  template <class Clock>
  SyncPlan reduce_with() {
    const int N = p_.nranks;
    const int64_t levels = std::clamp<int64_t>(opt_.clock_budget / (int64_t{N} * N), 2, S_ + 2);
    if (opt_.share_rotated_clocks)
      if (std::optional<SyncPlan> plan = reduce_rotations<Clock>(levels)) return std::move(*plan);
    ClockWindow<Clock> clocks(N, N, levels);
    for (int r = 0; r < N; ++r) {
      Clock* row = clocks.row(-1, r);
      std::fill(row, row + N, Clock{-2});
      row[r] = -1;
    }
    SyncPlan plan = empty_plan();
    const auto known = [&clocks](int level, int rank, int peer) { return clocks.row(level, rank)[peer]; };
    std::vector<const Clock*> sources;
    std::vector<const Candidate*> direct;  // kept waits whose clocks left the window: only themselves
    for (int k = 0; k <= S_; ++k)
      for (int r : order_[k]) {
        find_needed(r, k, clocks, known);
        sources.assign(1, clocks.row(k - 1, r));
        direct.clear();
        kept_.clear();
        for (size_t i = 0; i < by_step_.size(); ++i) {
          if (!needed_[i]) continue;
          const Candidate& c = by_step_[i];
          kept_.push_back(wait_for(c));
          if (clocks.holds(c.step, k)) sources.push_back(clocks.row(c.step, c.peer));
          else direct.push_back(&c);
        }
        Clock* row = clocks.row(k, r);
        clocks.merge(row, sources);
        for (const Candidate* c : direct) row[c->peer] = std::max<Clock>(row[c->peer], static_cast<Clock>(c->step));
        row[r] = static_cast<Clock>(k);
        add_kept(plan, r, k);
      }
    return plan;
  }

  // The same plan for a program whose candidate waits look alike from every rank, rotated: where
  // rank 0 waits for peer p to finish step j, rank r waits for peer (p + r) mod N to finish step
  // j (ring, and the rotations of the shipped schedules). Then rank r's clocks are rank 0's
  // rotated (by induction over the steps: they start so, and merge rotated clocks of the same
  // waits), rank r keeps exactly the waits rank 0 keeps, seen from r, and only rank 0's clocks
  // are computed: O(N) per step instead of O(N^2) (ring at N = 1024: 2 G clock entries merged
  // otherwise). nullopt at the first step whose candidates are not rank 0's rotated, or when a
  // step has waits inside it (a rank's clock would then need a peer's of that same step).
  template <class Clock>
  std::optional<SyncPlan> reduce_rotations(int64_t levels) {
    const int N = p_.nranks;
    if (N < 2 || std::find(internal_.begin(), internal_.end(), 1) != internal_.end()) return std::nullopt;
    ClockWindow<Clock> clocks(N, 1, levels);
    Clock* start = clocks.row(-1, 0);
    std::fill(start, start + N, Clock{-2});
    start[0] = -1;
    // rank's clock of peer = rank 0's clock of the peer seen from rank 0, (peer - rank) mod N.
    const auto known = [&clocks, N](int level, int rank, int peer) { return clocks.row(level, 0)[(peer - rank + N) % N]; };
    SyncPlan plan = empty_plan();
    plan.rotated_clocks = true;
    // Rank 0's candidates of the step by peer: the step it waits for (kNone: no candidate) and
    // whether it keeps the wait.
    constexpr int kNone = std::numeric_limits<int>::min();
    std::vector<std::pair<int, bool>> zero(N, {kNone, false});
    std::vector<Candidate> mine;
    for (int k = 0; k <= S_; ++k) {
      find_needed(0, k, clocks, known);
      Clock* row = clocks.row(k, 0);
      const Clock* before = clocks.row(k - 1, 0);
      std::copy(before, before + N, row);
      kept_.clear();
      for (size_t i = 0; i < by_step_.size(); ++i) {
        const Candidate& c = by_step_[i];
        zero[c.peer] = {c.step, needed_[i] != 0};
        if (!needed_[i]) continue;
        kept_.push_back(wait_for(c));
        if (clocks.holds(c.step, k)) clocks.max_rotated_into(row, clocks.row(c.step, 0), c.peer);
        else row[c.peer] = std::max<Clock>(row[c.peer], static_cast<Clock>(c.step));
      }
      row[0] = static_cast<Clock>(k);
      add_kept(plan, 0, k);
      for (int r = 1; r < N; ++r) {
        const Candidates& cands = node(r, k);
        if (cands.size() != by_step_.size()) return std::nullopt;
        // Distinct peers (one candidate per peer) seen from rank 0 at rank 0's steps, as many:
        // the same candidates. Listed in the order the general planner keeps them in.
        mine.assign(cands.begin(), cands.end());
        stable_sort_small(mine.begin(), mine.end(), latest_first);
        kept_.clear();
        for (const Candidate& c : mine) {
          const auto [step, keep] = zero[(c.peer - r + N) % N];
          if (step != c.step) return std::nullopt;
          if (keep) kept_.push_back(wait_for(c));
        }
        add_kept(plan, r, k);
      }
      for (const Candidate& c : by_step_) zero[c.peer] = {kNone, false};
    }
    return plan;
  }

  static bool latest_first(const Candidate& a, const Candidate& b) { return a.step > b.step; }

  // Sorts node (r, k)'s candidates latest step first into by_step_ and marks in needed_ those
  // that nothing else implies: neither rank r's own clock before the step nor the clock of
  // another candidate. known(level, q, x): the latest step of rank x that rank q knows has
  // finished once q has finished step `level`, for a level the window holds.
  template <class Clock, class Known>
  void find_needed(int r, int k, const ClockWindow<Clock>& clocks, const Known& known) {
    const Candidates& cands = node(r, k);
    by_step_.assign(cands.begin(), cands.end());
    stable_sort_small(by_step_.begin(), by_step_.end(), latest_first);
    needed_.assign(by_step_.size(), 0);
    // Dependencies never go to an earlier step, so only a wait on a later step -- or on the
    // same step, if that step has waits inside it -- can imply another: with the candidates
    // sorted latest first, each looks at a prefix (one-shot's N-1 waits on one step: none).
    for (size_t i = 0; i < by_step_.size(); ++i) {
      const Candidate& c = by_step_[i];
      bool implied = known(k - 1, r, c.peer) >= c.step;
      for (size_t j = 0; j < by_step_.size() && !implied; ++j) {
        const Candidate& o = by_step_[j];
        if (o.step < c.step || (o.step == c.step && (c.step < 0 || !internal_[c.step]))) break;
        implied = j != i && clocks.holds(o.step, k) && known(o.step, o.peer, c.peer) >= c.step;
      }
      needed_[i] = !implied;
    }
  }

  SyncPlan empty_plan() const {
    SyncPlan plan;
    plan.waits.assign(p_.nranks, std::vector<std::vector<Wait>>(S_ + 1));
    plan.cross_rank_edges = cross_edges_;
    return plan;
  }

  // kept_ becomes node (r, k)'s waits, copied out at its exact size (2 M small vectors at large N).
  void add_kept(SyncPlan& plan, int r, int k) const {
    plan.waits[r][k].assign(kept_.begin(), kept_.end());
    plan.waits_kept += static_cast<int64_t>(kept_.size());
  }

  Candidates& node(int r, int k) { return nodes_[static_cast<size_t>(k) * p_.nranks + r]; }

  // Keeps, per peer, only the wait for its latest step: it implies the earlier ones.
  void add(const Candidate& c, int r, int k) {
    for (Candidate& e : node(r, k))
      if (e.peer == c.peer) {
        if (c.step > e.step) e = c;
        return;
      }
    node(r, k).push_back(c);
  }

  static SyncReason reason(DepKind k) {
    switch (k) {
      case DepKind::WAR: return SyncReason::WAR;
      case DepKind::Entry: return SyncReason::Entry;
      case DepKind::Exit: return SyncReason::Exit;
      default: return SyncReason::RAW;
    }
  }

  // The DSL op a wait for `dep` names: the waiting rank's op, or at exit the peer's op that still
  // reads. Taken from the dependency, not looked up later when the plan is reduced step by step
  // across ranks (a cache and TLB miss per wait).
  static SourceLoc op_loc(const Dependency& dep) { return dep.kind == DepKind::Exit ? dep.from_loc : dep.to_loc; }

  // The wait for candidate c, with the fields wait_why() explains it by.
  Wait wait_for(const Candidate& c) const {
    return {c.peer, c.step, reason(c.kind), c.buffer, c.kind == DepKind::WAR && opt_.in_place && c.buffer == Buffer::Input,
            c.loc, c.chunks};
  }

  void report_clobbered_input(const Dependency& dep) {
    const Op& reader = p_.ops[dep.to.rank][dep.to.step][dep.to.op];
    const Op& writer = p_.ops[dep.from.rank][dep.from.step][dep.from.op];
    d_.error(reader.loc,
             fmt::format("in place, rank {} at {} reads {} of rank {}, but rank {} overwrote that memory (its output) "
                         "at {}; no wait can bring the input back",
                         dep.to.rank, describe_step(p_, dep.to.step), describe_chunks(dep.buffer, dep.chunks),
                         dep.owner, dep.owner, describe_step(p_, dep.from.step)));
    d_.note(writer.loc, fmt::format("the overwrite: rank {}: {}; read the output instead, or run out of place",
                                    dep.from.rank, describe_op(writer, dep.from.rank)));
  }

  void report_local_hazard(const Dependency& dep) {
    const Op& reader = p_.ops[dep.from.rank][dep.from.step][dep.from.op];
    const Op& writer = p_.ops[dep.to.rank][dep.to.step][dep.to.op];
    d_.error(reader.loc, fmt::format("rank {} at {} reads {} that another op of the same step overwrites; "
                                     "the generated code runs a step's ops in no fixed order: split the step",
                                     dep.from.rank, describe_step(p_, dep.from.step),
                                     describe_chunks(dep.buffer, dep.chunks)));
    d_.note(writer.loc, "the overwrite: " + describe_op(writer, dep.to.rank));
  }

  const StepProgram& p_;
  const SyncOptions& opt_;
  Diagnostics& d_;
  const int S_;
  std::vector<Candidates> nodes_;  // [step (nsteps = exit)][rank]
  int64_t cross_edges_ = 0;
  std::vector<std::vector<int>> order_;
  std::vector<char> internal_;  // per step: some rank waits for another inside it
  int cycle_step_ = -1;
  std::vector<int> cycle_comp_;
  // The node being reduced: its candidates latest first, which of them are needed, and the waits
  // kept (reused buffers: 2 M nodes at large N).
  std::vector<Candidate> by_step_;
  std::vector<char> needed_;
  std::vector<Wait> kept_;
};

}  // namespace

std::optional<PlannedProgram> plan_syncs(StepProgram program, const SyncOptions& options, Diagnostics& diags) {
  if (!check_structure(program, diags)) return std::nullopt;
  std::vector<std::string> notes;
  // Staging adds steps that can only remove same-step cycles, so a second round settles it.
  for (int round = 0;; ++round) {
    program = resolve_first_reads(std::move(program));
    Planner planner(program, options, diags);
    if (!planner.collect()) return std::nullopt;
    std::vector<std::pair<int, int>> cyclic;
    if (planner.order_steps(cyclic)) {
      SyncPlan sync = planner.reduce();
      sync.notes = std::move(notes);
      return PlannedProgram{std::move(program), std::move(sync)};
    }
    std::string why_not = round > 0 ? "the staged program still has a cycle" : "";
    StepProgram staged = program;
    if (why_not.empty() && stage_through_scratch(staged, cyclic, why_not)) {
      std::vector<int> steps;
      for (auto [r, k] : cyclic) steps.push_back(k);
      steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
      for (int k : steps) {
        int64_t n = std::count_if(cyclic.begin(), cyclic.end(), [&](auto rk) { return rk.second == k; });
        notes.push_back(fmt::format(
            "{}: {} ranks overwrite in this step output chunks a peer reads in it{}; their writes are staged through "
            "scratch and copied to the output in a new step",
            describe_step(program, k), n, options.in_place ? " (in place: input and output are one buffer)" : ""));
      }
      program = std::move(staged);
      continue;
    }
    planner.report_cycle(why_not);
    return std::nullopt;
  }
}

std::string print_syncs(const PlannedProgram& planned) {
  const StepProgram& p = planned.program;
  const SyncPlan& s = planned.sync;
  std::string out = fmt::format("syncs {} ({}) N={}: {} cross-rank dependencies, {} waits\n", p.schedule,
                                collective_name(p.collective), p.nranks, s.cross_rank_edges, s.waits_kept);
  for (int r = 0; r < p.nranks; ++r) {
    out += fmt::format("rank {}:\n", r);
    for (int k = 0; k <= p.nsteps(); ++k)
      for (const Wait& w : s.waits[r][k])
        out += fmt::format("  before {}: wait for rank {} {}: {} {}\n", describe_step(p, k), w.peer,
                           w.step < 0 ? "to start" : "to finish " + describe_step(p, w.step), sync_reason_name(w.reason),
                           wait_why(w, p.steps, p.file));
  }
  for (const std::string& n : s.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace ccc
