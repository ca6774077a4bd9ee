#include <gtest/gtest.h>

#include <chrono>

#include "print_steps.h"
#include "front_end_util.h"

using namespace ccc;
using test::compile_schedule;
using test::compile_text;

namespace {
std::string one_step(const std::string& body, const std::string& chunks = "N") {
  return "allreduce t {\n  chunks " + chunks + "\n  phase p {\n    step {\n      " + body + "\n    }\n  }\n}\n";
}
}  // namespace

// The classic ring pseudocode: in reduce-scatter step s rank r receives chunk (r - s - 1) mod N
// from r - 1 and reduces it; in all-gather step s it receives chunk (r - s) mod N.
TEST(Instantiate, RingMatchesTheClassicPseudocodeAtN8) {
  const int n = 8;
  auto r = compile_schedule("ring", n);
  ASSERT_TRUE(r.program) << r.errors;
  const StepProgram& p = *r.program;
  ASSERT_EQ(p.nsteps(), 2 * (n - 1));
  EXPECT_EQ(p.nchunks, n);
  for (int rank = 0; rank < n; ++rank) {
    for (int s = 0; s < 2 * (n - 1); ++s) {
      const auto& ops = p.ops[rank][s];
      ASSERT_EQ(ops.size(), 1u);
      bool rs = s < n - 1;
      int k = rs ? s : s - (n - 1);
      int chunk = (((rank - k - (rs ? 1 : 0)) % n) + n) % n;
      EXPECT_EQ(ops[0].kind, rs ? OpKind::Reduce : OpKind::Copy);
      EXPECT_EQ(ops[0].chunks, (ChunkRange{chunk, 1})) << "rank " << rank << " step " << s;
      EXPECT_EQ(ops[0].peer, (rank + n - 1) % n);
      EXPECT_EQ(ops[0].dst, Buffer::Output);
    }
  }
}

TEST(Instantiate, ModuloIsEuclideanAndDivisionFloorsToMatch) {
  auto r = compile_text(one_step("copy chunk (-7 % 4) + (-7 / 4) + 2 * (7 % -4) into scratch from r", "8"), 1);
  ASSERT_TRUE(r.program) << r.errors;
  // -7 % 4 = 1, -7 / 4 = -2, 7 % -4 = 3: 1 - 2 + 6 = 5
  EXPECT_EQ(r.program->ops[0][0][0].chunks.begin, 5);
}

TEST(Instantiate, BuiltinsAndIsPow2) {
  auto r = compile_text("allreduce t { chunks 64 requires N is pow2 phase p { step {\n"
                        "copy chunk log2(N) + pow2(2) + min(3, 1) + max(-1, 0) + abs(-10) into scratch from r } } }",
                        8);
  ASSERT_TRUE(r.program) << r.errors;
  EXPECT_EQ(r.program->ops[0][0][0].chunks.begin, 3 + 4 + 1 + 0 + 10);
}

TEST(Instantiate, ChunkLoopMergesIntoOneRange) {
  auto r = compile_text(one_step("for c in 0 .. N-1 where c != 2 { reduce chunk c from input of (r + 1) % N }"), 6);
  ASSERT_TRUE(r.program) << r.errors;
  EXPECT_EQ(print_op(r.program->ops[0][0][0]), "reduce chunks 0..1 from input of 1");
  EXPECT_EQ(print_op(r.program->ops[0][0][1]), "reduce chunks 3..5 from input of 1");
}

TEST(Instantiate, DivisionByZeroNamesRankAndStep) {
  auto r = compile_text("allreduce t { chunks N phase p { step s in 0 .. 1 {\n"
                        "  reduce chunk 0 from input of (r + 1) % (N - r - s) } } }",
                        3);
  EXPECT_FALSE(r.program);
  EXPECT_EQ(r.errors, "t.sched:2:40: error: modulo by zero: 3 % 0 (N = 3, r = 2, step 1 (p s=1))\n"
                      "  reduce chunk 0 from input of (r + 1) % (N - r - s) } } }\n"
                      "                                       ^\n");
}

TEST(Instantiate, OverflowIsAnError) {
  auto r = compile_text(one_step("copy chunk (1 << 62) * 2 into scratch from r"), 2);
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("integer overflow: 4611686018427387904 * 2 does not fit in 64 bits (N = 2, r = 0, step 0 (p))"),
            std::string::npos)
      << r.errors;
}

