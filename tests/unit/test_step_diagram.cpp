// The step diagram (`ccc compile --emit svg`): its structure, not its pixels. One golden for a
// small schedule; the rest counts what the picture is made of.
#include <gtest/gtest.h>

#include "step_diagram.h"
#include "codegen_pipeline.h"
#include "golden_util.h"
#include "pipeline.h"
#include "program_builders.h"

namespace ccc {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

size_t total_waits(const SyncPlan& plan) {
  size_t n = 0;
  for (const auto& rank : plan.waits)
    for (const auto& step : rank) n += step.size();
  return n;
}

PlannedProgram planned(const std::string& name, int nranks) {
  testing::Planned p = testing::plan_shipped(name, nranks);
  if (!p.planned) throw std::runtime_error(p.errors);
  return std::move(*p.planned);
}

TEST(StepDiagram, RingGolden) {
  const PlannedProgram p = planned("ring", 3);
  test::expect_matches_golden(step_diagram_svg(p.program, &p.sync), "tests/golden/svg/ring_n3_syncs.svg",
                              "StepDiagram.*");
}

// Ring at N = 4: a lane per rank, a column per step, one box per op (reduces solid, copies
// outlined), an arrow per op (every op reads the previous rank), and the waits on request.
TEST(StepDiagram, RingHasABoxAndAnArrowPerOp) {
  const PlannedProgram p = planned("ring", 4);
  const std::string svg = step_diagram_svg(p.program);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("ring (allreduce), N = 4: 6 steps, 4 chunks"), std::string::npos);
  for (const char* lane : {">r0<", ">r1<", ">r2<", ">r3<"}) EXPECT_EQ(count(svg, lane), 1u) << lane;
  EXPECT_EQ(count(svg, "<text class=\"s\""), 6u);  // step numbers
  EXPECT_EQ(count(svg, ">reduce_scatter</text>"), 1u);
  EXPECT_EQ(count(svg, ">all_gather</text>"), 1u);
  // One more of each in the legend.
  EXPECT_EQ(count(svg, "<rect class=\"r\""), 4u * 3 + 1);
  EXPECT_EQ(count(svg, "<rect class=\"c\""), 4u * 3 + 1);
  EXPECT_EQ(count(svg, "<line class=\"a\""), 4u * 6 + 1);
  EXPECT_EQ(count(svg, "class=\"w\""), 0u);
  EXPECT_NE(svg.find("<title>r1 step 0 (reduce_scatter s=0): reduce output chunk 0 from rank 0's input"
                     " (schedules/ring.sched:14)</title>"),
            std::string::npos);

  const std::string with_syncs = step_diagram_svg(p.program, &p.sync);
  EXPECT_EQ(count(with_syncs, "<line class=\"w\""), total_waits(p.sync) + 1);
}

// Self-contained: no scripts, no fonts or images from elsewhere.
TEST(StepDiagram, ReferencesNothingOutside) {
  const PlannedProgram p = planned("butterfly", 8);
  const std::string svg = step_diagram_svg(p.program, &p.sync);
  for (const char* outside : {"<script", "href", "@import", "@font-face", "<image", "url(http"})
    EXPECT_EQ(svg.find(outside), std::string::npos) << outside;
}

// One-shot's cells hold N - 1 reduces each: the boxes name their peer, no fan of arrows.
TEST(StepDiagram, FanInNamesThePeerInsteadOfArrows) {
  const PlannedProgram p = planned("oneshot", 4);
  const std::string svg = step_diagram_svg(p.program);
  EXPECT_EQ(count(svg, "<rect class=\"r\""), 4u * 3 + 1);
  EXPECT_EQ(count(svg, "<line class=\"a\""), 1u);  // the legend's
  EXPECT_EQ(count(svg, "<text class=\"f\""), 4u * 3);
  EXPECT_NE(svg.find(">\u21903 i0</text>"), std::string::npos);  // from rank 3, its input chunk 0
}

// A box says which buffer it writes unless the output, and which buffer and chunk it reads where
// that differs from the chunk written: Bruck's rotations stage through scratch.
TEST(StepDiagram, BoxesSayTheBuffersAndTheChunkRead) {
  const std::string svg = step_diagram_svg(planned("alltoall_bruck", 4).program);
  const size_t op = svg.find("copy scratch chunk 1 from rank 3's input chunk 0");
  ASSERT_NE(op, std::string::npos) << "the op checked here moved";
  const std::string box = svg.substr(op, svg.find("</g>", op) - op);
  EXPECT_NE(box.find(">s1</text>"), std::string::npos) << box;        // writes scratch chunk 1
  EXPECT_NE(box.find(">\u21903 i0</text>"), std::string::npos) << box;  // reads rank 3's input chunk 0
}

