#include <gtest/gtest.h>

#include <set>

#include "emit_cuda.h"
#include "lower.h"
#include "pipeline.h"
#include "rank_symmetry.h"
#include "verify_bits.h"
#include "codegen_pipeline.h"
#include "program_builders.h"

namespace ccc {
namespace {

using testing::lower_shipped;

TEST(Lower, RingFirstReadsComeFromTheInput) {
  KernelPlan plan = lower_shipped("ring", 4);
  // Rank 1, step 0: out[0] = sum(r0.in[0], in[0]) -- nothing wrote either output chunk yet (and
  // rank 0's value folds first: fold_order.h).
  const DataPass& first = plan.ranks[1].steps[0].passes.at(0);
  EXPECT_EQ(first.kind, OpKind::Reduce);
  EXPECT_EQ(first.chunks, (ChunkRange{0, 1}));
  ASSERT_EQ(first.operands.size(), 2u);
  EXPECT_EQ(first.operands[0], (Operand{0, Storage::Input}));
  EXPECT_EQ(first.operands[1], (Operand{1, Storage::Input}));
  // Step 1 reads the chunk rank 0 reduced at step 0 (ranks 3 and 0): its output.
  EXPECT_EQ(plan.ranks[1].steps[1].passes.at(0).operands[0], (Operand{0, Storage::Output}));
  EXPECT_TRUE(plan.ranks[1].passthrough.empty());
}

// A rank pushes its step progress to exactly the ranks whose waits name it: every wait's
// producer lists the waiter, and every listed rank waits on it somewhere (ring: the successor
// reads from it, the predecessor's exit waits on it; one-shot: every peer).
TEST(Lower, ConsumersAreTheRanksThatWaitOnARank) {
  KernelPlan ring = lower_shipped("ring", 4);
  EXPECT_EQ(ring.ranks[0].consumers, (std::vector<int>{1, 3}));
  EXPECT_EQ(ring.ranks[2].consumers, (std::vector<int>{1, 3}));
  KernelPlan oneshot = lower_shipped("oneshot", 4);
  EXPECT_EQ(oneshot.ranks[1].consumers, (std::vector<int>{0, 2, 3}));
  for (const char* name : {"ring", "tree", "dbtree", "butterfly", "twoshot"}) {
    KernelPlan plan = lower_shipped(name, 6 + (std::string(name) == "butterfly" ? 2 : 0));
    std::vector<std::set<int>> waited(plan.nranks);
    for (int r = 0; r < plan.nranks; ++r) {
      for (const StepPlan& step : plan.ranks[r].steps)
        for (const Wait& w : step.waits) waited[w.peer].insert(r);
      for (const Wait& w : plan.ranks[r].exit_waits) waited[w.peer].insert(r);
    }
    for (int r = 0; r < plan.nranks; ++r)
      EXPECT_EQ(plan.ranks[r].consumers, std::vector<int>(waited[r].begin(), waited[r].end())) << name << " rank " << r;
  }
}

TEST(Lower, InPlaceReadsTheOutput) {
  KernelOptions o;
  o.in_place = true;
  KernelPlan plan = lower_shipped("butterfly", 8, o);
  const DataPass& first = plan.ranks[0].steps[0].passes.at(0);
  EXPECT_EQ(first.operands[0], (Operand{0, Storage::Output}));  // the old value: in == out
}

TEST(Lower, TheReduceThatCompletesAChunkCarriesTheFinish) {
  KernelPlan plan = lower_shipped("ring", 5);
  for (const RankPlan& rank : plan.ranks)
    for (int k = 0; k < plan.nsteps(); ++k)
      for (const DataPass& pass : rank.steps[k].passes) EXPECT_EQ(pass.completes, k == 3) << "step " << k;
}

TEST(Lower, RingMovesTheMinimumBytes) {
  // Reduce-scatter + all-gather: each rank reads 2 (N - 1) chunks from peers and writes 2 (N - 1).
  for (int n : {2, 3, 8}) {
    KernelPlan plan = lower_shipped("ring", n);
    for (int r = 0; r < n; ++r) {
      Traffic t = rank_traffic(plan.ranks[r], r);
      EXPECT_EQ(t.read_remote, 2 * (n - 1));
      EXPECT_EQ(t.written, 2 * (n - 1));
      EXPECT_EQ(t.read, 3 * (n - 1));  // plus the own operand of each reduce
    }
  }
}

TEST(Lower, OneShotFusesEveryPeerIntoOnePass) {
  KernelOptions o;
  o.op = ReduceOp::Avg;
  KernelPlan plan = lower_shipped("oneshot", 5, o);
  const DataPasses& passes = plan.ranks[2].steps[0].passes;
  ASSERT_EQ(passes.size(), 1u);
  EXPECT_EQ(passes[0].operands.size(), 5u);
  EXPECT_TRUE(passes[0].completes);
  // In rank order, the rank's own input in its place: the same fold on every rank.
  EXPECT_EQ(pass_text(passes[0], 2, ReduceOp::Avg), "out[0] = avg(r0.in[0], r1.in[0], in[0], r3.in[0], r4.in[0]) / N");
}

// Whatever the rank and however the value reached its operand (input, output after first touch,
// scratch when in place one-shot is staged), every rank folds one-shot's N inputs in rank order.
TEST(Lower, EveryRankFoldsOneShotInRankOrder) {
  for (bool in_place : {false, true}) {
    KernelOptions o;
    o.in_place = in_place;
    const KernelPlan plan = lower_shipped("oneshot", 6, o);
    for (int r = 0; r < plan.nranks; ++r) {
      std::vector<int> order;
      for (const StepPlan& step : plan.ranks[r].steps)
        for (const DataPass& pass : step.passes)
          if (pass.kind == OpKind::Reduce)
            for (const Operand& operand : pass.operands) order.push_back(operand.rank);
      EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5})) << "rank " << r << (in_place ? " in place" : "");
    }
  }
}

