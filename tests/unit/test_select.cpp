#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "select.h"
#include "cost_model_util.h"
#include "golden_util.h"

using namespace ccc;
using namespace ccc::test;

namespace {

// Every shipped allreduce schedule for n ranks.
struct Menu {
  explicit Menu(int n) : menu(Collective::AllReduce, n, shipped_schedule_sources()), candidates(menu.candidates()) {}
  ScheduleMenu menu;
  std::vector<CandidateSchedule> candidates;
};

const std::set<std::string> kLatencyBound = {"oneshot", "tree", "dbtree", "butterfly"};
// Schedules that move 2(N-1)/N of the message per rank; butterfly is also latency-bound (log N
// steps), so on a switch it can win from small sizes on once waits are charged one by one.
const std::set<std::string> kBandwidthBound = {"ring", "twoshot", "butterfly"};

std::string chosen(const Topology& t, const Menu& m, int64_t bytes) {
  return select_schedule(Collective::AllReduce, bytes, 4, t, m.candidates).name();
}

class RuleOfThumb : public ::testing::TestWithParam<const char*> {};

// The seed's rule of thumb must come out of the model: nothing in selection names an algorithm.
TEST_P(RuleOfThumb, EmergesOnTheDgxFiles) {
  Topology t = shipped_topology(GetParam());
  Menu m(8);
  for (int64_t bytes : {8, 1024, 16 << 10})
    EXPECT_TRUE(kLatencyBound.count(chosen(t, m, bytes))) << bytes << " B: " << chosen(t, m, bytes);
  for (int64_t bytes : {1 << 20, 64 << 20, 1 << 30})
    EXPECT_TRUE(kBandwidthBound.count(chosen(t, m, bytes))) << bytes << " B: " << chosen(t, m, bytes);
  // One crossover: once a bandwidth-bound schedule wins, it keeps winning as sizes grow.
  bool crossed = false;
  for (const TuneRow& row : tune_table(Collective::AllReduce, 4, t, m.candidates)) {
    bool bandwidth = kBandwidthBound.count(row.choice.name()) > 0;
    EXPECT_FALSE(crossed && !bandwidth) << row.bytes;
    crossed = crossed || bandwidth;
  }
}

INSTANTIATE_TEST_SUITE_P(Dgx, RuleOfThumb, ::testing::Values("dgx-a100", "dgx-h100"));

// Every schedule but the ring crosses the PCIe diagonals, with their bandwidth and, for the first
// read of a diagonal peer in a launch, their latency twice (the mailbox's round trip): the ring
// wins every size.
TEST(Select, NvlinkRingKeepsEverySizeOnTheRing) {
  Topology t = shipped_topology("nvlink-ring-4");
  Menu m(4);
  for (int64_t bytes : {int64_t{64}, int64_t{64} << 10, int64_t{256} << 20}) EXPECT_EQ(chosen(t, m, bytes), "ring") << bytes;
}

// Alltoall picks among its own schedules: Bruck's ceil(log2 N) steps win small messages, the
// direct exchange (every block moved once) large ones, on the model alone.
TEST(Select, AllToAllSwitchesFromBruckToDirectWithSize) {
  Topology t = shipped_topology("dgx-h100");
  ScheduleMenu menu(Collective::AllToAll, 8, shipped_schedule_sources());
  const std::vector<CandidateSchedule> candidates = menu.candidates();
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(select_schedule(Collective::AllToAll, 1024, 4, t, candidates).name(), "alltoall_bruck");
  EXPECT_EQ(select_schedule(Collective::AllToAll, 256 << 20, 4, t, candidates).name(), "alltoall_direct");
}

TEST(Select, PcieBoxAlsoSwitchesWithSize) {
  Topology t = shipped_topology("pcie-4gpu");
  Menu m(4);
  EXPECT_TRUE(kLatencyBound.count(chosen(t, m, 256)));
  EXPECT_TRUE(kBandwidthBound.count(chosen(t, m, 256 << 20)));
}

TEST(Select, ChannelsGrowWithTheMessage) {
  Topology t = shipped_topology("dgx-h100");
  Menu m(8);
  Choice tiny = select_schedule(Collective::AllReduce, 8, 4, t, m.candidates);
  Choice big = select_schedule(Collective::AllReduce, 1 << 30, 4, t, m.candidates);
  EXPECT_EQ(tiny.params.channels, 1);
  EXPECT_GE(big.params.channels, 16);  // 450 GB/s ports need 18+ channels of 25 GB/s
  EXPECT_GT(big.estimate.busbw, 350e9);
  EXPECT_LT(big.estimate.busbw, 450e9);
}

TEST(Select, ForcedByOptionOrEnvironment) {
  Topology t = shipped_topology("dgx-h100");
  Menu m(8);
  SelectOptions opt;
  opt.algo = "ring";
  Choice c = select_schedule(Collective::AllReduce, 8, 4, t, m.candidates, opt);
  EXPECT_EQ(c.name(), "ring");
  EXPECT_TRUE(c.forced);
  EXPECT_EQ(c.candidate->program->schedule, "ring");

  ::setenv("CCC_ALGO", "tree", 1);
  Choice env = select_schedule(Collective::AllReduce, 1 << 30, 4, t, m.candidates);
  ::setenv("CCC_ALGO", "nope", 1);
  EXPECT_THROW(
      {
        try {
          select_schedule(Collective::AllReduce, 8, 4, t, m.candidates);
        } catch (const std::invalid_argument& e) {
          EXPECT_STREQ(e.what(),
                       "CCC_ALGO=nope: no such allreduce schedule (candidates: butterfly, dbtree, oneshot, ring, tree, twoshot)");
          throw;
        }
      },
      std::invalid_argument);
  ::unsetenv("CCC_ALGO");
  EXPECT_EQ(env.name(), "tree");
  EXPECT_TRUE(env.forced);
  EXPECT_FALSE(select_schedule(Collective::AllReduce, 8, 4, t, m.candidates).forced);
}

TEST(Select, OnlyCandidatesOfTheCollectiveCount) {
  Topology t = shipped_topology("dgx-h100");
  Menu m(8);
  StepProgram gather = *m.candidates[0].program;
  gather.collective = Collective::AllGather;
  std::vector<CandidateSchedule> mixed = m.candidates;
  mixed[0].program = &gather;
  auto all = tune_candidates(Collective::AllReduce, 1024, 4, t, mixed);
  ASSERT_EQ(all.size(), m.candidates.size() - 1);
  EXPECT_EQ(all[0].name(), m.candidates[1].name);
  EXPECT_EQ(tune_candidates(Collective::AllGather, 1024, 4, t, mixed).size(), 1u);
  EXPECT_THROW(select_schedule(Collective::Broadcast, 1024, 4, t, m.candidates), std::invalid_argument);
}

TEST(Select, RejectsBadArguments) {
  Topology t = shipped_topology("dgx-h100");
  Menu m(8);
  EXPECT_THROW(select_schedule(Collective::AllReduce, 6, 4, t, m.candidates), std::invalid_argument);
  EXPECT_THROW(select_schedule(Collective::AllReduce, 8, 3, t, m.candidates), std::invalid_argument);
  Menu four(4);
  std::vector<CandidateSchedule> mixed = {m.candidates[0], four.candidates[1]};
  EXPECT_THROW(select_schedule(Collective::AllReduce, 8, 4, t, mixed), std::invalid_argument);
}

TEST(Select, TuneTableHasOneRowPerSizeFrom8BytesTo1GiB) {
  Topology t = shipped_topology("dgx-h100");
  Menu m(8);
  auto rows = tune_table(Collective::AllReduce, 4, t, m.candidates);
  ASSERT_EQ(rows.size(), 28u);
  EXPECT_EQ(rows.front().bytes, 8);
  EXPECT_EQ(rows.back().bytes, int64_t{1} << 30);
  std::string text = format_tune_table(rows, "dgx-h100 allreduce");
  EXPECT_EQ(text.substr(0, text.find("\n           8")),
            "# dgx-h100 allreduce\n"
            "# predicted time in us per schedule (best channels and tile for each)\n"
            "       bytes  butterfly     dbtree    oneshot       ring       tree    twoshot  choice");
  EXPECT_NE(text.find("  1073741824 "), std::string::npos);
}

}  // namespace

