#include "cost_model.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace ccc {
namespace {

// A peer load (protocol simple) crosses the fabric twice, the request out and the data back; a
// pushed flag or an ll line crosses once. Topology latencies are one way.
constexpr int kReadTrips = 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t g) { return ceil_div(a, g) * g; }

// Fabric resources a read can load, numbered: each GPU's memory (local ops), then both
// directions of every direct link, then every switch's egress and ingress port per GPU.
std::vector<double> resource_bandwidths(const Topology& t) {
  std::vector<double> bw;
  for (const Gpu& g : t.gpus) bw.push_back(g.memory_bandwidth);
  for (const DirectLink& l : t.links) bw.insert(bw.end(), 2, l.spec.bandwidth);
  for (const Switch& s : t.switches) bw.insert(bw.end(), 2 * t.gpus.size(), s.port.bandwidth);
  return bw;
}

// The resources a read of GPU src's memory by GPU dst crosses along route r.
std::vector<int> resources_used(const Topology& t, const Route& r, int src, int dst) {
  const int g = t.ngpus();
  switch (r.via) {
    case Route::Via::Local: return {dst};
    case Route::Via::Link: return {g + 2 * r.index + (t.links[r.index].a == src ? 0 : 1)};
    case Route::Via::Switch: {
      int base = g + 2 * static_cast<int>(t.links.size()) + 2 * g * r.index;
      return {base + 2 * src, base + 2 * dst + 1};  // src's egress, dst's ingress
    }
  }
  return {};
}

Route checked_route(const Topology& t, int src, int dst) {
  auto r = route(t, src, dst);
  if (!r) throw std::invalid_argument(fmt::format("GPUs {} and {} have no P2P path", src, dst));
  return *r;
}

