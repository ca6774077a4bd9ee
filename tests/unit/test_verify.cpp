#include <gtest/gtest.h>

#include "verify.h"
#include "program_builders.h"

using namespace ccc;
using namespace ccc::testing;

namespace {

std::string errors_of(const StepProgram& p) {
  Diagnostics d;
  verify(p, d);
  return d.render(nullptr);
}

}  // namespace

// The error points where the value went wrong (here the reduce-scatter, whose fullest sum of
// chunk 0 misses ranks 0 and 1), not at the all-gather that copied it around; the note names
// the last writer.
TEST(Verify, MissingContributionBlamesWhereTheSumFellShort) {
  StepProgram p = shipped("ring", 4);
  p.ops[2][1].clear();  // rank 2 skips reduce-scatter step 1: chunk 0 loses ranks 0 and 1
  const std::string fell_short =
      "no rank ever holds the complete chunk 0: the fullest value (2 of 4 contributions) was last made at step 2 "
      "(reduce_scatter s=2) by rank 3: reduce output chunk 0 from rank 2's output\n";
  EXPECT_EQ(errors_of(p),
            "<input>:14:7: error: rank 0 ends with chunk 0 missing the contributions of ranks 0, 1; " + fell_short +
            "<input>:18:5: note: last written at step 3 (all_gather s=0) by rank 0: copy output chunk 0 from rank 3's output\n"
            // Where the op that fell short got its peer, and its step (the first error only).
            "<input>:11:3: note: 'prev' = 2 for rank 3 at step 2 (reduce_scatter s=2)\n"
            "<input>:13:5: note: the op's step loop 's in 0 .. N - 2' runs s = 0 .. 2\n"
            "<input>:14:7: error: rank 1 ends with chunk 0 missing the contributions of ranks 0, 1; " + fell_short +
            "<input>:18:5: note: last written at step 4 (all_gather s=1) by rank 1: copy output chunk 0 from rank 0's output\n"
            "<input>:14:7: error: rank 2 ends with chunk 0 missing the contributions of ranks 0, 1; " + fell_short +
            "<input>:18:5: note: last written at step 5 (all_gather s=2) by rank 2: copy output chunk 0 from rank 1's output\n"
            "<input>:14:7: error: rank 3 ends with chunk 0 missing the contributions of ranks 0, 1\n"
            "<input>:13:5: note: last written at step 2 (reduce_scatter s=2) by rank 3: reduce output chunk 0 from rank 2's output\n");
}

TEST(Verify, CopyInsteadOfReduceAndTheReverse) {
  StepProgram p = shipped("ring", 3);
  p.ops[1][0][0].kind = OpKind::Copy;  // rank 1 drops its own contribution to chunk 0
  EXPECT_NE(errors_of(p).find("rank 2 ends with chunk 0 missing the contribution of rank 1"), std::string::npos);
  StepProgram q = shipped("ring", 3);
  q.ops[0][2][0].kind = OpKind::Reduce;  // all-gather adds instead of copying
  EXPECT_NE(errors_of(q).find("rank 0 ends with chunk 0 holding the contribution of rank 0 2 times"), std::string::npos)
      << errors_of(q);
}

TEST(Verify, AllGatherUndefinedChunkNamesTheUndefinedRead) {
  StepProgram p = empty_program("ag", Collective::AllGather, 2, 2, 1);
  add(p, 0, 0, OpKind::Copy, 1, 1);
  add(p, 1, 0, OpKind::Copy, 0, 1);  // copies its own undefined chunk 0 instead of rank 0's
  EXPECT_EQ(errors_of(p),
            "<input>:3:5: error: rank 1 ends with chunk 0 undefined: it is computed from output chunk 0 of rank 1, "
            "which rank 1 reads at step 0 (s=0) before anything is written there\n"
            "<input>:2:3: note: last written at step 0 (s=0) by rank 1: copy output chunk 0 from its own output\n"
            "<input>:3:5: note: the undefined read: rank 1: copy output chunk 0 from its own output\n");
}

TEST(Verify, ReduceScatterAndReduceIgnoreDontCareChunks) {
  StepProgram p = empty_program("rs", Collective::ReduceScatter, 2, 2, 1);
  add(p, 0, 0, OpKind::Reduce, 0, 1);
  add(p, 1, 0, OpKind::Reduce, 1, 0);
  EXPECT_EQ(errors_of(p), "");
  StepProgram q = empty_program("red", Collective::Reduce, 3, 1, 1);
  q.root = 2;
  add(q, 2, 0, OpKind::Reduce, 0, 0);
  add(q, 2, 0, OpKind::Reduce, 0, 1);
  EXPECT_EQ(errors_of(q), "");
  q.root = 1;
  EXPECT_NE(errors_of(q).find("rank 1 ends with chunk 0 missing the contributions of ranks 0, 2"), std::string::npos);
}

