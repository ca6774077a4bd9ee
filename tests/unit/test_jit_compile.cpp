// NVRTC and host compiles of small kernels that use the embedded device prelude.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "ccc/errors.h"
#include "content_hash.h"
#include "embedded_files.h"
#include "host_backend.h"
#include "ccc_abi.h"
#include "host_compile.h"
#include "nvrtc_jit.h"
#include "shipped_schedules.h"
#include "runtime_test_support.h"

using namespace ccc;

namespace {

const char* kCudaKernel = R"(#include "ccc_abi.h"
extern "C" __global__ void scale(const ccc_launch_args args) {
  float* out = static_cast<float*>(args.own.output);
  const unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < args.count) out[i] *= 2.0f;
}
)";

const char* kHostKernel = R"(#include "ccc_abi.h"
extern "C" unsigned long long ccc_test_entry(const ccc_launch_args* args) {
  return args->count * 10 + CCC_ABI_VERSION;
}
)";

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST(EmbeddedPrelude, CarriesTheAbiHeader) {
  bool found = false;
  for (const EmbeddedFile& f : device_prelude_files())
    found |= f.name == "ccc_abi.h" && contains(std::string(f.text), "typedef struct ccc_launch_args");
  EXPECT_TRUE(found);
  EXPECT_EQ(device_prelude_hash().size(), 32u);
}

TEST(Nvrtc, CompilesToCubinForAmpereAndHopper) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    NvrtcRequest req;
    req.source = kCudaKernel;
    req.arch = arch;
    const NvrtcOutput out = nvrtc_build(req);
    EXPECT_EQ(out.image.substr(0, 4), "\x7f" "ELF") << arch;
    EXPECT_EQ(out.log, "") << arch;
  }
}

TEST(Nvrtc, CompilesToPtx) {
  NvrtcRequest req;
  req.source = kCudaKernel;
  req.target = NvrtcTarget::Ptx;
  const std::string ptx = nvrtc_build(req).image;
  EXPECT_TRUE(contains(ptx, ".target sm_90")) << ptx.substr(0, 400);
  EXPECT_TRUE(contains(ptx, ".entry scale"));
}

TEST(Nvrtc, ReportsCompileErrorsWithTheLog) {
  NvrtcRequest req;
  req.source = "extern \"C\" __global__ void broken() { undeclared_name = 1; }\n";
  req.name = "broken.cu";
  try {
    nvrtc_build(req);
    FAIL() << "expected a JitError";
  } catch (const JitError& e) {
    EXPECT_TRUE(contains(e.what(), "broken.cu")) << e.what();
    EXPECT_TRUE(contains(e.what(), "undeclared_name")) << e.what();
  }
}

TEST(Nvrtc, RejectsBadArch) {
  for (const char* arch : {"90", "sm_", "sm_9x", "compute_90", "sm_90b"}) {
    NvrtcRequest req;
    req.source = kCudaKernel;
    req.arch = arch;
    EXPECT_THROW(nvrtc_build(req), JitError) << arch;
  }
  EXPECT_FALSE(nvrtc_version().empty());
}

TEST(Nvrtc, CachedCompileIsADiskHitInAFreshCache) {
  test::ScratchDir dir;
  NvrtcRequest req;
  req.source = kCudaKernel;
  JitCache first(dir.path());
  const auto image = nvrtc_build_cached(first, req);
  JitCache second(dir.path());
  EXPECT_EQ(*nvrtc_build_cached(second, req), *image);
  req.arch = "sm_80";  // a different key
  EXPECT_NE(*nvrtc_build_cached(second, req), *image);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 2);
}

TEST(HostCompile, BuildsLoadsAndCallsAnEntry) {
  HostCompileRequest req;
  req.source = kHostKernel;
  SharedObject so(host_compile(req));
  auto entry = reinterpret_cast<unsigned long long (*)(const ccc_launch_args*)>(
      so.symbol("ccc_test_entry"));
  ccc_launch_args args{};
  args.count = 4;
  EXPECT_EQ(entry(&args), 40u + CCC_ABI_VERSION);
  EXPECT_THROW(so.symbol("not_there"), JitError);
}

TEST(HostCompile, ReportsCompilerErrors) {
  HostCompileRequest req;
  req.source = "int f() { return undeclared_name; }\n";
  req.name = "broken.cpp";
  try {
    host_compile(req);
    FAIL() << "expected a JitError";
  } catch (const JitError& e) {
    EXPECT_TRUE(contains(e.what(), "broken.cpp")) << e.what();
    EXPECT_TRUE(contains(e.what(), "undeclared_name")) << e.what();
  }
}

TEST(HostCompile, CachedObjectLoadsFromDisk) {
  test::ScratchDir dir;
  HostCompileRequest req;
  req.source = kHostKernel;
  JitCache first(dir.path());
  const auto built = host_compile_cached(first, req);
  JitCache second(dir.path());
  const auto loaded = host_compile_cached(second, req);
  EXPECT_EQ(*loaded, *built);
  SharedObject so(*loaded);
  EXPECT_NE(so.symbol("ccc_test_entry"), nullptr);
  EXPECT_FALSE(host_compiler_version().empty());
}

