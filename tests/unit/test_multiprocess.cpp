// Multi-process host communicators (docs/runtime.md, "Multi-process"): real processes, one per
// rank, each running tests/multiprocess/rank_driver.cpp; the root of their bootstrap runs here.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bootstrap.h"
#include "ccc/ccc.h"
#include "ccc/communicator.h"
#include "host_backend.h"
#include "mp_cases.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct RankRun {
  int status = 0;  // the exit code; -signal if killed by one; kTimedOut if still running at the limit
  std::string stderr_text;
};
constexpr int kTimedOut = -1000;

std::string hex(const cccUniqueId& id) {
  std::string s;
  for (char c : id.internal) s += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return s;
}

// ccc's entries in /dev/shm (other tests running beside this one, pytest's multiprocessing among
// them, make their own).
std::set<std::string> shm_entries() {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    if (e.path().filename().string().find("ccc") != std::string::npos) names.insert(e.path().filename().string());
  return names;
}

// The session tags of the ids this test made (new_id): other tests running beside this one have
// bootstrap sockets of their own.
std::set<uint64_t>& own_tags() {
  static std::set<uint64_t> tags;
  return tags;
}

// Lines of /proc/net/unix that name a bootstrap socket of an id this test made (abstract:
// "@ccc-bootstrap-<tag>").
std::string bootstrap_sockets() {
  std::ifstream in("/proc/net/unix");
  std::string line, found;
  while (std::getline(in, line))
    for (uint64_t tag : own_tags())
      if (line.find(fmt::format("@ccc-bootstrap-{:016x}", tag)) != std::string::npos) found += line + "\n";
  return found;
}

// Starts one rank driver per `args` entry (its arguments after the id) with `env` added to this
// process's environment, and waits for all of them, at most `limit`.
std::vector<RankRun> run_ranks(const std::string& id, const std::vector<std::vector<std::string>>& args,
                               const std::vector<std::string>& env, std::chrono::seconds limit) {
  const fs::path dir = fs::path(testing::TempDir()) / fmt::format("ccc_mp_{}", ::getpid());
  fs::create_directories(dir);
  std::vector<std::string> env_strings = env;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);  // earlier entries win
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::vector<pid_t> pids;
  std::vector<fs::path> logs;
  for (size_t i = 0; i < args.size(); ++i) {
    std::vector<std::string> argv_strings{CCC_MP_RANK, id};
    argv_strings.insert(argv_strings.end(), args[i].begin(), args[i].end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    static std::atomic<int> next_log{0};  // unique across concurrent run_ranks calls too
    logs.push_back(dir / fmt::format("rank{}_{}.log", i, next_log++));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, CCC_MP_RANK, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "posix_spawn: " << std::strerror(rc);
    pids.push_back(pid);
  }
  std::vector<RankRun> runs(args.size());
  std::vector<bool> done(args.size(), false);
  const auto deadline = Clock::now() + limit;
  for (size_t left = args.size(); left > 0;) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (done[i] || ::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      runs[i].status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      done[i] = true;
      --left;
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (done[i]) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        runs[i].status = kTimedOut;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    std::ifstream in(logs[i]);
    runs[i].stderr_text.assign(std::istreambuf_iterator<char>(in), {});
    fs::remove(logs[i]);
  }
  std::error_code busy;
  fs::remove(dir, busy);  // unless a concurrent run_ranks still has its logs there
  return runs;
}

std::string new_id() {
  cccUniqueId id{};
  EXPECT_EQ(cccGetUniqueId(&id), cccSuccess) << cccGetLastError(nullptr);
  ccc::UniqueId same;
  static_assert(sizeof id == sizeof same.bytes);
  std::memcpy(same.bytes.data(), &id, sizeof id);
  own_tags().insert(ccc::bootstrap_tag(same));
  return hex(id);
}

// Ranks 0..n-1 of one communicator, each with `scenario` (and `arg`).
std::vector<std::vector<std::string>> ranks(int n, const std::string& scenario, const std::string& arg = "") {
  std::vector<std::vector<std::string>> args;
  for (int r = 0; r < n; ++r) {
    args.push_back({std::to_string(n), std::to_string(r), scenario});
    if (!arg.empty()) args.back().push_back(arg);
  }
  return args;
}

