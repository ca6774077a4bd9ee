// ccc::Communicator and the C API on the host backend: generated kernels, run on threads, checked
// element by element against the reference (outputs poisoned first, buffers offset from their
// allocation, counts that divide nothing).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <limits>
#include <thread>

#include <cstring>
#include <ostream>
#include <vector>

#include "ccc/ccc.h"
#include "collective_reference.h"
#include "ccc/communicator.h"
#include "topology.h"
#include "instantiate.h"
#include "shipped_schedules.h"
#include "golden_util.h"
#include "ccc_abi.h"  // CCC_MAX_DEVICE_RANKS
#include "data_type.h"  // kLlMaxBytes

#include <fmt/format.h>

using namespace ccc;

namespace ccc {
// Readable in test listings (ctest shows the parameter).
void PrintTo(Collective c, std::ostream* os) { *os << collective_name(c); }
}  // namespace ccc

namespace {

// One cache for the whole test binary, in the build tree: reruns are disk hits.
JitCache& test_cache() {
  static JitCache cache(std::filesystem::path(CCC_BINARY_DIR) / "jit-cache");
  return cache;
}

CommOptions options(const std::string& algo = "") {
  CommOptions o;
  o.algo = algo;
  o.cache = &test_cache();
  o.timeout_seconds = 60;
  return o;
}

// Runs `shape` once through the Communicator's method for its collective and returns the number
// of wrong elements over all ranks. Buffers start 8 bytes into their allocations (not 16-byte
// aligned: the kernels' scalar path), outputs poisoned first.
uint64_t check(Communicator& comm, const CollectiveCall& shape, bool in_place) {
  HostCollectiveBuffers buffers(shape, comm.size(), in_place, /*offset*/ 8);
  buffers.prepare(shape.count);
  const CollectiveCall& c = buffers.call();
  switch (c.collective) {
    case Collective::AllReduce: comm.all_reduce(c.send, c.recv, c.count, c.dtype, c.op); break;
    case Collective::ReduceScatter: comm.reduce_scatter(c.send, c.recv, c.count, c.dtype, c.op); break;
    case Collective::AllGather: comm.all_gather(c.send, c.recv, c.count, c.dtype); break;
    case Collective::Broadcast: comm.broadcast(c.send, c.recv, c.count, c.dtype, c.root); break;
    case Collective::Reduce: comm.reduce(c.send, c.recv, c.count, c.dtype, c.op, c.root); break;
    case Collective::AllToAll: comm.all_to_all(c.send, c.recv, c.count, c.dtype); break;
  }
  return buffers.wrong_elements();
}

CollectiveCall shape_of(Collective collective, uint64_t count, DataType dtype, ReduceOp op, int root) {
  CollectiveCall call;
  call.collective = collective;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.root = collective == Collective::Broadcast || collective == Collective::Reduce ? root : -1;
  return call;
}

uint64_t check_all_reduce(Communicator& comm, uint64_t count, DataType dtype, ReduceOp op, bool in_place) {
  return check(comm, shape_of(Collective::AllReduce, count, dtype, op, -1), in_place);
}

constexpr Collective kOtherCollectives[] = {Collective::ReduceScatter, Collective::AllGather, Collective::Broadcast,
                                            Collective::Reduce};

}  // namespace

// Backends by name (CCC_BACKEND, --backend, Python) and by kind (Communicator::create): every
// name round-trips, another is refused, and a backend that cannot serve the request says why.
TEST(Communicator, BackendsByNameAndKind) {
  for (BackendKind kind : {BackendKind::Host, BackendKind::Cuda, BackendKind::Sim})
    EXPECT_EQ(backend_named(backend_name(kind)), kind) << backend_name(kind);
  EXPECT_EQ(backend_named("gpu"), std::nullopt);
  EXPECT_EQ(backend_names(), "\"host\", \"cuda\" or \"sim\"");
  Communicator host = Communicator::create(BackendKind::Host, 3);
  EXPECT_EQ(host.size(), 3);
  EXPECT_EQ(host.backend(), BackendKind::Host);
  try {
    Communicator::create_rank(BackendKind::Sim, UniqueId{}, 2, 0);
    ADD_FAILURE() << "a simulator rank per process was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidUsage);
    EXPECT_NE(std::string(e.what()).find("simulates every rank in one process"), std::string::npos) << e.what();
  }
}

TEST(Communicator, AllReduceEveryDtype) {
  Communicator comm = Communicator::host(3, options("ring"));
  for (DataType t : kAllDataTypes)
    EXPECT_EQ(check_all_reduce(comm, 4097, t, ReduceOp::Sum, false), 0u) << data_type_name(t);
}

TEST(Communicator, AllReduceEveryOp) {
  Communicator comm = Communicator::host(4, options("ring"));
  for (DataType t : {DataType::F32, DataType::I8})
    for (ReduceOp op : kAllReduceOps)
      EXPECT_EQ(check_all_reduce(comm, 1003, t, op, false), 0u) << data_type_name(t) << " " << reduce_op_name(op);
}

