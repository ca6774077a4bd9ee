#include <gtest/gtest.h>

#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <fstream>
#include <future>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "content_hash.h"
#include "ccc/jit_cache.h"
#include "runtime_test_support.h"

using namespace ccc;
namespace fs = std::filesystem;
using Hit = JitCache::Hit;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void overwrite(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A deterministic payload large enough that a non-atomic write would be seen half done.
std::string payload(int seed, size_t size = 1 << 18) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) >> 3);
  return s;
}

}  // namespace

TEST(ContentHash, FieldsAreDelimited) {
  EXPECT_NE(ContentHash().add("ab").add("c").hex(), ContentHash().add("a").add("bc").hex());
  EXPECT_EQ(ContentHash().add("x").add(uint64_t{7}).hex(), ContentHash().add("x").add(uint64_t{7}).hex());
  EXPECT_EQ(ContentHash().hex().size(), 32u);
  EXPECT_EQ(checksum64(""), 0xcbf29ce484222325ULL);  // the FNV-1a 64 offset basis
  EXPECT_EQ(checksum64("a"), 0xaf63dc4c8601ec8cULL); // published FNV-1a test vector
}

TEST(JitCache, MissThenMemoryThenDiskHit) {
  test::ScratchDir dir;
  int builds = 0;
  auto build = [&] { ++builds; return std::string("image"); };
  JitCache cache(dir.path());
  EXPECT_EQ(cache.get("k1", "t", build).hit, Hit::Miss);
  EXPECT_EQ(cache.get("k1", "t", build).hit, Hit::Memory);
  cache.forget_memory();
  const JitCache::Entry again = cache.get("k1", "t", build);
  EXPECT_EQ(again.hit, Hit::Disk);
  EXPECT_EQ(*again.bytes, "image");
  JitCache other_process(dir.path());
  EXPECT_EQ(other_process.get("k1", "t", build).hit, Hit::Disk);
  EXPECT_EQ(other_process.get("k2", "t", build).hit, Hit::Miss);
  EXPECT_EQ(builds, 2);
}

TEST(JitCache, MemoryOnlyWithoutDirectory) {
  JitCache cache{fs::path()};
  int builds = 0;
  auto build = [&] { ++builds; return std::string("x"); };
  cache.get("k", "t", build);
  cache.forget_memory();
  EXPECT_EQ(cache.get("k", "t", build).hit, Hit::Miss);
  EXPECT_EQ(builds, 2);
}

