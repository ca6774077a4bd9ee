#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "cli_util.h"
#include "front_end_util.h"
#include "golden_util.h"
#include "runtime_test_support.h"

using namespace ccc;
using test::run_cli;

namespace {

const std::string kRing = test::schedule_path("ring");

}  // namespace

TEST(Cli, CheckValidScheduleExitsZero) {
  auto r = run_cli({"check", kRing, "--ranks", "8"});
  EXPECT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_NE(r.out.find("ok: ring (allreduce) for N = 8: 14 steps, 112 ops"), std::string::npos) << r.out;
}

TEST(Cli, ScheduleErrorsExitOne) {
  auto r = run_cli({"check", kRing, "--ranks", "3", "--define", "C=2"});
  EXPECT_EQ(r.code, cli::kExitScheduleError);
  EXPECT_NE(r.err.find("'C' is defined, but schedule 'ring' has no parameters"), std::string::npos) << r.err;
}

TEST(Cli, UsageErrorsExitTwo) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"check", kRing},
           {"check", kRing, "--ranks", "eight"},
           {"check", kRing, "--ranks", "8", "--bogus"},
           {"check", "--ranks", "8"},
           {"compile", kRing, "--ranks", "8"},
           {"compile", kRing, "--ranks", "8", "--emit", "nope"},
           {"compile", kRing, "--ranks", "8", "--emit", "steps", "--dump-after=nope"},
           {"compile", kRing, "--ranks", "8", "--emit", "steps", "--dump-after=verify"},
           {"compile", kRing, "--ranks", "8", "--emit"},
           {"check", kRing, "--ranks", "0"},
           {"run", kRing, "--ranks", "5000", "--count", "4"},
           {"check", "/nonexistent/x.sched", "--ranks", "4"},
       }) {
    auto r = run_cli(args);
    EXPECT_EQ(r.code, cli::kExitUsage) << testing::PrintToString(args);
    EXPECT_FALSE(r.err.empty());
  }
  auto r = run_cli({"check", kRing, "--ranks", "0"});
  EXPECT_NE(r.err.find("--ranks expects a number of ranks, 1 .. 4096, not '0'"), std::string::npos) << r.err;
  r = run_cli({"compile", "/nonexistent/x.sched", "--ranks", "4", "--emit", "cu"});
  EXPECT_EQ(r.err.rfind("ccc compile: error: cannot open '/nonexistent/x.sched': No such file or directory\nusage: ccc compile", 0),
            0u) << r.err;
}

// Options that mean nothing for the schedule's collective are ignored, with a warning.
TEST(Cli, OptionsThatMeanNothingForTheCollectiveWarn) {
  auto r = run_cli({"check", kRing, "--ranks", "4", "--root", "2"});
  EXPECT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_NE(r.err.find("ccc check: warning: --root means nothing for allreduce (only broadcast and reduce have a root); "
                       "ignored"), std::string::npos) << r.err;
  r = run_cli({"compile", test::schedule_path("ring_allgather"), "--ranks", "4", "--emit", "steps", "--op", "max"});
  EXPECT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_NE(r.err.find("ccc compile: warning: --op means nothing for allgather, which reduces nothing; ignored"),
            std::string::npos) << r.err;
  r = run_cli({"check", kRing, "--ranks", "4"});
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
}

// Unknown names get the nearest known one, where one is near enough to be a typo.
TEST(Cli, UnknownNamesSuggestTheNearestKnownOne) {
  auto r = run_cli({"chek", kRing, "--ranks", "4"});
  EXPECT_NE(r.err.find("unknown command 'chek' (did you mean 'check'?)"), std::string::npos) << r.err;
  r = run_cli({"check", kRing, "--rank", "4"});
  EXPECT_NE(r.err.find("unknown option '--rank' (did you mean '--ranks'?)"), std::string::npos) << r.err;
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "cuu"});
  EXPECT_NE(r.err.find("unknown --emit target 'cuu' (did you mean 'cu'?); one of: steps, graph"), std::string::npos) << r.err;
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "cu", "--dtype", "bf61"});
  EXPECT_NE(r.err.find("unknown --dtype 'bf61' (did you mean 'bf16'?); one of: f64, f32"), std::string::npos) << r.err;
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "cu", "--protocol", "LL"});
  EXPECT_NE(r.err.find("unknown --protocol 'LL' (did you mean 'll'?); one of: simple, ll"), std::string::npos) << r.err;
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "cu", "--op", "xor"});
  EXPECT_NE(r.err.find("unknown --op 'xor'; one of: sum, prod, min, max, avg"), std::string::npos) << r.err;  // none near
}

