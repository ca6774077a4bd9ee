// `ccc compile --emit cu|ptx|cubin` and the code-generation options.
#include <gtest/gtest.h>

#include <sstream>

#include "cli.h"
#include "front_end_util.h"

namespace ccc {
namespace {

struct CliResult {
  int code;
  std::string out, err;
};

CliResult run_cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = cli::run(args, out, err);
  return {code, out.str(), err.str()};
}

const std::string kRing = test::schedule_path("ring");

TEST(CliCodegen, EmitsCudaWithTheOptionsInTheName) {
  auto r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "cu", "--dtype", "bf16", "--op", "avg",
                    "--tile-bytes", "4096", "--channels", "8", "--pipeline", "3", "--in-place"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_NE(r.out.find("CCC_KERNEL(ccc_ring_n4_bf16_avg_t4096_c8_p3_ip, 512)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ccc::bf16, ccc::op_avg"), std::string::npos);
}

TEST(CliCodegen, DumpsTheKernelPlan) {
  auto r = run_cli({"compile", kRing, "--ranks", "3", "--emit", "cu", "--dump-after=lower"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_NE(r.err.find("kernel plan: allreduce ring"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("total: reads 6 (4 remote), writes 4"), std::string::npos) << r.err;
}

TEST(CliCodegen, PtxAndCubinThroughNvrtc) {
  auto ptx = run_cli({"compile", kRing, "--ranks", "2", "--emit", "ptx", "--arch", "sm_80"});
  ASSERT_EQ(ptx.code, cli::kExitOk) << ptx.err;
  EXPECT_NE(ptx.out.find(".target sm_80"), std::string::npos);
  auto cubin = run_cli({"compile", kRing, "--ranks", "2", "--emit", "cubin"});
  ASSERT_EQ(cubin.code, cli::kExitOk) << cubin.err;
  EXPECT_EQ(cubin.out.substr(0, 4), "\x7f" "ELF");
}

TEST(CliCodegen, BadOptionsAreUsageErrors) {
  for (std::vector<std::string> extra : {std::vector<std::string>{"--dtype", "f128"}, {"--op", "xor"}, {"--tile-bytes", "100"},
                                         {"--channels", "0"}, {"--pipeline", "x"}, {"--arch", "volta"}}) {
    std::vector<std::string> args = {"compile", kRing, "--ranks", "4", "--emit", "cu"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_cli(args);
    EXPECT_EQ(r.code, cli::kExitUsage) << extra[0];
    EXPECT_NE(r.err.find(extra[0]), std::string::npos) << r.err;
  }
}

TEST(CliCodegen, RootedCollectiveNamesItsRoot) {
  auto r = run_cli({"compile", test::schedule_path("ring_broadcast"), "--ranks", "4", "--root", "2", "--emit", "cu"});
  EXPECT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_NE(r.out.find("ccc_ring_broadcast_n4_root2_f32_sum_t65536_c4_p2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("// Buffers: count elements; only root 2's input is read."), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ccc
