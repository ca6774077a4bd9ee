#include "ccc/cost_model.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ccc {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t g) { return ceil_div(a, g) * g; }

// Fabric resources a read can load: a GPU's memory (local ops), one direction of a direct link,
// or one direction of a GPU's switch port. Each drains at its own bandwidth.
class Resources {
 public:
  explicit Resources(const Topology& t) : t_(t) {
    for (const Gpu& g : t.gpus) bandwidth_.push_back(g.memory_bandwidth);
    for (const DirectLink& l : t.links) bandwidth_.insert(bandwidth_.end(), 2, l.spec.bandwidth);
    for (const Switch& s : t.switches) bandwidth_.insert(bandwidth_.end(), 2 * t.gpus.size(), s.port.bandwidth);
  }

  // The resources a read of GPU src's memory by GPU dst crosses along route r.
  std::vector<int> used(const Route& r, int src, int dst) const {
    const int g = t_.ngpus();
    const int links = static_cast<int>(t_.links.size());
    switch (r.via) {
      case Route::Via::Local: return {dst};
      case Route::Via::Link: return {g + 2 * r.index + (t_.links[r.index].a == src ? 0 : 1)};
      case Route::Via::Switch: {
        int base = g + 2 * links + 2 * g * r.index;
        return {base + 2 * src, base + 2 * dst + 1};  // src's egress, dst's ingress
      }
    }
    return {};
  }

  size_t size() const { return bandwidth_.size(); }
  double bandwidth(int id) const { return bandwidth_[static_cast<size_t>(id)]; }

 private:
  const Topology& t_;
  std::vector<double> bandwidth_;
};

// What rank r does in step k, in units of one tile of one chunk (bytes-independent).
struct RankStep {
  double alpha = 0;
  std::vector<int> resources;  // every resource its reads cross
  int64_t moved = 0;           // chunk tiles read
  int64_t reduced = 0;         // chunk tiles reduced
  bool active() const { return moved > 0 || alpha > 0; }
};

struct Profile {
  std::vector<std::vector<RankStep>> steps;         // [step][rank]
  std::vector<std::vector<int64_t>> load;           // [step][resource] chunk tiles crossing it
  std::vector<double> exit_alpha;                   // [rank] latency of its exit waits
};

Profile make_profile(const StepProgram& p, const SyncPlan* sync, const Topology& t, const Resources& res) {
  auto path = [&](int src, int dst) {
    auto r = route(t, src, dst);
    if (!r) throw std::invalid_argument(fmt::format("GPUs {} and {} have no P2P path", src, dst));
    return *r;
  };
  Profile prof;
  prof.steps.assign(static_cast<size_t>(p.nsteps()), std::vector<RankStep>(static_cast<size_t>(p.nranks)));
  prof.load.assign(static_cast<size_t>(p.nsteps()), std::vector<int64_t>(res.size(), 0));
  for (int r = 0; r < p.nranks; ++r)
    for (int k = 0; k < p.nsteps(); ++k) {
      RankStep& rs = prof.steps[k][r];
      for (const Op& op : p.ops[r][k]) {
        if (op.peer < 0 || op.peer >= p.nranks)
          throw std::invalid_argument(fmt::format("rank {} step {} reads from rank {}, outside 0..{}", r, k, op.peer, p.nranks - 1));
        Route route_in = path(op.peer, r);
        rs.alpha = std::max(rs.alpha, route_in.spec.latency);
        for (int id : res.used(route_in, op.peer, r)) {
          rs.resources.push_back(id);
          prof.load[k][id] += op.chunks.count;
        }
        rs.moved += op.chunks.count;
        if (op.kind == OpKind::Reduce) rs.reduced += op.chunks.count;
      }
      if (sync)
        for (const Wait& w : sync->waits[r][k]) rs.alpha = std::max(rs.alpha, path(w.peer, r).spec.latency);
    }
  prof.exit_alpha.assign(static_cast<size_t>(p.nranks), 0.0);
  if (sync)
    for (int r = 0; r < p.nranks; ++r)
      for (const Wait& w : sync->waits[r][p.nsteps()])
        prof.exit_alpha[r] = std::max(prof.exit_alpha[r], path(w.peer, r).spec.latency);
  return prof;
}

