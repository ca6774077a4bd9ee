#include <chrono>

#include <gtest/gtest.h>

#include "topology.h"
#include "cost_model_util.h"

using namespace ccc;
using namespace ccc::test;

namespace {

std::string parse_errors(const std::string& text) {
  SourceFile f{"t.topo", text};
  Diagnostics d;
  auto t = parse_topology(f, d);
  EXPECT_EQ(t.has_value(), !d.has_errors());
  return d.render(&f);
}

const char* kGpus = "gpus 4 arch=sm_80 memory=1TB/s reduce=500GB/s channel=20GB/s channels=16\n";

TEST(Topology, ShippedDgxH100) {
  Topology t = shipped_topology("dgx-h100");
  ASSERT_EQ(t.ngpus(), 8);
  EXPECT_EQ(t.name, "dgx-h100");
  EXPECT_EQ(t.gpus[7].arch, 90);
  EXPECT_EQ(t.gpus[0].model, "H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(t.gpus[3].memory_bandwidth, 3350e9);
  EXPECT_EQ(t.gpus[3].max_channels, 32);
  ASSERT_EQ(t.switches.size(), 1u);
  EXPECT_EQ(t.switches[0].kind, FabricKind::NVSwitch);
  EXPECT_DOUBLE_EQ(t.switches[0].port.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(t.switches[0].port.latency, 0.8e-6);
  auto r = route(t, 2, 6);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->via, Route::Via::Switch);
}

TEST(Topology, EveryShippedFileParsesAndRoundTrips) {
  for (const char* name : {"dgx-a100", "dgx-h100", "pcie-4gpu", "nvlink-ring-4"}) {
    Topology t = shipped_topology(name);
    EXPECT_EQ(validate_topology(t), "") << name;
    std::string text = format_topology(t);
    SourceFile again{"again.topo", text};
    Diagnostics d;
    auto t2 = parse_topology(again, d);
    ASSERT_TRUE(t2) << d.render(&again);
    EXPECT_EQ(*t2, t) << name << ":\n" << text;
    EXPECT_EQ(format_topology(*t2), text);
  }
}

// Two nodes like dgx-h100.topo, joined by eight 50 GB/s NICs each.
TEST(Topology, NodesJoinedByNics) {
  const Topology two = test::shipped_topology("dgx-h100-2nodes");
  EXPECT_EQ(two.ngpus(), 8);
  EXPECT_EQ(two.network, (Network{2, 8, LinkSpec{50e9, 2e-6}}));
  EXPECT_NE(describe_topology(two).find("2 nodes like this one, 8 NICs each: 50GB/s per NIC and direction, latency 2us"),
            std::string::npos)
      << describe_topology(two);
  EXPECT_NE(format_topology(two).find("nodes 2 nics=8 bandwidth=50GB/s latency=2us\n"), std::string::npos);
  EXPECT_EQ(test::shipped_topology("dgx-h100").network, Network{});
}

TEST(Topology, RingPrefersNvlinkNeighboursAndFallsBackToPcie) {
  Topology t = shipped_topology("nvlink-ring-4");
  auto near = route(t, 3, 0);
  auto far = route(t, 0, 2);
  ASSERT_TRUE(near && far);
  EXPECT_EQ(near->via, Route::Via::Link);
  EXPECT_DOUBLE_EQ(near->spec.bandwidth, 150e9);
  EXPECT_EQ(far->via, Route::Via::Switch);
  EXPECT_EQ(t.switches[far->index].kind, FabricKind::PCIe);
  EXPECT_EQ(route(t, 1, 1)->via, Route::Via::Local);
}

TEST(Topology, FormatAndDescribe) {
  Topology t = shipped_topology("nvlink-ring-4");
  EXPECT_EQ(format_topology(t),
            "name nvlink-ring-4\n"
            "gpus 4 model=\"A100-SXM4-80GB\" arch=sm_80 memory=2039GB/s reduce=1000GB/s channel=20GB/s channels=32 "
            "launch=2.5us\n"
            "link 0 1 kind=nvlink bandwidth=150GB/s latency=1us\n"
            "link 1 2 kind=nvlink bandwidth=150GB/s latency=1us\n"
            "link 2 3 kind=nvlink bandwidth=150GB/s latency=1us\n"
            "link 3 0 kind=nvlink bandwidth=150GB/s latency=1us\n"
            "switch pcie kind=pcie gpus=0-3 bandwidth=24GB/s latency=2.5us\n");
  EXPECT_EQ(describe_topology(shipped_topology("dgx-a100")),
            "topology dgx-a100: 8 GPUs\n"
            "  gpu 0-7: A100-SXM4-80GB sm_80, memory 2039GB/s, 32 channels of 20GB/s\n"
            "  nvswitch switch nvswitch over gpus 0-7: 300GB/s per port and direction, latency 1us\n");
}

TEST(Topology, PerGpuOverridesAndUnits) {
  SourceFile f{"t.topo", std::string(kGpus) +
                             "gpu 2 model=\"odd one\" memory=2000MB/s channels=4   # slower\n"
                             "switch s kind=pcie gpus=0,1-3 bandwidth=1GiB/s latency=500ns\n"};
  Diagnostics d;
  auto t = parse_topology(f, d);
  ASSERT_TRUE(t) << d.render(&f);
  EXPECT_EQ(t->gpus[2].model, "odd one");
  EXPECT_DOUBLE_EQ(t->gpus[2].memory_bandwidth, 2e9);
  EXPECT_EQ(t->gpus[2].max_channels, 4);
  EXPECT_EQ(t->gpus[2].arch, 80);
  EXPECT_DOUBLE_EQ(t->gpus[1].memory_bandwidth, 1e12);
  EXPECT_DOUBLE_EQ(t->switches[0].port.bandwidth, 1073741824.0);
  EXPECT_DOUBLE_EQ(t->switches[0].port.latency, 500e-9);
  EXPECT_EQ(t->switches[0].gpus, (std::vector<int>{0, 1, 2, 3}));
}

struct BadCase {
  std::string text;
  std::string error;  // the first line of the rendered diagnostics
};

class BadTopology : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadTopology, ReportsFileLineAndColumn) {
  std::string out = parse_errors(GetParam().text);
  EXPECT_EQ(out.substr(0, out.find('\n')), GetParam().error) << out;
}

const std::string kSw = std::string(kGpus) + "switch s kind=nvswitch gpus=0-3 bandwidth=100GB/s latency=1us\n";

INSTANTIATE_TEST_SUITE_P(
    Errors, BadTopology,
    ::testing::Values(
        BadCase{"", "t.topo: error: no 'gpus COUNT ...' line"},
        BadCase{"# only a comment\n\n", "t.topo: error: no 'gpus COUNT ...' line"},
        BadCase{"gpu 0 arch=sm_80\n", "t.topo:1:5: error: GPU indices need a 'gpus COUNT' line first"},
        BadCase{"frobnicate 3\n", "t.topo:1:1: error: unknown directive 'frobnicate' (expected name, gpus, gpu, link, switch or nodes)"},
        BadCase{"gpus 0\n", "t.topo:1:6: error: the GPU count must be an integer in 1..4096, got '0'"},
        BadCase{"gpus 99999\n", "t.topo:1:6: error: the GPU count must be an integer in 1..4096, got '99999'"},
        BadCase{"gpus 4 arch=sm_80 memory=1TB/s reduce=500GB/s channel=20GB/s\n",
                "t.topo:1:1: error: gpu 0 has no channels= (set it on 'gpus' or on 'gpu 0')"},
        BadCase{"gpus 4 arch=80\n", "t.topo:1:13: error: arch must look like sm_90, got '80'"},
        BadCase{"gpus 4 memory=450\n", "t.topo:1:18: error: memory '450' needs a unit (TB/s, GB/s, MB/s, GiB/s, MiB/s)"},
        BadCase{"gpus 4 memory=-4GB/s\n", "t.topo:1:15: error: memory must be a positive number with a unit, got '-4GB/s'"},
        BadCase{"gpus 4 memory=nanGB/s\n", "t.topo:1:15: error: memory must be a positive number with a unit, got 'nanGB/s'"},
        BadCase{"gpus 4 colour=red\n",
                "t.topo:1:8: error: unknown key 'colour' for 'gpus' (expected arch, channel, channels, graph_launch, launch, memory, model, reduce)"},
        BadCase{"gpus 4 arch=sm_80 arch=sm_90\n", "t.topo:1:19: error: duplicate key 'arch'"},
        BadCase{"gpus 4 arch\n", "t.topo:1:8: error: expected KEY=VALUE, got 'arch'"},
        BadCase{"gpus 4 model=\"open\n", "t.topo:1:14: error: unterminated string"},
        BadCase{"gpus 2\ngpus 2\n", "t.topo:2:1: error: 'gpus' given twice (first on line 1)"},
        BadCase{kSw + "link 0 4 bandwidth=1GB/s latency=1us\n",
                "t.topo:3:8: error: a GPU index must be an integer in 0..3, got '4'"},
        BadCase{kSw + "link 1 1 bandwidth=1GB/s latency=1us\n",
                "t.topo:3:8: error: a link needs two different GPUs, got 1 twice"},
        BadCase{kSw + "link 0 1 bandwidth=1GB/s\n", "t.topo:3:1: error: 'link' needs latency="},
        BadCase{kSw + "link 0 1 bandwidth=1GB/s latency=1us\nlink 1 0 bandwidth=1GB/s latency=1us\n",
                "t.topo:4:1: error: GPUs 1 and 0 are linked twice (describe one bundle)"},
        BadCase{kSw + "link 0 1 kind=nvswitch bandwidth=1GB/s latency=1us\n",
                "t.topo:3:15: error: kind must be one of nvlink, pcie, got 'nvswitch'"},
        BadCase{kSw + "link 0 1 bandwidth=1GB/s latency=fast\n",
                "t.topo:3:34: error: latency must be a non-negative number with a unit, got 'fast'"},
        BadCase{std::string(kGpus) + "switch s kind=pcie gpus=0-1 bandwidth=1GB/s latency=1us\n",
                "t.topo:1:1: error: gpus 0 and 2 have no P2P path (no link and no shared switch)"},
        BadCase{std::string(kGpus) + "switch s kind=pcie gpus=3-1 bandwidth=1GB/s latency=1us\n",
                "t.topo:2:25: error: empty GPU range '3-1'"},
        BadCase{std::string(kGpus) + "switch s kind=pcie gpus=0,2,2 bandwidth=1GB/s latency=1us\n",
                "t.topo:2:29: error: GPU 2 listed twice"},
        BadCase{std::string(kGpus) + "switch s kind=pcie gpus=1 bandwidth=1GB/s latency=1us\n",
                "t.topo:2:25: error: a switch needs at least two GPUs"},
        BadCase{std::string(kGpus) + "switch s kind=pcie bandwidth=1GB/s latency=1us\n",
                "t.topo:2:1: error: 'switch' needs gpus="},
        // Finite as written, not once scaled to bytes/s or seconds (docs/topology.md).
        BadCase{"gpus 4 memory=1e300TB/s\n",
                "t.topo:1:15: error: memory '1e300TB/s' is out of range: it is infinite in bytes/s"},
        BadCase{kSw + "link 0 1 bandwidth=1GB/s latency=1e-320ns\n",
                "t.topo:3:34: error: latency '1e-320ns' is out of range: it is 0 in seconds"},
        BadCase{kSw + "nodes 2 nics=1 bandwidth=1GB/s latency=1us\nnodes 2 nics=1 bandwidth=1GB/s latency=1us\n",
                "t.topo:4:1: error: 'nodes' given twice (first on line 3)"},
        BadCase{kSw + "nodes 2 bandwidth=1GB/s latency=1us\n", "t.topo:3:1: error: 'nodes' needs nics="},
        BadCase{kSw + "nodes 2 nics=0 bandwidth=1GB/s latency=1us\n",
                "t.topo:3:14: error: nics must be an integer in 1..64, got '0'"},
        BadCase{kSw + "nodes 0 nics=1 bandwidth=1GB/s latency=1us\n",
                "t.topo:3:7: error: the node count must be an integer in 1..4096, got '0'"},
        BadCase{"\x01\x02\xff\n",
                "t.topo:1:1: error: unknown directive '?\?\?' (expected name, gpus, gpu, link, switch or nodes)"}));

TEST(Topology, EveryBadLineIsReportedNotJustTheFirst) {
  std::string out = parse_errors("gpus 2 arch=sm_80\nbogus\nlink 0 0 bandwidth=1GB/s latency=1us\n");
  EXPECT_NE(out.find("t.topo:2:1: error: unknown directive 'bogus'"), std::string::npos) << out;
  EXPECT_NE(out.find("t.topo:3:8: error: a link needs two different GPUs"), std::string::npos) << out;
}

TEST(Topology, LoadReportsAMissingFile) {
  std::string errors;
  EXPECT_FALSE(load_topology("/nonexistent/x.topo", errors));
  EXPECT_EQ(errors, "/nonexistent/x.topo: error: cannot read topology file: No such file or directory\n");
  EXPECT_FALSE(load_topology(CCC_SOURCE_DIR "/topologies", errors));  // a directory
  EXPECT_NE(errors.find("cannot read topology file"), std::string::npos) << errors;
}

TEST(Topology, FilesOver1MiBAreRefused) {
  EXPECT_EQ(parse_errors(std::string((1 << 20) + 1, '#')),
            "t.topo: error: the file is larger than 1048576 bytes (1 MiB), the limit for a topology\n");
}

TEST(Topology, LoadReadsNoMoreThanTheLimit) {
  // /dev/zero never ends: the reader stops one byte past 1 MiB and the parser refuses that.
  std::string errors;
  EXPECT_FALSE(load_topology("/dev/zero", errors));
  EXPECT_EQ(errors, "/dev/zero: error: the file is larger than 1048576 bytes (1 MiB), the limit for a topology\n");
}

TEST(Topology, A1MiBFileOfFullSwitchLinesParsesQuickly) {
  // Each line lists all 4096 GPUs; finding duplicates by searching the list was quadratic (67 s).
  std::string text = "gpus 4096 arch=sm_90 memory=1TB/s reduce=1TB/s channel=1GB/s channels=1\n";
  const std::string line = "switch s kind=nvswitch gpus=0-4095 bandwidth=1GB/s latency=1us\n";
  while (text.size() + line.size() <= (1 << 20)) text += line;
  SourceFile f{"big.topo", text};
  Diagnostics d;
  const auto start = std::chrono::steady_clock::now();
  auto t = parse_topology(f, d);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(t) << d.render(&f);
  EXPECT_GT(t->switches.size(), 10000u);
  EXPECT_LT(seconds, 30.0);  // seconds even under sanitizers; the quadratic check took a minute optimised
}

TEST(Topology, TheLargestFileParsesQuickly) {
  SourceFile f{"big.topo",
               "gpus 4096 arch=sm_90 memory=1TB/s reduce=1TB/s channel=1GB/s channels=1\n"
               "switch s kind=nvswitch gpus=0-4095 bandwidth=1GB/s latency=1us\n"};
  Diagnostics d;
  auto t = parse_topology(f, d);
  ASSERT_TRUE(t) << d.render(&f);
  EXPECT_EQ(t->ngpus(), 4096);
}
}  // namespace