// verify_same_bits on the plans the lowering makes: every shipped allreduce, in and out of place.
TEST(VerifySameBits, AcceptsEveryShippedAllreduce) {
  for (const char* name : {"ring", "oneshot", "twoshot", "butterfly", "tree", "dbtree"})
    for (int n : {1, 2, 3, 4, 5, 8, 9})
      for (bool in_place : {false, true}) {
        testing::Planned p = testing::plan_shipped(name, n, in_place);
        if (!p.planned) continue;  // butterfly needs a power of two; some have no in-place plan
        KernelOptions o;
        o.in_place = in_place;
        Diagnostics diags;
        EXPECT_TRUE(verify_same_bits(testing::lowered(*p.planned, o), diags))
            << name << " N=" << n << (in_place ? " in place" : "") << "\n" << diags.render(nullptr);
      }
}

// Lowers shipped one-shot at N with rank `rank`'s fold reversed and returns verify_same_bits's
// error (an empty one, and a test failure, if it accepts the plan).
Diagnostic reversed_fold_error(int n, int rank) {
  KernelPlan plan = lower_shipped("oneshot", n);
  Operands& operands = plan.ranks[rank].steps[0].passes.at(0).operands;
  std::reverse(operands.begin(), operands.end());
  Diagnostics diags;
  if (verify_same_bits(plan, diags)) ADD_FAILURE() << "accepted a reversed fold on rank " << rank;
  return diags.all().empty() ? Diagnostic{} : diags.all().front();
}