std::string report(const std::vector<RankRun>& runs) {
  std::string s;
  for (size_t i = 0; i < runs.size(); ++i) s += fmt::format("rank {}: status {}\n{}", i, runs[i].status, runs[i].stderr_text);
  return s;
}

// Nothing of a communicator is left once its processes are gone: no file in /dev/shm (the arena
// is a memfd), no bootstrap socket (the root closes its own when it is done).
void expect_no_leftovers(const std::set<std::string>& shm_before) {
  EXPECT_EQ(shm_entries(), shm_before);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!bootstrap_sockets().empty() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(bootstrap_sockets(), "");
}

// The kernels the collectives scenario runs, compiled here into the JIT cache the ranks share,
// so that n processes do not compile each at once.
void warm_up(int n, const std::vector<ccc::mp::Case>& cases) {
  ccc::Communicator comm = ccc::Communicator::host(n);
  for (bool in_place : {false, true}) {
    std::vector<ccc::CollectiveCall> shapes;
    for (const ccc::mp::Case& c : cases)
      if (c.in_place == in_place) shapes.push_back({c.collective, c.count, c.dtype, c.op, c.root, {}, {}});
    comm.warm_up(shapes, in_place, ccc::Communicator::WarmUp::Wait);
  }
}

TEST(MultiProcess, EveryCollectiveOn2And3And4Ranks) {
  const std::set<std::string> shm_before = shm_entries();
  for (int n : {2, 3, 4}) {
    warm_up(n, ccc::mp::cases(n));
    const auto runs = run_ranks(new_id(), ranks(n, "collectives"), {"CCC_TIMEOUT=10"}, std::chrono::seconds(60));
    for (const RankRun& run : runs) EXPECT_EQ(run.status, 0) << n << " ranks:\n" << report(runs);
  }
  expect_no_leftovers(shm_before);
}

// 64 KiB per rank: a 40000-byte arena buffer runs in place; a malloc'd one, which would need
// 40000 more for its staging copy, is refused, saying so.
TEST(MultiProcess, ArenaBuffersNeedNoStagingAndACallThatDoesNotFitIsRefused) {
  warm_up(2, {ccc::mp::small_arena_case()});
  const auto runs = run_ranks(new_id(), ranks(2, "small-arena"), {"CCC_TIMEOUT=5", "CCC_ARENA_BYTES=65536"},
                              std::chrono::seconds(30));
  for (const RankRun& run : runs) EXPECT_EQ(run.status, 0) << report(runs);
}

// As NCCL jobs do (and ccc.torch): the process that made the id, which serves its bootstrap
// root, is a rank too. Its rank joins first, and the root must still answer the others.
TEST(MultiProcess, TheProcessThatMadeTheIdCanBeRankZero) {
  constexpr int kRanks = 8;  // the root's last answers go to rank 0 first, then to the 7 others
  const std::set<std::string> shm_before = shm_entries();
  cccUniqueId id{};
  ASSERT_EQ(cccGetUniqueId(&id), cccSuccess) << cccGetLastError(nullptr);
  cccResult_t here = cccInternalError;
  std::string here_error;
  std::thread rank0([&] {
    cccConfig_t config = CCC_CONFIG_INITIALIZER;
    config.timeoutSeconds = 10;
    cccComm_t comm = nullptr;
    here = cccCommInitRankConfig(&comm, kRanks, id, 0, &config);
    if (here != cccSuccess) here_error = cccGetLastError(nullptr);
    if (here == cccSuccess) here = cccCommDestroy(comm);
  });
  auto args = ranks(kRanks, "init");
  args.erase(args.begin());  // rank 0 is this process's thread
  const auto runs = run_ranks(hex(id), args, {"CCC_TIMEOUT=10"}, std::chrono::seconds(30));
  rank0.join();
  EXPECT_EQ(here, cccSuccess) << here_error;
  for (const RankRun& run : runs) EXPECT_EQ(run.status, 0) << report(runs);
  expect_no_leftovers(shm_before);
}

// The error a one-rank host communicator joined through `id` fails with, if it does.
std::optional<ccc::Error> join_alone(const ccc::UniqueId& id) {
  ccc::CommOptions options;
  options.timeout_seconds = 5;
  try {
    ccc::Communicator::host_rank(id, 1, 0, options);
    return std::nullopt;
  } catch (const ccc::Error& e) {
    return e;
  }
}