TEST(Instantiate, OpChecks) {
  struct Case {
    std::string body;
    std::string message;
  } cases[] = {
      {"reduce chunk N from input of 0", "chunk 4 is out of range: the schedule has 4 chunks (0 .. 3)"},
      {"reduce chunks 2 .. 1 from input of 0", "empty chunk range 2 .. 1"},
      {"reduce chunk 0 from N", "peer 4 is out of range: ranks are 0 .. 3"},
      {"reduce chunk 0 from r", "reduce from itself: rank 0 would read and write its own output"},
      {"copy chunk 1 from input of (r+1)%N  reduce chunk 1 from input of (r+2)%N",
       "output chunk 1 of rank 0 is written by a copy and by another op in the same step"},
      {"copy chunks 0 .. 2 from input of (r+1)%N  copy chunk 2 from input of (r+2)%N",
       "output chunk 2 of rank 0 is written by a copy and by another op in the same step"},
  };
  for (const Case& c : cases) {
    auto r = compile_text(one_step(c.body), 4);
    EXPECT_FALSE(r.program) << c.body;
    EXPECT_NE(r.errors.find(c.message), std::string::npos) << c.body << "\n" << r.errors;
  }
}

TEST(Instantiate, SeveralReducesOfOneChunkAndLocalOpsOnOtherBuffersAreFine) {
  auto r = compile_text(one_step("reduce chunk 0 from input of (r+1)%N  reduce chunk 0 from input of (r+2)%N\n"
                                 "copy chunk 1 into scratch from r  reduce chunk 2 from input of r"),
                        4);
  EXPECT_TRUE(r.program) << r.errors;
}

TEST(Instantiate, StepsMustNotDependOnRank) {
  auto r = compile_text("allreduce t { chunks N phase p { if r == 0 { step { } } } }", 2);
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("the sequence of steps depends on r: rank 0 has 1 steps, rank 1 has 0"), std::string::npos)
      << r.errors;
}

TEST(Instantiate, RequiresNamesTheFailedCondition) {
  auto r = compile_text("allreduce t { chunks N requires N is pow2 && N >= 2 }", 6);
  EXPECT_FALSE(r.program);
  EXPECT_EQ(r.errors, "t.sched:1:24: error: requirement 'N is pow2 && N >= 2' does not hold for N = 6\n"
                      "allreduce t { chunks N requires N is pow2 && N >= 2 }\n"
                      "                       ^\n");
}

TEST(Instantiate, RootIsBoundForBroadcast) {
  auto r = compile_text("broadcast b { chunks 1 phase p { step { if r != root { copy chunk 0 from input of root } } } }", 3, 2);
  ASSERT_TRUE(r.program) << r.errors;
  EXPECT_EQ(r.program->root, 2);
  EXPECT_EQ(r.program->ops[0][0][0].peer, 2);
  EXPECT_TRUE(r.program->ops[2][0].empty());
  EXPECT_FALSE(compile_text("broadcast b { chunks 1 }", 3, 3).program);
}

TEST(Instantiate, BlockedCollectivesNeedChunksMultipleOfN) {
  auto r = compile_text("reduce_scatter t { chunks N + 1 }", 4);
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("reduce_scatter needs chunks to be a multiple of N"), std::string::npos) << r.errors;
}

TEST(Instantiate, RankCountLimits) {
  EXPECT_FALSE(compile_schedule("ring", 0).program);
  auto r = compile_schedule("ring", kMaxRanks + 1);
  EXPECT_NE(r.errors.find("rank count 4097 is out of range: N must be 1 .. 4096"), std::string::npos) << r.errors;
  EXPECT_TRUE(compile_schedule("ring", 1).program);
}

// Ring at N = 4096 would be 33.5 M ops: refused from rank 0's count, before the other ranks run.
TEST(Instantiate, RingAtMaxRanksIsRefusedFast) {
  auto start = std::chrono::steady_clock::now();
  auto r = compile_schedule("ring", 4096);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("schedule 'ring' is too large for N = 4096: it would execute 33546240 ops (8190 per rank); "
                          "the limit is 16777216 (16 Mi)"),
            std::string::npos)
      << r.errors;
  EXPECT_LT(ms, 500);
}