// One rank folding in its own order: the error names it, the chunk and both expressions, at the
// DSL op of its pass.
TEST(VerifySameBits, NamesTheRankThatFoldsInAnotherOrder) {
  const Diagnostic e = reversed_fold_error(4, 2);
  const std::string& what = e.message;
  EXPECT_EQ(e.loc.line, 9);
  EXPECT_NE(what.find("rank 2 ends with output chunk 0 = sum(r3, r2, r1, r0), but rank 0 with sum(r0, r1, r2, r3)"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("computed at step 0 (direct) by rank 2"), std::string::npos) << what;
}

// Large expressions are cut short, with their parentheses balanced.
TEST(VerifySameBits, CutsLongExpressionsShort) {
  const std::string what = reversed_fold_error(64, 5).message;
  EXPECT_LT(what.size(), 600u) << what;
  EXPECT_NE(what.find("rank 5 ends with output chunk 0 = sum(r63, r62, "), std::string::npos) << what;
  EXPECT_NE(what.find(", ...), but rank 0 with sum(r0, r1, "), std::string::npos) << what;
}

// Fold order cannot fix reductions of different shapes: one-shot spread over N - 1 steps rounds
// after every peer, starting from the rank's own input, so every rank's sum has another shape.
// Lowering rejects it.
TEST(VerifySameBits, RejectsASequentialOneShot) {
  const SourceFile file = testing::sequential_one_shot();
  Diagnostics diags;
  std::optional<StepProgram> program = run_front_end(file, {3, 0}, diags);
  ASSERT_TRUE(program) << diags.render(&file);
  std::optional<PlannedProgram> planned = run_analysis(*program, {}, diags);
  ASSERT_TRUE(planned) << diags.render(&file);  // the contributions are right
  const Diagnostic e = testing::lower_error(*planned);
  EXPECT_EQ(e.loc.line, 4);
  EXPECT_NE(e.message.find("rank 1 ends with output chunk 0 = sum(r0, sum(r1, r2)), but rank 0 with "
                           "sum(sum(r0, r1), r2)"),
            std::string::npos)
      << e.message;
}

TEST(Lower, AdjacentChunksFuseIntoOnePass) {
  // Two ranks, four chunks, one op per chunk: each rank reduces its half from the other, then
  // copies the other half back. Each step's two ops on adjacent chunks become one pass.
  StepProgram p = testing::empty_program("halves", Collective::AllReduce, 2, 4, 2);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      testing::add(p, r, 0, OpKind::Reduce, 2 * r + c, 1 - r, Buffer::Input);
      testing::add(p, r, 1, OpKind::Copy, 2 * (1 - r) + c, 1 - r);
    }
  Diagnostics diags;
  std::optional<PlannedProgram> pp = plan_syncs(p, {}, diags);
  ASSERT_TRUE(pp) << diags.render(nullptr);
  const KernelPlan plan = testing::lowered(*pp);
  ASSERT_EQ(plan.ranks[1].steps[0].passes.size(), 1u);
  EXPECT_EQ(plan.ranks[1].steps[0].passes[0].chunks, (ChunkRange{2, 2}));
  EXPECT_EQ(plan.ranks[1].steps[0].passes[0].locs.size(), 1u);  // the two ops share one DSL line
  ASSERT_EQ(plan.ranks[1].steps[1].passes.size(), 1u);
  EXPECT_EQ(plan.ranks[1].steps[1].passes[0].chunks, (ChunkRange{0, 2}));
}

TEST(Lower, SingleRankPassesTheInputThrough) {
  KernelPlan plan = lower_shipped("ring", 1);
  ASSERT_EQ(plan.ranks[0].passthrough.size(), 1u);
  EXPECT_EQ(pass_text(plan.ranks[0].passthrough[0], 0, ReduceOp::Sum), "out[0] = in[0]");
  KernelOptions o;
  o.in_place = true;
  EXPECT_TRUE(lower_shipped("ring", 1, o).ranks[0].passthrough.empty());
}

TEST(Lower, RejectsBadOptions) {
  PlannedProgram pp = testing::without_waits(testing::shipped("ring", 2));
  for (int64_t tile : {0, 100, 32}) {
    KernelOptions o;
    o.tile_bytes = tile;
    EXPECT_NE(testing::lower_error(pp, o).message, "") << tile;
  }
  KernelOptions o;
  o.channels = 0;
  EXPECT_NE(testing::lower_error(pp, o).message, "");
  o = {};
  o.pipeline = 0;
  EXPECT_NE(testing::lower_error(pp, o).message, "");
  // Protocol ll counts a window's elements in 32 bits (ProtocolLl::ll_pass): a 1 GiB tile is fine
  // under simple only.
  o = {};
  o.tile_bytes = int64_t{1} << 30;
  EXPECT_NO_THROW(testing::lowered(pp, o));
  o.protocol = Protocol::Ll;
  EXPECT_EQ(testing::lower_error(pp, o).message, "protocol ll: tile size 1073741824 B x pipeline depth 2 must stay below 1 GiB");
}

TEST(Lower, RejectsAReadOfUnwrittenScratch) {
  StepProgram p = testing::shipped("ring", 2);
  p.ops[1][0][0].src = Buffer::Scratch;
  const Diagnostic e = testing::lower_error(testing::without_waits(p));
  EXPECT_EQ(e.message, "rank 1, step 0 (reduce_scatter s=0), chunk 0: reads rank 0's scratch before anything wrote it");
  EXPECT_EQ(e.loc.line, 14);  // ring.sched: the reduce_scatter op
}