void check_inputs(const StepProgram& p, const SyncPlan* sync, const Topology& t) {
  if (p.nranks < 1 || static_cast<int>(p.ops.size()) != p.nranks || p.nchunks < 1)
    throw std::invalid_argument("malformed step program");
  if (p.nranks > t.ngpus())
    throw std::invalid_argument(
        fmt::format("{} ranks do not fit topology '{}' with {} GPUs", p.nranks, t.name, t.ngpus()));
  for (int r = 0; r < p.nranks; ++r)
    for (const auto& step : p.ops[r])
      for (const Op& op : step)
        if (op.peer < 0 || op.peer >= p.nranks)
          throw std::invalid_argument(fmt::format("rank {} reads from rank {}, outside 0..{}", r, op.peer, p.nranks - 1));
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

// What rank r does in step k, in units of one window of one chunk (size-independent).
struct RankStep {
  // One thread per peer polls the waits together, then the reads take a round trip more: alpha =
  // the slowest wait's + the slowest read's. Entry waits (the peer has started) are polled in the
  // first window only: later windows pay period_alpha.
  double alpha = 0;
  double period_alpha = 0;
  int latencies = 0;           // cross-GPU latencies alpha adds up, one after another
  int period_latencies = 0;
  double read_latency = 0;     // the slowest of its reads' routes, one way
  std::vector<int> resources;  // every resource its reads cross
  int64_t moved = 0;           // chunk windows read, remote ones twice under ll (lines are half flag)
  int64_t reduced = 0;         // chunk windows reduced
  int64_t completed = 0;       // chunk windows whose output this step completes (its last write
                               // there is a reduce): an epilogue reads the residual for them
  std::vector<Wait> waits;     // from the sync plan
  bool active() const { return moved > 0 || alpha > 0; }
};

struct CostModel::Prepared {
  Collective collective = Collective::AllReduce;
  int nranks = 0;
  int64_t nchunks = 0;
  bool lock_step = true;
  // Per protocol (index: Protocol), what each rank does in each step and its exit waits.
  struct Form {
    std::vector<std::vector<RankStep>> steps;  // [step][rank]
    std::vector<std::vector<Wait>> exit_waits; // [rank]
    std::vector<double> exit_alpha;            // [rank] latency of its exit waits, polled together
    std::vector<int> exit_latencies;           // [rank] how many of them cross GPUs
  };
  Form forms[2];
  std::vector<std::vector<int64_t>> load;    // [step][resource] chunk windows crossing it
  int first_fabric = 0;                      // resources from here on are links and switch ports:
                                             // ll's lines cross them at twice the data's bytes
  std::vector<double> bandwidth;             // [resource]
  double launch = 0;                         // s: the slowest GPU's kernel launch
  std::vector<double> channel_bandwidth;     // [rank]
  std::vector<double> reduce_bandwidth;      // [rank]
};

CostModel::CostModel(const StepProgram& p, const SyncPlan* sync, const Topology& t) {
  check_inputs(p, sync, t);
  auto m = std::make_unique<Prepared>();
  m->collective = p.collective;
  m->nranks = p.nranks;
  m->nchunks = p.nchunks;
  m->lock_step = sync == nullptr;
  m->bandwidth = resource_bandwidths(t);
  m->first_fabric = t.ngpus();
  Prepared::Form& simple = m->forms[static_cast<int>(Protocol::Simple)];
  simple.steps.assign(static_cast<size_t>(p.nsteps()), std::vector<RankStep>(static_cast<size_t>(p.nranks)));
  m->load.assign(static_cast<size_t>(p.nsteps()), std::vector<int64_t>(m->bandwidth.size(), 0));
  simple.exit_waits.resize(static_cast<size_t>(p.nranks));
  simple.exit_alpha.assign(static_cast<size_t>(p.nranks), 0.0);
  simple.exit_latencies.assign(static_cast<size_t>(p.nranks), 0);
  std::map<std::pair<int, int>, Route> routes;  // route() scans every fabric: once per pair
  auto path = [&](int src, int dst) -> const Route& {
    auto it = routes.find({src, dst});
    if (it == routes.end()) it = routes.emplace(std::make_pair(src, dst), checked_route(t, src, dst)).first;
    return it->second;
  };
  // Latency of waits polled together: the slowest route's one-way latency, because a producer
  // pushes its progress into the waiting rank's own memory and the wait polls that locally
  // (ccc_progress.h, "Push the signal, poll locally"): what is on the critical path is the
  // flight of one release store. (Polling the producer's memory would cost a round trip, two
  // latencies.) Nothing for peers on the same GPU. Entry waits count in the first window only
  // (with_entry).
  auto slowest_wait = [&](const std::vector<Wait>& waits, int r, bool with_entry) {
    double latency = 0;
    for (const Wait& w : waits)
      if (with_entry || w.step >= 0) latency = std::max(latency, path(w.peer, r).spec.latency);
    return latency;
  };
  for (int r = 0; r < p.nranks; ++r) {
    m->launch = std::max(m->launch, t.gpus[r].launch);
    m->channel_bandwidth.push_back(t.gpus[r].channel_bandwidth);
    m->reduce_bandwidth.push_back(t.gpus[r].reduce_bandwidth);
    // The completing writes, where an epilogue reads the residual.
    for (const std::pair<int, int>& at : completing_reduces(p, r))
      if (at.first >= 0) ++simple.steps[static_cast<size_t>(at.first)][static_cast<size_t>(r)].completed;
    std::set<int> met = {r};  // the ranks whose mailboxes the launch has read (PeerTable::load_peers)
    for (int k = 0; k < p.nsteps(); ++k) {
      RankStep& rs = simple.steps[k][r];
      double read_latency = 0, mailbox_latency = 0;
      for (const Op& op : p.ops[r][k]) {
        const Route& in = path(op.peer, r);
        read_latency = std::max(read_latency, in.spec.latency);
        if (!met.count(op.peer)) mailbox_latency = std::max(mailbox_latency, in.spec.latency);
        for (int id : resources_used(t, in, op.peer, r)) {
          rs.resources.push_back(id);
          m->load[k][id] += op.chunks.count;
        }
        rs.moved += op.chunks.count;
        if (op.kind == OpKind::Reduce) rs.reduced += op.chunks.count;
      }
      // A peer load is a round trip: the request crosses to the peer and the data comes back
      // (the loads of one step are issued together, so the slowest route's round trip).
      for (const Op& op : p.ops[r][k]) met.insert(op.peer);
      rs.read_latency = read_latency;
      rs.alpha = rs.period_alpha = kReadTrips * read_latency;
      rs.latencies = rs.period_latencies = read_latency > 0 ? kReadTrips : 0;
      if (!sync) continue;  // lock-step (the schedule's closed form): the round trip of the step's reads only
      // The kernel: in the first window, before the reads, the mailboxes of the peers the launch
      // meets at this step are read, all at once (PeerTable::load_peers): one round trip more.
      rs.alpha += kReadTrips * mailbox_latency;
      rs.latencies += mailbox_latency > 0 ? kReadTrips : 0;
      rs.waits = sync->waits[r][k];
      const double waits = slowest_wait(rs.waits, r, true), period_waits = slowest_wait(rs.waits, r, false);
      rs.alpha += waits;
      rs.latencies += waits > 0 ? 1 : 0;
      rs.period_alpha += period_waits;
      rs.period_latencies += period_waits > 0 ? 1 : 0;
    }
    if (!sync) continue;
    simple.exit_waits[r] = sync->waits[r][p.nsteps()];
    simple.exit_alpha[r] = slowest_wait(simple.exit_waits[r], r, true);
    simple.exit_latencies[r] = simple.exit_alpha[r] > 0 ? 1 : 0;
    // Then each awaited peer whose buffers the rank never read has its call checked
    // (PeerTable::same_call): one peer load, a round trip, after the wait.
    std::set<int> read;
    for (const auto& step : p.ops[r])
      for (const Op& op : step) read.insert(op.peer);
    double check = 0;
    for (const Wait& w : simple.exit_waits[r])
      if (!read.count(w.peer)) check = std::max(check, path(r, w.peer).spec.latency);
    simple.exit_alpha[r] += kReadTrips * check;
    simple.exit_latencies[r] += check > 0 ? kReadTrips : 0;
  }
  // Protocol ll (docs/codegen.md): a remote read is the flight of the producer's lines into this
  // rank's memory, one latency, with no wait of its own; the producer's sends wait once for the
  // consumer to have entered, one more latency before the rank's first remote read (the pushed
  // "entered" of the rank, which the model prices like the read's route), then read the
  // consumer's mailbox for its receive slots, a round trip more. Reads still follow the
  // steps that produce them (the RAW waits, at no latency of their own); nothing waits at exit.
  // Remote bytes count twice: half of each 8-byte line is flag.
  Prepared::Form& ll = m->forms[static_cast<int>(Protocol::Ll)];
  ll = simple;
  ll.exit_waits.assign(static_cast<size_t>(p.nranks), {});
  ll.exit_alpha.assign(static_cast<size_t>(p.nranks), 0.0);
  ll.exit_latencies.assign(static_cast<size_t>(p.nranks), 0);
  for (int r = 0; r < p.nranks; ++r) {
    bool entered = false;  // the rank's first remote read has paid for its producers' entry waits
    for (int k = 0; k < p.nsteps(); ++k) {
      RankStep& rs = ll.steps[k][r];
      const int64_t remote = [&] {
        int64_t n = 0;
        for (const Op& op : p.ops[r][k]) n += op.peer == r ? 0 : op.chunks.count;
        return n;
      }();
      rs.moved += remote;
      std::erase_if(rs.waits, [](const Wait& w) { return w.reason != SyncReason::RAW || w.step < 0; });
      const int reads = rs.read_latency > 0 ? 1 : 0;
      rs.alpha = rs.period_alpha = rs.read_latency;
      rs.latencies = rs.period_latencies = reads;
      if (reads > 0 && !entered) {
        rs.alpha += (1 + kReadTrips) * rs.read_latency;
        rs.latencies += 1 + kReadTrips;
        entered = true;
      }
    }
  }
  prepared_ = std::move(m);
}

CostModel::~CostModel() = default;
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;

double bus_factor(Collective c, int n) {
  switch (c) {
    case Collective::AllReduce: return 2.0 * (n - 1) / n;
    case Collective::ReduceScatter:
    case Collective::AllGather:
    case Collective::AllToAll: return static_cast<double>(n - 1) / n;  // as nccl-tests count it
    case Collective::Broadcast:
    case Collective::Reduce: return 1.0;
  }
  return 1.0;
}

Estimate CostModel::estimate(int64_t bytes, const CostParams& params) const {
  if (params.channels < 1 || params.tile_bytes < 0 || params.pipeline < 1)
    throw std::invalid_argument("channels and pipeline must be >= 1, the tile size >= 0");
  const Prepared& m = *prepared_;
  const Prepared::Form& form = m.forms[static_cast<int>(params.protocol)];
  Estimate e;
  if (bytes <= 0) return e;

  // The largest chunk, its per-channel slice, and the window every step moves per chunk.
  const int64_t chunk = std::min(bytes, round_up(ceil_div(bytes, m.nchunks), kCutGranule));
  const int64_t slice = std::min(chunk, round_up(ceil_div(chunk, params.channels), kCutGranule));
  const int64_t window = params.tile_bytes * params.pipeline;
  e.windows = window > 0 ? std::max<int64_t>(1, ceil_div(slice, window)) : 1;
  const double piece = static_cast<double>(slice) / static_cast<double>(e.windows);
  const double channels = params.channels;
  const size_t nsteps = form.steps.size();
  const size_t nranks = static_cast<size_t>(m.nranks);

  // Every channel of every rank runs the same traffic, so a resource serves each channel with
  // 1/channels of its bandwidth.
  const double line_factor = params.protocol == Protocol::Ll ? 2.0 : 1.0;
  // An epilogue's residual, read at the completing writes through the rank's memory (resource
  // r: rank r runs on GPU r); protocol ll's reads of local buffers are not priced.
  const bool residual = params.epilogue.kind != Epilogue::None && params.protocol == Protocol::Simple;
  auto drain = [&](size_t k, int id) {
    int64_t windows = m.load[k][id];
    if (residual && static_cast<size_t>(id) < nranks) windows += form.steps[k][static_cast<size_t>(id)].completed;
    return windows * (id >= m.first_fabric ? line_factor : 1.0) * piece * channels / m.bandwidth[id];
  };
  // tau: the first window's cost of each step; period_tau: a later window's (no entry waits).
  std::vector<std::vector<double>> tau(nsteps, std::vector<double>(nranks, 0.0)), period_tau = tau;
  for (size_t k = 0; k < nsteps; ++k)
    for (size_t r = 0; r < nranks; ++r) {
      const RankStep& rs = form.steps[k][r];
      if (!rs.active()) continue;
      double transfer = rs.moved * piece / m.channel_bandwidth[r];
      for (int id : rs.resources) transfer = std::max(transfer, drain(k, id));
      if (residual && rs.completed > 0) transfer = std::max(transfer, drain(k, static_cast<int>(r)));
      const double work = transfer + rs.reduced * piece * channels / m.reduce_bandwidth[r];
      tau[k][r] = rs.alpha + work;
      period_tau[k][r] = rs.period_alpha + work;
    }

  // A time on the critical path and how many cross-GPU latencies it strings together.
  struct Path {
    double time = 0;
    int latencies = 0;
  };
  auto later = [](Path a, Path b) { return b.time > a.time ? b : a; };
  auto after = [&](Path p, size_t k, size_t r) {
    if (!form.steps[k][r].active()) return p;
    return Path{p.time + tau[k][r], p.latencies + form.steps[k][r].latencies};
  };
  Path fill;
  if (m.lock_step) {
    for (size_t k = 0; k < nsteps; ++k) {
      Path slowest{-1, 0};
      for (size_t r = 0; r < nranks; ++r) slowest = later(slowest, after({}, k, r));
      fill = {fill.time + slowest.time, fill.latencies + slowest.latencies};
    }
  } else {
    // Longest path through the waits: a step starts when the rank's previous step and every
    // step it waits on are done (step -1: the peer has started, at time 0).
    std::vector<std::vector<Path>> done(nranks, std::vector<Path>(nsteps));
    auto finished = [&](const Wait& w) { return w.step < 0 ? Path{} : done[w.peer][w.step]; };
    for (size_t k = 0; k < nsteps; ++k)
      for (size_t r = 0; r < nranks; ++r) {
        Path ready = k ? done[r][k - 1] : Path{};
        for (const Wait& w : form.steps[k][r].waits) ready = later(ready, finished(w));
        done[r][k] = after(ready, k, r);
      }
    for (size_t r = 0; r < nranks; ++r) {
      Path end = nsteps ? done[r][nsteps - 1] : Path{};
      for (const Wait& w : form.exit_waits[r]) end = later(end, finished(w));
      fill = later(fill, Path{end.time + form.exit_alpha[r], end.latencies + form.exit_latencies[r]});
    }
  }
  e.fill = fill.time;

  int period_latencies = 0;
  for (size_t r = 0; r < nranks; ++r) {
    double busy = 0;
    int latencies = 0;
    for (size_t k = 0; k < nsteps; ++k) {
      busy += period_tau[k][r];
      if (form.steps[k][r].active()) latencies += form.steps[k][r].period_latencies;
    }
    if (busy > e.period) period_latencies = latencies;
    e.period = std::max(e.period, busy);
  }
  for (size_t id = 0; id < m.bandwidth.size(); ++id) {
    double busy = 0;
    for (size_t k = 0; k < nsteps; ++k) busy += drain(k, static_cast<int>(id));
    e.period = std::max(e.period, busy);
  }

  e.time = e.fill + (e.windows > 1 ? static_cast<double>(e.windows - 1) * e.period : 0.0);  // no 0 * inf
  e.serial_latencies = fill.latencies + (e.windows - 1) * period_latencies;
  if (e.time == 0) return e;  // nothing to do (one rank): no meaningful bandwidth
  e.epilogue = norm_seconds(bytes, params);
  e.launch = m.launch;
  e.time += e.epilogue + e.launch;
  e.algbw = static_cast<double>(bytes) / e.time;
  e.busbw = e.algbw * bus_factor(m.collective, m.nranks);
  return e;
}

// The norm after the exit waits (PeerTable::rmsnorm_own_rows): block b of the rank's B (its
// channels, then its norm blocks: rmsnorm_rank_blocks) norms the b-th of B runs of whole rows, so
// the busiest block takes ceil(rows / B) of them at the block's rate, while every block's bytes
// cross the GPU's memory. The blocks' meeting before it (a few local stores and polls) is not
// priced.
double CostModel::norm_seconds(int64_t bytes, const CostParams& params) const {
  const EpilogueShape& e = params.epilogue;
  if (e.kind != Epilogue::ResidualRmsNorm || e.row_bytes <= 0) return 0;
  const Prepared& m = *prepared_;
  const int64_t rows = bytes / e.row_bytes;
  const int blocks = rmsnorm_rank_blocks(params.channels, rows, e.max_rank_blocks);
  const double busiest = static_cast<double>(ceil_div(rows, blocks) * e.row_bytes) * e.norm_accesses();
  double slowest = 0;
  for (int r = 0; r < m.nranks; ++r)
    slowest = std::max({slowest, busiest / 2 / m.channel_bandwidth[static_cast<size_t>(r)],
                        static_cast<double>(rows * e.row_bytes) * e.norm_accesses() / m.bandwidth[static_cast<size_t>(r)]});
  return slowest;
}

double separate_epilogue_seconds(const Topology& t, int nranks, int64_t bytes, const EpilogueShape& e) {
  if (e.kind == Epilogue::None || bytes <= 0) return 0;
  // The sum and the residual read, the output written; the norm's extra outputs.
  double accessed = 3.0 * static_cast<double>(bytes);
  if (e.kind == Epilogue::ResidualRmsNorm)
    accessed += static_cast<double>(bytes) * ((e.residual_out ? 1.0 : 0.0) + (e.quant_out ? 1.0 / e.elem_size : 0.0));
  double slowest = 0;
  for (int r = 0; r < nranks && r < t.ngpus(); ++r)
    slowest = std::max(slowest, t.gpus[static_cast<size_t>(r)].launch + accessed / t.gpus[static_cast<size_t>(r)].memory_bandwidth);
  return slowest;
}

Estimate estimate_cost(const StepProgram& p, const SyncPlan* sync, const Topology& t, int64_t bytes,
                       const CostParams& params) {
  return CostModel(p, sync, t).estimate(bytes, params);
}

}  // namespace ccc
