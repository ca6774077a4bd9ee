#include "interpret.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "describe.h"

namespace ccc {

namespace {

using Value = std::optional<uint64_t>;

Value plus(Value a, Value b) {
  if (!a || !b) return std::nullopt;
  return *a + *b;  // wrapping
}

// Each rank's three buffers; with in_place, reads and writes of `input` go to `output`.
class Memory {
 public:
  Memory(const StepProgram& p, bool in_place)
      : in_place_(in_place), bufs_(static_cast<size_t>(p.nranks) * 3, std::vector<Value>(p.nchunks)) {
    for (int r = 0; r < p.nranks; ++r)
      bufs_[slot(r, Buffer::Scratch)].resize(static_cast<size_t>(buffer_chunks(p, Buffer::Scratch)));
  }

  Value& at(int rank, Buffer b, int64_t c) { return bufs_[slot(rank, b)][c]; }
  void load(int rank, const std::vector<Value>& input) {
    bufs_[slot(rank, Buffer::Output)] = input;
    bufs_[slot(rank, Buffer::Input)] = input;
  }
  void scribble(int rank) {  // the rank's buffers are no longer this collective's
    for (Buffer b : {Buffer::Output, Buffer::Input, Buffer::Scratch})
      std::fill(bufs_[slot(rank, b)].begin(), bufs_[slot(rank, b)].end(), std::nullopt);
  }
  const std::vector<Value>& output(int rank) { return bufs_[slot(rank, Buffer::Output)]; }

 private:
  size_t slot(int rank, Buffer b) const {
    if (in_place_ && b == Buffer::Input) b = Buffer::Output;
    return static_cast<size_t>(rank) * 3 + static_cast<size_t>(b);
  }
  bool in_place_;
  std::vector<std::vector<Value>> bufs_;
};

// The ops of one (rank, step) grouped by destination chunk: a copy, or reduces whose sources all
// combine with the old value in one update.
struct Update {
  Buffer dst = Buffer::Output;
  int64_t chunk = 0;
  bool copy = false;
  struct Source {
    int peer;
    Buffer buffer;
    int64_t chunk;  // differs from the update's chunk where the op remaps
  };
  std::vector<Source> sources;
  Value staged;                                 // computed by the read, stored by the write
};

std::vector<Update> updates_of(const std::vector<Op>& ops) {
  std::vector<Update> out;
  for (const Op& op : ops)
    for (int64_t c = op.chunks.begin; c < op.chunks.end(); ++c) {
      Update* u = nullptr;
      for (Update& e : out)
        if (e.dst == op.dst && e.chunk == c) u = &e;
      if (!u) u = &out.emplace_back(Update{op.dst, c, op.kind == OpKind::Copy, {}, std::nullopt});
      u->sources.push_back({op.peer, op.src, c + op.shift});
    }
  return out;
}

Value read_update(Memory& mem, int rank, const Update& u) {
  auto source = [&](const Update::Source& s) { return mem.at(s.peer, s.buffer, s.chunk); };
  Value v = u.copy ? source(u.sources[0]) : mem.at(rank, u.dst, u.chunk);
  for (size_t i = u.copy ? 1 : 0; i < u.sources.size(); ++i) v = plus(v, source(u.sources[i]));
  return v;
}

InterpretResult run_lock_step(const StepProgram& p, const InterpretOptions& o) {
  Memory mem(p, o.in_place);
  ChunkValues inputs = interpreter_inputs(p, o.seed);
  for (int r = 0; r < p.nranks; ++r) mem.load(r, inputs[r]);
  for (int k = 0; k < p.nsteps(); ++k) {
    std::vector<std::vector<Update>> step(p.nranks);
    for (int r = 0; r < p.nranks; ++r) {
      step[r] = updates_of(p.ops[r][k]);
      for (Update& u : step[r]) u.staged = read_update(mem, r, u);
    }
    for (int r = 0; r < p.nranks; ++r)
      for (const Update& u : step[r]) mem.at(r, u.dst, u.chunk) = u.staged;
  }
  InterpretResult res{true, "", {}};
  for (int r = 0; r < p.nranks; ++r) res.output.push_back(mem.output(r));
  return res;
}

// Ranks at their own pace: each (rank, step) may start once its waits hold; its updates then read
// and write in any order, interleaved with every other rank's.
class Dataflow {
 public:
  Dataflow(const StepProgram& p, const InterpretOptions& o)
      : p_(p), plan_(*o.plan), mem_(p, o.in_place), inputs_(interpreter_inputs(p, o.seed)), rng_(o.seed ^ 0x5eed),
        uniform_(o.seed % 2 == 1), priority_(p.nranks), done_(p.nranks, -2), rank_(p.nranks) {
    std::iota(priority_.begin(), priority_.end(), 0);
    std::shuffle(priority_.begin(), priority_.end(), rng_);
  }