TEST(Lower, RejectsAStepThatReadsWhatItWrites) {
  // In place, rank 0's step 0 reduces into out[2] and also copies its own out[2] to scratch.
  StepProgram p = testing::shipped("ring", 3);
  testing::add(p, 0, 0, OpKind::Copy, 2, 0, Buffer::Output, Buffer::Scratch);
  KernelOptions o;
  o.in_place = true;
  EXPECT_NE(testing::lower_error(testing::without_waits(p), o).message, "");
  // Out of place the copy reads the input (first touch): no hazard.
  EXPECT_NO_THROW(testing::lowered(testing::without_waits(p)));
}

// `scratch N slots` (tests/lit/run/allpairs_slots.sched): a pass that touches a slot is one chunk
// long and runs at the chunk it moves, whichever slot holds it; scratch is N slots of the largest
// chunk, not N blocks of `count` as the positional `scratch N * N` needs.
TEST(Lower, SlotPassesRunAtTheChunkTheyMove) {
  testing::Planned p = testing::plan_shipped("tests/lit/run/allpairs_slots.sched", 8);
  ASSERT_TRUE(p.planned) << p.errors;
  const KernelPlan plan = testing::lowered(*p.planned);
  EXPECT_EQ(plan.scratch_slots, 8);
  EXPECT_EQ(plan.scratch_blocks, 0);
  const DataPasses& scatter = plan.ranks[3].steps[0].passes;
  ASSERT_EQ(scatter.size(), 7u);  // one per peer: slots never fuse
  for (const DataPass& pass : scatter) {
    EXPECT_EQ(pass.dst, Storage::Slot);
    EXPECT_EQ(pass.chunks, (ChunkRange{3, 1}));  // rank 3 moves its chunk 3 into slot p
    ASSERT_EQ(pass.operands.size(), 1u);
    EXPECT_EQ(pass.operands[0], (Operand{pass.to.slot, Storage::Input}));
  }
  const DataPass& reduce = plan.ranks[3].steps[1].passes.at(0);
  EXPECT_EQ(pass_text(reduce, 3, ReduceOp::Sum),
            "out[3] = sum(slot0[3], slot1[3], slot2[3], in[3], slot4[3], slot5[3], slot6[3], slot7[3])");
  const EmittedKernel k = emit_cuda(plan);
  const uint64_t count = 1 << 20;  // f32: 8 chunks of 131072 elements
  EXPECT_EQ(k.scratch_bytes(count), 8u * 131072 * 4);
  // The largest chunk sets a slot's size, rounded up to 64 bytes: 1001 elements (f32: 16 to 64
  // bytes) cut in 8 are 2 chunks of 112, 5 of 128 and the last of 137 (the leftover units go one
  // each to the last chunks, the leftover elements to the very last), so a slot holds 144.
  EXPECT_EQ(k.slot_elements(1001), 144u);
}

// What a slot holds is read back only at its own position: a chunk of another position may
// have another size. The verifier accepts this schedule (the stray copy is overwritten later);
// lowering does not.
TEST(Lower, RejectsASlotReadBackAtAnotherPosition) {
  const test::FrontEndResult r = test::compile_text(R"(allreduce stray {
  chunks N
  scratch N slots
  phase scatter {
    step { for p in 1 .. N-1 { copy chunk r into scratch from input of (r + p) % N as chunk (r + p) % N } }
  }
  phase stray {
    step { copy chunk (r + 1) % N from scratch of r as chunk (r + 2) % N }
  }
  phase reduce {
    step { for p in 1 .. N-1 { reduce chunk (r + p) % N from scratch of r as chunk r } }
  }
  phase gather {
    step { for p in 1 .. N-1 { copy chunk (r + p) % N from (r + p) % N } }
  }
})", 4);
  ASSERT_TRUE(r.program) << r.errors;
  Diagnostics diags;
  EXPECT_TRUE(verify(*r.program, diags)) << diags.render(nullptr);
  const Diagnostic e = testing::lower_error(testing::without_waits(*r.program));
  EXPECT_EQ(e.message, "rank 0, step 1 (stray), chunk 2: rank 0's scratch slot 1 holds chunk 0 (position 0), but the "
                       "pass moves chunk 2 (position 2): a slot gives a chunk back only at its own position (chunks of "
                       "other positions may differ in size; 4 chunks per block)");
  EXPECT_EQ(e.loc.line, 8);
}