TEST(Communicator, AllReduceRankCountsCountsAndPlacement) {
  for (int n : {1, 2, 5, 8}) {
    Communicator comm = Communicator::host(n, options("ring"));
    for (bool in_place : {false, true})
      for (uint64_t count : {0u, 1u, 7u, 100003u})
        EXPECT_EQ(check_all_reduce(comm, count, DataType::F32, ReduceOp::Sum, in_place), 0u)
            << "N " << n << " count " << count << (in_place ? " in place" : "");
  }
}

TEST(Communicator, AllReduceEveryShippedSchedule) {
  for (const char* algo : {"ring", "oneshot", "twoshot", "butterfly", "tree", "dbtree"}) {
    Communicator comm = Communicator::host(4, options(algo));
    EXPECT_EQ(check_all_reduce(comm, 77777, DataType::I32, ReduceOp::Sum, false), 0u) << algo;
  }
}

// The fused allreduce + residual + RMSNorm (docs/epilogue.md) through every shipped allreduce
// schedule (and protocol ll where the small sizes take it), with blocks of several threads
// (block_sum): rows from one (fewer than the ranks) to ten, row lengths that are not a multiple
// of a vector, in place and out, each type it takes. Every rank's output must be within the
// norm's rounding of the norm of the exact sums, its residual_out exactly those sums, and its
// fp8 output, where it has one, the output scaled and rounded to nearest e4m3 (saturated).
TEST(CommunicatorEpilogue, ResidualRmsNormOnEveryShippedAllreduce) {
  struct Case {
    uint64_t rows, hidden;
    DataType dtype;
    bool in_place;
    std::optional<float> quant_scale;  // an fp8 output too (some of it saturated at 448)
  };
  const Case cases[] = {{1, 1001, DataType::BF16, false, 1 / 256.0f},
                        {3, 100, DataType::F16, true, std::nullopt},
                        {10, 64, DataType::F32, false, 0.01f}};
  for (const auto& [algo, protocol] :
       {std::pair{"ring", Protocol::Simple}, std::pair{"oneshot", Protocol::Simple}, std::pair{"twoshot", Protocol::Simple},
        std::pair{"butterfly", Protocol::Simple}, std::pair{"tree", Protocol::Simple}, std::pair{"dbtree", Protocol::Simple},
        std::pair{"oneshot", Protocol::Ll}, std::pair{"twoshot", Protocol::Ll}}) {
    CommOptions o = options(algo);
    o.protocol = protocol;
    o.host_block_threads = protocol == Protocol::Ll ? 7 : 32;
    const int n = std::string(algo) == "butterfly" ? 4 : 5;
    Communicator comm = Communicator::host(n, o);
    for (const Case& c : cases) {
      CollectiveCall shape = shape_of(Collective::AllReduce, c.rows * c.hidden, c.dtype, ReduceOp::Sum, -1);
      shape.epilogue = Epilogue::ResidualRmsNorm;
      shape.hidden = c.hidden;
      shape.eps = 1e-5f;
      shape.quant_scale = c.quant_scale;
      HostCollectiveBuffers buffers(shape, n, c.in_place, /*offset*/ 8);
      buffers.prepare(c.rows);
      comm.run(buffers.call());
      EXPECT_EQ(buffers.wrong_elements(), 0u) << algo << " " << protocol_name(protocol) << " " << c.rows << " rows of "
                                              << c.hidden << " " << data_type_name(c.dtype);
    }
  }
}

// A rank's channels meet before the norm (Progress::meet_own_channels): each channel norms a run
// of whole rows that every channel's slices cut across, so a channel that went ahead would norm
// rows its siblings (or the peers' copies) had not written yet: poisoned NaN, or a race under
// ThreadSanitizer (make test-tsan runs this test). Several calls, four channels, two to a core;
// the rank's other 20 blocks are norm blocks (a row each: rmsnorm_rank_blocks), which wait from
// their start and must not norm before every channel has arrived.
TEST(CommunicatorEpilogue, ChannelsMeetBeforeTheyNormRowsTheirSiblingsWrote) {
  CommOptions o = options("twoshot");
  o.channels = 4;
  o.host_block_threads = 4;
  Communicator comm = Communicator::host(3, o);
  CollectiveCall shape = shape_of(Collective::AllReduce, 24 * 96, DataType::F32, ReduceOp::Sum, -1);
  shape.epilogue = Epilogue::ResidualRmsNorm;
  shape.hidden = 96;
  HostCollectiveBuffers buffers(shape, 3, /*in_place*/ false);
  for (uint64_t call = 1; call <= 6; ++call) {
    buffers.prepare(call);
    comm.run(buffers.call());
    ASSERT_EQ(buffers.wrong_elements(), 0u) << "call " << call;
  }
}

// Reduce_scatter, allgather, broadcast and reduce through their shipped ring schedules.
class CommunicatorCollective : public ::testing::TestWithParam<Collective> {};

TEST_P(CommunicatorCollective, EveryDtype) {
  Communicator comm = Communicator::host(3, options());
  for (DataType t : kAllDataTypes)
    EXPECT_EQ(check(comm, shape_of(GetParam(), 1003, t, ReduceOp::Sum, 1), false), 0u) << data_type_name(t);
}