void check_inputs(const StepProgram& p, const SyncPlan* sync, const Topology& t, const CostParams& params) {
  if (p.nranks < 1 || static_cast<int>(p.ops.size()) != p.nranks || p.nchunks < 1)
    throw std::invalid_argument("malformed step program");
  if (p.nranks > t.ngpus())
    throw std::invalid_argument(
        fmt::format("{} ranks do not fit topology '{}' with {} GPUs", p.nranks, t.name, t.ngpus()));
  if (params.channels < 1 || params.tile_bytes < 0) throw std::invalid_argument("channels must be >= 1, tile >= 0");
  if (!sync) return;
  bool shaped = static_cast<int>(sync->waits.size()) == p.nranks;
  for (const auto& rank : sync->waits) {
    shaped = shaped && static_cast<int>(rank.size()) == p.nsteps() + 1;
    for (const auto& step : rank)
      for (const Wait& w : step)
        shaped = shaped && w.peer >= 0 && w.peer < p.nranks && w.step >= -1 && w.step < p.nsteps();
  }
  if (!shaped) throw std::invalid_argument("the sync plan does not match the step program's ranks and steps");
}

}  // namespace

double bus_factor(Collective c, int n) {
  switch (c) {
    case Collective::AllReduce: return 2.0 * (n - 1) / n;
    case Collective::ReduceScatter:
    case Collective::AllGather: return static_cast<double>(n - 1) / n;
    case Collective::Broadcast:
    case Collective::Reduce: return 1.0;
  }
  return 1.0;
}

Estimate estimate_cost(const StepProgram& p, const SyncPlan* sync, const Topology& t, int64_t bytes,
                       const CostParams& params) {
  check_inputs(p, sync, t, params);
  Estimate e;
  if (bytes <= 0) return e;

  // The largest chunk, its per-channel slice, and the tile every step moves per chunk.
  const int64_t chunk = std::min(bytes, round_up(ceil_div(bytes, p.nchunks), kCutGranule));
  const int64_t slice = std::min(chunk, round_up(ceil_div(chunk, params.channels), kCutGranule));
  e.tiles = params.tile_bytes > 0 ? std::max<int64_t>(1, ceil_div(slice, params.tile_bytes)) : 1;
  const double piece = static_cast<double>(slice) / static_cast<double>(e.tiles);
  const double channels = params.channels;

  Resources res(t);
  Profile prof = make_profile(p, sync, t, res);
  const size_t nsteps = static_cast<size_t>(p.nsteps());
  const size_t nranks = static_cast<size_t>(p.nranks);

  // Every channel of every rank runs the same traffic, so a resource serves each channel with
  // 1/channels of its bandwidth.
  auto drain = [&](size_t k, int id) { return prof.load[k][id] * piece * channels / res.bandwidth(id); };
  std::vector<std::vector<double>> tau(nsteps, std::vector<double>(nranks, 0.0));
  for (size_t k = 0; k < nsteps; ++k)
    for (size_t r = 0; r < nranks; ++r) {
      const RankStep& rs = prof.steps[k][r];
      if (!rs.active()) continue;
      const Gpu& g = t.gpus[r];
      double transfer = rs.moved * piece / g.channel_bandwidth;
      for (int id : rs.resources) transfer = std::max(transfer, drain(k, id));
      tau[k][r] = rs.alpha + transfer + rs.reduced * piece * channels / g.reduce_bandwidth;
    }

  if (!sync) {
    for (size_t k = 0; k < nsteps; ++k) e.fill += *std::max_element(tau[k].begin(), tau[k].end());
  } else {
    // Longest path through the waits: a step starts when the rank's previous step and every
    // step it waits on are done (step -1: the peer has started, at time 0).
    std::vector<std::vector<double>> done(nranks, std::vector<double>(nsteps, 0.0));
    auto finished = [&](const Wait& w) { return w.step < 0 ? 0.0 : done[w.peer][w.step]; };
    for (size_t k = 0; k < nsteps; ++k)
      for (size_t r = 0; r < nranks; ++r) {
        double ready = k ? done[r][k - 1] : 0.0;
        for (const Wait& w : sync->waits[r][k]) ready = std::max(ready, finished(w));
        done[r][k] = ready + tau[k][r];
      }
    for (size_t r = 0; r < nranks; ++r) {
      double end = nsteps ? done[r][nsteps - 1] : 0.0;
      for (const Wait& w : sync->waits[r][nsteps]) end = std::max(end, finished(w));
      e.fill = std::max(e.fill, end + prof.exit_alpha[r]);
    }
  }

  for (size_t r = 0; r < nranks; ++r) {
    double busy = 0;
    for (size_t k = 0; k < nsteps; ++k) busy += tau[k][r];
    e.period = std::max(e.period, busy);
  }
  for (size_t id = 0; id < res.size(); ++id) {
    double busy = 0;
    for (size_t k = 0; k < nsteps; ++k) busy += drain(k, static_cast<int>(id));
    e.period = std::max(e.period, busy);
  }

  e.time = e.fill + static_cast<double>(e.tiles - 1) * e.period;
  if (e.time == 0) return e;  // nothing to do (one rank): no meaningful bandwidth
  e.algbw = static_cast<double>(bytes) / e.time;
  e.busbw = e.algbw * bus_factor(p.collective, p.nranks);
  return e;
}

}  // namespace ccc
