#include <gtest/gtest.h>

#include <fmt/format.h>

#include "cuda_topology.h"
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
  EXPECT_DOUBLE_EQ(t.switches[0].port.latency, 0.8e-6);   // H100's, as dgx-h100.topo
  EXPECT_EQ(t.gpus[0].graph_launch, 1.3e-6);
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

// Ranks on one device (processes sharing a GPU): each gets its share of the device, and the
// ranks of a device are joined by its memory, which is faster than any fabric between devices.
TEST(TopologyDetect, RanksOnOneDeviceShareItAndAreJoinedByItsMemory) {
  DriverProbe p = probe(4, "NVIDIA H100 80GB HBM3", 9, 0, true);
  p.devices[1].pci_bus_id = p.devices[0].pci_bus_id;
  p.devices[3].pci_bus_id = "00000000:12:00.0";  // rank 2's device, its id as NVML writes it
  const Topology t = topology_from_probe(p, std::nullopt);
  EXPECT_EQ(validate_topology(t), "");
  EXPECT_NEAR(t.gpus[0].memory_bandwidth, 3.352e12 / 2, 1e9);
  EXPECT_EQ(t.gpus[0].max_channels, 32);  // 66 SMs each, at most 32 channels
  ASSERT_EQ(t.switches.size(), 3u);
  EXPECT_EQ(t.switches[0], (Switch{"memory", FabricKind::Memory, {t.gpus[0].memory_bandwidth, 250e-9}, {0, 1}}));
  EXPECT_EQ(t.switches[1].name, "memory1");
  EXPECT_EQ(t.switches[1].gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(t.switches[2].kind, FabricKind::PCIe);
  EXPECT_EQ(t.switches[route(t, 0, 1)->index].kind, FabricKind::Memory);
  EXPECT_EQ(t.switches[route(t, 1, 2)->index].kind, FabricKind::PCIe);
}

// A rank whose bus id is unknown is a device of its own: never one shared with another such rank.
TEST(TopologyDetect, RanksWithoutABusIdShareNothing) {
  DriverProbe p = probe(2, "NVIDIA H100 80GB HBM3", 9, 0, true);
  for (DriverDevice& d : p.devices) d.pci_bus_id = "";
  const Topology t = topology_from_probe(p, NvlinkReport(2, std::vector<NvlinkEnd>(1, NvlinkEnd{4, "", false})));
  EXPECT_NEAR(t.gpus[0].memory_bandwidth, 3.352e12, 1e9);
  ASSERT_EQ(t.switches.size(), 1u);
  EXPECT_EQ(t.switches[0].kind, FabricKind::PCIe);
  EXPECT_TRUE(t.links.empty()) << "an NVLink to an unknown far end joins nothing";
}

// Virtual ranks: N ranks on one device, joined by its memory alone.
TEST(TopologyDetect, VirtualRanksSplitOneDevice) {
  DriverProbe p = probe(8, "NVIDIA H100 80GB HBM3", 9, 0, false);
  for (DriverDevice& d : p.devices) d.pci_bus_id = p.devices[0].pci_bus_id;
  const Topology t = topology_from_probe(p, std::nullopt);
  EXPECT_EQ(validate_topology(t), "");
  EXPECT_EQ(t.gpus[7].max_channels, 132 / 8);
  ASSERT_EQ(t.switches.size(), 1u);
  EXPECT_EQ(t.switches[0].gpus.size(), 8u);
  EXPECT_NEAR(t.switches[0].port.bandwidth, 3.352e12 / 8, 1e9);
  SourceFile f{"virtual.topo", format_topology(t)};
  Diagnostics d;
  auto again = parse_topology(f, d);  // kind=memory reads back
  ASSERT_TRUE(again) << d.render(&f) << f.text;
  EXPECT_EQ(format_topology(*again), f.text);
}

// What a multi-process rank sends its peers about its device comes back as it was, names cut at
// their field, and "NVML said nothing" apart from "no NVLinks".
TEST(TopologyDetect, RankDevicesCrossTheWireIntact) {
  RankDevice d{{"NVIDIA H100 80GB HBM3", 9, 0, 132, 2619000, 5120, "0000:18:00.0"},
               std::vector<NvlinkEnd>{{4, "0000:c0:00.0", true}, {3, "0000:19:00.0", false}}};
  const std::vector<std::byte> bytes = encode_rank_device(d);
  ASSERT_EQ(bytes.size(), kRankDeviceBytes);
  RankDevice back = decode_rank_device(std::span<const std::byte, kRankDeviceBytes>(bytes.data(), kRankDeviceBytes));
  EXPECT_EQ(back.device.name, d.device.name);
  EXPECT_EQ(back.device.pci_bus_id, d.device.pci_bus_id);
  EXPECT_EQ(back.device.memory_clock_khz, 2619000);
  ASSERT_TRUE(back.nvlinks);
  ASSERT_EQ(back.nvlinks->size(), 2u);
  EXPECT_EQ((*back.nvlinks)[1].remote_bus_id, "0000:19:00.0");
  EXPECT_FALSE((*back.nvlinks)[1].remote_is_switch);
  EXPECT_TRUE((*back.nvlinks)[0].remote_is_switch);

  d.device.name = std::string(300, 'x');
  d.nvlinks = std::nullopt;
  back = decode_rank_device(std::span<const std::byte, kRankDeviceBytes>(encode_rank_device(d).data(), kRankDeviceBytes));
  EXPECT_EQ(back.device.name, std::string(127, 'x'));
  EXPECT_FALSE(back.nvlinks);
  d.nvlinks.emplace();
  back = decode_rank_device(std::span<const std::byte, kRankDeviceBytes>(encode_rank_device(d).data(), kRankDeviceBytes));
  ASSERT_TRUE(back.nvlinks);
  EXPECT_TRUE(back.nvlinks->empty());
}

}  // namespace
