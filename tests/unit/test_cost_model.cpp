// The cost model on the shipped schedules against the closed forms their headers state (Thakur,
// Rabenseifner and Gropp) on uniform fabrics.
#include <gtest/gtest.h>

#include <cmath>

#include "cost_model.h"
#include "cost_model_util.h"

using namespace ccc;
using namespace ccc::test;

namespace {

constexpr double kAlpha = 1e-6;    // s: the fabric's one-way latency
// The closed forms' alpha, a step's latency: a peer load crosses the fabric and back.
constexpr double kRoundTrip = 2 * kAlpha;
constexpr double kBand = 100e9;    // bytes/s per port and direction: beta = 1 / kBand
constexpr double kReduce = 400e9;  // bytes/s: gamma = 1 / kReduce
constexpr int64_t kBytes = 64 << 20;

double lg(int n) { return std::log2(n); }

class ClosedForm : public ::testing::TestWithParam<int> {
 protected:
  int n = GetParam();
  Topology sw = uniform_switch(n, kBand, kAlpha, kReduce);
  double t(const StepProgram& p) { return estimate_cost(p, nullptr, sw, kBytes, {}).time; }
  double nb = kBytes / kBand;    // n * beta
  double ng = kBytes / kReduce;  // n * gamma
};

TEST_P(ClosedForm, Ring) {
  EXPECT_NEAR(t(shipped_program("ring", n)), 2 * (n - 1) * kRoundTrip + 2.0 * (n - 1) / n * nb + 1.0 * (n - 1) / n * ng, 1e-12);
}

TEST_P(ClosedForm, Butterfly) {
  EXPECT_NEAR(t(shipped_program("butterfly", n)), 2 * lg(n) * kRoundTrip + 2.0 * (n - 1) / n * nb + 1.0 * (n - 1) / n * ng, 1e-12);
}

TEST_P(ClosedForm, OneShotSharesTheReadersIngressPort) {
  EXPECT_NEAR(t(shipped_program("oneshot", n)), kRoundTrip + (n - 1) * nb + (n - 1) * ng, 1e-12);
}

TEST_P(ClosedForm, TwoShot) {
  EXPECT_NEAR(t(shipped_program("twoshot", n)), 2 * kRoundTrip + 2.0 * (n - 1) / n * nb + 1.0 * (n - 1) / n * ng, 1e-12);
}

TEST_P(ClosedForm, OneShotOnDirectLinksUsesEveryLinkAtOnce) {
  Topology mesh = full_mesh(n, kBand, kAlpha, kReduce);
  EXPECT_NEAR(estimate_cost(shipped_program("oneshot", n), nullptr, mesh, kBytes, {}).time, kRoundTrip + nb + (n - 1) * ng, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Pow2Ranks, ClosedForm, ::testing::Values(2, 4, 8, 16));

// The heap-ordered binary tree on a complete tree (N = 2^(L+1) - 1): per level a parent's
// ingress port carries both children's sums, and in the broadcast its egress port carries the
// result to both children, so a level costs 2 n beta each way.
TEST(CostModel, BinaryTreeOnCompleteTrees) {
  for (int levels : {1, 2, 3}) {
    int n = (2 << levels) - 1;
    Topology sw = uniform_switch(n, kBand, kAlpha, kReduce);
    double expect = 2 * levels * kRoundTrip + 4 * levels * kBytes / kBand + 2 * levels * kBytes / kReduce;
    EXPECT_NEAR(estimate_cost(shipped_program("tree", n), nullptr, sw, kBytes, {}).time, expect, 1e-12) << "N=" << n;
  }
}

TEST(CostModel, RingReduceScatterAndAllGatherOverTheWholeVector) {
  for (int n : {2, 5, 8}) {
    Topology sw = uniform_switch(n, kBand, kAlpha, kReduce);
    int64_t bytes = 64 * n * 4096;
    double share = 1.0 * (n - 1) / n * bytes;
    EXPECT_NEAR(estimate_cost(shipped_program("ring_reduce_scatter", n), nullptr, sw, bytes, {}).time,
                (n - 1) * kRoundTrip + share / kBand + share / kReduce, 1e-12);
    EXPECT_NEAR(estimate_cost(shipped_program("ring_allgather", n), nullptr, sw, bytes, {}).time,
                (n - 1) * kRoundTrip + share / kBand, 1e-12);
  }
}

// The chain broadcast in P windows: (N - 2 + P) (alpha + (n/P) beta), the pipeline formula exactly
// (alpha: the read's round trip).
TEST(CostModel, PipelinedChainBroadcast) {
  Topology sw = uniform_switch(8, kBand, kAlpha, kReduce);
  StepProgram chain = shipped_program("ring_broadcast", 8);
  for (int64_t windows : {1, 4, 64}) {
    Estimate e = estimate_cost(chain, nullptr, sw, kBytes, {1, kBytes / windows / 2, 2});  // 2 tiles a window
    EXPECT_EQ(e.windows, windows);
    EXPECT_NEAR(e.time, (8 - 2 + windows) * (kRoundTrip + kBytes / windows / kBand), 1e-12) << windows;
  }
  EXPECT_DOUBLE_EQ(estimate_cost(chain, nullptr, sw, kBytes, {}).busbw,
                   estimate_cost(chain, nullptr, sw, kBytes, {}).algbw);
}

TEST(CostModel, RingAtOddRankCounts) {
  for (int n : {3, 5, 7}) {
    Topology sw = uniform_switch(n, kBand, kAlpha, kReduce);
    int64_t bytes = 64 * n * 1000;  // chunks divide evenly on the 64-byte granule
    double expect = 2 * (n - 1) * kRoundTrip + 2.0 * (n - 1) / n * bytes / kBand + 1.0 * (n - 1) / n * bytes / kReduce;
    EXPECT_NEAR(estimate_cost(shipped_program("ring", n), nullptr, sw, bytes, {}).time, expect, 1e-12) << "N=" << n;
  }
}

TEST(CostModel, AlgbwAndBusbwFollowNcclTests) {
  Topology sw = uniform_switch(8, kBand, kAlpha, kReduce);
  Estimate e = estimate_cost(shipped_program("ring", 8), nullptr, sw, kBytes, {});
  EXPECT_DOUBLE_EQ(e.algbw, kBytes / e.time);
  EXPECT_DOUBLE_EQ(e.busbw, e.algbw * 2 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::Broadcast, 4), 1.0);
}

TEST(CostModel, UnevenSizesAreChargedTheLargestChunk) {
  Topology sw = uniform_switch(4, kBand, 0, 1e30);
  // 1000 bytes in 4 chunks: 64-byte cuts make the largest chunk 256 bytes.
  EXPECT_NEAR(estimate_cost(shipped_program("ring", 4), nullptr, sw, 1000, {}).time, 6 * 256 / kBand, 1e-18);
  // 8 bytes: one non-empty chunk of 8 bytes, but every step still pays its latency.
  Topology slow = uniform_switch(4, kBand, kAlpha, 1e30);
  EXPECT_NEAR(estimate_cost(shipped_program("ring", 4), nullptr, slow, 8, {}).time, 6 * (kRoundTrip + 8 / kBand), 1e-15);
}

TEST(CostModel, ChannelBandwidthCapsEachRank) {
  Topology sw = uniform_switch(8, kBand, 0, 1e30);
  for (Gpu& g : sw.gpus) g.channel_bandwidth = 10e9;
  double one = estimate_cost(shipped_program("ring", 8), nullptr, sw, kBytes, {1, 0}).time;
  double four = estimate_cost(shipped_program("ring", 8), nullptr, sw, kBytes, {4, 0}).time;
  double many = estimate_cost(shipped_program("ring", 8), nullptr, sw, kBytes, {32, 0}).time;
  EXPECT_NEAR(one, 14.0 * kBytes / 8 / 10e9, 1e-9);
  EXPECT_NEAR(four, one / 4, 1e-9);
  EXPECT_NEAR(many, 14.0 * kBytes / 8 / kBand, 1e-9);  // the port, not the channels, is the limit
}

TEST(CostModel, TilesPipelineTheTreeButOnlyAddLatencyToTheRing) {
  Topology sw = uniform_switch(7, kBand, kAlpha, kReduce);
  StepProgram tree = shipped_program("tree", 7);
  Estimate whole = estimate_cost(tree, nullptr, sw, kBytes, {1, 0});
  Estimate tiled = estimate_cost(tree, nullptr, sw, kBytes, {1, kBytes / 16});
  EXPECT_EQ(tiled.windows, 16);
  // Ranks 1 and 2 are the busiest: they read two children, then their parent, whose egress
  // port also serves the other child.
  double tile = kBytes / 16.0;
  EXPECT_NEAR(tiled.period, 2 * kRoundTrip + 4 * tile / kBand + 2 * tile / kReduce, 1e-12);
  EXPECT_NEAR(tiled.time, tiled.fill + 15 * tiled.period, 1e-12);
  EXPECT_LT(tiled.time, 0.6 * whole.time);

  Topology sw8 = uniform_switch(8, kBand, kAlpha, kReduce);
  StepProgram ring = shipped_program("ring", 8);
  Estimate ring_whole = estimate_cost(ring, nullptr, sw8, kBytes, {1, 0});
  Estimate ring_tiled = estimate_cost(ring, nullptr, sw8, kBytes, {1, kBytes / 8 / 4});
  EXPECT_NEAR(ring_tiled.time - ring_whole.time, 3 * 14 * kRoundTrip, 1e-12);
}

// The planner's ring waits chain each rank to its predecessor, so the longest path is the
// lock-step sum, plus each step's wait (the one-way flight of the predecessor's pushed flag,
// before the read's round trip) and the exit wait (no rank returns while a peer still reads it):
// 2 x 14 one-way latencies for the reads' round trips, 14 + 1 for the waits, in a row.
TEST(CostModel, SyncPlanLongestPathIsLockStepPlusEachWait) {
  Topology sw = uniform_switch(8, kBand, kAlpha, kReduce);
  PlannedProgram ring = shipped_planned("ring", 8);
  const Estimate lock = estimate_cost(ring.program, nullptr, sw, kBytes, {});
  const Estimate flow = estimate_cost(ring.program, &ring.sync, sw, kBytes, {});
  // 15 waits, the first step's read of the previous rank's mailbox (a round trip:
  // PeerTable::load_peers), and the exit's check of the next rank's call, which no ring rank reads
  // (a round trip: PeerTable::same_call).
  EXPECT_NEAR(flow.time, lock.time + 19 * kAlpha, 1e-12);
  EXPECT_EQ(lock.serial_latencies, 2 * 14);
  EXPECT_EQ(flow.serial_latencies, 2 * 14 + 15 + 2 + 2);
}

// Waits on several peers are polled together, one thread per peer: one-shot at N = 8 pays one
// latency for its 7 entry waits, a round trip (two) for the 7 mailboxes, read at once, a round
// trip for its reads and one for its 7 exit waits; the launch comes on top. Later windows poll
// no entry waits and read no mailbox: each adds only its reads' round trip.
TEST(CostModel, WaitsOverlapAndTheLaunchIsCharged) {
  Topology sw = uniform_switch(8, kBand, kAlpha, kReduce);
  PlannedProgram oneshot = shipped_planned("oneshot", 8);
  const Estimate e = estimate_cost(oneshot.program, &oneshot.sync, sw, 8, {});
  EXPECT_EQ(e.serial_latencies, 6);
  EXPECT_NEAR(e.time, 6 * kAlpha, 1e-3 * kAlpha);
  const Estimate windowed = estimate_cost(oneshot.program, &oneshot.sync, sw, 4 << 20, {1, 64 << 10, 1});
  ASSERT_EQ(windowed.windows, 64);
  EXPECT_EQ(windowed.serial_latencies, 6 + 2 * 63);
  for (Gpu& g : sw.gpus) g.launch = 3e-6;
  const Estimate launched = estimate_cost(oneshot.program, &oneshot.sync, sw, 8, {});
  EXPECT_NEAR(launched.time - e.time, 3e-6, 1e-12);
  EXPECT_EQ(launched.launch, 3e-6);
}

TEST(CostModel, SyncPlanLetsIndependentRanksRunAhead) {
  // Rank 0 does a long local copy in step 0 and nothing after; rank 1 reads rank 2 at step 0
  // and at step 1. Lock-step makes rank 1's second read wait for rank 0; the waits do not.
  Topology sw = uniform_switch(3, kBand, kAlpha, kReduce);
  StepProgram p;
  p.nranks = 3;
  p.nchunks = 1;
  p.steps.assign(2, StepInfo{});
  p.ops.assign(3, std::vector<std::vector<Op>>(2));
  p.ops[0][0] = {Op{OpKind::Copy, {0, 1}, 0, Buffer::Input, Buffer::Scratch, {}}};
  p.ops[1][0] = {Op{OpKind::Copy, {0, 1}, 2, Buffer::Input, Buffer::Scratch, {}}};
  p.ops[1][1] = {Op{OpKind::Reduce, {0, 1}, 2, Buffer::Input, Buffer::Output, {}}};
  for (Gpu& g : sw.gpus) g.memory_bandwidth = kBand / 10;  // the local copy is 10x slower
  SyncPlan plan;
  plan.waits.assign(3, std::vector<std::vector<Wait>>(3));
  Wait entry;
  entry.peer = 2;
  entry.reason = SyncReason::Entry;
  plan.waits[1][0] = {entry};
  double lock = estimate_cost(p, nullptr, sw, kBytes, {}).time;
  double flow = estimate_cost(p, &plan, sw, kBytes, {}).time;
  EXPECT_NEAR(lock, 10 * kBytes / kBand + kRoundTrip + kBytes / kBand + kBytes / kReduce, 1e-12);
  EXPECT_NEAR(flow, 10 * kBytes / kBand, 1e-12);  // rank 0's copy is now the critical path
}

TEST(CostModel, RejectsMismatchedInputs) {
  Topology sw = uniform_switch(4, kBand, kAlpha, kReduce);
  EXPECT_THROW(estimate_cost(shipped_program("ring", 8), nullptr, sw, kBytes, {}), std::invalid_argument);
  EXPECT_THROW(estimate_cost(shipped_program("ring", 4), nullptr, sw, kBytes, {0, 0}), std::invalid_argument);
  SyncPlan wrong = shipped_planned("ring", 2).sync;
  EXPECT_THROW(estimate_cost(shipped_program("ring", 4), &wrong, sw, kBytes, {}), std::invalid_argument);
  Topology split = sw;
  split.switches.clear();
  EXPECT_THROW(estimate_cost(shipped_program("ring", 4), nullptr, split, kBytes, {}), std::invalid_argument);
}

TEST(CostModel, NothingToMoveCostsNothing) {
  Topology sw = uniform_switch(4, kBand, kAlpha, kReduce);
  EXPECT_EQ(estimate_cost(shipped_program("ring", 4), nullptr, sw, 0, {}).time, 0.0);
}

}  // namespace