// An id that no rank uses gives its thread and sockets back after 1.5 x the timeout (2000 ids
// used to keep 2000 threads and 10000 descriptors for the life of the process), and a rank that
// comes later is refused instead of waiting.
TEST(MultiProcess, AnUnusedUniqueIdIsReleasedAfterTheTimeout) {
  setenv("CCC_TIMEOUT", "0.2", 1);  // ids made from here on give up after 0.3 s
  auto entries = [](const char* dir) { return std::distance(fs::directory_iterator(dir), fs::directory_iterator()); };
  const ccc::UniqueId first = ccc::Communicator::unique_id();  // what a first id makes once
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const auto threads = entries("/proc/self/task"), fds = entries("/proc/self/fd");
  for (int i = 0; i < 20; ++i) ccc::Communicator::unique_id();
  EXPECT_GE(entries("/proc/self/task"), threads + 20);
  EXPECT_GE(entries("/proc/self/fd"), fds + 40);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_LE(entries("/proc/self/task"), threads) << "the roots' threads ended";
  ccc::Communicator::unique_id();  // takes away what is left of the 21 expired roots, makes one
  EXPECT_LE(entries("/proc/self/fd"), fds + 6);
  const auto start = Clock::now();
  const std::optional<ccc::Error> refused = join_alone(first);
  ASSERT_TRUE(refused) << "joined through a released id";
  EXPECT_NE(std::string(refused->what()).find("bootstrap"), std::string::npos) << refused->what();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3)) << "refused at once, not after the join's timeout";

  // Another program now listens on the released id's port and answers junk: a clear
  // InvalidArgument, not an internal error.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(ccc::bootstrap_port(first));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(listener, 1), 0);
  std::thread junk([&] {
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    std::vector<char> bytes(4096, 'x');
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // after the hello
    [[maybe_unused]] const auto sent = ::send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::close(c);
  });
  const std::optional<ccc::Error> foreign = join_alone(first);
  junk.join();
  ASSERT_TRUE(foreign) << "joined through a port that is not a ccc root";
  EXPECT_EQ(foreign->kind(), ccc::ErrorKind::InvalidArgument) << foreign->what();
  EXPECT_NE(std::string(foreign->what()).find("not as a ccc bootstrap root"), std::string::npos) << foreign->what();
  ::close(listener);
  unsetenv("CCC_TIMEOUT");
}

TEST(MultiProcess, ABadUniqueIdIsRefused) {
  const auto runs = run_ranks(std::string(2 * CCC_UNIQUE_ID_BYTES, '0'), ranks(1, "init"), {}, std::chrono::seconds(20));
  EXPECT_EQ(runs[0].status, 10 + cccInvalidArgument) << report(runs);
  EXPECT_NE(runs[0].stderr_text.find("not a unique id"), std::string::npos) << report(runs);
}

TEST(MultiProcess, RanksThatDisagreeOnTheRankCountAllFail) {
  auto args = ranks(2, "init");
  args[1][0] = "3";
  const auto runs = run_ranks(new_id(), args, {"CCC_TIMEOUT=5"}, std::chrono::seconds(20));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 10 + cccInvalidUsage) << report(runs);
    EXPECT_NE(run.stderr_text.find("ranks"), std::string::npos) << report(runs);
  }
}

// The arena's size is fixed per communicator and every rank maps every part: ranks that ask for
// different sizes are refused, all of them, before anything is mapped.
TEST(MultiProcess, RanksThatDisagreeOnTheArenaSizeAllFail) {
  const std::string id = new_id();
  const auto all = ranks(2, "init");
  std::vector<RankRun> runs(2);
  std::vector<std::thread> starters;
  for (int r = 0; r < 2; ++r)
    starters.emplace_back([&, r] {
      runs[r] = run_ranks(id, {all[r]}, {"CCC_TIMEOUT=5", r == 0 ? "CCC_ARENA_BYTES=65536" : "CCC_ARENA_BYTES=131072"},
                          std::chrono::seconds(20))[0];
    });
  for (std::thread& t : starters) t.join();
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 10 + cccInvalidUsage) << report(runs);
    EXPECT_NE(run.stderr_text.find("arena bytes per rank"), std::string::npos) << report(runs);
  }
}

TEST(MultiProcess, TwoProcessesAsOneRankBothFail) {
  auto args = ranks(2, "init");
  args[1][1] = "0";
  const auto runs = run_ranks(new_id(), args, {"CCC_TIMEOUT=5"}, std::chrono::seconds(20));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 10 + cccInvalidUsage) << report(runs);
    EXPECT_NE(run.stderr_text.find("two processes joined as rank 0"), std::string::npos) << report(runs);
  }
}

