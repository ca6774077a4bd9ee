#include <gtest/gtest.h>

#include "emit_cuda.h"
#include "lower.h"
#include "step_diagram.h"
#include "codegen_pipeline.h"
#include "golden_util.h"

namespace ccc {
namespace {

void expect_golden(const std::string& name, const std::string& text) {
  test::expect_matches_golden(text, "tests/golden/cu/" + name, "EmitCuda.*");
}

EmittedKernel emit_shipped(const std::string& name, int n, const KernelOptions& o, bool with_source) {
  testing::Planned p = testing::plan_shipped(name, n, o.in_place);
  if (!p.planned) throw std::runtime_error(p.errors);
  return emit_cuda(testing::lowered(*p.planned, o), with_source ? &p.source : nullptr);
}

TEST(EmitCuda, RingGolden) {
  EmittedKernel k = emit_shipped("ring", 3, {}, true);
  EXPECT_EQ(k.kernel_name, "ccc_ring_n3_f32_sum_t65536_c4_p2");
  EXPECT_EQ(k.channels, 4);
  EXPECT_EQ(k.scratch_bytes(1000), 0u);
  expect_golden("ring_n3_f32_sum.cu", k.source);
}

TEST(EmitCuda, OneShotAvgGolden) {
  KernelOptions o;
  o.dtype = DataType::BF16;
  o.op = ReduceOp::Avg;
  o.tile_bytes = 4096;
  o.channels = 2;
  o.pipeline = 1;
  expect_golden("oneshot_n4_bf16_avg.cu", emit_shipped("oneshot", 4, o, false).source);
}

// Reduce_scatter: a blocked layout, and staging for the partial sums of other ranks' blocks.
TEST(EmitCuda, ReduceScatterGolden) {
  EmittedKernel k = emit_shipped("ring_reduce_scatter", 3, {}, true);
  EXPECT_EQ(k.blocks, 3);
  EXPECT_EQ(k.scratch_bytes(1000), 3u * 1000 * 4);  // staging: the whole vector
  expect_golden("ring_reduce_scatter_n3_f32_sum.cu", k.source);
}

TEST(EmitCuda, KernelTextUsesOnlyThePrelude) {
  EmittedKernel k = emit_shipped("butterfly", 4, {}, true);
  for (const char* raw : {"threadIdx", "blockIdx", "blockDim", "__global__", "__syncthreads", "asm"})
    EXPECT_EQ(k.source.find(raw), std::string::npos) << raw;
}

// A symmetric schedule's kernel ships one table, so its source grows with the steps (ring: 2N - 2
// of them, butterfly: 2 log2 N), not with N x steps: from N = 8 to N = 64, ring's source grows
// about 7-fold; per-rank tables would make it 64-fold. Under both protocols.
TEST(EmitCuda, SymmetricSourceGrowsWithTheSteps) {
  for (Protocol protocol : {Protocol::Simple, Protocol::Ll}) {
    KernelOptions o;
    o.protocol = protocol;
    for (const char* name : {"ring", "butterfly"}) {
      const std::string small = emit_shipped(name, 8, o, false).source, large = emit_shipped(name, 64, o, false).source;
      for (const std::string* source : {&small, &large}) {
        EXPECT_NE(source->find("CCC_PROGRAM Instr rank_0[program_length]"), std::string::npos) << name;
        EXPECT_EQ(source->find("CCC_PROGRAM Instr rank_1[program_length]"), std::string::npos) << name;
      }
      EXPECT_LT(large.size(), 12 * small.size()) << name;
    }
  }
}

// Under ll the symmetric schedules share rank 0's table and the asymmetric ones (trees) keep a
// table per rank.
TEST(EmitCuda, LlSharesTheTableOfSymmetricPlansOnly) {
  KernelOptions ll;
  ll.protocol = Protocol::Ll;
  for (const char* name : {"oneshot", "twoshot", "ring_reduce_scatter", "ring_allgather"}) {
    const std::string source = emit_shipped(name, 8, ll, false).source;
    EXPECT_NE(source.find("ccc::RankMap<"), std::string::npos) << name;
    EXPECT_EQ(source.find("CCC_PROGRAM Instr rank_1[program_length]"), std::string::npos) << name;
  }
  for (const char* name : {"tree", "dbtree"}) {
    const std::string source = emit_shipped(name, 8, ll, false).source;
    EXPECT_EQ(source.find("ccc::RankMap<"), std::string::npos) << name;
    EXPECT_NE(source.find("CCC_PROGRAM Instr rank_1[program_length]"), std::string::npos) << name;
  }
}

// generated/: every shipped schedule at N = 8, f32, sum, root 0, default parameters: the kernel
// and its step diagram (`--emit cu` and `--emit svg`).
TEST(EmitCuda, GeneratedDirectoryIsCurrent) {
  for (const std::string& name : test::shipped_schedule_names()) {
    testing::Planned p = testing::plan_shipped(name, 8);
    ASSERT_TRUE(p.planned) << p.errors;
    test::expect_matches_golden(emit_cuda(testing::lowered(*p.planned, {}), &p.source).source,
                                "generated/" + name + "_n8_f32_sum.cu", "EmitCuda.GeneratedDirectoryIsCurrent");
    test::expect_matches_golden(step_diagram_svg(p.planned->program), "generated/" + name + "_n8.svg",
                                "EmitCuda.GeneratedDirectoryIsCurrent");
  }
}

}  // namespace
}  // namespace ccc
