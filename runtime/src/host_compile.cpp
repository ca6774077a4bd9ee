#include "host_compile.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "content_hash.h"
#include "embedded_files.h"

extern char** environ;

namespace ccc {

namespace fs = std::filesystem;

namespace {

// $TMPDIR (else /tmp), or JitError saying why it cannot be used: temp_directory_path throws
// filesystem_error for a TMPDIR that is missing or not a directory, which no caller expects.
fs::path temp_dir() {
  try {
    return fs::temp_directory_path();
  } catch (const fs::filesystem_error& e) {
    const char* env = std::getenv("TMPDIR");
    throw JitError(fmt::format("cannot use the temporary directory{}: {}",
                               env != nullptr ? fmt::format(" TMPDIR={}", env) : "", e.code().message()));
  }
}

// A fresh private directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (temp_dir() / "ccc-host-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw JitError(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw JitError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs argv[0] (looked up in PATH) with stdout and stderr going to `log`; returns the text it
// printed. Throws JitError if it cannot start or does not exit with status 0.
std::string run_tool(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    throw JitError(fmt::format("cannot run {}: {}", argv[0], std::strerror(spawned)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string output = read_file(log);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string command;
    for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
    throw JitError(fmt::format("{} failed:\n{}", command, output));
  }
  return output;
}

std::vector<std::string> compile_flags(const HostCompileRequest& req) {
  std::vector<std::string> flags = {"-std=c++20", "-O2", "-fPIC", "-shared", "-pthread"};
#ifdef CCC_HOST_SANITIZE
  flags.push_back(CCC_HOST_SANITIZE);
#endif
  if (const char* extra = std::getenv("CCC_HOST_CXXFLAGS")) {
    std::istringstream words(extra);
    for (std::string w; words >> w;) flags.push_back(w);
  }
  flags.insert(flags.end(), req.options.begin(), req.options.end());
  return flags;
}

}  // namespace

std::string host_compiler() {
  const char* cxx = std::getenv("CCC_HOST_CXX");
  return cxx != nullptr && *cxx != '\0' ? cxx : "g++";
}

const std::string& host_compiler_version() {
  static const std::string version = [] {
    TempDir dir;
    const std::string out = run_tool({host_compiler(), "--version"}, dir.path() / "version.txt");
    return out.substr(0, out.find('\n'));
  }();
  return version;
}

std::string host_compile(const HostCompileRequest& req) {
  TempDir dir;
  for (const EmbeddedFile& f : device_prelude_files()) write_file(dir.path() / f.name, f.text);
  write_file(dir.path() / req.name, req.source);
  std::vector<std::string> argv = {host_compiler()};
  for (std::string& f : compile_flags(req)) argv.push_back(std::move(f));
  const fs::path object = dir.path() / "kernel.so";
  argv.insert(argv.end(), {"-I", dir.path().string(), "-o", object.string(),
                           (dir.path() / req.name).string()});
  run_tool(argv, dir.path() / "compile.log");
  return read_file(object);
}

std::shared_ptr<const std::string> host_compile_cached(JitCache& cache, const HostCompileRequest& req,
                                                       const std::function<void(const std::string&)>& load) {
  ContentHash key;
  key.add("host").add(host_compiler()).add(host_compiler_version()).add(req.name)
      .add(req.source).add(device_prelude_hash());
  for (const std::string& f : compile_flags(req)) key.add(f);
  return cache.get(key.hex(), fmt::format("{} {}", host_compiler(), req.name),
                   [&] { return host_compile(req); }, load).bytes;
}

SharedObject::SharedObject(std::string_view image) {
  // dlopen needs a file. The name carries the image's checksum: glibc returns an already-loaded
  // object whose path matches, which is then only ever an identical image.
  std::string path = (temp_dir() / fmt::format("ccc-{:016x}-XXXXXX.so", checksum64(image))).string();
  const int fd = mkstemps(path.data(), 3);
  if (fd < 0) throw JitError(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  close(fd);
  // Unlinked on every path, a failed write (a full TMPDIR) included: nothing is left behind.
  struct Unlink {
    const std::string& path;
    ~Unlink() { unlink(path.c_str()); }
  } unlink_copy{path};
  write_file(path, image);
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) throw JitError(fmt::format("cannot load a compiled kernel: {}", dlerror()));
}

SharedObject::~SharedObject() { dlclose(handle_); }

void* SharedObject::symbol(const char* name) const {
  dlerror();
  void* address = dlsym(handle_, name);
  if (address == nullptr) throw JitError(fmt::format("the compiled kernel has no symbol '{}'", name));
  return address;
}

}  // namespace ccc
