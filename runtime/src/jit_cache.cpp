#include "ccc/jit_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "content_hash.h"

namespace ccc {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "CCCJIT1\n";
constexpr size_t kHeaderBytes = 8 + 8 + 8;

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t get_u64(std::string_view in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

bool jit_log_enabled() {
  const char* v = std::getenv("CCC_JIT_LOG");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Other processes that share the cache directory (the ranks of one job, on a cold cache) build
// a key once: the builder holds an exclusive flock on `<key>.lock` while it builds and writes,
// and a process that finds the entry missing takes the lock before building, then looks again.
// The builder removes the lock file when done; a process that had opened it before then may
// build the entry a second time, which costs time and never correctness (entries are renamed
// into place whole). A builder that hangs holds the others at most kBuildLockWait, after which
// they build on their own.
class BuildLock {
 public:
  static constexpr auto kBuildLockWait = std::chrono::seconds(120);

  explicit BuildLock(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;  // an unwritable directory: build without it
    const auto deadline = std::chrono::steady_clock::now() + kBuildLockWait;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~BuildLock() {
    if (fd_ >= 0) ::close(fd_);  // the flock goes with the descriptor
  }
  BuildLock(const BuildLock&) = delete;
  BuildLock& operator=(const BuildLock&) = delete;
  // This process built the entry: the lock file is of no more use.
  void built() {
    if (fd_ >= 0) ::unlink(path_.c_str());
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

}  // namespace

JitCache::JitCache(fs::path dir) : dir_(std::move(dir)) {}

fs::path JitCache::default_dir() {
  if (const char* d = env_or_null("CCC_CACHE_DIR")) return d;
  if (const char* d = env_or_null("XDG_CACHE_HOME")) return fs::path(d) / "ccc";
  if (const char* d = env_or_null("HOME")) return fs::path(d) / ".cache" / "ccc";
  return {};
}

JitCache& JitCache::process_cache() {
  static JitCache cache(default_dir());
  return cache;
}

fs::path JitCache::entry_path(const std::string& key) const { return dir_ / (key + ".ccc"); }

void JitCache::forget_memory() {
  std::lock_guard lock(mutex_);
  memory_.clear();
}

JitCache::Entry JitCache::get(const std::string& key, std::string_view what,
                              const std::function<std::string()>& build,
                              const std::function<void(const std::string&)>& load) {
  std::shared_ptr<const std::string> in_memory;
  std::optional<std::shared_future<std::shared_ptr<const std::string>>> theirs;
  std::promise<std::shared_ptr<const std::string>> mine;
  {
    std::lock_guard lock(mutex_);
    if (auto it = memory_.find(key); it != memory_.end()) {
      in_memory = it->second;
    } else if (auto b = building_.find(key); b != building_.end()) {
      // Another thread (a warm-up, say) is producing this entry: wait for it, not for a second
      // compile of the same bytes. Its failure is this call's failure too.
      theirs = b->second;
    } else {
      building_.emplace(key, mine.get_future().share());
    }
  }
  if (theirs) in_memory = theirs->get();
  if (in_memory) {
    if (load) load(*in_memory);
    return {in_memory, Hit::Memory};
  }
  try {
    Entry entry = produce(key, what, build, load);
    mine.set_value(entry.bytes);
    std::lock_guard lock(mutex_);
    memory_.emplace(key, entry.bytes);
    fills_.fetch_add(1, std::memory_order_relaxed);
    building_.erase(key);
    return entry;
  } catch (...) {
    mine.set_exception(std::current_exception());
    std::lock_guard lock(mutex_);
    building_.erase(key);
    throw;
  }
}

JitCache::Entry JitCache::produce(const std::string& key, std::string_view what,
                                  const std::function<std::string()>& build,
                                  const std::function<void(const std::string&)>& load) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  // The disk's entry if it is there and loads; one that does not load is rebuilt below (said
  // once, at the first look).
  auto from_disk = [&](std::string_view how, bool first_look) -> std::shared_ptr<const std::string> {
    std::shared_ptr<const std::string> bytes = read_entry(entry_path(key));
    if (bytes && load) {
      try {
        load(*bytes);
      } catch (const std::runtime_error& e) {
        if (first_look)
          fmt::print(stderr, "ccc: warning: JIT cache entry {} does not load ({}); rebuilding it\n",
                     entry_path(key).string(), e.what());
        return nullptr;
      }
    }
    if (bytes && jit_log_enabled()) fmt::print(stderr, "ccc jit: {}: {} in {:.1f} ms\n", what, how, elapsed_ms());
    return bytes;
  };
  if (!dir_.empty())
    if (auto bytes = from_disk("disk hit", true)) return {bytes, Hit::Disk};
  std::optional<BuildLock> lock;
  bool writable = false;
  {
    std::lock_guard guard(mutex_);
    writable = !dir_.empty() && disk_writable_;
  }
  if (writable) {
    std::error_code ec;
    fs::create_directories(dir_, ec);  // the first entry's: the lock lives beside it
    lock.emplace(dir_ / (key + ".lock"));
    // Another process may have built it while this one waited for the lock.
    if (auto bytes = from_disk("built by another process, read", false)) return {bytes, Hit::Disk};
  }
  Entry entry{std::make_shared<const std::string>(build()), Hit::Miss};
  builds_.fetch_add(1, std::memory_order_relaxed);
  if (jit_log_enabled()) fmt::print(stderr, "ccc jit: {}: compiled in {:.1f} ms\n", what, elapsed_ms());
  if (load) load(*entry.bytes);  // first: bytes that do not load are not stored
  if (!dir_.empty()) write_entry(key, *entry.bytes);  // renamed over a broken entry
  if (lock) lock->built();
  return entry;
}

std::shared_ptr<const std::string> JitCache::read_entry(const fs::path& path) const {
  // stdio, not an istreambuf_iterator: libstdc++'s filebuf throws from a failed read (an entry
  // that is a directory: EISDIR), and that escaped every caller.
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return nullptr;  // no entry yet
  std::string file;
  char buf[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) file.append(buf, got);
  const bool unreadable = std::ferror(f) != 0;
  const int read_errno = errno;
  std::fclose(f);
  std::string problem;
  if (unreadable) {
    problem = fmt::format("unreadable: {}", std::strerror(read_errno));
  } else if (file.size() < kHeaderBytes || std::string_view(file).substr(0, 8) != kMagic) {
    problem = "bad header";
  } else if (get_u64(std::string_view(file).substr(8)) != file.size() - kHeaderBytes) {
    problem = "truncated";
  } else if (get_u64(std::string_view(file).substr(16)) !=
             checksum64(std::string_view(file).substr(kHeaderBytes))) {
    problem = "checksum mismatch";
  }
  if (!problem.empty()) {
    fmt::print(stderr, "ccc: warning: JIT cache entry {} is corrupt ({}); rebuilding it\n",
               path.string(), problem);
    return nullptr;
  }
  return std::make_shared<const std::string>(file.substr(kHeaderBytes));
}

void JitCache::write_entry(const std::string& key, const std::string& bytes) {
  {
    std::lock_guard lock(mutex_);
    if (!disk_writable_) return;
  }
  // Unique per process and call, in the entry's directory so the rename cannot cross filesystems.
  static std::atomic<uint64_t> serial{0};
  const fs::path temp =
      dir_ / fmt::format("{}.tmp.{}.{}", key, static_cast<long>(getpid()), serial++);
  std::string header(kMagic);
  put_u64(header, bytes.size());
  put_u64(header, checksum64(bytes));

  std::error_code ec;
  fs::create_directories(dir_, ec);
  std::string failure;
  if (ec) {
    failure = ec.message();
  } else {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      failure = std::strerror(errno);
    } else {
      fs::rename(temp, entry_path(key), ec);
      if (ec) failure = ec.message();
    }
  }
  if (failure.empty()) return;
  fs::remove(temp, ec);
  std::lock_guard lock(mutex_);
  if (!disk_writable_) return;
  disk_writable_ = false;
  fmt::print(stderr,
             "ccc: warning: cannot write the JIT cache in {} ({}); caching in memory only\n",
             dir_.string(), failure);
}

}  // namespace ccc
