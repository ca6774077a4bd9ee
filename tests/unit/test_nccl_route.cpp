// libccc-nccl's routing (nccl/route.h) and the NCCL model it routes by (nccl_model.h). The
// library's calls themselves run in tests/nccl (processes over a stand-in NCCL).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "cost_model_util.h"
#include "hierarchy_model.h"
#include "schedule_menu.h"
#include "shipped_schedules.h"
#include "nccl_model.h"
#include "route.h"
#include "shim_comm.h"

namespace ccc {
namespace {

using nccl::RoutePolicy;
using nccl::Side;

TEST(NcclRoute, APolicyIsADefaultSideThenPerCollectiveSides) {
  EXPECT_EQ(RoutePolicy::parse("auto").canonical(),
            "allreduce=auto,reduce_scatter=auto,allgather=auto,broadcast=auto,reduce=auto,alltoall=auto");
  const RoutePolicy nccl_only = RoutePolicy::parse("nccl");
  EXPECT_FALSE(nccl_only.uses_ccc());
  const RoutePolicy mixed = RoutePolicy::parse("nccl,allreduce=ccc,alltoall=auto");
  EXPECT_TRUE(mixed.uses_ccc());
  EXPECT_EQ(mixed.side(Collective::AllReduce), Side::Ccc);
  EXPECT_EQ(mixed.side(Collective::AllToAll), Side::Auto);
  EXPECT_EQ(mixed.side(Collective::AllGather), Side::Nccl);
  // A later default does not undo a collective's own side.
  EXPECT_EQ(RoutePolicy::parse("allgather=ccc,nccl").side(Collective::AllGather), Side::Ccc);
}

TEST(NcclRoute, ABadPolicyIsRefusedNamingWhatIsWrong) {
  auto message = [](const std::string& text) {
    try {
      RoutePolicy::parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("fast"), "CCC_NCCL_ROUTE=\"fast\": \"fast\" is not a side (nccl, ccc or auto)");
  EXPECT_EQ(message("allreduce=maybe"),
            "CCC_NCCL_ROUTE=\"allreduce=maybe\": \"allreduce=maybe\" is not a side (nccl, ccc or auto) after the '='");
  EXPECT_NE(message("gather=ccc").find("\"gather\" is not a collective"), std::string::npos);
  EXPECT_NE(message("").find("is not a side"), std::string::npos);
}

TEST(NcclRoute, AutoTakesCccWhereItIsPredictedFasterAndFits) {
  const uint64_t arena = 64 << 20;
  EXPECT_FALSE(nccl::decide(Side::Nccl, 8, 1e-6, 9e-6, arena).to_ccc);
  EXPECT_TRUE(nccl::decide(Side::Ccc, 8, 9e-6, 1e-6, arena).to_ccc);
  EXPECT_TRUE(nccl::decide(Side::Auto, 8, 7e-6, 13e-6, arena).to_ccc);
  const nccl::RouteDecision slower = nccl::decide(Side::Auto, 8, 13e-6, 7e-6, arena);
  EXPECT_FALSE(slower.to_ccc);
  EXPECT_EQ(slower.why, "predicted ccc 13.00 us, NCCL 7.00 us");
  EXPECT_EQ(nccl::decide(Side::Auto, 8, 0, 0, arena).why, "no topology to predict by (set CCC_TOPO)");
  EXPECT_EQ(nccl::decide(Side::Auto, 8, 5e-6, 0, arena).why, "NCCL's tuning model does not price it");
  // Send and receive staged beside the scratch: a quarter of the arena each at most.
  EXPECT_TRUE(nccl::decide(Side::Auto, 16 << 20, 1e-6, 2e-6, arena).to_ccc);
  const nccl::RouteDecision big = nccl::decide(Side::Auto, (16 << 20) + 1, 1e-6, 2e-6, arena);
  EXPECT_FALSE(big.to_ccc);
  EXPECT_EQ(big.why, "too large to stage in ccc's arena of 64 MiB");
}

// NCCL's tuning model (tuning.cc's ring constants) on an NVSwitch machine: LL's latency and capped
// bandwidth for a small allreduce, Simple's bandwidth for a large one.
TEST(NcclModel, TheRingOfNcclsTuningModelOnDgxH100) {
  const Topology dgx = test::shipped_topology("dgx-h100");
  const double launch = 2.5e-6, bus = 450e9, ll_max = 87.7e9;
  const int n = 8, steps = 2 * (n - 1);
  const double ll = launch + (6.6 + steps * 0.6) * 1e-6 + 8 / (std::min(ll_max, bus / 4) * n / steps);
  EXPECT_NEAR(nccl_predicted_seconds(Collective::AllReduce, 8, n, dgx), ll, 1e-12);
  const double big = 256.0 * (1 << 20);
  const double simple = launch + (8.4 + steps * 3.4) * 1e-6 + big / (bus * n / steps);
  EXPECT_NEAR(nccl_predicted_seconds(Collective::AllReduce, static_cast<int64_t>(big), n, dgx), simple, 1e-12);
  // An all-gather takes N-1 steps, and LL a third of the bus (capped).
  const double gather = launch + (6.6 + (n - 1) * 0.6) * 1e-6 + 64 / (std::min(ll_max, bus / 3) * n / (n - 1));
  EXPECT_NEAR(nccl_predicted_seconds(Collective::AllGather, 64, n, dgx), gather, 1e-12);
  // A broadcast pipelines down the ring: one hop of latency, N steps of bandwidth.
  const double broadcast = launch + (6.6 + 0.6) * 1e-6 + 4 / (std::min(ll_max, bus / 3) * n / n);
  EXPECT_NEAR(nccl_predicted_seconds(Collective::Broadcast, 4, n, dgx), broadcast, 1e-12);
  EXPECT_EQ(nccl_predicted_seconds(Collective::AllToAll, 8, n, dgx), 0) << "NCCL's model has no all-to-all";
  EXPECT_EQ(nccl_predicted_seconds(Collective::AllReduce, 8, 1, dgx), 0);
  EXPECT_EQ(nccl_predicted_seconds(Collective::AllReduce, 8, 9, dgx), 0);
}

// Across two DGX H100: the ring's network steps pay NCCL's network latency and the NIC's, the
// others NCCL's host overhead per step (1 us, above NVLink's 0.6); the eight NICs (400 GB/s)
// bound the bus below NVLink's 450, and LL is capped at 39 GB/s.
TEST(NcclModel, TheRingAcrossNodesPaysTheNetwork) {
  const Topology two = test::shipped_topology("dgx-h100-2nodes");
  const int n = 16, steps = 2 * (n - 1), network_steps = 4;
  const double ll = 2.5e-6 + (6.6 + (steps - network_steps) * 1.0 + network_steps * (2.7 + 2.0)) * 1e-6 +
                    8 / (39e9 * n / steps);
  EXPECT_NEAR(nccl_predicted_seconds(Collective::AllReduce, 8, n, two), ll, 1e-12);
  const double big = 1 << 30;
  const double simple = 2.5e-6 + (8.4 + (steps - network_steps) * 3.4 + network_steps * (14.0 + 2 * 2.0)) * 1e-6 +
                        big / (400e9 * n / steps);
  EXPECT_NEAR(nccl_predicted_seconds(Collective::AllReduce, 1 << 30, n, two), simple, 1e-12);
  EXPECT_EQ(nccl_predicted_seconds(Collective::AllReduce, 8, 8, two), 0) << "every rank of both nodes, or none";
}

// ccc's hierarchy against NCCL's ring on the two multi-node files: on DGX H100 it wins small
// allreduces (two network steps instead of NCCL's four, and ccc's kernels in the nodes) and loses
// large ones (each rank's block crosses one NIC of 50 GB/s, NCCL's ring all eight); on the PCIe
// pair, whose four GPUs share one NIC, NCCL's ring wins throughout.
TEST(NcclModel, HierarchyWinsSmallAllreducesAcrossDgxH100s) {
  std::vector<SourceFile> sources;
  for (const ShippedSchedule& s : shipped_schedules()) sources.push_back(s.file);
  for (const char* name : {"dgx-h100-2nodes", "pcie-2nodes"}) {
    const Topology topo = test::shipped_topology(name);
    const ScheduleMenu rs(Collective::ReduceScatter, topo.ngpus(), sources);
    const ScheduleMenu ag(Collective::AllGather, topo.ngpus(), sources);
    const std::vector<HierarchyRow> rows = hierarchy_table(4, topo, rs.candidates(), ag.candidates());
    ASSERT_FALSE(rows.empty());
    EXPECT_EQ(rows.back().bytes, int64_t{1} << 30);
    for (const HierarchyRow& row : rows)
      EXPECT_NEAR(row.hierarchical, row.reduce_scatter.estimate.time + row.rail + row.all_gather.estimate.time, 1e-15);
    const bool dgx = std::string(name) == "dgx-h100-2nodes";
    EXPECT_EQ(rows.front().hierarchical_wins(), dgx) << name;
    EXPECT_FALSE(rows.back().hierarchical_wins()) << name;
    const std::string table = format_hierarchy_table(rows, name);
    EXPECT_NE(table.find(dgx ? "  hierarchical\n" : "  nccl_ring\n"), std::string::npos) << table;
  }
  EXPECT_THROW(hierarchy_table(4, test::shipped_topology("dgx-h100"), {}, {}), std::invalid_argument);
}

TEST(NcclModel, APcieRingTakesPciLatenciesAndNoLl128) {
  const Topology pcie = test::shipped_topology("pcie-4gpu");
  const int n = 4, steps = 2 * (n - 1);
  const double bytes = 4 << 20, bus = 24e9;
  const double simple = 2.5e-6 + (8.4 + steps * 5.7) * 1e-6 + bytes / (bus * n / steps);
  EXPECT_NEAR(nccl_predicted_seconds(Collective::AllReduce, 4 << 20, n, pcie), simple, 1e-12);
}

nccl::RankCard card(const std::string& node, const std::string& policy, uint64_t arena = 64 << 20) {
  nccl::RankCard c{};
  nccl::copy_text(c.node, node);
  nccl::copy_text(c.policy, policy);
  c.arena_bytes = arena;
  return c;
}

// What libccc-nccl's ranks decide from the cards they all-gather at init.
TEST(NcclRoute, RanksThatRouteDifferentlyAreRefusedAndPlacedOnTheirNodes) {
  const std::string a = RoutePolicy::parse("auto").canonical(), n = RoutePolicy::parse("nccl").canonical();
  const nccl::NodePlace one = nccl::node_place({card("h/1", a), card("h/1", a)}, 1);
  EXPECT_EQ(one.nodes, 1);
  EXPECT_EQ(one.local_rank, 1);
  EXPECT_EQ(one.local_ranks, 2);
  EXPECT_EQ(one.leader, 0);
  // Two nodes, their ranks interleaved: places by node, in rank order within each.
  const std::vector<nccl::RankCard> two = {card("h/1", a), card("g/2", a), card("h/1", a), card("g/2", a)};
  const nccl::NodePlace third = nccl::node_place(two, 3);
  EXPECT_EQ(third.nodes, 2);
  EXPECT_EQ(third.node, 1);
  EXPECT_EQ(third.local_rank, 1);
  EXPECT_EQ(third.local_ranks, 2);
  EXPECT_EQ(third.leader, 1);
  EXPECT_TRUE(third.even);
  EXPECT_FALSE(nccl::node_place({card("h/1", a), card("h/1", a), card("g/2", a)}, 2).even);
  try {
    nccl::node_place({card("h/1", a), card("h/1", a), card("h/1", n)}, 0);
    ADD_FAILURE() << "accepted";
  } catch (const nccl::ShimError& e) {
    EXPECT_EQ(e.result, ncclInvalidUsage);
    EXPECT_NE(e.message.find("ranks 0 and 2 route differently (CCC_NCCL_ROUTE, CCC_ARENA_BYTES)"), std::string::npos)
        << e.message;
  }
  EXPECT_THROW(nccl::node_place({card("h/1", a), card("h/1", a, 1 << 20)}, 1), nccl::ShimError);
  // Names longer than a card's field stay apart.
  const std::string long_name(200, 'x');
  EXPECT_EQ(nccl::node_place({card(long_name + "1", a), card(long_name + "2", a)}, 0).nodes, 2);
}

}  // namespace
}  // namespace ccc