TEST(EmbeddedSchedules, ShippedSchedulesAreIndexedByCollectiveAndName) {
  const ShippedSchedule& ring = find_shipped_schedule(Collective::AllReduce, "ring");
  EXPECT_EQ(ring.file.name, "schedules/ring.sched");
  EXPECT_TRUE(contains(ring.file.text, "allreduce ring {"));
  try {
    find_shipped_schedule(Collective::AllReduce, "nope");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no shipped allreduce schedule named 'nope' (there are: ")) << e.what();
    EXPECT_TRUE(contains(e.what(), "ring")) << e.what();
  }
}

TEST(JitCli, SecondIdenticalCubinCompileIsADiskHit) {
  test::ScratchDir dir;
  const std::string command = fmt::format(
      "CCC_CACHE_DIR={0}/cache CCC_JIT_LOG=1 {1}/cli/ccc compile {2}/schedules/ring.sched --ranks 2 "
      "--emit cubin -o {0}/ring.cubin 2>>{0}/log",
      dir.path().string(), CCC_BINARY_DIR, CCC_SOURCE_DIR);
  ASSERT_EQ(std::system(command.c_str()), 0);
  ASSERT_EQ(std::system(command.c_str()), 0);
  std::ifstream in(dir.path() / "log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t compiled = log.find("compiled in"), hit = log.find("disk hit in");
  EXPECT_NE(compiled, std::string::npos) << log;
  EXPECT_NE(hit, std::string::npos) << log;
  EXPECT_LT(compiled, hit) << log;
}

namespace {

// Sets an environment variable for one scope and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string only_entry(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries.push_back(e.path());
  EXPECT_EQ(entries.size(), 1u);
  return entries.empty() ? "" : entries[0].string();
}

}  // namespace

// A cached object with a valid header and checksum but bytes that do not load is rebuilt and
// replaced (it used to fail every run, never rebuilt).
TEST(HostCompile, CachedObjectThatDoesNotLoadIsRebuilt) {
  test::ScratchDir dir;
  {
    JitCache cache(dir.path());
    load_host_kernel(cache, kHostKernel, "ccc_test_entry");
  }
  const std::string entry = only_entry(dir.path());
  const std::string junk = "not a shared object";
  std::string header = "CCCJIT1\n";
  for (uint64_t v : {uint64_t{junk.size()}, checksum64(junk)})
    for (int i = 0; i < 8; ++i) header.push_back(static_cast<char>(v >> (8 * i)));
  std::ofstream(entry, std::ios::binary | std::ios::trunc) << header << junk;

  JitCache cache(dir.path());
  testing::internal::CaptureStderr();
  const HostKernel k = load_host_kernel(cache, kHostKernel, "ccc_test_entry");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(k.entry, nullptr);
  EXPECT_TRUE(contains(err, "does not load (cannot load a compiled kernel")) << err;
  EXPECT_EQ(cache.builds(), 1u);
  // The rebuilt object replaced the broken entry: another process loads it from disk, building
  // nothing and warning about nothing. (Not compared byte for byte with the first build: under
  // AddressSanitizer an object names its temporary source path, which differs per build.)
  JitCache again(dir.path());
  testing::internal::CaptureStderr();
  EXPECT_NE(load_host_kernel(again, kHostKernel, "ccc_test_entry").entry, nullptr);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(again.builds(), 0u) << "the entry on disk is the rebuilt one";
  EXPECT_EQ(only_entry(dir.path()), entry);
}

// temp_directory_path throws filesystem_error for these; it escaped as an abort of `ccc run`.
TEST(HostCompile, AMissingOrFileTmpdirIsAJitError) {
  test::ScratchDir dir;
  const std::string file = (dir.path() / "file").string();
  std::ofstream(file) << "x";
  for (const auto& [tmpdir, why] : {std::pair{(dir.path() / "missing").string(), "No such file or directory"},
                                    std::pair{file, "Not a directory"}}) {
    ScopedEnv env("TMPDIR", tmpdir);
    try {
      SharedObject so("bytes");
      FAIL() << tmpdir;
    } catch (const JitError& e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("cannot use the temporary directory TMPDIR={}: {}", tmpdir, why));
    }
    EXPECT_THROW(host_compile(HostCompileRequest{}), JitError);
  }
}

// A write that fails part way (a full TMPDIR; here a file size limit) leaves no partial .so.
TEST(HostCompile, AFailedWriteLeavesNoTemporaryBehind) {
  test::ScratchDir dir;
  ScopedEnv env("TMPDIR", dir.path().string());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 4096;
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // a failed write, not a signal
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    SharedObject so(std::string(1 << 16, 'x'));
  } catch (const JitError& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(contains(error, "cannot write")) << error;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}
