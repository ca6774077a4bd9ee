// What of the CUDA backend runs without a GPU: launch shapes, argument packing, no-driver errors.
#include <gtest/gtest.h>

#include "cuda_backend.h"

using namespace ccc;

TEST(CudaBackend, LaunchShapeIsChannelsPerRankOrOneGridOfVirtualRanks) {
  const CudaLaunchShape one = cuda_launch_shape(3, 8, 4, 512);
  EXPECT_EQ(one.grid, 4u);
  EXPECT_EQ(one.block, 512u);
  const CudaLaunchShape all = cuda_launch_shape(-1, 8, 4, 256);
  EXPECT_EQ(all.grid, 32u);
  EXPECT_EQ(all.block, 256u);
}

TEST(CudaBackend, KernelParamsPointAtTheArgsStruct) {
  ccc_rank_state table[2] = {};
  ccc_buffers own[2] = {};
  ccc_launch_args args{table, {}, own, 1000, -1, 5'000'000'000ULL, nullptr, {}, nullptr, 0};
  const std::vector<void*> params = cuda_kernel_params(args);
  ASSERT_EQ(params.size(), 1u);
  const auto* seen = static_cast<const ccc_launch_args*>(params[0]);
  EXPECT_EQ(seen->ranks, table);
  EXPECT_EQ(seen->virtual_own, own);
  EXPECT_EQ(seen->count, 1000u);
  EXPECT_EQ(seen->rank, -1);
  EXPECT_EQ(seen->timeout_ns, 5'000'000'000ULL);
  EXPECT_EQ(cuda_arch_name(9, 0), "sm_90");
}

TEST(CudaBackend, WithoutADriverConstructionReportsNoCudaDevice) {
  try {
    CudaDriver::get();
    GTEST_SKIP() << "a CUDA driver is present";
  } catch (const NoCudaDevice&) {
  }
  EXPECT_THROW(CudaRanks({0}, 8), NoCudaDevice);
}

TEST(CudaBackend, BufferChecksRefuseRangesPastTheAllocationAndUnmappableMemory) {
  EXPECT_EQ(cuda_buffer_problem(0x1000, 256, 0x1000, 4096, true, true), "");
  EXPECT_EQ(cuda_buffer_problem(0x1f00, 256, 0x1000, 4096, true, true), "");
  EXPECT_NE(cuda_buffer_problem(0x1f00, 257, 0x1000, 4096, true, true).find("run past the end"), std::string::npos);
  EXPECT_NE(cuda_buffer_problem(0x800, 16, 0x1000, 4096, true, true).find("run past the end"), std::string::npos);
  const std::string pool = cuda_buffer_problem(0x1000, 256, 0x1000, 4096, false, true);
  EXPECT_NE(pool.find("cudaMallocAsync"), std::string::npos) << pool;
  EXPECT_NE(pool.find("expandable_segments"), std::string::npos) << pool;
  EXPECT_EQ(cuda_buffer_problem(0x1000, 256, 0x1000, 4096, false, false), "") << "one device: no peer mapping needed";
}
