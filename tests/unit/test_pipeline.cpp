// run_codegen: the whole pipeline in one call, as the runtime, `ccc compile` and Python run it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "emit_cuda.h"
#include "lower.h"
#include "pipeline.h"
#include "codegen_pipeline.h"

namespace ccc {
namespace {

CodegenOptions ring_options(int nranks, Pass last = Pass::Emit) {
  CodegenOptions o;
  o.instantiate.nranks = nranks;
  o.kernel.dtype = DataType::BF16;
  o.kernel.channels = 2;
  o.last = last;
  return o;
}

SourceFile shipped(const std::string& name) {
  testing::Planned p = testing::plan_shipped(name, 2);
  EXPECT_TRUE(p.planned) << p.errors;
  return p.source;
}

TEST(Pipeline, EmitsWhatThePassesEmitOneByOne) {
  const SourceFile ring = shipped("ring");
  Diagnostics diags;
  std::optional<CodegenResult> r = run_codegen(ring, ring_options(4), diags);
  ASSERT_TRUE(r) << diags.render(&ring);
  EXPECT_FALSE(r->program);  // moved into the analysis
  ASSERT_TRUE(r->planned && r->plan && r->kernel);

  std::optional<StepProgram> program = run_front_end(ring, {4, 0}, diags);
  ASSERT_TRUE(program);
  std::optional<PlannedProgram> planned = run_analysis(*program, {}, diags);
  ASSERT_TRUE(planned);
  const EmittedKernel by_hand = emit_cuda(testing::lowered(*planned, ring_options(4).kernel), &ring);
  EXPECT_EQ(r->kernel->source, by_hand.source);
  EXPECT_EQ(r->kernel->kernel_name, by_hand.kernel_name);
  EXPECT_NE(r->kernel->kernel_name.find("bf16"), std::string::npos) << r->kernel->kernel_name;
  EXPECT_TRUE(r->planned->sync.waits.empty());  // released by lowering: only the plan needs them
}

TEST(Pipeline, StopsAfterTheLastPassAsked) {
  const SourceFile ring = shipped("ring");
  Diagnostics diags;
  std::optional<CodegenResult> front = run_codegen(ring, ring_options(4, Pass::Instantiate), diags);
  ASSERT_TRUE(front);
  EXPECT_TRUE(front->program);
  EXPECT_FALSE(front->planned || front->plan || front->kernel);

  CodegenOptions o = ring_options(4, Pass::Sync);
  o.keep_program = true;
  std::optional<CodegenResult> analysed = run_codegen(ring, o, diags);
  ASSERT_TRUE(analysed);
  ASSERT_TRUE(analysed->program && analysed->planned);
  EXPECT_FALSE(analysed->planned->sync.waits.empty());
  EXPECT_EQ(analysed->program->nranks, 4);
  EXPECT_FALSE(analysed->plan || analysed->kernel);
}

// Lowering's errors are diagnostics like every other pass's: located, rendered with the line.
TEST(Pipeline, ALoweringErrorIsADiagnosticOnItsLine) {
  const SourceFile file = testing::sequential_one_shot();
  Diagnostics diags;
  EXPECT_FALSE(run_codegen(file, ring_options(3), diags));
  ASSERT_EQ(diags.error_count(), 1);
  EXPECT_EQ(diags.all()[0].loc.line, 4);
  const std::string text = diags.render(&file);
  EXPECT_NE(text.find("seq.sched:4:"), std::string::npos) << text;
  EXPECT_NE(text.find("but rank 0 with"), std::string::npos) << text;

  // Analysis alone proves it: the contributions are right, only their order differs.
  Diagnostics analysis_only;
  EXPECT_TRUE(run_codegen(file, ring_options(3, Pass::Sync), analysis_only)) << analysis_only.render(&file);
}

TEST(Pipeline, AScheduleForAnotherCollectiveIsAnError) {
  const SourceFile ring = shipped("ring");
  CodegenOptions o = ring_options(4);
  o.collective = Collective::AllGather;
  Diagnostics diags;
  EXPECT_FALSE(run_codegen(ring, o, diags));
  const std::string text = diags.render(&ring);
  EXPECT_NE(text.find("implements allreduce, not allgather"), std::string::npos) << text;
}

// A caller that prints each stage's diagnostics when the stage ends shows them after that stage's
// dumps: the front end's before the graph's dump, which comes from the analysis.
TEST(Pipeline, EachStageHandsOverItsDiagnosticsAfterItsDumps) {
  const SourceFile file{"unused.sched", R"(allreduce unused {
  chunks N
  let unused = 3
  phase rs {
    step s in 0 .. N-2 { reduce chunk (r - s - 1) % N from (r - 1) % N }
  }
  phase ag {
    step s in 0 .. N-2 { copy chunk (r - s) % N from (r - 1) % N }
  }
})"};
  std::vector<std::string> events;
  DumpHook hook;
  hook.write = [&](std::string_view) { events.push_back("dump"); };
  hook.stage_done = [&](const Diagnostics& d) { events.push_back("stage " + std::to_string(d.all().size())); };
  for (Pass after : {Pass::Instantiate, Pass::Graph}) {
    events.clear();
    hook.after = after;
    Diagnostics diags;
    ASSERT_TRUE(run_codegen(file, ring_options(4), diags, hook)) << diags.render(&file);
    ASSERT_GE(diags.all().size(), 1u) << "the unused let warns";
    const std::string warned = "stage " + std::to_string(diags.all().size());
    const std::vector<std::string> expected =
        after == Pass::Instantiate ? std::vector<std::string>{"dump", warned, warned, warned}
                                   : std::vector<std::string>{warned, "dump", warned, warned};
    EXPECT_EQ(events, expected) << pass_name(after);
  }
}

}  // namespace
}  // namespace ccc
