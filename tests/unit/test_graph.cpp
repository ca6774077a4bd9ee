#include <gtest/gtest.h>

#include <sstream>

#include "graph.h"
#include "rewrites.h"
#include "program_builders.h"

using namespace ccc;
using namespace ccc::testing;

TEST(Graph, RingEdgesByKindAndCriticalPath) {
  StepProgram p = resolve_first_reads(shipped("ring", 3));
  DependencyGraph g = build_graph(p);
  EXPECT_EQ(boost::num_vertices(g.g), 3u * (4 + 2));
  std::string text = print_graph(p, g);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "graph ring (allreduce) N=3: 18 vertices, 48 edges (program 15, RAW 9, WAR 3, WAW 3, entry 9, exit 9)");
  // Each step of ring waits for the previous rank's previous step: the chain is as long as the program.
  ASSERT_TRUE(critical_path(g));
  EXPECT_EQ(critical_path(g)->size(), 4u);
  EXPECT_NE(text.find("r0 s1 op0: reduce output chunk 1 from rank 2's output (schedules/ring.sched:14)\n"
                      "  -> r0 s2 op0  program\n"
                      "  -> r1 s2 op0  RAW rank 0's output chunk 1\n"
                      "  -> r2 s3 op0  WAR rank 2's output chunk 1\n"),
            std::string::npos)
      << text;
}

TEST(Graph, RangesStayRanges) {
  StepProgram p = empty_program("ranges", Collective::AllReduce, 2, 8, 2);
  add(p, 0, 0, OpKind::Copy, 0, 0, Buffer::Input, Buffer::Scratch, 8);
  add(p, 1, 1, OpKind::Copy, 2, 0, Buffer::Scratch, Buffer::Output, 4);
  std::string text = print_graph(p, build_graph(p));
  EXPECT_NE(text.find("-> r1 s1 op0  RAW rank 0's scratch chunks 2..5\n"), std::string::npos) << text;
}

TEST(Graph, InPlaceAliasesInputAndOutput) {
  StepProgram p = resolve_first_reads(shipped("oneshot", 2));
  EXPECT_EQ(print_graph(p, build_graph(p)).find("  WAR "), std::string::npos);
  DependencyGraph g = build_graph(p, true);
  EXPECT_FALSE(critical_path(g));  // each rank overwrites what the other reads in the same step
  std::string in_place = print_graph(p, g);
  EXPECT_NE(in_place.find("-> r1 s0 op0  WAR rank 1's input chunk 0"), std::string::npos) << in_place;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = 0; (pos = text.find(what, pos)) != std::string::npos; ++pos) ++n;
  return n;
}

// A grid: a cluster per rank, a `rank=same` column for the starts, for each step and for the ends.
TEST(Graph, DotHasOneNodePerVertexInAGrid) {
  StepProgram p = shipped("tree", 4);
  DependencyGraph g = build_graph(p);
  std::ostringstream dot;
  write_dot(dot, p, g);
  std::string text = dot.str();
  EXPECT_EQ(text.rfind("digraph G {", 0), 0u);
  EXPECT_EQ(count(text, "[label=\"r"), boost::num_vertices(g.g));
  EXPECT_EQ(count(text, "subgraph cluster_rank_"), 4u);
  EXPECT_EQ(count(text, "{rank=same;"), static_cast<size_t>(p.nsteps()) + 2);
  EXPECT_NE(text.find("color=blue"), std::string::npos);  // RAW edges
}
