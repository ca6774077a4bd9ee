// Step programs built in C++ for the analysis tests: classic schedules and random ones.
#pragma once

#include <random>
#include <string>

#include "ccc/step_program.h"

namespace ccc::testing {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

inline StepProgram empty_program(std::string name, Collective coll, int nranks, int64_t nchunks, int nsteps) {
  StepProgram p;
  p.file = name + ".sched";
  p.schedule = std::move(name);
  p.collective = coll;
  p.nranks = nranks;
  p.nchunks = nchunks;
  p.phases.push_back({"main", {1, 1}});
  for (int k = 0; k < nsteps; ++k) p.steps.push_back({0, "s=" + std::to_string(k), {2, 3}});
  p.ops.assign(nranks, std::vector<std::vector<Op>>(nsteps));
  return p;
}

inline void add(StepProgram& p, int rank, int step, OpKind kind, int64_t chunk, int peer,
                Buffer src = Buffer::Output, Buffer dst = Buffer::Output, int64_t count = 1) {
  p.ops[rank][step].push_back(Op{kind, {chunk, count}, peer, src, dst, {3, 5}});
}

// Ring allreduce: N-1 reduce-scatter steps, then N-1 all-gather steps, from the previous rank.
inline StepProgram ring(int N) {
  StepProgram p = empty_program("ring", Collective::AllReduce, N, N, 2 * (N - 1));
  for (int r = 0; r < N; ++r)
    for (int s = 0; s < N - 1; ++s) {
      add(p, r, s, OpKind::Reduce, mod(r - s - 1, N), mod(r - 1, N));
      add(p, r, N - 1 + s, OpKind::Copy, mod(r - s, N), mod(r - 1, N));
    }
  return p;
}

// One-shot allreduce: one step, every rank reduces chunk 0 of every peer into its own.
inline StepProgram oneshot(int N) {
  StepProgram p = empty_program("oneshot", Collective::AllReduce, N, 1, 1);
  for (int r = 0; r < N; ++r)
    for (int q = 1; q < N; ++q) add(p, r, 0, OpKind::Reduce, 0, (r + q) % N);
  return p;
}

// Naive exchange allreduce for N = 2^m: at step k every rank reduces all chunks from r ^ 2^k.
inline StepProgram naive_butterfly(int N) {
  int steps = 0;
  while ((1 << steps) < N) ++steps;
  StepProgram p = empty_program("naive_butterfly", Collective::AllReduce, N, 1, steps);
  for (int r = 0; r < N; ++r)
    for (int k = 0; k < steps; ++k) add(p, r, k, OpKind::Reduce, 0, r ^ (1 << k));
  return p;
}

// Butterfly allreduce for N = 2^L: recursive halving, then recursive doubling.
inline StepProgram butterfly(int N) {
  int L = 0;
  while ((1 << L) < N) ++L;
  StepProgram p = empty_program("butterfly", Collective::AllReduce, N, N, 2 * L);
  for (int r = 0; r < N; ++r)
    for (int k = 0; k < L; ++k) {
      int down = N >> (k + 1), up = 1 << k;
      for (int c = 0; c < N; ++c) {
        if ((c ^ r) / down == 0) add(p, r, k, OpKind::Reduce, c, r ^ down);
        if ((c ^ r ^ up) / up == 0) add(p, r, L + k, OpKind::Copy, c, r ^ up);
      }
    }
  return p;
}

// Chain broadcast from `root`: at step s rank root+s+1 copies every chunk from its predecessor.
inline StepProgram chain_broadcast(int N, int root, int64_t C) {
  StepProgram p = empty_program("chain", Collective::Broadcast, N, C, N - 1);
  p.root = root;
  for (int s = 0; s < N - 1; ++s) {
    int r = (root + s + 1) % N;
    add(p, r, s, OpKind::Copy, 0, (r + N - 1) % N, Buffer::Output, Buffer::Output, C);
  }
  return p;
}

// A random program: few ranks, chunks and steps; random kinds, peers, buffers and ranges.
inline StepProgram random_program(std::mt19937_64& rng) {
  auto pick = [&](int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
  const Collective colls[] = {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                              Collective::Broadcast, Collective::Reduce};
  int N = 1 + pick(4);
  int64_t C = N * (1 + pick(2));
  StepProgram p = empty_program("random", colls[pick(5)], N, C, 1 + pick(4));
  p.root = pick(N);
  for (int r = 0; r < N; ++r)
    for (int k = 0; k < p.nsteps(); ++k) {
      std::vector<char> copied(2 * C, 0), reduced(2 * C, 0);  // keep one copy or only reduces per chunk
      for (int n = pick(3); n > 0; --n) {
        OpKind kind = pick(2) ? OpKind::Reduce : OpKind::Copy;
        int64_t c = pick(static_cast<int>(C));
        Buffer src = static_cast<Buffer>(pick(5) == 0 ? 1 + pick(2) : 0);
        Buffer dst = pick(6) == 0 ? Buffer::Scratch : Buffer::Output;
        size_t slot = (dst == Buffer::Scratch ? C : 0) + c;
        if (copied[slot] || (kind == OpKind::Copy && reduced[slot])) continue;
        (kind == OpKind::Copy ? copied : reduced)[slot] = 1;
        add(p, r, k, kind, c, pick(N), src, dst);
      }
    }
  return p;
}

// One random change to a (usually correct) program, or none: drop or duplicate an op, change its
// peer, chunk, kind or buffer, or move it to another step.
inline StepProgram mutate(StepProgram p, std::mt19937_64& rng) {
  auto pick = [&](int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
  if (p.nsteps() == 0) return p;
  int r = pick(p.nranks), k = pick(p.nsteps());
  auto& ops = p.ops[r][k];
  if (ops.empty() || pick(5) == 0) return p;
  int i = pick(static_cast<int>(ops.size()));
  Op& op = ops[i];
  switch (pick(7)) {
    case 0: ops.erase(ops.begin() + i); break;
    case 1: op.peer = pick(p.nranks); break;
    case 2: op.chunks.begin = pick(static_cast<int>(p.nchunks - op.chunks.count + 1)); break;
    case 3: op.kind = op.kind == OpKind::Copy ? OpKind::Reduce : OpKind::Copy; break;
    case 4: op.src = static_cast<Buffer>(pick(3)); break;
    case 5: p.ops[r][pick(p.nsteps())].push_back(op); break;
    case 6: {
      Op moved = op;
      ops.erase(ops.begin() + i);
      p.ops[r][pick(p.nsteps())].push_back(moved);
      break;
    }
  }
  return p;
}

}  // namespace ccc::testing
