// The simulator (Communicator::sim, sim_engine.h): the same results as host emulation, bit for
// bit, and virtual times that depend on the kernels and the topology, never on the host.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ccc/communicator.h"
#include "ccc/errors.h"
#include "collective_reference.h"

using namespace ccc;

namespace {

JitCache& test_cache() {
  static JitCache cache(std::filesystem::path(CCC_BINARY_DIR) / "jit-cache");
  return cache;
}

std::string topology(const char* name) { return std::string(CCC_SOURCE_DIR) + "/topologies/" + name; }

CommOptions options(const std::string& algo, std::optional<Protocol> protocol = std::nullopt,
                    const char* topo = "dgx-h100.topo") {
  CommOptions o;
  o.algo = algo;
  o.protocol = protocol;
  o.cache = &test_cache();
  o.timeout_seconds = 60;
  o.topology_file = topology(topo);
  return o;
}

CollectiveCall all_reduce(uint64_t count, DataType dtype = DataType::F32) {
  CollectiveCall call;
  call.collective = Collective::AllReduce;
  call.count = count;
  call.dtype = dtype;
  call.op = ReduceOp::Sum;
  return call;
}

// Runs `shape` once, checked against the reference; returns the wrong elements and, in `seconds`,
// the call's virtual time.
uint64_t run_checked(Communicator& comm, const CollectiveCall& shape, bool in_place, double& seconds) {
  HostCollectiveBuffers buffers(shape, comm.size(), in_place, /*offset*/ 8);
  buffers.prepare(shape.count);
  const double before = comm.virtual_seconds();
  comm.run(buffers.call());
  comm.synchronize();
  seconds = comm.virtual_seconds() - before;
  return buffers.wrong_elements();
}

// `iters` back-to-back calls, queued before any wait (as ccc-bench times them): virtual seconds per call.
double time_calls(Communicator& comm, const CollectiveCall& shape, int iters) {
  HostCollectiveBuffers buffers(shape, comm.size(), /*in_place*/ false);
  buffers.prepare(1);
  const double before = comm.virtual_seconds();
  for (int i = 0; i < iters; ++i)
    for (int r = 0; r < comm.size(); ++r)
      comm.run_rank(buffers.call(), r, buffers.call().send[static_cast<size_t>(r)],
                    buffers.call().recv[static_cast<size_t>(r)]);
  comm.synchronize();
  return (comm.virtual_seconds() - before) / iters;
}

}  // namespace

// Each case one type (HostRun covers every type; each kernel here is a host compile, which the
// test's time is mostly): 4-byte floats, a 16-bit float and 1-byte integers over both protocols.
TEST(Sim, ResultsAreHostEmulationsBitForBit) {
  struct Case {
    const char* algo;
    std::optional<Protocol> protocol;
    int nranks;
    uint64_t count;
    DataType dtype;
  };
  for (const Case& c : {Case{"ring", Protocol::Simple, 4, 30011, DataType::F32},
                        Case{"twoshot", Protocol::Simple, 8, 12345, DataType::BF16},
                        Case{"oneshot", Protocol::Ll, 8, 1001, DataType::I8},
                        Case{"butterfly", Protocol::Simple, 4, 4097, DataType::I8},
                        Case{"twoshot", Protocol::Ll, 3, 333, DataType::BF16}}) {
    Communicator comm = Communicator::sim(c.nranks, options(c.algo, c.protocol));
    EXPECT_EQ(comm.backend(), BackendKind::Sim);
    for (bool in_place : {false, true}) {
      double seconds = 0;
      EXPECT_EQ(run_checked(comm, all_reduce(c.count, c.dtype), in_place, seconds), 0u)
          << c.algo << " N " << c.nranks << " " << data_type_name(c.dtype) << (in_place ? " in place" : "");
      EXPECT_GT(seconds, 0) << c.algo;
    }
  }
}

// Virtual time is the kernels' and the topology's: the same calls take the same time, to the
// picosecond, however the host scheduled its threads (a second communicator, another size before).
TEST(Sim, VirtualTimeDoesNotDependOnTheHost) {
  for (const char* algo : {"oneshot", "twoshot", "ring"}) {
    std::vector<double> times;
    for (int run = 0; run < 2; ++run) {
      Communicator comm = Communicator::sim(8, options(algo));
      if (run == 1) time_calls(comm, all_reduce(1234), 1);
      times.push_back(time_calls(comm, all_reduce(5000), 2));
    }
    EXPECT_NEAR(times[0], times[1], 1e-12) << algo;  // a picosecond: the rounding of the readings
  }
}