TEST_P(CommunicatorCollective, RankCountsRootsCountsAndPlacement) {
  for (int n : {1, 2, 5}) {
    Communicator comm = Communicator::host(n, options());
    for (int root : {0, n - 1})
      for (bool in_place : {false, true})
        for (uint64_t count : {0u, 1u, 7u, 100003u})
          EXPECT_EQ(check(comm, shape_of(GetParam(), count, DataType::F32, ReduceOp::Sum, root), in_place), 0u)
              << "N " << n << " root " << root << " count " << count << (in_place ? " in place" : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Host, CommunicatorCollective, ::testing::ValuesIn(kOtherCollectives),
                         [](const auto& info) { return std::string(collective_name(info.param)); });

// The reducing ones, under every op.
class CommunicatorReduction : public ::testing::TestWithParam<Collective> {};

TEST_P(CommunicatorReduction, EveryOp) {
  Communicator comm = Communicator::host(4, options());
  for (DataType t : {DataType::F32, DataType::I8})
    for (ReduceOp op : kAllReduceOps)
      EXPECT_EQ(check(comm, shape_of(GetParam(), 777, t, op, 3), false), 0u) << data_type_name(t) << " " << reduce_op_name(op);
}

INSTANTIATE_TEST_SUITE_P(Host, CommunicatorReduction, ::testing::Values(Collective::ReduceScatter, Collective::Reduce),
                         [](const auto& info) { return std::string(collective_name(info.param)); });

// Alltoall through each shipped schedule, out of place (HostCollectiveBuffers: outputs poisoned,
// buffers misaligned by 8 bytes, every element against the reference): rank counts that are and
// are not powers of two, empty, odd and large counts.
TEST(Communicator, AllToAllEveryShippedScheduleRankCountAndCount) {
  for (const char* algo : {"alltoall_direct", "alltoall_bruck"})
    for (int n : {1, 2, 3, 4, 5, 8}) {
      Communicator comm = Communicator::host(n, options(algo));
      for (uint64_t count : {0u, 1u, 7u, 40009u})
        EXPECT_EQ(check(comm, shape_of(Collective::AllToAll, count, DataType::F32, ReduceOp::Sum, -1), false), 0u)
            << algo << " N " << n << " count " << count;
    }
}

// Element sizes from 1 to 8 bytes: Bruck with every dtype, direct with one of each size.
TEST(Communicator, AllToAllEveryDtype) {
  Communicator bruck = Communicator::host(3, options("alltoall_bruck"));
  for (DataType t : kAllDataTypes)
    EXPECT_EQ(check(bruck, shape_of(Collective::AllToAll, 1003, t, ReduceOp::Sum, -1), false), 0u) << data_type_name(t);
  Communicator direct = Communicator::host(5, options("alltoall_direct"));
  for (DataType t : {DataType::F64, DataType::I32, DataType::F16, DataType::U8})
    EXPECT_EQ(check(direct, shape_of(Collective::AllToAll, 1003, t, ReduceOp::Sum, -1), false), 0u) << data_type_name(t);
}

// In place, a rank would overwrite blocks its peers have yet to read: refused, not run wrong.
TEST(Communicator, AllToAllRefusesInPlace) {
  Communicator comm = Communicator::host(2, options());
  try {
    check(comm, shape_of(Collective::AllToAll, 16, DataType::F32, ReduceOp::Sum, -1), /*in_place*/ true);
    FAIL() << "in-place alltoall ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("in-place alltoall (send == recv) is not supported"), std::string::npos)
        << e.what();
  }
}

// NCCL's reduce leaves the non-root ranks' recv buffers alone: partial sums live in staging.
TEST(Communicator, ReduceLeavesNonRootOutputsAlone) {
  const int n = 4, root = 2;
  const uint64_t count = 4097;
  Communicator comm = Communicator::host(n, options());
  HostCollectiveBuffers buffers(shape_of(Collective::Reduce, count, DataType::F32, ReduceOp::Sum, root), n, false);
  buffers.prepare(1);
  comm.run(buffers.call());
  EXPECT_EQ(buffers.wrong_elements(), 0u);
  std::vector<float> poisoned(count);
  poison(DataType::F32, count, poisoned.data());
  for (int r = 0; r < n; ++r) {
    if (r == root) continue;
    EXPECT_EQ(std::memcmp(buffers.call().recv[r], poisoned.data(), count * sizeof(float)), 0) << "rank " << r;
  }
}

TEST(Communicator, ReportsWhatCannotRun) {
  Communicator comm = Communicator::host(3, options("butterfly"));
  std::vector<float> a(8), b(8), c(8);
  const void* send[] = {a.data(), b.data(), c.data()};
  void* recv[] = {a.data(), b.data(), c.data()};
  try {
    comm.all_reduce(send, recv, 8, DataType::F32, ReduceOp::Sum);
    FAIL() << "butterfly needs a power of two";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'N is pow2' does not hold for N = 3"), std::string::npos) << e.what();
  }
  Communicator unknown = Communicator::host(3, options("warp-drive"));
  try {
    unknown.all_reduce(send, recv, 8, DataType::F32, ReduceOp::Sum);
    FAIL() << "no such schedule";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no shipped allreduce schedule named 'warp-drive'"), std::string::npos);
  }
}

// CommOptions::defines set a user schedule's parameters: the grid allreduce (tests/lit) runs
// correctly with its default column count and with another, and a column count its requirement
// refuses, or a name it has no parameter for, fails the call with the instantiation's message.
TEST(Communicator, DefinesSetTheScheduleParameters) {
  const std::string path = std::string(CCC_SOURCE_DIR) + "/tests/lit/instantiate/param_grid.sched";
  auto run = [&](std::map<std::string, int64_t> defines) {
    CommOptions o = options();
    o.schedule = SourceFile{path, test::read_file(path)};
    o.defines = std::move(defines);
    Communicator comm = Communicator::host(4, o);
    return check_all_reduce(comm, 1001, DataType::F32, ReduceOp::Sum, false);
  };
  EXPECT_EQ(run({}), 0u);
  EXPECT_EQ(run({{"C", 4}}), 0u);
  for (auto [defines, message] : std::vector<std::pair<std::map<std::string, int64_t>, std::string>>{
           {{{"C", 3}}, "does not hold for N = 4"},
           {{{"D", 1}}, "'D' is defined, but schedule 'grid' has no such parameter (it has: C)"}}) {
    try {
      run(defines);
      FAIL() << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST(Communicator, MixedPlacementAndUseAfterDestroy) {
  Communicator comm = Communicator::host(2, options());
  std::vector<float> a(64), b(64), c(64);
  const void* send[] = {a.data(), b.data()};
  void* recv[] = {a.data(), c.data()};
  try {
    comm.all_reduce(send, recv, 64, DataType::F32, ReduceOp::Sum);
    FAIL() << "rank 0 in place, rank 1 not";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "allreduce: 1 of 2 ranks are in place; all or none must be");
  }
  comm.destroy();
  try {
    comm.size();
    FAIL() << "used after destroy";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidUsage);
    EXPECT_STREQ(e.what(), "communicator used after destroy");
  }
}

// One communicator used from several threads at once: calls are serialised, every result right.
TEST(Communicator, CallsFromSeveralThreadsAreSerialised) {
  const int n = 3;
  Communicator comm = Communicator::host(n, options("ring"));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) wrong += check_all_reduce(comm, 1000 + 64 * i, DataType::I32, ReduceOp::Sum, false) != 0;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
}

// A constructor that fails once tracing is asked for throws and writes nothing: the trace starts
// with the communicator, once its backend exists (it used to be finished against a backend that
// was never made: an empty file, or a crash for a CUDA communicator without its devices).
TEST(Communicator, AConstructorThatFailsWhileTracingThrowsAndWritesNoTrace) {
  const std::string path = testing::TempDir() + "failed_constructor.trace.json";
  std::filesystem::remove(path);
  CommOptions bad_topology;
  bad_topology.trace_file = path;
  bad_topology.topology_file = "/nonexistent/machine.topo";
  EXPECT_THROW(Communicator::host(2, bad_topology), Error);
  CommOptions traced;
  traced.trace_file = path;
  EXPECT_THROW(Communicator::cuda({99999}, traced), Error);  // no driver here; no such device anywhere
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Communicator, TimeoutsAreCheckedAndInfiniteMeansForEver) {
  EXPECT_EQ(Communicator::timeout_ns(2.5), 2'500'000'000u);
  EXPECT_EQ(Communicator::timeout_ns(std::numeric_limits<double>::infinity()), ~0ULL);
  EXPECT_EQ(Communicator::timeout_ns(1e30), ~0ULL);
  for (double bad : {0.0, -1.0, std::nan("")}) EXPECT_THROW(Communicator::timeout_ns(bad), Error) << bad;
  setenv("CCC_TIMEOUT", "7", 1);
  EXPECT_EQ(Communicator::timeout_ns(std::nullopt), 7'000'000'000u);
  EXPECT_EQ(Communicator::timeout_ns(1.0), 1'000'000'000u) << "an explicit timeout wins";
  setenv("CCC_TIMEOUT", "soon", 1);
  EXPECT_THROW(Communicator::timeout_ns(std::nullopt), Error);
  unsetenv("CCC_TIMEOUT");
  EXPECT_EQ(Communicator::timeout_ns(std::nullopt), 600'000'000'000u) << "10 minutes, PyTorch's default";
}

// Threads per host block (fibers): checked, from the option or the environment, and every count
// computes what one thread does (the ctest environment runs this file with 32; docs/runtime.md).
TEST(Communicator, HostBlockThreadsAreCheckedAndEveryCountComputesTheSame) {
  for (int bad : {-1, 1025}) {
    CommOptions o = options();
    o.host_block_threads = bad;
    try {
      Communicator::host(2, o);
      FAIL() << bad << " threads";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_EQ(std::string(e.what()), fmt::format("host_block_threads {}: a thread block has 1 to 1024 threads", bad));
    }
  }
  const char* before = std::getenv("CCC_HOST_BLOCK_THREADS");
  const std::string kept = before != nullptr ? before : "";
  for (const char* bad : {"0", "lots", "2048"}) {
    setenv("CCC_HOST_BLOCK_THREADS", bad, 1);
    EXPECT_THROW(Communicator::host(2, options()), Error) << bad;
  }
  setenv("CCC_HOST_BLOCK_THREADS", "3", 1);
  for (int threads : {0, 1, 7}) {  // 0: the environment's 3
    CommOptions o = options("twoshot");
    o.host_block_threads = threads;
    Communicator comm = Communicator::host(3, o);
    EXPECT_EQ(check_all_reduce(comm, 100003, DataType::F32, ReduceOp::Sum, false), 0u) << threads << " threads";
  }
  if (before != nullptr)
    setenv("CCC_HOST_BLOCK_THREADS", kept.c_str(), 1);
  else
    unsetenv("CCC_HOST_BLOCK_THREADS");
}

TEST(Communicator, DefaultsToTheRingWithoutATopology) {
  Communicator comm = Communicator::host(4, options());
  CollectiveCall call;
  call.count = 1 << 20;
  EXPECT_EQ(comm.choice_for(call).algorithm, "ring");
  call.collective = Collective::AllToAll;  // no ring: the direct exchange, not Bruck
  EXPECT_EQ(comm.choice_for(call).algorithm, "alltoall_direct");
}

TEST(CApi, AllReduceThroughTheCApi) {
  const int n = 3;
  const size_t count = 1001;
  cccComm_t comms[n];
  ASSERT_EQ(cccCommInitAllHost(comms, n), cccSuccess);
  std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) buf[r][i] = static_cast<int32_t>(i * (r + 1));
  for (int r = n - 1; r >= 0; --r)  // any order: each call queues its rank
    ASSERT_EQ(cccAllReduce(buf[r].data(), buf[r].data(), count, cccInt32, cccSum, comms[r], nullptr), cccSuccess)
        << cccGetLastError(comms[r]);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << cccGetLastError(comms[r]);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf[r][i], static_cast<int32_t>(6 * i)) << r << " " << i;
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// cccAllToAll: block p of rank r's recvbuff is block r of rank p's sendbuff; in place is
// cccInvalidArgument.
TEST(CApi, AllToAllThroughTheCApi) {
  const int n = 3;
  const size_t count = 101;
  cccComm_t comms[n];
  ASSERT_EQ(cccCommInitAllHost(comms, n), cccSuccess);
  std::vector<std::vector<int32_t>> send(n, std::vector<int32_t>(n * count)), recv(n, std::vector<int32_t>(n * count, -1));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < n * count; ++i) send[r][i] = static_cast<int32_t>(1000000 * r + i);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(cccAllToAll(send[r].data(), recv[r].data(), count, cccInt32, comms[r], nullptr), cccSuccess)
        << cccGetLastError(comms[r]);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << cccGetLastError(comms[r]);
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(recv[r][p * count + i], send[p][r * count + i]) << "rank " << r << " block " << p << " element " << i;
  EXPECT_EQ(cccAllToAll(send[0].data(), send[0].data(), count, cccInt32, comms[0], nullptr), cccInvalidArgument);
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

TEST(Communicator, SelectsBySizeOnATopology) {
  CommOptions o = options();
  o.topology_file = std::string(CCC_SOURCE_DIR) + "/topologies/dgx-h100.topo";
  Communicator comm = Communicator::host(8, o);
  CollectiveCall small, large;
  small.count = 2;
  large.count = uint64_t{1} << 28;
  const std::string small_algo = comm.choice_for(small).algorithm, large_algo = comm.choice_for(large).algorithm;
  EXPECT_NE(small_algo, large_algo);
  // Large messages: a bandwidth-optimal schedule (each moves 2(N-1)/N of the message per rank).
  EXPECT_TRUE(large_algo == "ring" || large_algo == "twoshot" || large_algo == "butterfly") << large_algo;
  std::vector<const void*> send(8, nullptr);
  std::vector<void*> recv(8, nullptr);
  std::vector<std::vector<float>> bufs(8, std::vector<float>(2, 1.0f));
  for (int r = 0; r < 8; ++r) send[r] = recv[r] = bufs[r].data();
  comm.all_reduce(send, recv, 2, DataType::F32, ReduceOp::Sum);
  for (const auto& v : bufs) EXPECT_EQ(v, std::vector<float>(2, 8.0f)) << small_algo;
}

// A calibration file changes what the model sees exactly as a topology file with those constants
// written in would; one that does not parse refuses the communicator.
TEST(Communicator, CalibrationFileReplacesTheTopologysConstants) {
  const std::string dgx = std::string(CCC_SOURCE_DIR) + "/topologies/dgx-h100.topo";
  const std::string cal_path = testing::TempDir() + "comm.cal", calibrated_path = testing::TempDir() + "calibrated.topo";
  Calibration cal;
  cal.latency = 50e-6;  // slow flags: fewer serial latencies win up to larger sizes
  cal.bandwidth = 20e9;
  std::ofstream(cal_path) << format_calibration(cal);
  std::string errors;
  std::optional<Topology> topo = load_topology(dgx, errors);
  ASSERT_TRUE(topo) << errors;
  apply_calibration(*topo, cal);
  std::ofstream(calibrated_path) << format_topology(*topo);

  CommOptions with_cal = options(), written_in = options(), plain = options();
  with_cal.topology_file = dgx;
  with_cal.calibration_file = cal_path;
  written_in.topology_file = calibrated_path;
  plain.topology_file = dgx;
  Communicator a = Communicator::host(8, with_cal), b = Communicator::host(8, written_in), c = Communicator::host(8, plain);
  int differs_from_plain = 0;
  for (uint64_t count = 1; count <= (uint64_t{1} << 26); count *= 4) {
    CollectiveCall call;
    call.count = count;
    EXPECT_EQ(a.choice_for(call).algorithm, b.choice_for(call).algorithm) << count;
    differs_from_plain += a.choice_for(call).algorithm != c.choice_for(call).algorithm;
  }
  EXPECT_GT(differs_from_plain, 0) << "the calibration changed no choice: the test shows nothing";

  std::ofstream(cal_path) << "fabric latency=fast\n";
  try {
    Communicator::host(2, with_cal);
    ADD_FAILURE() << "a calibration file that does not parse was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("cannot use calibration file " + cal_path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(":1:16: error: latency must be a positive number"), std::string::npos) << e.what();
  }
  std::filesystem::remove(cal_path);
  std::filesystem::remove(calibrated_path);
}

// A kernel's build runs with the communicator's lock released. Held, it kept the other ranks'
// threads from launching while one thread compiled (seconds) and loaded a module, which on a GPU
// may wait for kernels that wait for those very launches. Rank 0's thread issues a warm call and
// then a cold one, whose compiler (a wrapper) waits until rank 1's thread, on this thread, has
// issued its warm call: with the lock held across the build that call could never get through,
// and the wrapper gives up after 30 s.
TEST(Communicator, AKernelIsBuiltWithoutTheLockAPeersThreadNeedsToLaunch) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / fmt::format("gated_cxx_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string gate = (dir / "gate").string(), started = (dir / "started").string(), go = (dir / "go").string();
  const std::string wrapper = (dir / "cxx").string();
  {
    std::ofstream out(wrapper);
    out << "#!/bin/sh\n"
        << "[ -e " << gate << " ] || exec g++ \"$@\"\n"
        << "touch " << started << "\n"
        << "for i in $(seq 300); do [ -e " << go << " ] && exec g++ \"$@\"; sleep 0.1; done\n"
        << "echo 'rank 1 never issued its call' >&2; exit 1\n";
  }
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  const char* saved = std::getenv("CCC_HOST_CXX");
  const std::string saved_cxx = saved != nullptr ? saved : "";
  setenv("CCC_HOST_CXX", wrapper.c_str(), 1);

  JitCache cache{std::filesystem::path()};
  CommOptions o = options();
  o.cache = &cache;
  Communicator comm = Communicator::host(2, o);
  const CollectiveCall warm = shape_of(Collective::AllReduce, 64, DataType::F32, ReduceOp::Sum, -1);
  const CollectiveCall cold = shape_of(Collective::AllReduce, 64, DataType::F64, ReduceOp::Sum, -1);
  std::vector<float> f[2];
  std::vector<double> d[2];
  for (int r = 0; r < 2; ++r) {
    f[r].assign(64, static_cast<float>(r + 1));
    d[r].assign(64, static_cast<double>(r + 1));
  }
  auto issue = [&](const CollectiveCall& call, int r) {
    void* buf = call.dtype == DataType::F32 ? static_cast<void*>(f[r].data()) : static_cast<void*>(d[r].data());
    comm.run_rank(call, r, buf, buf);
  };
  for (int r = 0; r < 2; ++r) issue(warm, r);
  comm.synchronize();
  std::ofstream{gate};

  std::string rank0_error;
  std::thread rank0([&] {
    try {
      issue(warm, 0);
      issue(cold, 0);
    } catch (const std::exception& e) {
      rank0_error = e.what();
    }
  });
  for (int i = 0; i < 600 && !std::filesystem::exists(started); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(std::filesystem::exists(started)) << "rank 0's build never started";
  issue(warm, 1);  // with the lock held by rank 0's build, this waited for it
  std::ofstream{go};
  rank0.join();
  EXPECT_EQ(rank0_error, "");
  issue(cold, 1);
  comm.synchronize();
  EXPECT_EQ(f[0][0], 6.0f);  // 1 + 2, then 3 + 3
  EXPECT_EQ(d[1][63], 3.0);

  if (saved != nullptr) setenv("CCC_HOST_CXX", saved_cxx.c_str(), 1); else unsetenv("CCC_HOST_CXX");
  std::filesystem::remove_all(dir);
}

// warm_up compiles what calls of the declared shapes will run, so the calls compile nothing.
// A memory-only cache of the test's own: every kernel it holds was built in this test.
TEST(Communicator, WarmUpCompilesAheadWhatTheCallsRun) {
  JitCache cache{std::filesystem::path()};
  CommOptions o = options();
  o.cache = &cache;
  Communicator comm = Communicator::host(3, o);
  const CollectiveCall f32 = shape_of(Collective::AllReduce, 1000, DataType::F32, ReduceOp::Sum, -1);
  CollectiveCall same_kernel = f32;
  same_kernel.count = 5000;  // one ring kernel serves every count
  comm.warm_up({f32, same_kernel}, /*in_place*/ false, Communicator::WarmUp::Wait);
  EXPECT_EQ(cache.builds(), 1u);
  EXPECT_EQ(check(comm, f32, false), 0u);
  EXPECT_EQ(check(comm, same_kernel, false), 0u);
  EXPECT_EQ(cache.builds(), 1u) << "the calls found the warmed kernel";
  EXPECT_EQ(check(comm, f32, true), 0u);
  EXPECT_EQ(cache.builds(), 2u) << "in place is another kernel, not warmed";

  // In the background: the call that needs the kernel while it compiles waits for that compile.
  const CollectiveCall i32 = shape_of(Collective::AllGather, 777, DataType::I32, ReduceOp::Sum, -1);
  comm.warm_up({i32});
  EXPECT_EQ(check(comm, i32, false), 0u);
  EXPECT_EQ(cache.builds(), 3u) << "compiled once, by the warm-up or by the call, not by both";

  const CollectiveCall bad_root = shape_of(Collective::Broadcast, 10, DataType::F32, ReduceOp::Sum, 3);
  try {
    comm.warm_up({bad_root});
    ADD_FAILURE() << "root 3 of 3 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("root 3 is not a rank"), std::string::npos) << e.what();
  }
  comm.warm_up({shape_of(Collective::AllReduce, 0, DataType::F64, ReduceOp::Max, -1)}, false,
               Communicator::WarmUp::Wait);
  EXPECT_EQ(cache.builds(), 3u) << "a count of 0 runs no kernel";
}

// A communicator destroyed while its warm-up still compiles waits for that thread first.
TEST(Communicator, DestroyJoinsItsWarmUp) {
  JitCache cache{std::filesystem::path()};
  CommOptions o = options();
  o.cache = &cache;
  Communicator comm = Communicator::host(2, o);
  comm.warm_up({shape_of(Collective::ReduceScatter, 64, DataType::F16, ReduceOp::Max, -1)});
  comm.destroy();
  EXPECT_EQ(cache.builds(), 1u);
}

// The rank limit comes before any per-rank work: 2^20 ranks used to start 2^20 rank states and
// check 2^40 buffer pairs before the code generator refused the count.
TEST(Communicator, RefusesARankCountOutsideTheLimitAtOnce) {
  for (int n : {0, -1, kMaxRanks + 1, 1 << 20}) {
    try {
      Communicator::host(n, options());
      FAIL() << n << " ranks";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_EQ(std::string(e.what()),
                fmt::format("a communicator has 1 .. 4096 ranks (the code generator's limit), got {}", n));
    }
  }
  // A GPU kernel holds fewer (ccc_abi.h): refused before any driver is asked, so here too.
  try {
    Communicator::cuda_virtual(0, CCC_MAX_DEVICE_RANKS + 1, options());
    FAIL() << "1025 virtual ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind("a CUDA communicator has at most 1024 ranks, got 1025: ", 0), 0u) << e.what();
  }
}

// A scratch allocation that fails is Error(System), not a std::bad_alloc out of the library.
TEST(Communicator, OutOfMemoryForScratchIsASystemError) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator reports the huge allocation instead of throwing bad_alloc";
#else
  // ring_reduce on 3 ranks stages count elements per rank in scratch: 2^60 bytes here. The
  // buffers are never touched (rank 0's scratch comes before any launch), so addresses that
  // only pass validation will do.
  Communicator comm = Communicator::host(3, options());
  const uint64_t count = uint64_t{1} << 58;
  const uintptr_t span = uintptr_t{1} << 60;  // one f32 buffer of `count`
  auto at = [&](int i) { return reinterpret_cast<void*>(i * span + 64); };
  const void* send[] = {at(0), at(2), at(4)};
  void* recv[] = {at(1), at(3), at(5)};
  try {
    comm.reduce(send, recv, count, DataType::F32, ReduceOp::Sum, 0);
    FAIL() << "2^60 bytes of scratch";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::System);
    EXPECT_STREQ(e.what(), "out of host memory (a rank's scratch or state)");
  }
#endif
}

namespace {

std::vector<float> iota_from(float first, uint64_t count) {
  std::vector<float> v(count);
  for (uint64_t i = 0; i < count; ++i) v[i] = first + static_cast<float>(i % 1000);
  return v;
}

}  // namespace

// NCCL-legal NULLs: a broadcast's non-root ranks need no send buffer, a reduce's no recv
// buffer; out of place and with the root in place (the others then follow it).
TEST(Communicator, NullBuffersWhereNcclAllowsThem) {
  const int n = 4, root = 1;
  const uint64_t count = 4099;
  Communicator comm = Communicator::host(n, options());
  for (bool root_in_place : {false, true}) {
    SCOPED_TRACE(root_in_place ? "root in place" : "out of place");
    std::vector<std::vector<float>> in(n), out(n, std::vector<float>(count, -1.0f));
    for (int r = 0; r < n; ++r) in[r] = iota_from(static_cast<float>(r + 1), count);
    std::vector<const void*> send(n);
    std::vector<void*> recv(n);
    for (int r = 0; r < n; ++r) recv[r] = out[r].data();
    send[root] = root_in_place ? recv[root] : in[root].data();
    if (root_in_place) out[root] = in[root];
    comm.broadcast(send, recv, count, DataType::F32, root);
    for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], in[root]) << "broadcast, rank " << r;

    const std::vector<std::vector<float>> kept = in;
    for (int r = 0; r < n; ++r) {
      send[r] = in[r].data();
      recv[r] = nullptr;
    }
    std::vector<float> result(count, -1.0f);
    if (root_in_place) {
      result = in[root];
      send[root] = result.data();
    }
    recv[root] = result.data();
    comm.reduce(send, recv, count, DataType::F32, ReduceOp::Sum, root);
    for (uint64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += kept[r][i];
      ASSERT_EQ(result[i], sum) << "reduce, element " << i;
    }
    for (int r = 0; r < n; ++r) {
      if (r == root) continue;
      EXPECT_EQ(in[r], kept[r]) << "rank " << r << "'s input is not written";
    }
  }
}

TEST(CApi, NullBuffersWhereNcclAllowsThem) {
  const int n = 3, root = 2;
  const size_t count = 1001;
  cccComm_t comms[n];
  ASSERT_EQ(cccCommInitAllHost(comms, n), cccSuccess);
  std::vector<std::vector<float>> in(n), out(n, std::vector<float>(count, -1.0f));
  for (int r = 0; r < n; ++r) in[r] = iota_from(static_cast<float>(r + 1), count);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(cccBroadcast(r == root ? in[r].data() : nullptr, out[r].data(), count, cccFloat32, root, comms[r], nullptr),
              cccSuccess)
        << cccGetLastError(comms[r]);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << cccGetLastError(comms[r]);
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], in[root]) << "broadcast, rank " << r;

  std::vector<float> result(count, -1.0f);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(cccReduce(in[r].data(), r == root ? result.data() : nullptr, count, cccFloat32, cccSum, root, comms[r],
                        nullptr),
              cccSuccess)
        << cccGetLastError(comms[r]);
  for (int r = 0; r < n; ++r) ASSERT_EQ(cccCommSynchronize(comms[r]), cccSuccess) << cccGetLastError(comms[r]);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(result[i], in[0][i] + in[1][i] + in[2][i]) << i;

  EXPECT_EQ(cccReduce(in[0].data(), nullptr, count, cccFloat32, cccSum, 0, comms[0], nullptr), cccInvalidArgument);
  EXPECT_STREQ(cccGetLastError(comms[0]), "reduce: rank 0: null recv buffer");
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

// Protocol ll through the runtime: every shipped schedule of every collective (a test each, so
// ctest spreads them over cores), at rank counts that do and do not divide, over dtypes of 1, 2,
// 4 and 8 bytes (packed lines, two lines per element) and every op where it reduces, odd counts,
// in and out of place, roots at both ends; each communicator launches repeatedly over the same
// receive slots.
class CommunicatorLl : public testing::TestWithParam<size_t> {};

TEST_P(CommunicatorLl, EveryCollectiveShapeOfTheSchedule) {
  const DataType dtypes[] = {DataType::F32, DataType::F16, DataType::I8, DataType::F64, DataType::BF16};
  const ShippedSchedule& s = shipped_schedules()[GetParam()];
  int variant = static_cast<int>(GetParam()) * 6;  // the dtypes and ops rotate across schedules too
  const bool pow2 = s.name == "butterfly";
  for (int n : pow2 ? std::vector<int>{2, 4, 8} : std::vector<int>{2, 3, 5}) {
    CommOptions o = options(s.name);
    o.protocol = Protocol::Ll;
    Communicator comm = Communicator::host(n, o);
    for (bool in_place : {false, true}) {
      if (in_place && s.collective == Collective::AllToAll) continue;  // refused for any protocol
      const DataType t = dtypes[variant % 5];
      const ReduceOp op = kAllReduceOps[variant % std::size(kAllReduceOps)];
      ++variant;
      for (uint64_t count : {0u, 1u, 7u, 1003u})
        EXPECT_EQ(check(comm, shape_of(s.collective, count, t, op, count % 2 == 0 ? 0 : n - 1), in_place), 0u)
            << s.name << " N " << n << " " << data_type_name(t) << " " << reduce_op_name(op) << " count " << count
            << (in_place ? " in place" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shipped, CommunicatorLl, testing::Range<size_t>(0, shipped_schedules().size()),
                         [](const testing::TestParamInfo<size_t>& info) {
                           return std::string(shipped_schedules()[info.param].name);
                         });

TEST(CommunicatorLlCap, RefusesCallsAboveItsCap) {
  CommOptions o = options("oneshot");
  o.protocol = Protocol::Ll;
  Communicator comm = Communicator::host(2, o);
  EXPECT_EQ(check_all_reduce(comm, kLlMaxBytes / 4, DataType::F32, ReduceOp::Sum, false), 0u);
  try {
    check_all_reduce(comm, kLlMaxBytes / 4 + 1, DataType::F32, ReduceOp::Sum, false);
    FAIL() << "ll ran a call above its cap";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("protocol ll moves at most 262144 bytes per call"), std::string::npos) << e.what();
  }
}