TEST(JitCache, FailedBuildCachesNothing) {
  test::ScratchDir dir;
  JitCache cache(dir.path());
  EXPECT_THROW(cache.get("k", "t", []() -> std::string { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_FALSE(fs::exists(cache.entry_path("k")));
  EXPECT_EQ(cache.get("k", "t", [] { return std::string("ok"); }).hit, Hit::Miss);
}

TEST(JitCache, CorruptOrTruncatedEntryIsRebuilt) {
  test::ScratchDir dir;
  const std::string good = payload(1, 4096);
  {
    JitCache cache(dir.path());
    cache.get("k", "t", [&] { return good; });
  }
  const fs::path entry = JitCache(dir.path()).entry_path("k");
  const std::string whole = read_all(entry);
  std::string flipped = whole;
  flipped[whole.size() / 2] ^= 0x40;
  const std::pair<std::string, std::string> damages[] = {
      {flipped, "checksum mismatch"},
      {whole.substr(0, whole.size() - 1), "truncated"},
      {whole.substr(0, 10), "bad header"},
      {"", "bad header"},
  };
  for (const auto& [bytes, problem] : damages) {
    overwrite(entry, bytes);
    JitCache cache(dir.path());
    testing::internal::CaptureStderr();
    const JitCache::Entry e = cache.get("k", "t", [&] { return good; });
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(e.hit, Hit::Miss) << problem;
    EXPECT_EQ(*e.bytes, good);
    EXPECT_NE(err.find("is corrupt (" + problem + ")"), std::string::npos) << err;
    EXPECT_EQ(read_all(entry), whole) << "the rebuilt entry replaced the damaged one";
  }
}

namespace {

// Checks that an unwritable cache directory still caches in memory and warns exactly once.
void expect_memory_fallback(const fs::path& unwritable) {
  JitCache cache(unwritable);
  int builds = 0;
  auto build = [&] { ++builds; return std::string("bytes"); };
  testing::internal::CaptureStderr();
  EXPECT_EQ(cache.get("a", "t", build).hit, Hit::Miss);
  EXPECT_EQ(cache.get("b", "t", build).hit, Hit::Miss);
  EXPECT_EQ(cache.get("a", "t", build).hit, Hit::Memory);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(builds, 2);
  const size_t first = err.find("caching in memory only");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("warning", first), std::string::npos) << "more than one warning:\n" << err;
}

}  // namespace

TEST(JitCache, DirectoryUnderARegularFileFallsBackToMemory) {
  test::ScratchDir dir;
  overwrite(dir.path() / "file", "not a directory");
  expect_memory_fallback(dir.path() / "file" / "cache");
}

TEST(JitCache, ReadOnlyDirectoryFallsBackToMemory) {
  test::ScratchDir dir;
  const fs::perms read_only = fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                              fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(dir.path(), read_only);
  if (geteuid() != 0) {
    expect_memory_fallback(dir.path());
    return;
  }
  // Root writes anywhere (CI runs as root): check as user "nobody" in a child process.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    expect_memory_fallback(dir.path());
    _exit(testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the check failed as nobody (see above); 2: could not become nobody";
}

TEST(JitCache, TwoProcessesWritingOneEntryNeverSeeAPartialOne) {
  test::ScratchDir dir;
  constexpr int kKeys = 40;
  auto child = [&](int id) {
    // Any "corrupt" warning means a reader saw a half-written entry.
    if (std::freopen((dir.path() / ("stderr" + std::to_string(id))).c_str(), "w", stderr) == nullptr)
      _exit(3);
    for (int k = 0; k < kKeys; ++k) {
      JitCache cache(dir.path() / "cache");
      const std::string key = "key" + std::to_string(k);
      for (int round = 0; round < 3; ++round) {
        cache.forget_memory();
        if (*cache.get(key, "t", [&] { return payload(k); }).bytes != payload(k)) _exit(1);
      }
    }
    _exit(0);
  };
  pid_t pids[2];
  for (int id = 0; id < 2; ++id) {
    pids[id] = fork();
    ASSERT_GE(pids[id], 0);
    if (pids[id] == 0) child(id);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  for (int id = 0; id < 2; ++id)
    EXPECT_EQ(read_all(dir.path() / ("stderr" + std::to_string(id))), "");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path() / "cache")) {
    EXPECT_EQ(e.path().extension(), ".ccc") << "left behind: " << e.path();
    ++entries;
  }
  EXPECT_EQ(entries, kKeys);
}

// Processes sharing a cache directory build a missing key once (the ranks of one job on a cold
// cache used to compile every kernel once each): the others wait for the builder's lock, then
// read its entry. No lock file is left behind.
TEST(JitCache, ProcessesSharingTheDirectoryBuildAKeyOnce) {
  test::ScratchDir dir;
  constexpr int kProcesses = 4;
  const fs::path builds = dir.path() / "builds";
  pid_t pids[kProcesses];
  for (int id = 0; id < kProcesses; ++id) {
    pids[id] = fork();
    ASSERT_GE(pids[id], 0);
    if (pids[id] == 0) {
      JitCache cache(dir.path() / "cache");
      const auto entry = cache.get("kernel", "t", [&] {
        std::ofstream(builds, std::ios::app) << id << "\n";
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a compile's worth
        return payload(7);
      });
      _exit(*entry.bytes == payload(7) ? 0 : 1);
    }
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  const std::string built = read_all(builds);
  EXPECT_EQ(std::count(built.begin(), built.end(), '\n'), 1) << "built by: " << built;
  for (const auto& e : fs::directory_iterator(dir.path() / "cache"))
    EXPECT_EQ(e.path().extension(), ".ccc") << "left behind: " << e.path();
}

// While one thread builds a key, another asking for it waits for that build instead of building
// it again (a warm-up and the call that needs its kernel), and shares its failure.
TEST(JitCache, ConcurrentGetsOfOneKeyBuildOnce) {
  for (bool fail : {false, true}) {
    JitCache cache{fs::path()};
    std::promise<void> started, release;
    std::shared_future<void> go = release.get_future().share();
    auto slow = [&] {
      started.set_value();
      go.wait();
      if (fail) throw std::runtime_error("compile failed");
      return std::string("image");
    };
    auto first = std::async(std::launch::async, [&] { return cache.get("k", "t", slow); });
    started.get_future().wait();
    auto second = std::async(std::launch::async, [&] {
      return cache.get("k", "t", [] { return std::string("a second build"); });
    });
    // Give the second get time to find the build in flight (it also passes if it comes later:
    // then it is a memory hit, or after a failure a build of its own, which the checks tell).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release.set_value();
    if (fail) {
      EXPECT_THROW(first.get(), std::runtime_error);
      EXPECT_THROW(second.get(), std::runtime_error) << "the waiter shares the build's failure";
      EXPECT_EQ(cache.builds(), 0u);
      EXPECT_EQ(*cache.get("k", "t", [] { return std::string("rebuilt"); }).bytes, "rebuilt") << "nothing was cached";
    } else {
      EXPECT_EQ(*first.get().bytes, "image");
      EXPECT_EQ(*second.get().bytes, "image");
      EXPECT_EQ(cache.builds(), 1u);
    }
  }
}

// A payload stored broken behind a valid header and checksum (a faulty build wrote it) is found
// by the caller's load, rebuilt and replaced; before, every run failed on it for ever.
TEST(JitCache, EntryThatDoesNotLoadIsRebuiltAndReplaced) {
  test::ScratchDir dir;
  auto refuse_broken = [](const std::string& bytes) {
    if (bytes == "broken") throw std::runtime_error("not an image");
  };
  {
    JitCache cache(dir.path());
    cache.get("k", "t", [] { return std::string("broken"); });  // stored unloaded, as a bad build would
  }
  JitCache cache(dir.path());
  int builds = 0;
  std::string loaded;
  testing::internal::CaptureStderr();
  const JitCache::Entry e = cache.get("k", "t", [&] { ++builds; return std::string("good"); },
                                      [&](const std::string& bytes) { refuse_broken(bytes); loaded = bytes; });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.hit, Hit::Miss);
  EXPECT_EQ(*e.bytes, "good");
  EXPECT_EQ(loaded, "good");
  EXPECT_EQ(builds, 1);
  EXPECT_NE(err.find("does not load (not an image); rebuilding it"), std::string::npos) << err;
  JitCache next_process(dir.path());
  EXPECT_EQ(next_process.get("k", "t", [] { return std::string("unused"); }, refuse_broken).hit, Hit::Disk)
      << "the rebuilt entry replaced the broken one on disk";
  // A build that does not load either is an error, not a loop.
  JitCache always_broken(dir.path() / "other");
  EXPECT_THROW(always_broken.get("k", "t", [] { return std::string("broken"); }, refuse_broken), std::runtime_error);
}

// An entry that is a directory cannot be read (libstdc++'s filebuf threw from the read, out of
// every caller) or replaced: a warning each, and the cache carries on in memory.
TEST(JitCache, EntryThatIsADirectoryWarnsAndBuilds) {
  test::ScratchDir dir;
  JitCache cache(dir.path());
  fs::create_directories(cache.entry_path("k"));
  testing::internal::CaptureStderr();
  const JitCache::Entry e = cache.get("k", "t", [] { return std::string("image"); });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.hit, Hit::Miss);
  EXPECT_EQ(*e.bytes, "image");
  EXPECT_NE(err.find("is corrupt (unreadable: Is a directory); rebuilding it"), std::string::npos) << err;
  EXPECT_NE(err.find("caching in memory only"), std::string::npos) << err;
  EXPECT_EQ(cache.get("k", "t", [] { return std::string("unused"); }).hit, Hit::Memory);
}