namespace {

// Calibration files: the topology's words and units, three directives, each at most once.
std::string calibration_errors(const std::string& text) {
  SourceFile f{"c.cal", text};
  Diagnostics d;
  auto c = parse_calibration(f, d);
  EXPECT_EQ(c.has_value(), !d.has_errors());
  return d.render(&f);
}

TEST(Calibration, ParsesFormatsAndReadsBack) {
  SourceFile f{"c.cal", "# measured\ncalibration device=\"NVIDIA H200\"\ngpus launch=3.5us graph_launch=1200ns "
                        "memory=4TB/s reduce=2000GB/s\nfabric latency=900ns\n"};
  Diagnostics d;
  std::optional<Calibration> c = parse_calibration(f, d);
  ASSERT_TRUE(c) << d.render(&f);
  EXPECT_EQ(c->device, "NVIDIA H200");
  EXPECT_DOUBLE_EQ(*c->launch, 3.5e-6);
  EXPECT_DOUBLE_EQ(*c->graph_launch, 1.2e-6);
  EXPECT_DOUBLE_EQ(*c->memory_bandwidth, 4e12);
  EXPECT_DOUBLE_EQ(*c->reduce_bandwidth, 2e12);
  EXPECT_FALSE(c->channel_bandwidth);
  EXPECT_DOUBLE_EQ(*c->latency, 9e-7);
  EXPECT_FALSE(c->bandwidth);
  SourceFile again{"again.cal", format_calibration(*c)};
  std::optional<Calibration> read_back = parse_calibration(again, d);
  ASSERT_TRUE(read_back) << d.render(&again);
  EXPECT_EQ(format_calibration(*read_back), again.text);
  EXPECT_EQ(again.text, "calibration device=\"NVIDIA H200\"\ngpus launch=3.5us graph_launch=1.2us memory=4000GB/s "
                        "reduce=2000GB/s\nfabric latency=0.9us\n");
  EXPECT_EQ(format_calibration(Calibration{}), "");
}

TEST(Calibration, ReplacesOnlyTheConstantsItHas) {
  const Topology before = shipped_topology("dgx-h100");
  Topology t = before;
  Calibration c;
  c.launch = 7e-6;
  c.latency = 2e-6;
  apply_calibration(t, c);
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    EXPECT_DOUBLE_EQ(t.gpus[i].launch, 7e-6);
    EXPECT_EQ(t.gpus[i].memory_bandwidth, before.gpus[i].memory_bandwidth);
  }
  ASSERT_FALSE(t.switches.empty());
  for (size_t i = 0; i < t.switches.size(); ++i) {
    EXPECT_DOUBLE_EQ(t.switches[i].port.latency, 2e-6);
    EXPECT_EQ(t.switches[i].port.bandwidth, before.switches[i].port.bandwidth);
  }
  apply_calibration(t, Calibration{});
  EXPECT_DOUBLE_EQ(t.gpus[0].launch, 7e-6) << "an empty calibration changes nothing";
}

