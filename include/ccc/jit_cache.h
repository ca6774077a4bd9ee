// The JIT cache: compiled kernels (cubins, PTX, host shared objects) in memory and on disk.
//
// Entries are keyed by a hash of everything that determines the bytes (source, options, compiler
// version, arch, device prelude). On disk each entry is one file `<dir>/<key>.ccc`:
//   "CCCJIT1\n" | payload size (u64 LE) | checksum64(payload) (u64 LE) | payload
// written to a temporary name and renamed into place, so readers in other processes see a whole
// entry or none. A truncated or corrupt entry is rebuilt, never trusted. If the directory cannot
// be written the cache warns once and keeps entries in memory only.
#pragma once

#include <atomic>
#include <filesystem>
#include <future>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ccc {

class JitCache {
 public:
  // `dir` empty: memory only.
  explicit JitCache(std::filesystem::path dir);

  // The process-wide cache, in default_dir().
  static JitCache& process_cache();
  // $CCC_CACHE_DIR, else $XDG_CACHE_HOME/ccc, else $HOME/.cache/ccc; empty if none is set.
  static std::filesystem::path default_dir();

  enum class Hit { Memory, Disk, Miss };
  struct Entry {
    std::shared_ptr<const std::string> bytes;
    Hit hit = Hit::Miss;
  };

  // The entry for `key`, from memory, else disk, else `build()` (whose exceptions propagate and
  // cache nothing). `what` names the artifact in CCC_JIT_LOG lines. Thread-safe; while one
  // thread builds a key, other threads asking for it wait for that build (and share its
  // failure) instead of building it again.
  // `load`, if given, is called on the bytes before they are returned. A disk entry whose bytes
  // `load` refuses (throws std::runtime_error) was stored broken in a way the checksum cannot
  // see, e.g. written by a faulty build: it is rebuilt, replaced on disk, and the new bytes
  // loaded (their failure propagates). Without this such an entry failed every run for ever.
  Entry get(const std::string& key, std::string_view what,
            const std::function<std::string()>& build,
            const std::function<void(const std::string&)>& load = {});

  // How many times get() has called a `build` so far (disk and memory hits do not count).
  uint64_t builds() const { return builds_.load(std::memory_order_relaxed); }
  // How many entries get() has put in memory so far, from the disk or built: the first use of
  // each key in the process (what a warm-up moves ahead of the calls).
  uint64_t fills() const { return fills_.load(std::memory_order_relaxed); }

  // Drops the in-memory entries (the next get of a key reads the disk), for benchmarks and tests.
  void forget_memory();

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_path(const std::string& key) const;

 private:
  Entry produce(const std::string& key, std::string_view what, const std::function<std::string()>& build,
                const std::function<void(const std::string&)>& load);
  std::shared_ptr<const std::string> read_entry(const std::filesystem::path& path) const;
  void write_entry(const std::string& key, const std::string& bytes);

  std::filesystem::path dir_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const std::string>> memory_;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const std::string>>> building_;
  std::atomic<uint64_t> builds_{0};
  std::atomic<uint64_t> fills_{0};
  bool disk_writable_ = true;  // false after the first failed write (and its one warning)
};

}  // namespace ccc