// An epilogue's residual is read at each completing write (the chunk's last write into the
// rank's output, a reduce), through the rank's memory: one-shot completes all 8 chunks on every
// rank, two-shot one of them. On a fabric where memory is the only limit, that is 8 chunks' more
// bytes against one.
TEST(CostModel, TheResidualIsReadWhereEachChunkIsCompleted) {
  Topology slow = uniform_switch(8, 1e15, 0, 1e30);
  for (Gpu& g : slow.gpus) g.memory_bandwidth = 1e9, g.channel_bandwidth = 1e15;
  CostParams plain, fused;
  fused.epilogue.kind = Epilogue::Residual;
  auto extra = [&](const char* algo) {
    const StepProgram p = shipped_program(algo, 8);
    return estimate_cost(p, nullptr, slow, 8 << 20, fused).time - estimate_cost(p, nullptr, slow, 8 << 20, plain).time;
  };
  EXPECT_NEAR(extra("oneshot"), double(8 << 20) / 1e9, 1e-6);  // the other bytes, at 1e15 B/s, overlap
  EXPECT_NEAR(extra("twoshot"), double(1 << 20) / 1e9, 1e-6);
  fused.protocol = plain.protocol = Protocol::Ll;  // ll's local reads are not priced (as in the simulator)
  EXPECT_EQ(extra("oneshot"), 0);
}