// --define NAME=V[,NAME=V...]: anything but a name, '=' and a 64-bit integer is a usage error
// that says what was wrong.
TEST(Cli, BadDefinesAreUsageErrors) {
  for (auto [define, message] : std::vector<std::pair<std::string, std::string>>{
           {"C", "--define expects NAME=V (comma-separated for several), not 'C'"},
           {"=4", "--define expects NAME=V (comma-separated for several), not '=4'"},
           {"C=4,", "--define expects NAME=V (comma-separated for several), not ''"},
           {"C=four", "--define C: 'four' is not a 64-bit integer"},
           {"C=", "--define C: '' is not a 64-bit integer"},
           {"C=99999999999999999999", "--define C: '99999999999999999999' is not a 64-bit integer"},
           {"C=1,C=2", "--define sets 'C' more than once"},
       }) {
    auto r = run_cli({"check", kRing, "--ranks", "8", "--define", define});
    EXPECT_EQ(r.code, cli::kExitUsage) << define;
    EXPECT_NE(r.err.find("error: " + message + "\n"), std::string::npos) << define << ": " << r.err;
  }
}

TEST(Cli, HelpAndVersion) {
  EXPECT_EQ(run_cli({"--version"}).out, "ccc 0.1.0\n");
  auto r = run_cli({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("compile"), std::string::npos);
  r = run_cli({"compile", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--dump-after PASS"), std::string::npos);
}

// A command's usage line names every option it takes (`ccc compile`'s once lacked --protocol).
TEST(Cli, UsageLinesNameEveryOption) {
  for (const cli::Command* cmd : {&cli::check_command(), &cli::compile_command(), &cli::run_command(),
                                  &cli::topo_command(), &cli::tune_command(), &cli::trace_summary_command()})
    for (const cli::OptionSpec& o : cmd->options)
      EXPECT_NE(std::string(cmd->usage).find(o.name), std::string::npos) << "ccc " << cmd->name << ": " << o.name;
}

// A command's help lists each option once (`ccc run --help` once listed --in-place twice).
TEST(Cli, HelpListsEachOptionOnce) {
  for (const cli::Command* cmd : {&cli::check_command(), &cli::compile_command(), &cli::run_command(),
                                  &cli::topo_command(), &cli::tune_command()}) {
    std::set<std::string> seen;
    for (const cli::OptionSpec& o : cmd->options)
      EXPECT_TRUE(seen.insert(o.name).second) << cmd->name << " lists " << o.name << " twice";
  }
}

TEST(Cli, CompileEmitsStepsToStdoutOrFile) {
  auto r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "steps"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto prog = test::compile_schedule("ring", 4);
  ASSERT_TRUE(prog.program);
  EXPECT_NE(r.out.find("phase reduce_scatter\n  step 0  reduce_scatter s=0"), std::string::npos) << r.out;

  std::string out_path = std::string(CCC_BINARY_DIR) + "/cli_test_ring.steps";
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit=steps", "-o", out_path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(test::read_file(out_path).find("# allreduce ring"), std::string::npos);
  std::filesystem::remove(out_path);
}

TEST(Cli, DumpAfterParseGoesToStderr) {
  auto r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "steps", "--dump-after=parse"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("allreduce ring {\n  chunks N\n  let prev = (r - 1) % N\n", 0), 0u) << r.err;
  EXPECT_NE(r.out.find("# allreduce ring"), std::string::npos);
}

// One row per pass the target runs, in pipeline order, then the output and the total; the
// output itself is unchanged.
TEST(Cli, TimePassesListsEveryPassOnStderr) {
  auto timed = run_cli({"compile", kRing, "--ranks", "4", "--emit", "cu", "--time-passes"});
  ASSERT_EQ(timed.code, 0) << timed.err;
  EXPECT_EQ(timed.out, run_cli({"compile", kRing, "--ranks", "4", "--emit", "cu"}).out);
  size_t at = timed.err.find("ccc: time per pass (wall, peak resident memory after it):\n");
  ASSERT_NE(at, std::string::npos) << timed.err;
  for (const char* pass : {"parse", "instantiate", "graph", "verify", "sync", "lower", "emit", "output (cu)", "total"}) {
    const size_t row = timed.err.find(fmt::format("\n  {} ", pass), at);
    ASSERT_NE(row, std::string::npos) << pass << " missing or out of order in:\n" << timed.err;
    at = row + 1;
  }
  // A target that stops after instantiation times only the passes it runs.
  auto steps = run_cli({"compile", kRing, "--ranks", "4", "--emit", "steps", "--time-passes"});
  ASSERT_EQ(steps.code, 0) << steps.err;
  EXPECT_NE(steps.err.find("\n  instantiate "), std::string::npos) << steps.err;
  EXPECT_EQ(steps.err.find("\n  verify "), std::string::npos) << steps.err;
}

TEST(Cli, CheckVerifiesAndPlans) {
  auto r = run_cli({"check", test::schedule_path("oneshot"), "--ranks", "4", "--in-place"});
  ASSERT_EQ(r.code, cli::kExitOk) << r.err;
  EXPECT_NE(r.out.find("verified; 24 waits for 24 cross-rank dependencies\nnote: step 0 (direct): 4 ranks"),
            std::string::npos) << r.out;
  r = run_cli({"check", std::string(CCC_SOURCE_DIR) + "/tests/verify_bad/ring_missing_step.sched", "--ranks", "4"});
  EXPECT_EQ(r.code, cli::kExitScheduleError);
  EXPECT_NE(r.err.find("error: rank 0 ends with chunk 0 missing the contributions of ranks 0, 1, 2"), std::string::npos)
      << r.err;
}

TEST(Cli, EmitSyncsGraphAndDot) {
  auto r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "syncs"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::string text = r.out;  // the golden names the schedule relative to the source tree
  for (size_t at; (at = text.find(CCC_SOURCE_DIR "/")) != std::string::npos;)
    text.erase(at, std::string(CCC_SOURCE_DIR "/").size());
  EXPECT_EQ(text, test::read_file(std::string(CCC_SOURCE_DIR) + "/tests/golden/syncs/ring.n4.txt"));
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "graph", "--dump-after=graph"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("graph ring (allreduce) N=4: 32 vertices", 0), 0u) << r.out;
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "dot"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("digraph G {", 0), 0u);
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "syncs", "--dump-after=verify"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "verified: ring (allreduce) for N = 4\n");
}