// A graph replay's launch is its own constant: a topology or calibration may give it, and
// pricing graph replays (ccc tune --graph) puts it in place of the eager launch.
TEST(Calibration, GraphLaunchPricesReplaysAndRoundTrips) {
  ASSERT_TRUE(shipped_topology("dgx-h100").gpus[0].graph_launch) << "derived from vLLM's graph-mode one-shot";
  EXPECT_DOUBLE_EQ(*shipped_topology("dgx-h100").gpus[0].graph_launch, 1.3e-6);
  Topology t = shipped_topology("dgx-a100");
  ASSERT_FALSE(t.gpus[0].graph_launch) << "no published graph-mode anchor for A100";
  Topology unchanged = t;
  price_graph_replays(unchanged);
  EXPECT_EQ(unchanged, t) << "without graph_launch a replay costs the launch";
  Calibration c;
  c.graph_launch = 1.5e-6;
  apply_calibration(t, c);
  EXPECT_DOUBLE_EQ(t.gpus[0].launch, kDefaultKernelLaunch);
  SourceFile text{"t.topo", format_topology(t)};
  EXPECT_NE(text.text.find(" graph_launch=1.5us"), std::string::npos) << text.text;
  Diagnostics d;
  std::optional<Topology> back = parse_topology(text, d);
  ASSERT_TRUE(back) << d.render(&text);
  EXPECT_EQ(*back, t);
  price_graph_replays(t);
  for (const Gpu& g : t.gpus) EXPECT_DOUBLE_EQ(g.launch, 1.5e-6);
}