// The norm after the exit waits: the busiest of the rank's blocks norms ceil(rows / B) rows,
// reading each twice and writing it, plus residual_out and the fp8 output, as moves (a read and
// a write each) at the block's rate, unless the GPU's memory is the slower; none without the
// norm. B is the channels and a norm block per further row, up to 64 (rmsnorm_rank_blocks);
// virtual ranks add none.
TEST(CostModel, TheNormRunsOnTheRanksBlocksAfterTheExit) {
  Topology sw = uniform_switch(8, kBand, kAlpha, kReduce);
  for (Gpu& g : sw.gpus) g.channel_bandwidth = 10e9, g.memory_bandwidth = 1e12;
  const StepProgram p = shipped_program("twoshot", 8);
  CostParams params{4, 0, 1, Protocol::Simple};
  params.epilogue = {Epilogue::ResidualRmsNorm, 1000 * 2, 2, true, false, kMaxRankBlocks};
  const int64_t bytes = 10 * 2000;  // 10 rows: 10 blocks, one row each
  const Estimate e = estimate_cost(p, nullptr, sw, bytes, params);
  EXPECT_NEAR(e.epilogue, 2000 * 4.0 / 2 / 10e9, 1e-15);
  EXPECT_EQ(rmsnorm_rank_blocks(4, 10), 10);
  EXPECT_EQ(rmsnorm_rank_blocks(4, 3), 4);
  EXPECT_EQ(rmsnorm_rank_blocks(4, 1000), 64);
  EXPECT_EQ(rmsnorm_rank_blocks(4, 1000, 8), 8);
  EXPECT_EQ(rmsnorm_rank_blocks(4, 1000, 0), 4);
  params.epilogue.max_rank_blocks = 0;  // the 4 channels alone: the busiest norms 3 rows
  EXPECT_NEAR(estimate_cost(p, nullptr, sw, bytes, params).epilogue, 3 * 2000 * 4.0 / 2 / 10e9, 1e-15);
  params.epilogue.quant_out = true;  // one more byte per 2-byte element
  EXPECT_NEAR(estimate_cost(p, nullptr, sw, bytes, params).epilogue, 3 * 2000 * 4.5 / 2 / 10e9, 1e-15);
  for (Gpu& g : sw.gpus) g.memory_bandwidth = 1e9;  // every channel's bytes through a slow memory
  EXPECT_NEAR(estimate_cost(p, nullptr, sw, bytes, params).epilogue, 10 * 2000 * 4.5 / 1e9, 1e-15);
  params.epilogue.kind = Epilogue::Residual;
  const Estimate residual = estimate_cost(p, nullptr, sw, bytes, params);
  EXPECT_EQ(residual.epilogue, 0);
  EXPECT_NEAR(e.time - e.epilogue, estimate_cost(p, nullptr, sw, bytes, {4, 0, 1, Protocol::Simple}).time, 1e-12);
}

// The unfused alternative's second kernel: a launch, and each buffer once at the memory's rate.
TEST(CostModel, ASeparateEpilogueKernelStreamsEachBufferOnce) {
  Topology sw = uniform_switch(4, kBand, kAlpha, kReduce);
  for (Gpu& g : sw.gpus) g.memory_bandwidth = 1e12, g.launch = 2e-6;
  EXPECT_EQ(separate_epilogue_seconds(sw, 4, 1 << 20, {}), 0);
  EXPECT_NEAR(separate_epilogue_seconds(sw, 4, 1 << 20, {Epilogue::Residual}), 2e-6 + 3.0 * (1 << 20) / 1e12, 1e-15);
  EXPECT_NEAR(separate_epilogue_seconds(sw, 4, 1 << 20, {Epilogue::ResidualRmsNorm, 8192, 2, true, true, kMaxRankBlocks}),
              2e-6 + 4.5 * (1 << 20) / 1e12, 1e-15);
}