// A hand-built program's remaps are checked as the front end checks them: the chunks read must
// exist in the source buffer (scratch: nscratch of them), and a chunk moves only to the same
// position in another block (an allreduce has one block of `chunks`).
TEST(Verify, StructuralErrorsOfRemaps) {
  StepProgram p = empty_program("a2a", Collective::AllToAll, 2, 4, 1);  // 2 blocks of 2 chunks
  add(p, 0, 0, OpKind::Copy, 2, 1);
  p.ops[0][0][0].shift = -2;  // chunk 0 of rank 1 into chunk 2: same position, fine
  add(p, 1, 0, OpKind::Copy, 1, 0);
  p.ops[1][0][0].shift = 2;   // chunk 3 into chunk 1: fine
  add(p, 1, 0, OpKind::Copy, 0, 0);
  p.ops[1][0][1].shift = 1;   // chunk 1 into chunk 0: another position
  add(p, 0, 0, OpKind::Copy, 3, 1);
  p.ops[0][0][1].shift = 2;   // chunk 5: past the output
  auto structure = [](const StepProgram& prog, bool& ok) {
    Diagnostics d;
    ok = check_structure(prog, d);
    return d.render(nullptr);
  };
  bool ok = true;
  const std::string errors = structure(p, ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(errors.find("rank 0 step 0 (s=0) names output chunks 5..5, outside 0..3"), std::string::npos) << errors;
  EXPECT_NE(errors.find("rank 1 step 0 (s=0) moves chunk 1 onto chunk 0, another position in a block of 2 chunks"),
            std::string::npos) << errors;
  EXPECT_EQ(errors.find("chunk 2"), std::string::npos) << errors;  // the good remaps pass
  StepProgram q = empty_program("slots", Collective::AllReduce, 2, 2, 1);
  q.nscratch = 6;
  add(q, 0, 0, OpKind::Copy, 5, 1);
  q.ops[0][0][0].dst = Buffer::Scratch;
  q.ops[0][0][0].shift = -4;  // output chunk 1 of rank 1 into scratch slot 5: position 1 both
  EXPECT_EQ(structure(q, ok), "");
  EXPECT_TRUE(ok);
  q.ops[0][0][0].shift = -5;  // output chunk 0 into slot 5: another position
  EXPECT_NE(structure(q, ok).find("moves chunk 0 onto chunk 5"), std::string::npos);
}

TEST(Verify, StructuralErrors) {
  StepProgram p = shipped("ring", 3);
  p.ops[0][0][0].peer = 7;
  p.ops[1][0][0].chunks = {2, 5};
  p.ops[2][0][0].dst = Buffer::Input;
  add(p, 2, 1, OpKind::Copy, 0, 0);  // rank 2 step 1 already reduces chunk 0
  EXPECT_EQ(errors_of(p),
            "<input>:14:7: error: rank 0 step 0 (reduce_scatter s=0) reads from rank 7, which does not exist (N = 3)\n"
            "<input>:14:7: error: rank 1 step 0 (reduce_scatter s=0) names output chunks 2..6, outside 0..2\n"
            "<input>:14:7: error: rank 2 step 0 (reduce_scatter s=0) writes the input buffer, which is read-only\n"
            "<input>:3:5: error: rank 2 step 1 (reduce_scatter s=1) writes output chunk 0 with a copy and another op in the same step\n"
            "<input>:14:7: note: the other write: reduce output chunk 0 from rank 1's output\n");
}

TEST(Verify, ReportsAtMostEightWrongChunks) {
  StepProgram p = shipped("ring", 16);
  for (auto& rank : p.ops) rank.back().clear();  // no last all-gather step
  std::string out = errors_of(p);
  size_t errors = 0;
  for (size_t at = out.find(": error: "); at != std::string::npos; at = out.find(": error: ", at + 1)) ++errors;
  EXPECT_EQ(errors, 8u) << out;
  EXPECT_NE(out.find("note: 8 more (rank, chunk) pairs are wrong; the 8 shown are those that went wrong first"), std::string::npos);
}

TEST(Verify, RefusesProgramsOverTheOpLimit) {
  StepProgram p = empty_program("huge", Collective::AllReduce, 1, 1, 1);
  p.ops[0][0].assign(kMaxAnalysedOps + 1, Op{OpKind::Reduce, {0, 1}, 0, Buffer::Input, Buffer::Output, {}});
  EXPECT_EQ(errors_of(p), "<input>: error: schedule 'huge' has 4194305 ops for N = 1; verification and sync planning "
                          "are limited to 4194304 (4 Mi) ops\n");
}
