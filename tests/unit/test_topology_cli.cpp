#include <gtest/gtest.h>

#include <fstream>

#include "cli_util.h"

using namespace ccc;
using test::run_cli;

namespace {

const std::string kTopologies = std::string(CCC_SOURCE_DIR) + "/topologies/";

TEST(TopoCommand, PrintsASummaryAndAReloadableFile) {
  auto r = run_cli({"topo", "--file", kTopologies + "dgx-h100.topo"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "# topology dgx-h100: 8 GPUs\n"
            "#   gpu 0-7: H100-SXM5-80GB sm_90, memory 3350GB/s, 32 channels of 25GB/s\n"
            "#   nvswitch switch nvswitch over gpus 0-7: 450GB/s per port and direction, latency 0.8us\n"
            "name dgx-h100\n"
            "gpus 8 model=\"H100-SXM5-80GB\" arch=sm_90 memory=3350GB/s reduce=1600GB/s channel=25GB/s channels=32 launch=2.5us graph_launch=1.3us\n"
            "switch nvswitch kind=nvswitch gpus=0-7 bandwidth=450GB/s latency=0.8us\n");
  std::string saved = std::string(CCC_BINARY_DIR) + "/topo_roundtrip.topo";
  std::ofstream(saved) << r.out;
  auto again = run_cli({"topo", "--file", saved});
  EXPECT_EQ(again.out, r.out);
}

TEST(TopoCommand, BadFilesAndUsage) {
  std::string bad = std::string(CCC_BINARY_DIR) + "/bad.topo";
  std::ofstream(bad) << "gpus 2 arch=sm_80\nlink 0 2 bandwidth=1GB/s latency=1us\n";
  auto r = run_cli({"topo", "--file", bad});
  EXPECT_EQ(r.code, cli::kExitScheduleError);
  EXPECT_EQ(r.err, bad + ":2:8: error: a GPU index must be an integer in 0..1, got '2'\n"
                   "link 0 2 bandwidth=1GB/s latency=1us\n"
                   "       ^\n");
  EXPECT_EQ(run_cli({"topo", "--file", kTopologies + "dgx-a100.topo", "extra"}).code, cli::kExitUsage);
  EXPECT_EQ(run_cli({"topo", "--file", "/nonexistent.topo"}).code, cli::kExitScheduleError);
  // A stream without end is read one byte past the limit, not to the end of memory.
  r = run_cli({"topo", "--file", "/dev/zero"});
  EXPECT_EQ(r.code, cli::kExitScheduleError);
  EXPECT_EQ(r.err, "/dev/zero: error: the file is larger than 1048576 bytes (1 MiB), the limit for a topology\n");
}

TEST(TopoCommand, DetectsOrSaysWhyNot) {
  auto r = run_cli({"topo"});
  if (r.code == cli::kExitOk) {  // a machine with a driver
    EXPECT_EQ(r.out.rfind("# detected with the CUDA driver", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("\n# NVRTC 1"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.code, cli::kExitScheduleError);
    EXPECT_EQ(r.err.rfind("ccc topo: error: no CUDA device", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("give --file F"), std::string::npos) << r.err;
  }
  // Either way it says which NVRTC compiles the kernels, and from where.
  EXPECT_NE((r.out + r.err).find("NVRTC 1"), std::string::npos) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("libnvrtc.so"), std::string::npos) << r.out << r.err;
}

}  // namespace