  InterpretResult run() {
    InterpretResult res{true, "", ChunkValues(p_.nranks)};
    for (;;) {
      std::vector<std::pair<int, int>> enabled;  // (rank, event): -1 start/enter/exit, else update index
      bool all_done = true;
      for (int r = 0; r < p_.nranks; ++r) {
        RankState& s = rank_[r];
        if (s.finished) continue;
        all_done = false;
        if (!s.entered) {
          if (done_[r] == -2 || waits_hold(r, s.step)) enabled.emplace_back(r, -1);
          continue;
        }
        for (int i = 0; i < static_cast<int>(s.updates.size()); ++i)
          if (s.phase[i] < 2) enabled.emplace_back(r, i);
      }
      if (all_done) return res;
      if (enabled.empty()) {
        res.completed = false;
        res.error = blocked();
        return res;
      }
      auto [r, e] = enabled[choose(enabled)];
      fire(r, e, res);
    }
  }

 private:
  struct RankState {
    int step = 0;          // the step being entered or run; nsteps = exiting
    bool entered = false;  // its waits held and it runs the step's updates
    bool finished = false;
    std::vector<Update> updates;
    std::vector<int> phase;  // per update: 0 unread, 1 read, 2 written
    int written = 0;
  };

  // Odd seeds pick uniformly among enabled events. Even seeds run the enabled rank with the
  // highest priority and now and then reshuffle the priorities, which starves ranks for long
  // stretches: that is what exposes a missing entry or exit wait.
  size_t choose(const std::vector<std::pair<int, int>>& enabled) {
    if (uniform_) return std::uniform_int_distribution<size_t>(0, enabled.size() - 1)(rng_);
    if (rng_() % 16 == 0) std::shuffle(priority_.begin(), priority_.end(), rng_);
    size_t best = 0;
    for (size_t i = 1; i < enabled.size(); ++i)
      if (priority_[enabled[i].first] > priority_[enabled[best].first]) best = i;
    size_t same = 0;  // among the chosen rank's events, pick at random
    for (const auto& ev : enabled) same += ev.first == enabled[best].first;
    size_t nth = std::uniform_int_distribution<size_t>(0, same - 1)(rng_);
    for (size_t i = 0; i < enabled.size(); ++i)
      if (enabled[i].first == enabled[best].first && nth-- == 0) return i;
    return best;
  }

  bool waits_hold(int r, int k) const {
    for (const Wait& w : plan_.waits[r][k])
      if (done_[w.peer] < w.step) return false;
    return true;
  }

  void fire(int r, int e, InterpretResult& res) {
    RankState& s = rank_[r];
    if (done_[r] == -2) {  // start: inputs ready
      mem_.load(r, inputs_[r]);
      done_[r] = -1;
      return;
    }
    if (!s.entered) {
      if (s.step == p_.nsteps()) {  // return to the user, who may reuse the buffers at once
        res.output[r] = mem_.output(r);
        mem_.scribble(r);
        s.finished = true;
        return;
      }
      s.entered = true;
      s.updates = updates_of(p_.ops[r][s.step]);
      s.phase.assign(s.updates.size(), 0);
      s.written = 0;
      if (s.updates.empty()) finish_step(r);
      return;
    }
    Update& u = s.updates[e];
    if (s.phase[e] == 0) {
      u.staged = read_update(mem_, r, u);
      s.phase[e] = 1;
      return;
    }
    mem_.at(r, u.dst, u.chunk) = u.staged;
    s.phase[e] = 2;
    if (++s.written == static_cast<int>(s.updates.size())) finish_step(r);
  }

