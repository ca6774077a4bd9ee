#include <gtest/gtest.h>

#include "interpret.h"
#include "sync.h"
#include "verify.h"
#include "program_builders.h"

using namespace ccc;
using namespace ccc::testing;

namespace {

PlannedProgram plan(const StepProgram& p, bool in_place = false) {
  Diagnostics d;
  auto planned = plan_syncs(p, {in_place}, d);
  EXPECT_TRUE(planned) << d.render(nullptr);
  return planned ? *planned : PlannedProgram{};
}

// Runs the planned program under `runs` random interleavings; "" if all match the reference.
std::string run_dataflow(const StepProgram& original, const PlannedProgram& planned, bool in_place, int runs) {
  for (int seed = 1; seed <= runs; ++seed) {
    InterpretResult res = interpret(planned.program, {&planned.sync, in_place, static_cast<uint64_t>(seed)});
    std::string diff = compare_with_reference(original, res, seed);
    if (!diff.empty()) return "seed " + std::to_string(seed) + ": " + diff;
  }
  return "";
}

}  // namespace

std::vector<StepProgram> correct_programs() {
  std::vector<StepProgram> out;
  for (int N = 1; N <= 7; ++N)
    for (const char* name : {"ring", "tree", "dbtree", "twoshot"}) out.push_back(shipped(name, N));
  for (int N = 1; N <= 5; ++N) out.push_back(shipped("oneshot", N));
  for (int N : {1, 2, 4, 8}) {
    out.push_back(shipped("butterfly", N));
    out.push_back(naive_butterfly(N));
  }
  for (int N : {2, 3, 5, 6}) out.push_back(test::compile_text(R"(broadcast chain {
  chunks 2
  phase chain {
    step s in 0 .. N-2 { if (r - root) % N == s + 1 { copy chunks 0 .. 1 from (r - 1) % N } }
  }
}
)", N, N - 1).program.value());  // reads the root's output (an input read after resolution)
  return out;
}

TEST(Sync, PlannedProgramsAreCorrectUnderRandomInterleavings) {
  for (const StepProgram& p : correct_programs())
    for (bool in_place : {false, true}) {
      PlannedProgram planned = plan(p, in_place);
      Diagnostics d;
      EXPECT_TRUE(verify(planned.program, d)) << d.render(nullptr);  // staging keeps the meaning
      EXPECT_EQ(run_dataflow(p, planned, in_place, 40), "") << p.schedule << " N=" << p.nranks << " in place "
                                                             << in_place << "\n" << print_syncs(planned);
    }
}

// Every kept wait is needed: without it some interleaving gives a wrong result.
TEST(Sync, EveryKeptWaitIsNeeded) {
  for (auto [p, in_place] : {std::pair{shipped("ring", 4), false}, {shipped("butterfly", 4), false},
                             {shipped("oneshot", 3), true}, {naive_butterfly(4), false}, {shipped("tree", 5), false},
                             {shipped("ring_broadcast", 3, 1), false}, {shipped("twoshot", 3), true}}) {
    const PlannedProgram planned = plan(p, in_place);
    for (size_t r = 0; r < planned.sync.waits.size(); ++r)
      for (size_t k = 0; k < planned.sync.waits[r].size(); ++k)
        for (size_t i = 0; i < planned.sync.waits[r][k].size(); ++i) {
          PlannedProgram weaker = planned;
          weaker.sync.waits[r][k].erase(weaker.sync.waits[r][k].begin() + i);
          EXPECT_NE(run_dataflow(p, weaker, in_place, 400), "")
              << p.schedule << ": rank " << r << " step " << k << " wait " << i << " is not needed";
        }
  }
}

TEST(Sync, RingKeepsOneWaitPerStepPlusExit) {
  for (int N : {2, 5, 64}) {
    PlannedProgram planned = plan(shipped("ring", N));
    EXPECT_EQ(planned.sync.waits_kept, int64_t{N} * (2 * N - 1)) << N;
    EXPECT_GT(planned.sync.cross_rank_edges, planned.sync.waits_kept);
  }
}

// A clock window of two steps keeps redundant waits but never drops a needed one.
TEST(Sync, SmallClockBudgetStaysCorrect) {
  for (const StepProgram& p : {shipped("ring", 6), shipped("butterfly", 8), naive_butterfly(8)}) {
    Diagnostics d;
    auto planned = plan_syncs(p, {false, 1}, d);
    ASSERT_TRUE(planned) << d.render(nullptr);
    EXPECT_GE(planned->sync.waits_kept, plan(p).sync.waits_kept);
    EXPECT_EQ(run_dataflow(p, *planned, false, 40), "") << p.schedule;
  }
}

