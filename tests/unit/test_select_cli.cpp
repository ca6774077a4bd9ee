#include <gtest/gtest.h>

#include <filesystem>

#include "cli_util.h"

using namespace ccc;
using test::run_cli;

namespace {

const std::string kTopologies = std::string(CCC_SOURCE_DIR) + "/topologies/";
const std::string kSchedules = std::string(CCC_SOURCE_DIR) + "/schedules";

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

TEST(TuneCommand, OneRowPerSizeWithTheSizeFirst) {
  auto r = run_cli({"tune", "--topo", kTopologies + "dgx-h100.topo", "--schedules", kSchedules});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  std::vector<std::string> rows;
  for (const std::string& line : lines(r.out))
    if (!line.empty() && line[0] != '#' && line.find("bytes") == std::string::npos) rows.push_back(line);
  ASSERT_EQ(rows.size(), 28u) << r.out;
  EXPECT_EQ(rows.front().substr(0, 12), "           8");
  EXPECT_EQ(rows.back().substr(0, 12), "  1073741824");
  EXPECT_NE(r.out.find("# dgx-h100: 8 ranks of H100-SXM5-80GB, allreduce f32"), std::string::npos) << r.out;
}

TEST(TuneCommand, AlgoForcesTheChoice) {
  auto r = run_cli({"tune", "--topo", kTopologies + "dgx-h100.topo", "--schedules", kSchedules, "--algo", "ring"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  int forced = 0;
  for (const std::string& line : lines(r.out))
    forced += line.find("  ring channels=") != std::string::npos && line.find("(forced)") != std::string::npos;
  EXPECT_EQ(forced, 28) << r.out;
  r = run_cli({"tune", "--topo", kTopologies + "dgx-h100.topo", "--schedules", kSchedules, "--algo", "nope"});
  EXPECT_EQ(r.code, cli::kExitScheduleError);
  EXPECT_NE(r.err.find("ccc tune: error: CCC_ALGO=nope: no such allreduce schedule"), std::string::npos) << r.err;
}

TEST(TuneCommand, UsageErrors) {
  std::string topo = kTopologies + "pcie-4gpu.topo";
  EXPECT_EQ(run_cli({"tune"}).code, cli::kExitUsage);
  EXPECT_EQ(run_cli({"tune", "--topo", topo, "--ranks", "5"}).code, cli::kExitUsage);  // 4 GPUs
  EXPECT_EQ(run_cli({"tune", "--topo", topo, "--dtype", "f128"}).code, cli::kExitUsage);
  EXPECT_EQ(run_cli({"tune", "--topo", topo, "--collective", "alltoall"}).code, cli::kExitUsage);
  std::string empty = std::string(CCC_BINARY_DIR) + "/no_schedules";
  std::filesystem::create_directories(empty);
  auto none = run_cli({"tune", "--topo", topo, "--schedules", empty});
  EXPECT_EQ(none.code, cli::kExitScheduleError);
  EXPECT_NE(none.err.find("no candidate schedule implements allreduce"), std::string::npos) << none.err;
}

}  // namespace