TEST(Calibration, BadLinesReportFileLineAndColumn) {
  EXPECT_EQ(calibration_errors("gpus launch=2us\nname x\n"),
            "c.cal:2:1: error: unknown directive 'name' in a calibration file (expected calibration, gpus or fabric)\n"
            "name x\n^\n");
  EXPECT_EQ(calibration_errors("gpus launch=2us\ngpus memory=1TB/s\n").rfind("c.cal:2:1: error: 'gpus' given twice\n", 0), 0u);
  EXPECT_EQ(calibration_errors("fabric latency=0us\n")
                .rfind("c.cal:1:16: error: latency must be a positive number with a unit, got '0us'\n", 0),
            0u);
  EXPECT_NE(calibration_errors("gpus arch=sm_90\n").find("c.cal:1:6: error: unknown key 'arch' for 'gpus' (expected channel, "
                                                          "graph_launch, launch, memory, reduce)"),
            std::string::npos);
  EXPECT_NE(calibration_errors("fabric bandwidth=450\n").find("c.cal:1:21: error: bandwidth '450' needs a unit"),
            std::string::npos);
  std::string errors;
  EXPECT_FALSE(load_calibration("/nonexistent/x.cal", errors));
  EXPECT_EQ(errors, "/nonexistent/x.cal: error: cannot read calibration file: No such file or directory\n");
}

}  // namespace