// Timing only (CommOptions::sim_timing_only): the same virtual times, to the picosecond, with no
// data moved by protocol simple (every output keeps its poison; ll's lines carry their data, at
// most 256 KiB); and a size whose buffers the test never writes (64 MiB a rank: pages nothing
// touches cost no memory) runs all the same.
TEST(Sim, TimingOnlyTakesTheSameVirtualTimeAndMovesNoData) {
  CommOptions o = options("twoshot", Protocol::Simple);
  Communicator full = Communicator::sim(8, o);
  o.sim_timing_only = true;
  Communicator timing = Communicator::sim(8, o);
  const CollectiveCall shape = all_reduce(30011);
  EXPECT_NEAR(time_calls(full, shape, 2), time_calls(timing, shape, 2), 1e-12);
  HostCollectiveBuffers buffers(shape, 8, /*in_place*/ false);
  buffers.prepare(1);
  timing.run(buffers.call());
  timing.synchronize();
  EXPECT_EQ(buffers.wrong_elements(), 8u * shape.count);

  CollectiveCall large = all_reduce(uint64_t{16} << 20);
  std::vector<std::unique_ptr<float[]>> memory;
  std::vector<const void*> send;
  std::vector<void*> recv;
  for (int r = 0; r < 8; ++r) {
    memory.push_back(std::make_unique_for_overwrite<float[]>(large.count));
    send.push_back(memory.back().get());
    memory.push_back(std::make_unique_for_overwrite<float[]>(large.count));
    recv.push_back(memory.back().get());
  }
  large.send = send;
  large.recv = recv;
  const double before = timing.virtual_seconds();
  timing.run(large);
  timing.synchronize();
  const double seconds = timing.virtual_seconds() - before, busbw = 2.0 * 7 / 8 * (uint64_t{64} << 20) / seconds;
  EXPECT_GT(busbw, 100e9);
  EXPECT_LT(busbw, 450e9);  // dgx-h100.topo: NVLink 4's 450 GB/s per direction
}

// Orders of magnitude the topology fixes: a call costs at least its launch, a large one is bound
// by the links (busbw below NVLink's 450 GB/s per direction), and more bytes take longer.
TEST(Sim, TimesFollowTheTopology) {
  Communicator comm = Communicator::sim(8, options("twoshot"));
  const double small = time_calls(comm, all_reduce(2), 4);
  const double large = time_calls(comm, all_reduce(uint64_t{1} << 20), 1);  // 4 MiB of f32
  EXPECT_GT(small, 2.5e-6);  // dgx-h100.topo: launch=2.5us
  EXPECT_LT(small, 50e-6);
  const double busbw = 2.0 * 7 / 8 * (uint64_t{4} << 20) / large;
  EXPECT_LT(busbw, 450e9);
  EXPECT_GT(busbw, 50e9);
  EXPECT_GT(large, small);
}

TEST(Sim, NeedsATopologyAndOnlyItHasVirtualTime) {
  CommOptions o = options("ring");
  o.topology_file.clear();
  EXPECT_THROW(Communicator::sim(2, o), Error);
  EXPECT_THROW(Communicator::sim(5, options("ring", std::nullopt, "nvlink-ring-4.topo")), Error);
  Communicator host = Communicator::host(2, options("ring"));
  EXPECT_THROW(host.virtual_seconds(), Error);
}