// Reduce_scatter: the output holds the rank's own block only; partial sums of other blocks live
// in staging, and the vector is N blocks of `count`.
TEST(Lower, ReduceScatterKeepsOtherBlocksInStaging) {
  KernelPlan plan = lower_shipped("ring_reduce_scatter", 4);
  EXPECT_EQ(plan.blocks, 4);
  EXPECT_TRUE(plan.uses_staging);
  EXPECT_FALSE(plan.uses_scratch);
  for (int r = 0; r < 4; ++r)
    for (const StepPlan& step : plan.ranks[r].steps)
      for (const DataPass& pass : step.passes) {
        EXPECT_EQ(pass.dst, pass.chunks.begin == r ? Storage::Output : Storage::Staging) << "rank " << r;
        EXPECT_EQ(pass.completes, pass.chunks.begin == r);
      }
}

// Allgather: the input holds the rank's own block, which reaches the output as a passthrough
// (out of place) or is already there (in place).
TEST(Lower, AllGatherPassesItsOwnBlockThrough) {
  KernelPlan plan = lower_shipped("ring_allgather", 4);
  EXPECT_EQ(plan.blocks, 4);
  EXPECT_FALSE(plan.uses_staging);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(plan.ranks[r].passthrough.size(), 1u);
    EXPECT_EQ(plan.ranks[r].passthrough[0].chunks, (ChunkRange{r, 1}));
    EXPECT_EQ(plan.ranks[r].passthrough[0].operands[0], (Operand{r, Storage::Input}));
  }
  KernelOptions o;
  o.in_place = true;
  for (const RankPlan& rank : lower_shipped("ring_allgather", 4, o).ranks) EXPECT_TRUE(rank.passthrough.empty());
}

// Reduce: only the root's output is the user's; the chain's partial sums live in staging.
TEST(Lower, ReduceWritesOnlyTheRootsOutput) {
  KernelPlan plan = lower_shipped("ring_reduce", 4);  // root 0
  EXPECT_EQ(plan.blocks, 1);
  for (int r = 0; r < 4; ++r)
    for (const StepPlan& step : plan.ranks[r].steps)
      for (const DataPass& pass : step.passes) EXPECT_EQ(pass.dst, r == 0 ? Storage::Output : Storage::Staging);
  EXPECT_TRUE(plan.ranks[0].passthrough.empty());  // the last reduce writes all of it
}

TEST(Lower, RejectsReadingAnInputTheCollectiveDoesNotGive) {
  StepProgram p = testing::shipped("ring_broadcast", 3);  // root 0: rank 1 copies from root's output
  p.ops[1][0][0].peer = 2;  // unwritten at step 0, so it stands for rank 2's input
  EXPECT_EQ(testing::lower_error(testing::without_waits(p)).message,
            "rank 1, step 0 (chain s=0), chunk 0: reads rank 2's output before anything wrote it, and a broadcast "
            "gives that rank no such input chunk");
}

TEST(Lower, RejectsBlocksThatDoNotSplitEvenly) {
  StepProgram p = testing::shipped("ring_reduce_scatter", 2);
  p.nchunks = 3;
  EXPECT_NE(testing::lower_error(testing::without_waits(p)).message, "");
}

TEST(Lower, PrintsThePlan) {
  std::string text = print_kernel_plan(lower_shipped("ring", 3));
  EXPECT_NE(text.find("kernel plan: allreduce ring (schedules/ring.sched), 3 ranks, 3 chunks, 4 steps"), std::string::npos) << text;
  EXPECT_NE(text.find("    out[2] = sum(in[2], r2.in[2])  -- reads 2 (1 remote), writes 1"), std::string::npos) << text;
  EXPECT_NE(text.find("  total: reads 6 (4 remote), writes 4"), std::string::npos) << text;
}

}  // namespace
}  // namespace ccc

