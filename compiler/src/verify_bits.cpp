#include "verify_bits.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "lower_error.h"

namespace ccc {

namespace {

constexpr int kStorages = 6;  // Output, Input, Scratch, Staging, Ll (unused: passes read none here), Slot
int index(Storage s) { return static_cast<int>(s); }
constexpr size_t kMaxExpressionText = 160;

// Where an expression node was first computed, for the diagnostic.
struct Origin {
  int rank = 0;
  int step = 0;
  SourceLoc loc;
};

// Interned expressions: equal ids are equal expressions. Ids below nranks * nchunks are the
// leaves (rank q's input chunk c: q * nchunks + c); the rest are reduce nodes.
class Expressions {
 public:
  static constexpr int64_t kUndefined = -1;

  explicit Expressions(const KernelPlan& plan) : plan_(plan) {}

  int64_t leaf(int rank, int64_t chunk) const { return rank * plan_.nchunks + chunk; }

  // The id of the reduce of `children` (in fold order), made at `origin` if it is new.
  int64_t node(std::span<const int64_t> children, const Origin& origin) {
    if (2 * (nodes_.size() + 1) > slots_.size()) rehash(std::max<size_t>(1024, 2 * slots_.size()));
    for (size_t at = hash(children) & (slots_.size() - 1);; at = (at + 1) & (slots_.size() - 1)) {
      if (slots_[at] == 0) {
        nodes_.push_back({static_cast<uint64_t>(pool_.size()), static_cast<uint32_t>(children.size()), origin});
        pool_.insert(pool_.end(), children.begin(), children.end());
        slots_[at] = nodes_.size();
        return leaves() + static_cast<int64_t>(nodes_.size()) - 1;
      }
      if (std::ranges::equal(children_of(slots_[at] - 1), children)) return leaves() + static_cast<int64_t>(slots_[at]) - 1;
    }
  }

  const Origin* origin(int64_t id) const { return id < leaves() ? nullptr : &nodes_[id - leaves()].origin; }

  // "sum(r0, r1, sum(r2, r3))", cut short past kMaxExpressionText characters.
  std::string text(int64_t id) const {
    std::string out;
    append(id, out);
    return out;
  }

 private:
  // Children live in one pool and ids in an open-addressed table: a map from child vectors cost
  // about 140 bytes a node, a million nodes for ring at N = 1024.
  struct Node {
    uint64_t begin;  // into pool_
    uint32_t count;
    Origin origin;
  };
  int64_t leaves() const { return plan_.nranks * plan_.nchunks; }
  std::span<const int64_t> children_of(size_t node) const { return {pool_.data() + nodes_[node].begin, nodes_[node].count}; }
  static size_t hash(std::span<const int64_t> children) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t c : children) h = (h ^ static_cast<uint64_t>(c)) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
  void rehash(size_t size) {
    slots_.assign(size, 0);
    for (size_t n = 0; n < nodes_.size(); ++n) {
      size_t at = hash(children_of(n)) & (size - 1);
      while (slots_[at] != 0) at = (at + 1) & (size - 1);
      slots_[at] = n + 1;
    }
  }

  void append(int64_t id, std::string& out) const {
    if (id == kUndefined) {
      out += "undefined";
      return;
    }
    if (id < leaves()) {
      out += fmt::format("r{}", id / plan_.nchunks);
      return;
    }
    out += fmt::format("{}(", reduce_op_name(plan_.options.op));
    const std::span<const int64_t> children = children_of(static_cast<size_t>(id - leaves()));
    for (size_t i = 0; i < children.size(); ++i) {
      if (i > 0) out += ", ";
      if (out.size() > kMaxExpressionText) {
        out += "...";
        break;
      }
      append(children[i], out);
    }
    out += ")";
  }