TEST(MultiProcess, ARankThatNeverJoinsFailsTheOthersWithinTheTimeout) {
  const std::set<std::string> shm_before = shm_entries();
  auto args = ranks(3, "init");
  args.pop_back();  // rank 2 never starts
  const auto start = Clock::now();
  const auto runs = run_ranks(new_id(), args, {"CCC_TIMEOUT=1"}, std::chrono::seconds(20));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 10 + cccRemoteError) << report(runs);
    EXPECT_NE(run.stderr_text.find("rank(s) 2 of 3 did not join"), std::string::npos) << report(runs);
  }
  expect_no_leftovers(shm_before);
}

TEST(MultiProcess, MismatchedCallsFailEveryRankAndTheCommunicatorStaysFailed) {
  const auto runs = run_ranks(new_id(), ranks(3, "mismatch"), {"CCC_TIMEOUT=2"}, std::chrono::seconds(30));
  for (const RankRun& run : runs) EXPECT_EQ(run.status, 0) << report(runs);
}

TEST(MultiProcess, BroadcastRootsThatDifferFailEveryRank) {
  const auto runs = run_ranks(new_id(), ranks(2, "roots"), {"CCC_TIMEOUT=10"}, std::chrono::seconds(30));
  for (const RankRun& run : runs) EXPECT_EQ(run.status, 0) << report(runs);
}

TEST(MultiProcess, ARankKilledMidCollectiveFailsTheOthersWithinTheTimeout) {
  const std::set<std::string> shm_before = shm_entries();
  const auto start = Clock::now();
  const auto runs = run_ranks(new_id(), ranks(3, "kill", "1"), {"CCC_TIMEOUT=1"}, std::chrono::seconds(30));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(runs[1].status, -SIGKILL) << report(runs);
  for (int r : {0, 2}) {
    EXPECT_EQ(runs[r].status, 0) << report(runs);
    EXPECT_NE(runs[r].stderr_text.find("timed out waiting for a peer"), std::string::npos) << report(runs);
  }
  expect_no_leftovers(shm_before);
}

TEST(MultiProcess, AnAbortedRankFailsTheOthersWithoutWaitingForTheTimeout) {
  const auto start = Clock::now();
  const auto runs = run_ranks(new_id(), ranks(3, "abort", "2"), {"CCC_TIMEOUT=30"}, std::chrono::seconds(60));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  for (const RankRun& run : runs) EXPECT_EQ(run.status, 0) << report(runs);
  for (int r : {0, 1}) EXPECT_NE(runs[r].stderr_text.find("aborted"), std::string::npos) << report(runs);
}

// The CUDA join end to end against the fake driver (tests/fake_cuda: memfd allocations, mmap
// reservations): each rank creates its part, the root all-gathers the descriptors, every process
// reserves the arena at one address, maps every part and tears it all down. No kernel runs.
TEST(MultiProcess, CudaRanksJoinTheirArenaThroughTheFakeDriver) {
  const std::set<std::string> shm_before = shm_entries();
  for (int n : {2, 3}) {
    const auto runs = run_ranks(new_id(), ranks(n, "init"),
                                {"CCC_LIBCUDA=" CCC_FAKE_LIBCUDA, "CCC_BACKEND=cuda", "CCC_TIMEOUT=5"},
                                std::chrono::seconds(30));
    for (const RankRun& run : runs) EXPECT_EQ(run.status, 0) << n << " ranks:\n" << report(runs);
  }
  expect_no_leftovers(shm_before);
}

// Without a driver (this machine's libcuda is a stub) a CUDA rank fails before it joins, saying
// why, rather than leaving its peers to time out. (Its root, never served, listens until the
// process exits: the tests that check for leftovers come before this one.)
TEST(MultiProcess, ACudaRankWithoutADriverFailsAtOnceAndABadBackendIsRefused) {
  cccUniqueId id{};
  ASSERT_EQ(cccGetUniqueId(&id), cccSuccess);
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.backend = "cuda";
  cccComm_t comm = nullptr;
  if (std::getenv("CCC_LIBCUDA") == nullptr) {
    EXPECT_EQ(cccCommInitRankConfig(&comm, 2, id, 0, &config), cccSystemError);
    EXPECT_NE(std::string(cccGetLastError(nullptr)).find("no CUDA device"), std::string::npos) << cccGetLastError(nullptr);
  }
  config.backend = "tpu";
  EXPECT_EQ(cccCommInitRankConfig(&comm, 2, id, 0, &config), cccInvalidArgument);
  EXPECT_EQ(cccGetUniqueId(nullptr), cccInvalidArgument);
}

