#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ccc/emit_cuda.h"
#include "ccc/lower.h"
#include "codegen_pipeline.h"

namespace ccc {
namespace {

// Compares with tests/golden/cu/NAME; CCC_UPDATE_GOLDEN=1 rewrites the file instead.
void expect_golden(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::path(CCC_SOURCE_DIR) / "tests/golden/cu" / name;
  if (std::getenv("CCC_UPDATE_GOLDEN") != nullptr) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path << "; create it with CCC_UPDATE_GOLDEN=1";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "emitted text differs from " << path << "; refresh with CCC_UPDATE_GOLDEN=1 ctest -R EmitCuda";
}

EmittedKernel emit_shipped(const std::string& name, int n, const KernelOptions& o, bool with_source) {
  testing::Planned p = testing::plan_shipped(name, n, o.in_place);
  if (!p.planned) throw std::runtime_error(p.errors);
  return emit_cuda(lower(*p.planned, o), with_source ? &p.source : nullptr);
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

TEST(EmitCuda, KernelTextUsesOnlyThePrelude) {
  EmittedKernel k = emit_shipped("butterfly", 4, {}, true);
  for (const char* raw : {"threadIdx", "blockIdx", "blockDim", "__global__", "__syncthreads", "asm"})
    EXPECT_EQ(k.source.find(raw), std::string::npos) << raw;
}

}  // namespace
}  // namespace ccc
