#include "rewrites.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ccc {

StepProgram resolve_first_reads(StepProgram p) {
  // written[r][c]: rank r's output chunk c has been written by an earlier step.
  std::vector<std::vector<char>> written(p.nranks, std::vector<char>(p.nchunks, 0));
  auto uniform = [&](const Op& op) {  // the op's source chunks are all written or all unwritten
    const auto& w = written[op.peer];
    const ChunkRange read = op.read_chunks();
    return std::all_of(w.begin() + read.begin, w.begin() + read.end(), [&](char x) { return x == w[read.begin]; });
  };
  for (int k = 0; k < p.nsteps(); ++k) {
    for (int r = 0; r < p.nranks; ++r) {
      std::vector<Op>& ops = p.ops[r][k];
      if (std::all_of(ops.begin(), ops.end(), [&](const Op& op) { return op.src != Buffer::Output || uniform(op); })) {
        for (Op& op : ops)  // the common case: no op needs splitting
          if (op.src == Buffer::Output && !written[op.peer][op.read_chunks().begin]) op.src = Buffer::Input;
        continue;
      }
      std::vector<Op> resolved;
      for (const Op& op : ops) {
        if (op.src != Buffer::Output) {
          resolved.push_back(op);
          continue;
        }
        const auto& w = written[op.peer];
        const ChunkRange read = op.read_chunks();
        int64_t start = read.begin;
        for (int64_t c = start + 1; c <= read.end(); ++c) {
          if (c < read.end() && w[c] == w[start]) continue;
          Op part = op;
          part.chunks = {start - op.shift, c - start};
          if (!w[start]) part.src = Buffer::Input;
          resolved.push_back(part);
          start = c;
        }
      }
      ops = std::move(resolved);
    }
    for (int r = 0; r < p.nranks; ++r)
      for (const Op& op : p.ops[r][k])
        if (op.dst == Buffer::Output)
          std::fill(written[r].begin() + op.chunks.begin, written[r].begin() + op.chunks.end(), 1);
  }
  return p;
}

namespace {

// Maximal runs of the chunks marked in `mark`, as ranges.
std::vector<ChunkRange> runs_of(const std::vector<char>& mark) {
  std::vector<ChunkRange> out;
  for (int64_t c = 0; c < static_cast<int64_t>(mark.size()); ++c)
    if (mark[c] && (out.empty() || out.back().end() != c)) out.push_back({c, 1});
    else if (mark[c]) ++out.back().count;
  return out;
}

// scratch_used[r][c]: some op writes or reads rank r's scratch chunk c.
std::vector<std::vector<char>> scratch_use(const StepProgram& p) {
  std::vector<std::vector<char>> used(p.nranks, std::vector<char>(buffer_chunks(p, Buffer::Scratch), 0));
  auto mark = [&](int r, ChunkRange ch) { std::fill(used[r].begin() + ch.begin, used[r].begin() + ch.end(), 1); };
  for (int r = 0; r < p.nranks; ++r)
    for (const auto& step : p.ops[r])
      for (const Op& op : step) {
        if (op.dst == Buffer::Scratch) mark(r, op.chunks);
        if (op.src == Buffer::Scratch) mark(op.peer, op.read_chunks());
      }
  return used;
}

Op local_copy(Buffer dst, Buffer src, ChunkRange chunks, int rank, SourceLoc loc) {
  return Op{OpKind::Copy, chunks, rank, src, dst, loc};
}

}  // namespace

bool stage_through_scratch(StepProgram& p, const std::vector<std::pair<int, int>>& targets, std::string& why_not) {
  const auto used = scratch_use(p);
  std::map<int, std::vector<int>, std::greater<>> by_step;  // later steps first: indices stay valid
  for (auto [r, k] : targets) by_step[k].push_back(r);
  for (auto& [k, ranks] : by_step) {
    std::vector<std::vector<Op>> before(p.nranks), after(p.nranks);
    for (int r : ranks) {
      std::vector<char> staged(p.nchunks, 0), needs_old(p.nchunks, 0);
      SourceLoc loc = p.steps[k].loc;
      for (Op& op : p.ops[r][k]) {
        if (op.dst != Buffer::Output) continue;
        for (int64_t c = op.chunks.begin; c < op.chunks.end(); ++c) {
          if (c >= buffer_chunks(p, Buffer::Scratch)) {
            why_not = fmt::format("rank {} needs scratch chunk {} to stage step {}, but scratch has {} chunks", r, c, k,
                                  p.nscratch);
            return false;
          }
          if (used[r][c]) {
            why_not = fmt::format("rank {} needs scratch chunk {} to stage step {}, but the schedule uses it", r, c, k);
            return false;
          }
          staged[c] = 1;
          if (op.kind == OpKind::Reduce) needs_old[c] = 1;
        }
        op.dst = Buffer::Scratch;
        loc = op.loc;
      }
      for (ChunkRange ch : runs_of(needs_old)) before[r].push_back(local_copy(Buffer::Scratch, Buffer::Output, ch, r, loc));
      for (ChunkRange ch : runs_of(staged)) after[r].push_back(local_copy(Buffer::Output, Buffer::Scratch, ch, r, loc));
    }
    const StepInfo info = p.steps[k];
    p.steps.insert(p.steps.begin() + k + 1, StepInfo{info.phase, info.label + " staged out", info.loc, true, info.number});
    for (int r = 0; r < p.nranks; ++r) p.ops[r].insert(p.ops[r].begin() + k + 1, std::move(after[r]));
    bool any_before = std::any_of(before.begin(), before.end(), [](const auto& v) { return !v.empty(); });
    if (any_before) {
      p.steps.insert(p.steps.begin() + k, StepInfo{info.phase, info.label + " staged in", info.loc, true, info.number});
      for (int r = 0; r < p.nranks; ++r) p.ops[r].insert(p.ops[r].begin() + k, std::move(before[r]));
    }
  }
  return true;
}

}  // namespace ccc