TEST(Instantiate, RunawayLoopsHitTheIterationLimit) {
  auto r = compile_text(one_step("for i in 0 .. 1 << 40 where i < 0 { reduce chunk 0 from input of 0 }"), 2);
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("is too long: the limit is 16777216 (16 Mi) iterations"), std::string::npos) << r.errors;
}

TEST(Instantiate, ChunkCountLimit) {
  auto r = compile_text("allreduce t { chunks (1 << 20) + 1 }", 2);
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("chunks = 1048577 is out of range: it must be 1 .. 1048576 (1 Mi)"), std::string::npos);
}

TEST(Instantiate, IfElseChainsAndSetLiteralsInOrder) {
  auto r = compile_text(one_step("if r == 0 { reduce chunk 0 from input of 1 } else if r == 1 { copy chunk 1 from 0 }\n"
                                 "else { for p in {3, 0, 2} where p != r { reduce chunk 2 from input of p } }"),
                        4);
  ASSERT_TRUE(r.program) << r.errors;
  const auto& ops = r.program->ops;
  EXPECT_EQ(print_op(ops[0][0][0]), "reduce chunk 0 from input of 1");
  EXPECT_EQ(print_op(ops[1][0][0]), "copy chunk 1 from 0");
  ASSERT_EQ(ops[2][0].size(), 2u);
  EXPECT_EQ(ops[2][0][0].peer, 3);
  EXPECT_EQ(ops[2][0][1].peer, 0);
  ASSERT_EQ(ops[3][0].size(), 2u);
  EXPECT_EQ(ops[3][0][1].peer, 2);
}

TEST(Instantiate, StepLabelsNameThePhaseAndLoopVariable) {
  auto r = test::compile_schedule("butterfly", 8);
  ASSERT_TRUE(r.program) << r.errors;
  ASSERT_EQ(r.program->nsteps(), 6);
  EXPECT_EQ(r.program->steps[1].label, "reduce_scatter k=1");
  EXPECT_EQ(r.program->steps[3].label, "all_gather k=0");
  EXPECT_EQ(r.program->phases[r.program->steps[3].phase].name, "all_gather");
}

TEST(Instantiate, WorkLimitsCanBeLowered) {
  SourceFile file{"t.sched", one_step("for i in 0 .. 99 { reduce chunk 0 from input of (r + 1) % N }")};
  Diagnostics diags;
  auto s = parse_schedule(file, diags);
  ASSERT_TRUE(s);
  InstantiateOptions opts{4, 0, {1000, 1000, 10000}};
  EXPECT_TRUE(instantiate(*s, opts, file, diags)) << diags.render(&file);
  opts.limits.ops = 399;
  EXPECT_FALSE(instantiate(*s, opts, file, diags));
  EXPECT_NE(diags.render(&file).find("it would execute 400 ops (100 per rank); the limit is 399"), std::string::npos)
      << diags.render(&file);
}

// A push is the peer's pull: the ring written with `to next` instantiates to the shipped ring's
// ops at every N (only the source lines differ), and one verifies exactly when the other does.
TEST(Instantiate, PushPhrasingGivesThePullProgram) {
  const std::string push_ring = R"(allreduce ring {
  chunks N
  let next = (r + 1) % N
  phase reduce_scatter {
    step s in 0 .. N-2 { reduce chunk (r - s) % N to next }
  }
  phase all_gather {
    step s in 0 .. N-2 { copy chunk (r - s + 1) % N from output to output of next }
  }
}
)";
  for (int n = 1; n <= 9; ++n) {
    auto pushed = compile_text(push_ring, n);
    auto pulled = compile_schedule("ring", n);
    ASSERT_TRUE(pushed.program && pulled.program) << pushed.errors << pulled.errors;
    ASSERT_EQ(pushed.program->nsteps(), pulled.program->nsteps());
    for (int r = 0; r < n; ++r)
      for (int k = 0; k < pulled.program->nsteps(); ++k) {
        std::vector<Op> a = pushed.program->ops[r][k], b = pulled.program->ops[r][k];
        for (Op& op : a) op.loc = {};
        for (Op& op : b) op.loc = {};
        EXPECT_EQ(a, b) << "N = " << n << " rank " << r << " step " << k;
      }
  }
}