  void finish_step(int r) {
    RankState& s = rank_[r];
    done_[r] = s.step;
    ++s.step;
    s.entered = false;
  }

  std::string blocked() const {
    for (int r = 0; r < p_.nranks; ++r) {
      const RankState& s = rank_[r];
      if (s.finished) continue;
      for (const Wait& w : plan_.waits[r][s.step])
        if (done_[w.peer] < w.step)
          return fmt::format("deadlock: rank {} at {} waits for rank {} to finish {}", r, describe_step(p_, s.step),
                             w.peer, describe_step(p_, w.step));
    }
    return "deadlock";
  }

  const StepProgram& p_;
  const SyncPlan& plan_;
  Memory mem_;
  ChunkValues inputs_;
  std::mt19937_64 rng_;
  bool uniform_;
  std::vector<int> priority_;
  std::vector<int> done_;  // per rank: -2 not started, -1 started, k = finished step k
  std::vector<RankState> rank_;
};

}  // namespace

ChunkValues interpreter_inputs(const StepProgram& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t per = std::max<int64_t>(1, p.nchunks / p.nranks);  // structurally valid programs divide
  ChunkValues in(p.nranks, std::vector<Value>(p.nchunks));
  for (int r = 0; r < p.nranks; ++r)
    for (int64_t c = 0; c < p.nchunks; ++c) {
      uint64_t x = rng();
      bool defined = p.collective == Collective::AllGather   ? c / per == r
                     : p.collective == Collective::Broadcast ? r == p.root
                                                             : true;
      if (defined) in[r][c] = x;
    }
  return in;
}

ChunkValues reference_output(const StepProgram& p, uint64_t seed) {
  ChunkValues in = interpreter_inputs(p, seed);
  const int64_t per = std::max<int64_t>(1, p.nchunks / p.nranks);  // structurally valid programs divide
  std::vector<uint64_t> total(p.nchunks, 0);
  for (int r = 0; r < p.nranks; ++r)
    for (int64_t c = 0; c < p.nchunks; ++c) total[c] += in[r][c].value_or(0);
  ChunkValues out(p.nranks, std::vector<Value>(p.nchunks));
  for (int r = 0; r < p.nranks; ++r)
    for (int64_t c = 0; c < p.nchunks; ++c) switch (p.collective) {
        case Collective::AllReduce: out[r][c] = total[c]; break;
        case Collective::ReduceScatter: if (c / per == r) out[r][c] = total[c]; break;
        case Collective::AllGather: out[r][c] = in[c / per][c]; break;
        case Collective::Broadcast: out[r][c] = in[p.root][c]; break;
        case Collective::Reduce: if (r == p.root) out[r][c] = total[c]; break;
        case Collective::AllToAll: out[r][c] = in[c / per][r * per + c % per]; break;
      }
  return out;
}

InterpretResult interpret(const StepProgram& p, const InterpretOptions& options) {
  if (!options.plan) return run_lock_step(p, options);
  return Dataflow(p, options).run();
}

std::string compare_with_reference(const StepProgram& p, const InterpretResult& result, uint64_t seed) {
  if (!result.completed) return result.error;
  ChunkValues want = reference_output(p, seed);
  for (int r = 0; r < p.nranks; ++r)
    for (int64_t c = 0; c < p.nchunks; ++c) {
      if (!want[r][c]) continue;
      const Value& got = result.output[r][c];
      if (!got) return fmt::format("rank {} chunk {}: undefined, want {:#x}", r, c, *want[r][c]);
      if (*got != *want[r][c]) return fmt::format("rank {} chunk {}: {:#x}, want {:#x}", r, c, *got, *want[r][c]);
    }
  return "";
}

}  // namespace ccc
