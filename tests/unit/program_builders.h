// Step programs for the analysis tests: shipped schedules through the front end, programs built
// in C++ for IR-level cases the language rejects, and random ones.
#pragma once

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "step_program.h"
#include "front_end_util.h"

namespace ccc::testing {

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

// A shipped schedule through the front end (it must instantiate for these arguments).
inline StepProgram shipped(const std::string& name, int N, int root = 0) {
  auto r = test::compile_schedule(name, N, root);
  EXPECT_TRUE(r.program) << r.errors;
  return r.program ? *r.program : StepProgram{};
}

// Recursive doubling on one chunk, every rank exchanging everything with r ^ 2^k: correct, but
// each step overwrites what the partner reads in it, so the planner must stage it.
inline StepProgram naive_butterfly(int N) {
  auto r = test::compile_text(R"(allreduce naive_butterfly {
  requires N is pow2
  chunks 1
  phase exchange {
    step k in 0 .. log2(N) - 1 {
      if k == 0 { reduce chunk 0 from input of r ^ 1 }
      else { reduce chunk 0 from r ^ (1 << k) }
    }
  }
}
)", N, 0, "naive_butterfly.sched");
  EXPECT_TRUE(r.program) << r.errors;
  return r.program ? *r.program : StepProgram{};
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