// Pushes from a rank that runs later land in the step lists of ranks that already ran, and
// the copy-and-another-write check sees them: two ranks pushing a copy into one chunk clash.
TEST(Instantiate, PushesAreCheckedAfterEveryRankRan) {
  auto r = compile_text(one_step("if r != 0 { copy chunk 0 to 0 }"), 3);
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("output chunk 0 of rank 0 is written by a copy and by another op in the same step"),
            std::string::npos)
      << r.errors;
}

// `param C = E` is a constant like `let`, but InstantiateOptions::defines replaces its default;
// a define that names no parameter is an error listing the parameters.
TEST(Instantiate, ParamDefaultAndDefine) {
  const std::string text = "allreduce t {\n  param C = N / 2\n  chunks C\n"
                           "  phase p { step { reduce chunk 0 from (r + 1) % N } }\n}\n";
  SourceFile file{"t.sched", text};
  auto chunks_with = [&](std::map<std::string, int64_t> defines, std::string& errors) -> int64_t {
    Diagnostics diags;
    InstantiateOptions options{4, 0};
    options.defines = std::move(defines);
    std::optional<StepProgram> p = run_front_end(file, options, diags);
    errors = diags.render(&file);
    return p ? p->nchunks : -1;
  };
  std::string errors;
  EXPECT_EQ(chunks_with({}, errors), 2) << errors;
  EXPECT_EQ(chunks_with({{"C", 3}}, errors), 3) << errors;
  EXPECT_EQ(chunks_with({{"D", 3}}, errors), -1);
  EXPECT_NE(errors.find("'D' is defined, but schedule 't' has no such parameter (it has: C)"), std::string::npos)
      << errors;
}

// Parameter values appear where N does: in a failed requirement and in the program's header; a
// misspelt define gets the parameter it most likely meant.
TEST(Instantiate, ParametersAreShownWhereTheyMatter) {
  SourceFile file{"t.sched", "allreduce t {\n  param chunks_per_rank = 1\n  param C = 2\n  requires N % C == 0\n"
                             "  chunks N * chunks_per_rank\n  phase p { step { reduce chunk 0 from (r + 1) % N } }\n}\n"};
  auto run = [&](std::map<std::string, int64_t> defines, std::string& errors) {
    Diagnostics diags;
    InstantiateOptions options{4, 0};
    options.defines = std::move(defines);
    std::optional<StepProgram> p = run_front_end(file, options, diags);
    errors = diags.render(&file);
    return p;
  };
  std::string errors;
  EXPECT_FALSE(run({{"C", 3}}, errors));
  EXPECT_NE(errors.find("t.sched:4:3: error: requirement 'N % C == 0' does not hold for N = 4, chunks_per_rank = 1, C = 3"),
            std::string::npos) << errors;
  std::optional<StepProgram> p = run({{"chunks_per_rank", 2}}, errors);
  ASSERT_TRUE(p) << errors;
  EXPECT_EQ(p->params, (std::vector<std::pair<std::string, int64_t>>{{"chunks_per_rank", 2}, {"C", 2}}));
  EXPECT_EQ(print_steps(*p).rfind("# allreduce t (t.sched): N = 4, chunks_per_rank = 2, C = 2, chunks = 8,", 0), 0u)
      << print_steps(*p);
  EXPECT_FALSE(run({{"chunk_per_rank", 2}}, errors));
  EXPECT_NE(errors.find("has no such parameter (did you mean 'chunks_per_rank'?) (it has: chunks_per_rank, C)"),
            std::string::npos) << errors;
  EXPECT_FALSE(run({{"c", 2}}, errors));
  EXPECT_NE(errors.find("(did you mean 'C'?)"), std::string::npos) << errors;
}

TEST(Instantiate, ParamDependingOnRIsRejected) {
  auto r = compile_text("allreduce t {\n  param C = r\n  chunks N\n}\n", 4);
  EXPECT_FALSE(r.program);
  EXPECT_NE(r.errors.find("the default of parameter 'C' depends on r"), std::string::npos) << r.errors;
}

// `param` is a contextual word: it still names a variable (a schedule that used it before
// parameters existed keeps working), and `param NAME` at a statement's start declares one.
TEST(Instantiate, ParamIsNotAReservedWord) {
  auto r = compile_text("allreduce t {\n  let param = 2\n  param P = param * N\n  chunks P\n}\n", 4);
  ASSERT_TRUE(r.program) << r.errors;
  EXPECT_EQ(r.program->nchunks, 8);
}