// A phase name that does not fit over its columns is never cut: the header shows a key, the
// legend the name (the torus of tests/lit/instantiate/phase_loop.sched, 8 phases of 3 steps).
TEST(StepDiagram, LongPhaseNamesGetAKeyInsteadOfBeingCut) {
  const SourceFile file{"torus.sched", test::read_file(std::string(CCC_SOURCE_DIR) + "/tests/lit/instantiate/phase_loop.sched")};
  Diagnostics diags;
  std::optional<StepProgram> p = run_front_end(file, {16, 0}, diags);
  ASSERT_TRUE(p) << diags.render(&file);
  const std::string svg = step_diagram_svg(*p);
  EXPECT_EQ(svg.find("\u2026"), std::string::npos);
  EXPECT_NE(svg.find("<title>phase reduce_scatter d=1</title>"), std::string::npos);
  EXPECT_NE(svg.find(">P3</text>"), std::string::npos);
  EXPECT_NE(svg.find("phases: P1: reduce_scatter d=0; P2: all_gather d=0; P3: reduce_scatter d=1;"), std::string::npos);
}

// The steps the sync planner inserts to stage writes through scratch are drawn apart (a tinted
// column whose title says so), and the legend says what the tint means.
TEST(StepDiagram, StagedStepsAreDrawnApart) {
  const SourceFile file{"staging.sched", test::read_file(std::string(CCC_SOURCE_DIR) + "/tests/lit/sync/staging.sched")};
  Diagnostics diags;
  std::optional<StepProgram> p = run_front_end(file, {4, 0}, diags);
  std::optional<PlannedProgram> staged = p ? run_analysis(*p, {}, diags) : std::nullopt;
  ASSERT_TRUE(staged) << diags.render(&file);
  ASSERT_EQ(staged->program.nsteps(), 4);
  const std::string svg = step_diagram_svg(staged->program, &staged->sync);
  EXPECT_EQ(count(svg, "<rect class=\"st\" x="), 2u + 1);  // two inserted steps, and the legend's swatch
  EXPECT_NE(svg.find("step 1 (q staged in): inserted by the sync planner"), std::string::npos);
  EXPECT_NE(svg.find("staging the sync planner inserted"), std::string::npos);
  EXPECT_EQ(count(step_diagram_svg(planned("ring", 4).program), "class=\"st\""), 0u);
}

// At N = 20 a cell holds 19 reduces: 15 boxes, then "+4" (the title says 4 more ops).
TEST(StepDiagram, CrowdedCellsEndInACount) {
  const std::string svg = step_diagram_svg(testing::shipped("oneshot", 20));
  EXPECT_EQ(count(svg, "<rect class=\"r\""), 20u * 15 + 1);
  EXPECT_EQ(count(svg, "<title>4 more ops</title>+4</text>"), 20u);
}

TEST(StepDiagram, IdleCellsAreEmpty) {
  StepProgram p = testing::empty_program("idle", Collective::AllReduce, 2, 2, 3);
  testing::add(p, 0, 1, OpKind::Copy, 1, 1);
  const std::string svg = step_diagram_svg(p);
  EXPECT_EQ(count(svg, "<rect class=\"c\""), 1u + 1);
  EXPECT_EQ(count(svg, "<rect class=\"r\""), 0u + 1);
  EXPECT_EQ(count(svg, "<text class=\"s\""), 3u);  // every step keeps its column
}

TEST(StepDiagram, TextIsEscaped) {
  StepProgram p = testing::empty_program("a<b&c", Collective::AllReduce, 2, 2, 1);
  p.phases[0].name = "\"x\"";
  testing::add(p, 0, 0, OpKind::Reduce, 0, 1);
  const std::string svg = step_diagram_svg(p);
  EXPECT_NE(svg.find("a&lt;b&amp;c (allreduce)"), std::string::npos);
  EXPECT_NE(svg.find("&quot;x&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
}

// Beyond 128 lanes and 128 columns every k-th rank and step is drawn, one plain cell each, with
// no labels or arrows: the picture stays around a megabyte.
TEST(StepDiagram, LargeNIsSampledAndBounded) {
  const StepProgram p = testing::shipped("ring", 512);
  const std::string svg = step_diagram_svg(p);
  EXPECT_NE(svg.find("(showing 1 rank in 4, 1 step in 8)"), std::string::npos);
  EXPECT_LT(svg.size(), 1200u * 1000);
  EXPECT_EQ(count(svg, "<line class=\"a\""), 0u);
  EXPECT_EQ(count(svg, "<text class=\"n\""), 0u);
  EXPECT_EQ(count(svg, "<rect x="), 128u * 64);                // reduce_scatter's sampled cells
  EXPECT_EQ(count(svg, "<rect class=\"p\""), 128u * 64);       // all_gather's
}

// At N = 64 every rank and step is drawn, but lanes are too thin for labels, arrows and waits.
TEST(StepDiagram, ThinLanesDropLabelsAndArrows) {
  const PlannedProgram p = planned("butterfly", 64);
  const std::string svg = step_diagram_svg(p.program, &p.sync);
  EXPECT_EQ(count(svg, "<line class=\"w\""), 0u);
  EXPECT_NE(svg.find("(waits are not drawn at this size)"), std::string::npos);
  EXPECT_EQ(svg.find("showing"), std::string::npos);
  EXPECT_EQ(count(svg, "<line class=\"a\""), 0u);
  EXPECT_EQ(count(svg, "<text class=\"n\""), 0u);
  EXPECT_EQ(count(svg, ">r62<"), 1u);
  EXPECT_EQ(count(svg, ">r63<"), 0u);  // lanes of 9 px: every other one is labelled
}

}  // namespace
}  // namespace ccc
