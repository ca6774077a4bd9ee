#include <gtest/gtest.h>

#include <fmt/format.h>

#include "topology_detect.h"

using namespace ccc;

namespace {

DriverProbe probe(int n, const char* name, int major, int minor, bool peers) {
  DriverProbe p;
  for (int i = 0; i < n; ++i)
    p.devices.push_back({name, major, minor, 132, 2619000, 5120, fmt::format("0000:{:02x}:00.0", 0x10 + i)});
  p.can_access_peer.assign(static_cast<size_t>(n), std::vector<bool>(static_cast<size_t>(n), peers));
  return p;
}

TEST(TopologyDetect, NormalizesBusIds) {
  EXPECT_EQ(normalize_bus_id("00000000:1A:00.0"), "0000:1a:00.0");
  EXPECT_EQ(normalize_bus_id("0000:18:00.0"), "0000:18:00.0");
  EXPECT_EQ(normalize_bus_id("garbage"), "");
  EXPECT_EQ(normalize_bus_id("0000:18:00.0x"), "");
}

TEST(TopologyDetect, DgxH100FromNvmlLooksLikeTheShippedFile) {
  DriverProbe p = probe(8, "NVIDIA H100 80GB HBM3", 9, 0, true);
  NvlinkReport links(8, std::vector<NvlinkEnd>(18, NvlinkEnd{4, "0000:c0:00.0", true}));
  Topology t = topology_from_probe(p, links);
  EXPECT_EQ(validate_topology(t), "");
  ASSERT_EQ(t.ngpus(), 8);
  EXPECT_EQ(t.gpus[0].arch, 90);
  EXPECT_NEAR(t.gpus[0].memory_bandwidth, 3.352e12, 1e9);  // 2619 MHz DDR x 5120 bits
  EXPECT_EQ(t.gpus[0].max_channels, 32);
  ASSERT_EQ(t.switches.size(), 2u);
  EXPECT_EQ(t.switches[0].kind, FabricKind::NVSwitch);
  EXPECT_DOUBLE_EQ(t.switches[0].port.bandwidth, 450e9);  // 18 NVLink4 links of 25 GB/s
  EXPECT_EQ(t.switches[1].kind, FabricKind::PCIe);
  EXPECT_EQ(route(t, 0, 7)->via, Route::Via::Switch);
  EXPECT_EQ(t.switches[route(t, 0, 7)->index].kind, FabricKind::NVSwitch);
}

TEST(TopologyDetect, NvlinkRingGivesDirectLinksAndPcieDiagonals) {
  DriverProbe p = probe(4, "NVIDIA A100-SXM4-80GB", 8, 0, true);
  NvlinkReport links(4);
  for (int i = 0; i < 4; ++i)
    for (int side : {1, 3})
      for (int l = 0; l < 6; ++l) links[i].push_back({3, fmt::format("00000000:{:02X}:00.0", 0x10 + (i + side) % 4), false});
  Topology t = topology_from_probe(p, links);
  ASSERT_EQ(t.links.size(), 4u);
  EXPECT_EQ(t.links[0], (DirectLink{0, 1, FabricKind::NVLink, {150e9, 1e-6}}));
  EXPECT_EQ(t.links[1], (DirectLink{0, 3, FabricKind::NVLink, {150e9, 1e-6}}));
  ASSERT_EQ(t.switches.size(), 1u);
  EXPECT_EQ(t.switches[0].kind, FabricKind::PCIe);
  EXPECT_EQ(route(t, 0, 2)->via, Route::Via::Switch);
  EXPECT_EQ(route(t, 2, 3)->via, Route::Via::Link);
}

TEST(TopologyDetect, WithoutNvmlOnlyPeerAccessCounts) {
  Topology t = topology_from_probe(probe(4, "NVIDIA L40S", 8, 9, true), std::nullopt);
  EXPECT_TRUE(t.links.empty());
  ASSERT_EQ(t.switches.size(), 1u);
  EXPECT_EQ(t.switches[0].gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(validate_topology(t), "");

  Topology isolated = topology_from_probe(probe(2, "NVIDIA L40S", 8, 9, false), std::nullopt);
  EXPECT_EQ(validate_topology(isolated), "gpus 0 and 1 have no P2P path (no link and no shared switch)");
}

TEST(TopologyDetect, DetectedTopologyRoundTripsThroughTheFileFormat) {
  Topology t = topology_from_probe(probe(8, "NVIDIA H100 80GB HBM3", 9, 0, true),
                                   NvlinkReport(8, std::vector<NvlinkEnd>(18, NvlinkEnd{4, "", true})));
  SourceFile f{"detected.topo", format_topology(t)};
  Diagnostics d;
  auto again = parse_topology(f, d);
  ASSERT_TRUE(again) << d.render(&f) << f.text;
  EXPECT_EQ(format_topology(*again), f.text);
}

TEST(TopologyDetect, NvmlQueryFailsCleanlyForUnknownDevices) {
  // Without NVML (these machines) the library is missing; with NVML the bus id is unknown.
  // Either way: no report, and a reason.
  DriverProbe p = probe(1, "none", 9, 0, false);
  p.devices[0].pci_bus_id = "ffff:ff:1f.7";
  std::string why;
  EXPECT_FALSE(query_nvlinks(p, &why));
  EXPECT_FALSE(why.empty());
}

}  // namespace