namespace {

TEST(ScheduleMenu, KeepsTheCollectivesSchedulesThatFitN) {
  ScheduleMenu menu(Collective::AllReduce, 6, shipped_schedule_sources());
  std::vector<std::string> names;
  for (const CandidateSchedule& c : menu.candidates()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"dbtree", "oneshot", "ring", "tree", "twoshot"}));
  ASSERT_EQ(menu.skipped().size(), 1u);
  EXPECT_NE(menu.skipped()[0].find("butterfly.sched: "), std::string::npos) << menu.skipped()[0];
  for (const CandidateSchedule& c : menu.candidates()) EXPECT_EQ(c.program->nranks, 6);

  for (const CandidateSchedule& c : menu.candidates()) {
    ASSERT_NE(c.sync, nullptr) << c.name;  // priced with the planner's waits
    EXPECT_EQ(c.sync->waits.size(), 6u);
  }

  ScheduleMenu gather(Collective::AllGather, 6, shipped_schedule_sources());
  ASSERT_EQ(gather.candidates().size(), 1u);
  EXPECT_EQ(gather.candidates()[0].name, "ring_allgather");
}

}  // namespace

namespace {

// The whole prediction table per shipped topology, so a model change shows up in review.
class TuneGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(TuneGolden, MatchesTheCommittedTable) {
  Topology t = shipped_topology(GetParam());
  Menu m(t.ngpus());
  std::string text = format_tune_table(tune_table(Collective::AllReduce, 4, t, m.candidates),
                                       std::string(GetParam()) + ": allreduce f32, shipped schedules");
  test::expect_matches_golden(text, std::string("tests/golden/tune/") + GetParam() + ".txt", "Shipped/TuneGolden.*");
}

INSTANTIATE_TEST_SUITE_P(Shipped, TuneGolden,
                         ::testing::Values("dgx-a100", "dgx-h100", "pcie-4gpu", "nvlink-ring-4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