namespace ccc {
namespace {

KernelOptions ll_options() {
  KernelOptions o;
  o.protocol = Protocol::Ll;
  return o;
}

// One-shot over ll: each rank sends its input to every peer at entry, after waiting for that
// peer's entry, reads its peers' values from its own receive regions, and waits for nothing else.
TEST(LowerLl, OneShotPushesItsInputAtEntry) {
  const KernelPlan plan = lower_shipped("oneshot", 4, ll_options());
  EXPECT_EQ(plan.ll_slots, 3);
  EXPECT_EQ(plan.ll_blocks, 1);
  for (int r = 0; r < 4; ++r) {
    const StepPlan& step = plan.ranks[r].steps[0];
    EXPECT_TRUE(plan.ranks[r].exit_waits.empty());
    ASSERT_EQ(step.waits.size(), 3u);
    for (const Wait& w : step.waits) EXPECT_EQ(w.step, -1);
    ASSERT_EQ(step.entry_sends.size(), 3u);
    EXPECT_TRUE(step.sends.empty());
    for (const DataPass& send : step.entry_sends) {
      EXPECT_NE(send.to.rank, r);
      EXPECT_EQ(send.operands.at(0).buffer, Storage::Input);
    }
    ASSERT_EQ(step.passes.size(), 1u);
    int regions = 0;
    for (const Operand& o : step.passes[0].operands) regions += o.buffer == Storage::Ll;
    EXPECT_EQ(regions, 3);
  }
}

// Two-shot: the reduced chunk is sent right after the step that finished it, to be read in the
// next step.
TEST(LowerLl, TwoShotSendsTheReducedChunkAfterItsStep) {
  const KernelPlan plan = lower_shipped("twoshot", 3, ll_options());
  const StepPlan& first = plan.ranks[1].steps[0];
  ASSERT_EQ(first.sends.size(), 2u);
  for (const DataPass& send : first.sends) {
    EXPECT_EQ(send.chunks.begin, 1);  // rank 1's reduced chunk
    EXPECT_EQ(send.operands.at(0).buffer, Storage::Output);
  }
  EXPECT_TRUE(plan.ranks[1].steps[1].waits.empty());
  EXPECT_TRUE(plan.ranks[1].steps[1].sends.empty());
}

// check_ll_plan refuses what would hang or overwrite: a send before the consumer's entry wait,
// a region nobody sends, a send after its read.
TEST(LowerLl, CheckRefusesUnsafePlans) {
  const KernelPlan good = lower_shipped("twoshot", 3, ll_options());
  Diagnostics accepted;
  EXPECT_TRUE(check_ll_plan(good, accepted)) << accepted.render(nullptr);
  auto refused = [](const KernelPlan& plan, const std::string& words) {
    Diagnostics diags;
    if (check_ll_plan(plan, diags)) ADD_FAILURE() << "accepted; expected: " << words;
    else EXPECT_NE(diags.render(nullptr).find(words), std::string::npos) << diags.render(nullptr);
  };
  KernelPlan no_wait = good;
  no_wait.ranks[0].steps[0].waits.clear();
  refused(no_wait, "without first waiting for that rank to enter the launch");
  KernelPlan unsent = good;
  unsent.ranks[0].steps[0].sends.pop_back();
  refused(unsent, "which rank 0 never sends: the read would wait for ever");
  KernelPlan late = good;
  late.ranks[0].steps[1].sends.push_back(late.ranks[0].steps[0].sends.back());
  late.ranks[0].steps[0].sends.pop_back();
  refused(late, "but the rank reads it at step 1");
}

// Every shipped schedule lowers under ll, and shares one table exactly where its simple kernel
// does: to_ll numbers every rank's receive regions in rank 0's frame.
TEST(LowerLl, RunsEveryShippedScheduleAndSharesATableWhereSimpleDoes) {
  for (const std::string& name : test::shipped_schedule_names()) {
    const int n = name == "butterfly" ? 4 : 5;
    const KernelPlan plan = lower_shipped(name, n, ll_options());
    const RankSymmetry simple = find_rank_symmetry(lower_shipped(name, n));
    EXPECT_EQ(find_rank_symmetry(plan).kind, simple.kind) << name;
    EXPECT_GT(plan.ll_slots, 0) << name;
  }
}

}  // namespace
}  // namespace ccc