TEST(Cli, RootOptionReachesBroadcast) {
  auto r = run_cli({"compile", test::schedule_path("ring_broadcast"), "--ranks", "4", "--root", "2", "--emit", "steps"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("N = 4, root = 2,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("r3  copy chunk 0 from 2"), std::string::npos) << r.out;
  r = run_cli({"check", test::schedule_path("ring_broadcast"), "--ranks", "4", "--root", "4"});
  EXPECT_EQ(r.code, cli::kExitScheduleError);
  EXPECT_NE(r.err.find("root 4 is out of range for N = 4 (0 .. 3)"), std::string::npos) << r.err;
}

TEST(Cli, DumpAfterInstantiateShowsTheStepProgram) {
  auto r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "steps", "--dump-after", "instantiate"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, r.out);  // --emit steps prints the same text as the instantiate pass's dump
}

// Buffers no machine has: a clear error (the std::bad_alloc escaped and aborted `ccc run`).
TEST(Cli, RunOutOfMemoryIsAnError) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator reports the huge allocation instead of throwing bad_alloc";
#else
  // 2^58 f32 per buffer: 2^60 bytes each, within a pointer difference, beyond any memory.
  auto r = run_cli({"run", kRing, "--ranks", "2", "--count", "288230376151711744"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "ccc run: error: out of memory for 2 ranks' buffers of count 288230376151711744 f32 (and the "
                   "reference's)\n");
#endif
}

namespace {

// RLIMIT_FSIZE makes a write fail part way, as a full disk does; SIGXFSZ is ignored so the
// write returns EFBIG instead of killing the test.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit small = old_;
    small.rlim_cur = bytes;
    handler_ = std::signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &small);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, handler_);
  }

 private:
  rlimit old_{};
  void (*handler_)(int) = nullptr;
};

}  // namespace

// -o replaces a file only with a whole new one: a failed write keeps the old file and leaves no
// temporary (it used to truncate the old file first).
TEST(Cli, OutputFileIsReplacedOnlyWhenWhollyWritten) {
  test::ScratchDir dir;
  const std::string out_path = (dir.path() / "ring.svg").string();
  std::ofstream(out_path) << "old";
  std::filesystem::permissions(out_path, std::filesystem::perms(0640));
  test::CliResult r;
  {
    FileSizeLimit limit(1024);  // the SVG is tens of KiB
    r = run_cli({"compile", kRing, "--ranks", "8", "--emit", "svg", "-o", out_path});
  }
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "ccc: error: cannot write '" + out_path + "': File too large\n");
  EXPECT_EQ(test::read_file(out_path), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1) << "a temporary was left";

  r = run_cli({"compile", kRing, "--ranks", "8", "--emit", "svg", "-o", out_path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(test::read_file(out_path).find("<svg"), std::string::npos);
  EXPECT_EQ(std::filesystem::status(out_path).permissions(), std::filesystem::perms(0640)) << "the old file's mode";
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);

  // Through a symlink the file it names is replaced; the link stays a link.
  const std::string link = (dir.path() / "link.svg").string();
  std::filesystem::create_symlink(out_path, link);
  std::ofstream(out_path, std::ios::trunc) << "old";
  r = run_cli({"compile", kRing, "--ranks", "8", "--emit", "svg", "-o", link});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_NE(test::read_file(out_path).find("<svg"), std::string::npos);
}

// Not a regular file: written in place (renaming over /dev/full would replace the device).
TEST(Cli, OutputToADeviceIsWrittenInPlace) {
  if (!std::filesystem::is_character_file("/dev/full")) GTEST_SKIP() << "no /dev/full";
  auto r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "steps", "-o", "/dev/full"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "ccc: error: cannot write '/dev/full': No space left on device\n");
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/full"));
  r = run_cli({"compile", kRing, "--ranks", "4", "--emit", "steps", "-o", "/dev/null"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}