// Rank 0's clocks rotated (ring and other rank-symmetric programs) give the plan every rank's
// clocks give, wait for wait and in the same order, also with a clock window of two steps.
TEST(Sync, RotatedClocksPlanWhatEveryRanksClocksPlan) {
  int rotated = 0;
  for (const char* name : {"ring", "oneshot", "twoshot", "butterfly", "tree", "dbtree", "ring_allgather",
                           "ring_reduce_scatter", "ring_broadcast", "alltoall_direct", "alltoall_bruck"})
    for (int N : {2, 3, 5, 8, 16})
      for (bool in_place : {false, true})
        for (int64_t budget : {int64_t{1}, SyncOptions{}.clock_budget}) {
          const std::optional<StepProgram> p = test::compile_schedule(name, N, 0).program;
          if (!p) continue;  // not defined for this N (butterfly: powers of two)
          Diagnostics d;
          SyncOptions shared{in_place, budget};
          SyncOptions every = shared;
          every.share_rotated_clocks = false;
          auto a = plan_syncs(*p, shared, d), b = plan_syncs(*p, every, d);
          ASSERT_EQ(a.has_value(), b.has_value()) << name << " N=" << N;
          if (!a) continue;
          EXPECT_FALSE(b->sync.rotated_clocks);
          rotated += a->sync.rotated_clocks;
          EXPECT_EQ(print_syncs(*a), print_syncs(*b)) << name << " N=" << N << " in place " << in_place;
          EXPECT_EQ(a->sync.waits_kept, b->sync.waits_kept);
        }
  EXPECT_GE(rotated, 40);  // ring, twoshot, the ring collectives...: the shortcut is taken
  Diagnostics d;
  auto ring = plan_syncs(shipped("ring", 64), {}, d), tree = plan_syncs(shipped("tree", 8), {}, d);
  ASSERT_TRUE(ring && tree);
  EXPECT_TRUE(ring->sync.rotated_clocks);
  EXPECT_FALSE(tree->sync.rotated_clocks);  // rooted: rank 0's waits are not every rank's
}

TEST(Sync, InPlaceOneShotIsStaged) {
  PlannedProgram planned = plan(shipped("oneshot", 3), true);
  ASSERT_EQ(planned.program.nsteps(), 3);
  EXPECT_EQ(planned.program.steps[0].label, "direct staged in");
  EXPECT_EQ(planned.program.steps[2].label, "direct staged out");
  ASSERT_EQ(planned.sync.notes.size(), 1u);
  EXPECT_EQ(planned.sync.notes[0],
            "step 0 (direct): 3 ranks overwrite in this step output chunks a peer reads in it (in place: input and "
            "output are one buffer); their writes are staged through scratch and copied to the output in a new step");
  EXPECT_TRUE(plan(shipped("oneshot", 3), false).sync.notes.empty());  // out of place it reads the pristine input
}

TEST(Sync, UnstageableCycleIsADeadlock) {
  StepProgram p = naive_butterfly(2);
  p.steps.push_back({0, "keep", {4, 3}});
  for (int r = 0; r < 2; ++r) {  // the schedule uses scratch chunk 0 itself
    p.ops[r].emplace_back();
    add(p, r, 1, OpKind::Copy, 0, r, Buffer::Output, Buffer::Scratch);
  }
  Diagnostics d;
  EXPECT_FALSE(plan_syncs(p, {true}, d));
  EXPECT_EQ(d.render(nullptr),
            "<input>:5:5: error: deadlock at step 0 (exchange k=0): ranks overwrite in this step what a peer still reads in it: rank 0 waits for rank 1 (overwrites output chunk 0 (in place: its input), which rank 1 reads at step 0 (exchange k=0) (naive_butterfly.sched:6)), rank 1 waits for rank 0 (overwrites output chunk 0 (in place: its input), which rank 0 reads at step 0 (exchange k=0) (naive_butterfly.sched:6))\n"
            "<input>: note: staging cannot break the cycle: rank 0 needs scratch chunk 0 to stage step 0, but the schedule uses it; write the step's results to scratch and copy them to the output in a later step\n");
}

TEST(Sync, InPlaceReadOfOverwrittenInputIsRejected) {
  StepProgram p = empty_program("clobber", Collective::AllReduce, 2, 1, 2);
  add(p, 0, 0, OpKind::Reduce, 0, 1);
  add(p, 1, 0, OpKind::Reduce, 0, 0);
  add(p, 0, 1, OpKind::Copy, 0, 1, Buffer::Input, Buffer::Scratch);
  Diagnostics d;
  EXPECT_TRUE(plan_syncs(p, {false}, d)) << d.render(nullptr);
  EXPECT_FALSE(plan_syncs(p, {true}, d));
  EXPECT_EQ(d.render(nullptr),
            "<input>:3:5: error: in place, rank 0 at step 1 (s=1) reads input chunk 0 of rank 1, but rank 1 overwrote "
            "that memory (its output) at step 0 (s=0); no wait can bring the input back\n"
            "<input>:3:5: note: the overwrite: rank 1: reduce output chunk 0 from rank 0's input; read the output "
            "instead, or run out of place\n");
}

TEST(Sync, SameStepLocalReadAndWriteIsRejected) {
  StepProgram p = empty_program("swap", Collective::AllReduce, 1, 1, 1);
  add(p, 0, 0, OpKind::Copy, 0, 0, Buffer::Output, Buffer::Scratch);
  add(p, 0, 0, OpKind::Copy, 0, 0, Buffer::Scratch, Buffer::Output);
  Diagnostics d;
  EXPECT_FALSE(plan_syncs(p, {false}, d));
  EXPECT_EQ(d.render(nullptr),
            "<input>:3:5: error: rank 0 at step 0 (s=0) reads scratch chunk 0 that another op of the same step "
            "overwrites; the generated code runs a step's ops in no fixed order: split the step\n"
            "<input>:3:5: note: the overwrite: copy scratch chunk 0 from its own input\n");
}