TEST(MultiProcess, InProcessCommunicatorsHaveNoArenaButReportAsyncErrors) {
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAllHost(comms, 2), cccSuccess);
  void* p = nullptr;
  EXPECT_EQ(cccCommMemAlloc(comms[0], &p, 64), cccInvalidUsage);
  cccResult_t async = cccInternalError;
  EXPECT_EQ(cccCommGetAsyncError(comms[0], &async), cccSuccess);
  EXPECT_EQ(async, cccSuccess);
  EXPECT_EQ(cccCommAbort(comms[0]), cccSuccess);
  EXPECT_EQ(cccCommDestroy(comms[1]), cccSuccess);
}

// cccCommRegister on the host backend (docs/runtime.md, "Buffers."): across processes another
// process cannot map malloc memory, so it is refused, pointing at cccCommMemAlloc; in one
// process the ranks share the address space and it succeeds with nothing to do.
TEST(MultiProcess, RegisteringIsRefusedAcrossHostProcessesAndANoOpInOne) {
  cccUniqueId id{};
  ASSERT_EQ(cccGetUniqueId(&id), cccSuccess) << cccGetLastError(nullptr);
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  config.backend = "host";
  config.timeoutSeconds = 10;
  cccComm_t comm = nullptr;
  ASSERT_EQ(cccCommInitRankConfig(&comm, 1, id, 0, &config), cccSuccess) << cccGetLastError(nullptr);
  std::vector<float> buffer(64);
  void* handle = nullptr;
  EXPECT_EQ(cccCommRegister(comm, buffer.data(), sizeof(float) * buffer.size(), &handle), cccInvalidUsage);
  EXPECT_NE(std::string(cccGetLastError(comm)).find("cccCommMemAlloc"), std::string::npos) << cccGetLastError(comm);
  EXPECT_EQ(handle, nullptr);
  EXPECT_EQ(cccCommDeregister(comm, buffer.data()), cccInvalidUsage);
  EXPECT_EQ(cccCommDestroy(comm), cccSuccess);

  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAllHost(comms, 2), cccSuccess);
  ASSERT_EQ(cccCommRegister(comms[0], buffer.data(), sizeof(float) * buffer.size(), &handle), cccSuccess)
      << cccGetLastError(comms[0]);
  EXPECT_EQ(cccCommRegister(comms[0], buffer.data(), 0, &handle), cccInvalidArgument);
  EXPECT_EQ(cccCommDeregister(comms[0], handle), cccSuccess);
  EXPECT_EQ(cccCommDeregister(comms[0], handle), cccInvalidArgument) << "deregistered already";
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

TEST(HostArena, AllocatesFirstFitCoalescesAndSaysWhenFull) {
  const uint64_t heap = 4096;
  const uint64_t bytes = ccc::HostArena::total_bytes(2, heap);
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  ccc::HostArena arena(map, 2, 1, heap);
  void* a = arena.heap().allocate(1000, "a");
  void* b = arena.heap().allocate(1000, "b");
  void* c = arena.heap().allocate(2000, "c");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_TRUE(arena.contains(a, 1000));
  EXPECT_FALSE(arena.contains(static_cast<char*>(map) + bytes, 1));
  EXPECT_GT(static_cast<void*>(arena.sync(1)), map) << "rank 1's sync state after rank 0's";
  try {
    arena.heap().allocate(1, "more");
    ADD_FAILURE() << "the heap is full";
  } catch (const ccc::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no room for 1 bytes of more"), std::string::npos) << e.what();
  }
  arena.heap().free(a);
  arena.heap().free(b);  // merges with a's block: 2048 bytes in one piece again
  EXPECT_EQ(arena.heap().allocate(2048, "a and b"), a);
  EXPECT_THROW(arena.heap().free(static_cast<char*>(c) + 1), ccc::Error);
  arena.heap().free(c);
  EXPECT_THROW(arena.heap().free(c), ccc::Error) << "freed twice";
}

}  // namespace