  const KernelPlan& plan_;
  std::vector<Node> nodes_;
  std::vector<int64_t> pool_;
  std::vector<size_t> slots_;  // node + 1, or 0: free; a power of two, at most half full
};

class Evaluator {
 public:
  explicit Evaluator(const KernelPlan& plan) : plan_(plan), exprs_(plan), values_(plan.nranks) {
    for (int r = 0; r < plan.nranks; ++r) {
      // Scratch may have more chunks than the output (`scratch K`): every storage gets the larger.
      const int64_t scratch_chunks = std::max(plan.scratch_blocks * (plan.nchunks / plan.blocks), plan.scratch_slots);
      values_[r].assign(kStorages, std::vector<int64_t>(std::max(plan.nchunks, scratch_chunks), Expressions::kUndefined));
      // The output starts as the input: in place it is the input, out of place lowering never
      // reads an output chunk before a pass wrote it.
      for (Storage s : {Storage::Output, Storage::Input})
        for (int64_t c = 0; c < plan.nchunks; ++c) values_[r][index(s)][c] = exprs_.leaf(r, c);
    }
  }

  // Lock-step, as the sync plan orders the passes: a step's passes read the state at its start.
  void run() {
    for (int k = 0; k < plan_.nsteps(); ++k) {
      for (int r = 0; r < plan_.nranks; ++r)
        for (const DataPass& pass : plan_.ranks[r].steps[k].passes) evaluate(pass, {r, k, pass.locs.front()});
      land();
    }
    for (int r = 0; r < plan_.nranks; ++r)  // copies: they make no node, so no origin to name
      for (const DataPass& pass : plan_.ranks[r].passthrough) evaluate(pass, {r, -1, {}});
    land();
  }

  void check_every_rank_agrees() const {
    for (int64_t c = 0; c < plan_.nchunks; ++c)
      for (int r = 1; r < plan_.nranks; ++r)
        if (output(r, c) != output(0, c)) report(r, c);
  }

 private:
  int64_t output(int rank, int64_t chunk) const { return values_[rank][index(Storage::Output)][chunk]; }

  void evaluate(const DataPass& pass, const Origin& origin) {
    for (int64_t c = pass.chunks.begin; c < pass.chunks.end(); ++c) {
      operands_.clear();
      for (const Operand& o : pass.operands) operands_.push_back(values_[o.rank][index(o.buffer)][operand_chunk(o, c)]);
      const int64_t value = pass.kind == OpKind::Copy ? operands_.front() : exprs_.node(operands_, origin);
      pending_.emplace_back(origin.rank, index(pass.dst), written_chunk(pass, c), value);
    }
  }

  void land() {
    for (auto [r, s, c, value] : pending_) values_[r][s][c] = value;
    pending_.clear();
  }

  [[noreturn]] void report(int rank, int64_t chunk) const {
    const int64_t mine = output(rank, chunk), first = output(0, chunk);
    const Origin* where = exprs_.origin(mine) ? exprs_.origin(mine) : exprs_.origin(first);
    std::string computed;
    if (where)
      computed = fmt::format("; that value was computed at step {} ({}) by rank {}", where->step,
                             plan_.steps[where->step].label, where->rank);
    throw LowerError(where ? where->loc : SourceLoc{},
                     fmt::format("rank {} ends with output chunk {} = {}, but rank 0 with {}: ranks that reduce in "
                                 "different orders end with different bits (rQ: rank Q's input chunk {}; operands fold "
                                 "left to right){}",
                                 rank, chunk, exprs_.text(mine), exprs_.text(first), chunk, computed));
  }

  const KernelPlan& plan_;
  Expressions exprs_;
  std::vector<std::vector<std::vector<int64_t>>> values_;  // [rank][storage][chunk]
  std::vector<std::tuple<int, int, int64_t, int64_t>> pending_;
  std::vector<int64_t> operands_;  // of the chunk being evaluated
};

}  // namespace

bool verify_same_bits(const KernelPlan& plan, Diagnostics& diags) {
  if (plan.collective != Collective::AllReduce) return true;
  return reporting_lower_errors(diags, [&] {
    Evaluator evaluator(plan);
    evaluator.run();
    evaluator.check_every_rank_agrees();
  });
}

}  // namespace ccc