// The critical path of a call runs from its launch to its end through the waits that set it,
// each naming the word it waited on, and its times add up to the call's.
TEST(Sim, CriticalPathNamesTheWaitsThatSetTheEnd) {
  for (std::optional<Protocol> protocol : {std::optional<Protocol>(Protocol::Simple), std::optional<Protocol>(Protocol::Ll)}) {
    Communicator comm = Communicator::sim(4, options("oneshot", protocol));
    const double seconds = time_calls(comm, all_reduce(2), 1);
    const std::string path = comm.critical_path();
    std::vector<std::string> lines;
    for (size_t at = 0; at < path.size();) {
      const size_t end = path.find('\n', at);
      lines.push_back(path.substr(at, end - at));
      at = end + 1;
    }
    ASSERT_GE(lines.size(), 3u) << path;
    EXPECT_NE(lines.front().find("0.000 us  rank"), std::string::npos) << path;
    EXPECT_NE(lines.front().find("launch"), std::string::npos) << path;
    EXPECT_NE(lines.back().find(" end"), std::string::npos) << path;
    EXPECT_NE(path.find("wait rank"), std::string::npos) << path;
    const std::string words = protocol == Protocol::Ll ? "ll lines" : "inbox, from rank";
    EXPECT_NE(path.find(words), std::string::npos) << path;
    // The end's time since the launch, plus the launch overhead, is the call's.
    const double end_us = std::stod(lines.back());
    EXPECT_NEAR(end_us * 1e-6 + 2.5e-6, seconds, 1e-9) << path;
  }
}

// A rank that never launches fails the others within the timeout (virtual and host time), and
// the communicator runs the next call.
TEST(Sim, ARankThatNeverLaunchesFailsTheOthersWithinTheTimeout) {
  CommOptions o = options("oneshot");
  o.timeout_seconds = 0.05;
  Communicator comm = Communicator::sim(3, o);
  HostCollectiveBuffers buffers(all_reduce(64), 3, /*in_place*/ false);
  buffers.prepare(1);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r)
    comm.run_rank(buffers.call(), r, buffers.call().send[static_cast<size_t>(r)], buffers.call().recv[static_cast<size_t>(r)]);
  try {
    comm.synchronize();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out waiting for a peer"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  double seconds = 0;
  EXPECT_EQ(run_checked(comm, all_reduce(64), false, seconds), 0u);
}

// A rank that calls with another count: every rank gets the error, none succeeds without the work.
TEST(Sim, APeerWithAnotherCountFailsEveryRank) {
  Communicator comm = Communicator::sim(3, options("oneshot"));
  HostCollectiveBuffers small(all_reduce(64), 3, false), large(all_reduce(128), 3, false);
  small.prepare(1);
  large.prepare(1);
  for (int r = 0; r < 3; ++r) {
    const HostCollectiveBuffers& b = r == 0 ? small : large;
    comm.run_rank(b.call(), r, b.call().send[static_cast<size_t>(r)], b.call().recv[static_cast<size_t>(r)]);
  }
  for (int r = 0; r < 3; ++r) {
    try {
      comm.synchronize_rank(r);
      ADD_FAILURE() << "rank " << r << " succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("collective failed"), std::string::npos) << e.what();
    }
  }
  double seconds = 0;
  EXPECT_EQ(run_checked(comm, all_reduce(64), false, seconds), 0u);  // the next call runs
}

// A fused call is chosen and priced with its epilogue (the norm after the exit, on the rank's
// channels), under a choice of its own: asked after the plain call of the same size, it is not
// given the plain call's choice and price.
TEST(Sim, AFusedCallIsChosenAndPricedWithItsEpilogue) {
  Communicator comm = Communicator::sim(8, options(""));
  const CollectiveCall plain = all_reduce(64 * 4096, DataType::BF16);
  CollectiveCall fused = plain;
  fused.epilogue = Epilogue::ResidualRmsNorm;
  fused.hidden = 4096;
  float somewhere = 0;
  const std::vector<void*> outs(8, &somewhere);  // predict looks at which outputs there are, not at them
  fused.residual_out = outs;
  const double plain_seconds = comm.predict(plain).ccc_seconds;
  const double fused_seconds = comm.predict(fused).ccc_seconds;
  ASSERT_GT(plain_seconds, 0);
  // 64 rows of 8 KiB on 64 blocks (the channels, then norm blocks): a row each, 4 accesses a
  // byte, as moves, at 25 GB/s.
  EXPECT_GE(fused_seconds - plain_seconds, 8192 * 4.0 / 2 / 25e9 * 0.999);
  fused.residual_out = {};  // no residual_out: a price of its own, lower
  EXPECT_LT(comm.predict(fused).ccc_seconds, fused_seconds);
}
