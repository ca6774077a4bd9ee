#include "rank_symmetry.h"

#include <algorithm>
#include <span>
#include <tuple>
#include <vector>

namespace ccc {

const char* symmetry_name(RankSymmetry::Kind k) {
  switch (k) {
    case RankSymmetry::Kind::None: return "none";
    case RankSymmetry::Kind::Rotation: return "rotation";
    case RankSymmetry::Kind::Xor: return "xor";
  }
  return "?";
}

int map_peer(const RankSymmetry& s, int nranks, int rank, int peer) {
  return s.kind == RankSymmetry::Kind::Xor ? peer ^ rank : (peer + rank) % nranks;
}

ChunkRange map_chunks(const RankSymmetry& s, int64_t nchunks, int rank, ChunkRange chunks) {
  const int64_t shift = rank * s.stride;
  const int64_t begin = s.kind == RankSymmetry::Kind::Xor ? (chunks.begin ^ shift) & ~(chunks.count - 1)
                                                          : (chunks.begin + shift) % nchunks;
  return {begin, chunks.count};
}

int unmap_peer(const RankSymmetry& s, int nranks, int rank, int peer) {
  return s.kind == RankSymmetry::Kind::Xor ? peer ^ rank : ((peer - rank) % nranks + nranks) % nranks;
}

ChunkRange unmap_chunks(const RankSymmetry& s, int64_t nchunks, int rank, ChunkRange chunks) {
  if (s.kind == RankSymmetry::Kind::Xor) return map_chunks(s, nchunks, rank, chunks);  // its own inverse
  return {((chunks.begin - rank * s.stride) % nchunks + nchunks) % nchunks, chunks.count};
}

Operands map_operands(const RankSymmetry& s, int nranks, int rank, Operands operands) {
  for (Operand& o : operands) o.rank = map_peer(s, nranks, rank, o.rank);
  auto lowest = std::min_element(operands.begin(), operands.end(),
                                 [](const Operand& a, const Operand& b) { return a.rank < b.rank; });
  std::rotate(operands.begin(), lowest, operands.end());
  return operands;
}

namespace {

// Whether rank r's passes of one step touch disjoint data: none writes what another reads or
// writes on the rank itself, and no two sends (protocol ll) write the same receive region.
// Then their order does not matter.
bool independent(std::span<const DataPass> passes, int r) {
  for (size_t i = 0; i < passes.size(); ++i)
    for (size_t j = 0; j < passes.size(); ++j) {
      if (i == j) continue;
      if (touches_slot(passes[i]) || touches_slot(passes[j])) return false;  // their chunks say nothing
      if (!passes[i].chunks.overlaps(passes[j].chunks)) continue;
      if (passes[i].dst == passes[j].dst && (passes[i].dst != Storage::Ll || passes[i].to == passes[j].to)) return false;
      for (const Operand& o : passes[j].operands)
        if (o.rank == r && o.buffer == passes[i].dst) return false;
    }
  return true;
}

using PassKey = std::tuple<OpKind, Storage, Operand, int64_t, int64_t, bool, Operands>;

PassKey key(const DataPass& p) {
  return {p.kind, p.dst, p.to, p.chunks.begin, p.chunks.count, p.completes, p.operands};
}

// key(a) == key(b) without building the keys (this runs for every pass of every rank).
bool same_key(const DataPass& a, const DataPass& b) {
  return a.kind == b.kind && a.dst == b.dst && a.to == b.to && a.chunks.begin == b.chunks.begin &&
         a.chunks.count == b.chunks.count && a.completes == b.completes && a.operands == b.operands;
}

// Rank 0's pass `a` relabelled for rank r into `m`, as far as key() sees it; false when its
// chunks leave the vector.
bool map_pass(const RankSymmetry& s, const KernelPlan& plan, int r, const DataPass& a, DataPass& m) {
  m.kind = a.kind;
  m.dst = a.dst;
  m.to = a.to;
  m.completes = a.completes;
  m.chunks = map_chunks(s, plan.nchunks, r, a.chunks);
  if (m.chunks.end() > plan.nchunks) return false;
  m.operands = map_operands(s, plan.nranks, r, a.operands);
  if (a.dst == Storage::Ll || a.dst == Storage::Slot) m.to.rank = map_peer(s, plan.nranks, r, a.to.rank);
  return true;
}

// Rank r's passes of a step are rank 0's mapped: in the same order, or in any order when they
// are independent. A receive region (protocol ll) keeps its number: the map relabels only whose
// region a send fills and who fills a region a pass reads.
bool same_passes(const RankSymmetry& s, const KernelPlan& plan, int r, std::span<const DataPass> base,
                 std::span<const DataPass> mine) {
  if (base.size() != mine.size()) return false;
  // The same order, the common case, compares pass by pass without keys on the heap.
  DataPass m;
  bool in_order = true;
  for (size_t i = 0; i < base.size() && in_order; ++i) {
    if (!map_pass(s, plan, r, base[i], m)) return false;
    in_order = same_key(m, mine[i]);
  }
  if (in_order) return true;
  if (!independent(mine, r)) return false;
  std::vector<PassKey> want, have;
  for (const DataPass& a : base) {
    if (!map_pass(s, plan, r, a, m)) return false;
    want.push_back(key(m));
  }
  for (const DataPass& b : mine) have.push_back(key(b));
  std::sort(want.begin(), want.end());
  std::sort(have.begin(), have.end());
  return want == have;
}

// The waits as (peer, step) sets: their order within a step does not matter (they are polled
// together). A step has a handful: sorted inline, not on the heap.
bool same_waits(const RankSymmetry& s, const KernelPlan& plan, int r, const Waits& base, const Waits& mine) {
  if (base.size() != mine.size()) return false;
  boost::container::small_vector<std::pair<int, int>, 8> want, have;
  for (const Wait& w : base) want.emplace_back(map_peer(s, plan.nranks, r, w.peer), w.step);
  for (const Wait& w : mine) have.emplace_back(w.peer, w.step);
  std::sort(want.begin(), want.end());
  std::sort(have.begin(), have.end());
  return want == have;
}

bool maps_every_rank(const RankSymmetry& s, const KernelPlan& plan) {
  const RankPlan& base = plan.ranks[0];
  for (int r = 1; r < plan.nranks; ++r) {
    const RankPlan& mine = plan.ranks[r];
    for (int k = 0; k < plan.nsteps(); ++k) {
      const StepPlan &a = base.steps[k], &b = mine.steps[k];
      if (!same_waits(s, plan, r, a.waits, b.waits)) return false;
      const auto base_lists = pass_lists(a), my_lists = pass_lists(b);
      for (size_t i = 0; i < base_lists.size(); ++i)
        if (!same_passes(s, plan, r, base_lists[i], my_lists[i])) return false;
    }
    if (!same_passes(s, plan, r, base.passthrough, mine.passthrough) ||
        !same_waits(s, plan, r, base.exit_waits, mine.exit_waits))
      return false;
    // Where the rank pushes its progress (a set: the pushes are independent stores).
    std::vector<int> want, have = mine.consumers;
    for (int q : base.consumers) want.push_back(map_peer(s, plan.nranks, r, q));
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    if (want != have) return false;
  }
  return true;
}

// The chunk strides that would send rank 0's first pass of a step to rank 1's, step by step: the
// only candidates worth checking (a range can hide low bits of an xor stride, so several). At
// most kMaxCandidates; none when no step has a pass on both ranks.
std::vector<int64_t> stride_candidates(const KernelPlan& plan, RankSymmetry::Kind kind) {
  constexpr size_t kMaxCandidates = 4;
  std::vector<int64_t> out;
  for (int k = 0; k < plan.nsteps() && out.size() < kMaxCandidates; ++k) {
    const auto& a = plan.ranks[0].steps[k].passes;
    const auto& b = plan.ranks[1].steps[k].passes;
    if (a.empty() || b.empty()) continue;
    const int64_t x = a[0].chunks.begin, y = b[0].chunks.begin;
    const int64_t stride = kind == RankSymmetry::Kind::Xor ? x ^ y : ((y - x) % plan.nchunks + plan.nchunks) % plan.nchunks;
    if (std::find(out.begin(), out.end(), stride) == out.end()) out.push_back(stride);
  }
  if (out.empty()) out.push_back(0);
  return out;
}

}  // namespace

RankSymmetry find_rank_symmetry(const KernelPlan& plan) {
  if (plan.nranks < 2 || static_cast<int>(plan.ranks.size()) != plan.nranks) return {};
  const bool pow2 = (plan.nranks & (plan.nranks - 1)) == 0;
  for (RankSymmetry::Kind kind : {RankSymmetry::Kind::Rotation, RankSymmetry::Kind::Xor}) {
    if (kind == RankSymmetry::Kind::Xor && !pow2) continue;  // p ^ r must stay a rank
    for (int64_t stride : stride_candidates(plan, kind))
      if (const RankSymmetry s{kind, stride}; maps_every_rank(s, plan)) return s;
  }
  return {};
}

}  // namespace ccc
