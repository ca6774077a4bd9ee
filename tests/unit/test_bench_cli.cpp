// ccc-bench's command line on the host backend: nccl-tests' options and type names, the footer
// lines cluster job checks grep, and the errors that stop a run that could never end. Runs the
// built binary (a process: ccc-bench exits on a usage error).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>

#include "topology.h"

namespace {

struct BenchResult {
  int code;
  std::string output;  // stdout and stderr
};

// ccc-bench with `args`, the CUDA driver `libcuda` (by default none), under a 120 s timeout.
BenchResult run_bench(const std::string& args, const std::string& libcuda = "/nonexistent") {
  const std::string command =
      "CCC_LIBCUDA=" + libcuda + " timeout 120 " CCC_BINARY_DIR "/tools/ccc-bench " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  BenchResult r{0, ""};
  char buffer[4096];
  for (size_t got; (got = fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, got);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The data rows (lines not starting with '#').
int data_rows(const std::string& output) {
  int rows = 0;
  for (size_t pos = 0; pos < output.size();) {
    const size_t end = std::min(output.find('\n', pos), output.size());
    if (end > pos && output[pos] != '#') ++rows;
    pos = end + 1;
  }
  return rows;
}

}  // namespace

TEST(BenchCli, LongOptionsAndNcclTypeNames) {
  const BenchResult r = run_bench("--ranks 2 --minbytes 1K --maxbytes=4K --stepfactor 4 --iters 1 --warmup_iters 0 "
                                  "--check 1 --datatype bfloat16 --op max");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(data_rows(r.output), 2) << r.output;
  EXPECT_TRUE(has(r.output, " bfloat16    max ")) << r.output;
  EXPECT_TRUE(has(r.output, "\n# Out of bounds values : 0 OK\n")) << r.output;
  EXPECT_TRUE(has(r.output, "\n# Avg bus bandwidth    : ")) << r.output;
  EXPECT_TRUE(has(r.output, "\n# Latency at 1024 B: ")) << r.output;
}

TEST(BenchCli, EveryTypeAndEveryOp) {
  const BenchResult types = run_bench("--ranks 2 -b 64 -e 64 -n 1 -w 0 -d all --collective allgather");
  ASSERT_EQ(types.code, 0) << types.output;
  EXPECT_EQ(data_rows(types.output), 12) << types.output;
  for (const char* name : {"double", "float", "half", "bfloat16", "int64", "uint64", "int32", "uint32", "int8", "uint8",
                           "f8e4m3", "f8e5m2"})
    EXPECT_TRUE(has(types.output, std::string(" ") + name + " ")) << name;
  const BenchResult ops = run_bench("--ranks 2 -b 64 -e 64 -n 1 -w 0 -d int32 -o all");
  ASSERT_EQ(ops.code, 0) << ops.output;
  EXPECT_EQ(data_rows(ops.output), 5) << ops.output;
  for (const char* op : {" sum ", " prod ", " min ", " max ", " avg "}) EXPECT_TRUE(has(ops.output, op)) << op;
}

TEST(BenchCli, CheckCountZeroChecksNothing) {
  const BenchResult r = run_bench("--ranks 2 -b 64 -e 64 -n 1 -w 0 -c 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, " N/A ")) << r.output;
  EXPECT_TRUE(has(r.output, "# Out of bounds values : 0 OK")) << r.output;
}

// The error against float64 (random inputs of many magnitudes): one-shot and two-shot add in
// float and round once (at most half an ulp); a ring rounds once per pass, and shows it. Types
// and collectives that cannot round say "-", and -c 0 measures nothing.
TEST(BenchCli, ErrorAgainstFloat64InUlps) {
  const auto largest = [](const std::string& algo, const std::string& more) {
    const BenchResult r = run_bench("--ranks 8 -b 64K -e 64K -n 1 -w 0 -d bfloat16 --algo " + algo + " " + more);
    EXPECT_EQ(r.code, 0) << r.output;
    const std::string key = "# Largest error against float64: ";
    const size_t at = r.output.find(key);
    return at == std::string::npos ? -1.0 : std::stod(r.output.substr(at + key.size()));
  };
  EXPECT_LE(largest("oneshot", ""), 0.5);
  EXPECT_GE(largest("twoshot", ""), 0.0);
  EXPECT_LE(largest("twoshot", ""), 0.5);
  EXPECT_GT(largest("ring", ""), 0.5);
  EXPECT_EQ(largest("ring", "-c 0"), -1.0);
  const BenchResult ints = run_bench("--ranks 2 -b 64 -e 64 -n 1 -w 0 -d int32");
  ASSERT_EQ(ints.code, 0) << ints.output;
  EXPECT_TRUE(has(ints.output, " ring            -\n")) << ints.output;
  EXPECT_FALSE(has(ints.output, "# Largest error")) << ints.output;
}

// --epilogue residual: the fused allreduce + residual, checked against the reference plus the
// residual in both placements (in place: recv = send, the residual apart); allreduce only. Then
// residual + RMSNorm + fp8 over rows of 100 (each size rounded down to whole rows), its
// residual_out and fp8 output checked too.
TEST(BenchCli, EpilogueResidualIsCheckedInBothPlacements) {
  for (const char* algo : {"ring", "oneshot"}) {
    const BenchResult r = run_bench(std::string("--ranks 3 -b 1K -e 64K -f 8 -n 1 -w 0 -d bfloat16 --epilogue residual --algo ") +
                                    algo);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "# ccc-bench: allreduce + residual (fused) on 3 host ranks")) << r.output;
    EXPECT_EQ(data_rows(r.output), 3) << r.output;
    EXPECT_TRUE(has(r.output, "\n# Out of bounds values : 0 OK\n")) << r.output;
  }
  EXPECT_TRUE(has(run_bench("--collective allgather --epilogue residual").output,
                  "--epilogue residual: only allreduce has one"));
  const BenchResult norm = run_bench(
      "--ranks 3 -b 1K -e 64K -f 8 -n 1 -w 0 -d bfloat16 --algo twoshot --epilogue residual-rmsnorm-fp8 --hidden 100 "
      "--scale 0.01");
  ASSERT_EQ(norm.code, 0) << norm.output;
  EXPECT_TRUE(has(norm.output, "allreduce + residual + RMSNorm (fused; rows of 100, the pre-norm sums written out, fp8 "
                               "e4m3 output at scale 0.01)"))
      << norm.output;
  EXPECT_TRUE(has(norm.output, " 1000          500 bfloat16")) << norm.output;  // 1 KiB: 5 rows
  EXPECT_TRUE(has(norm.output, "\n# Out of bounds values : 0 OK\n")) << norm.output;
  // The error against the norm in double, on random inputs: two-shot rounds the sum once, then
  // the norm rounds once more (and float's rsqrt and sums of squares in between).
  const size_t at = norm.output.find("# Largest error against float64: ");
  ASSERT_NE(at, std::string::npos) << norm.output;
  const double ulp = std::stod(norm.output.substr(at + 34));
  EXPECT_GT(ulp, 0) << norm.output;
  EXPECT_LT(ulp, 2) << norm.output;
  EXPECT_TRUE(has(run_bench("--epilogue rmsnorm").output,
                  "--epilogue is none, residual, residual-rmsnorm or residual-rmsnorm-fp8, not 'rmsnorm'"));
  EXPECT_TRUE(has(run_bench("--epilogue residual-rmsnorm").output, "--epilogue residual-rmsnorm needs --hidden H"));
  EXPECT_TRUE(has(run_bench("--epilogue residual --scale 2").output, "--scale is residual-rmsnorm-fp8's"));
}

TEST(BenchCli, ZeroMinimumWithAFactorIsAnErrorAndWithAStepRuns) {
  const BenchResult factor = run_bench("-b 0 -e 1K");
  EXPECT_EQ(factor.code, 2) << factor.output;
  EXPECT_TRUE(has(factor.output, "-b 0 with -f")) << factor.output;
  const BenchResult step = run_bench("--ranks 2 -b 0 -e 16 -i 8 -n 1 -w 0");
  ASSERT_EQ(step.code, 0) << step.output;
  EXPECT_EQ(data_rows(step.output), 2) << "0 bytes is no call; 8 and 16 are: " << step.output;
}

TEST(BenchCli, UsageErrors) {
  EXPECT_TRUE(has(run_bench("-G 10").output, "-G (CUDA graphs) needs --backend cuda or sim"));
  EXPECT_TRUE(has(run_bench("-d float8").output, "unknown type 'float8' (float, half, bfloat16"));
  EXPECT_TRUE(has(run_bench("--iters").output, "--iters needs a value"));
  EXPECT_TRUE(has(run_bench("--baseline=1").output, "--baseline takes no value"));
  EXPECT_EQ(run_bench("--frobnicate").code, 2);
  EXPECT_TRUE(has(run_bench("-b 1 -e 1G -i 1").output, "more than 10000 sizes"));
  const BenchResult timeout = run_bench("--ranks 2 -b 8 -e 8 -T 0");
  EXPECT_EQ(timeout.code, 1);
  EXPECT_TRUE(has(timeout.output, "ccc-bench: error: ")) << timeout.output;
  const BenchResult help = run_bench("-h");
  EXPECT_EQ(help.code, 0);
  for (const char* option : {"--minbytes", "--maxbytes", "--stepfactor", "--iters", "--warmup_iters", "--check",
                             "--datatype", "--op", "--cudagraph", "--timeout", "--backend", "--probe"})
    EXPECT_TRUE(has(help.output, option)) << option;
}

TEST(BenchCli, ProbeWithoutADriverSaysSoInOneLine) {
  const BenchResult r = run_bench("--probe");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.output.rfind("no CUDA device: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
}

// The CUDA path (streams, CUDA events, a captured graph, the copy baseline) against the recording
// stand-in for libcuda (tests/fake_cuda): kernels are not run, so nothing is checked (-c 0) and
// the times are the stand-in's.
TEST(BenchCli, GraphReplaysAndCopyBaselineOnTheCudaPath) {
  const BenchResult r = run_bench("--backend cuda --ranks 4 -G 5 -c 0 -b 1K -e 4K -f 4 -n 3 -w 1 --baseline",
                                  CCC_FAKE_LIBCUDA);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(data_rows(r.output), 2) << r.output;
  EXPECT_TRUE(has(r.output, "captured in a CUDA graph launched 5 times")) << r.output;
  EXPECT_TRUE(has(r.output, "# Latency at 1024 B: ")) << r.output;
  EXPECT_TRUE(has(r.output, " replayed, ")) << r.output;
  EXPECT_TRUE(has(r.output, "of a copy of the bytes it must move (best about 1)")) << r.output;
  const BenchResult probe = run_bench("--probe", CCC_FAKE_LIBCUDA);
  EXPECT_EQ(probe.code, 0);
  EXPECT_TRUE(has(probe.output, "sm_90")) << probe.output;
}

// --calibrate against the recording stand-in for libcuda (its events say 1 ms apart): a file that
// `ccc tune --calibration` reads, with every constant one GPU can measure, each from its own
// measurement (the stand-in's fixed event time makes each a different rate or time).
TEST(BenchCli, CalibrateWritesTheConstantsOfOneGpu) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("ccc-calibration-" + std::to_string(::getpid()) + ".txt")).string();
  const BenchResult r = run_bench("--calibrate " + file, CCC_FAKE_LIBCUDA);
  ASSERT_EQ(r.code, 0) << r.output;
  std::string errors;
  const std::optional<ccc::Calibration> c = ccc::load_calibration(file, errors);
  std::filesystem::remove(file);
  ASSERT_TRUE(c) << errors;
  EXPECT_EQ(c->device.rfind("Fake H100, sm_90", 0), 0u) << c->device;
  ASSERT_TRUE(c->launch && c->graph_launch && c->memory_bandwidth && c->channel_bandwidth) << r.output;
  EXPECT_GT(*c->launch, 0);
  EXPECT_LT(*c->graph_launch, *c->launch) << "20 calls per replayed graph against 100 eager calls per event pair";
  EXPECT_GT(*c->memory_bandwidth, *c->channel_bandwidth);
  EXPECT_FALSE(c->latency || c->bandwidth || c->reduce_bandwidth) << "not measurable on one GPU";
  const BenchResult unwritable = run_bench("--calibrate /nonexistent/dir/c.txt", CCC_FAKE_LIBCUDA);
  EXPECT_EQ(unwritable.code, 1);
  EXPECT_NE(unwritable.output.find("cannot write the calibration file '/nonexistent/dir/c.txt'"), std::string::npos)
      << unwritable.output;
  const BenchResult no_gpu = run_bench("--calibrate " + file);
  EXPECT_EQ(no_gpu.code, 1);
  EXPECT_FALSE(std::filesystem::exists(file));
}

// --trace: every call of the run (here one checked and one timed call, one size) in the file.
TEST(BenchCli, TraceWritesEveryCall) {
  const std::string file = (std::filesystem::temp_directory_path() / ("ccc-bench-trace-" + std::to_string(::getpid()) + ".json")).string();
  const BenchResult r = run_bench("--ranks 2 -b 4K -e 4K -n 1 -w 0 -c 1 --algo ring --trace " + file);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(file);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::filesystem::remove(file);
  EXPECT_NE(text.find(R"("schedule":"ring")"), std::string::npos) << text.substr(0, 2000);
  EXPECT_NE(text.find(R"("call":1,)"), std::string::npos) << "a second call";
}

TEST(BenchCli, BlockThreadsRunTheHostBlocksAsFibersAndAreChecked) {
  const BenchResult fibers = run_bench("--ranks 3 -b 1K -e 4K -f 4 -n 1 -w 0 -c 1 --algo twoshot --block-threads 7");
  EXPECT_EQ(fibers.code, 0) << fibers.output;
  EXPECT_TRUE(has(fibers.output, "\n# Out of bounds values : 0 OK\n")) << fibers.output;
  const BenchResult bad = run_bench("--block-threads 2000");
  EXPECT_NE(bad.code, 0);
  EXPECT_TRUE(has(bad.output, "host_block_threads 2000: a thread block has 1 to 1024 threads")) << bad.output;
}

// --backend sim: checked results, and times that are the simulator's, the same in every run.
TEST(BenchCli, SimPrintsVirtualTimesThatRepeat) {
  const std::string args = "--backend sim --topo " CCC_SOURCE_DIR "/topologies/dgx-h100.topo --ranks 4 -b 8 -e 4K -f 8 -n 2 -w 0 -c 1";
  const BenchResult first = run_bench(args), second = run_bench(args);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_TRUE(has(first.output, "on 4 sim ranks (dgx-h100.topo, virtual time: a prediction")) << first.output;
  EXPECT_TRUE(has(first.output, "\n# Out of bounds values : 0 OK\n")) << first.output;
  EXPECT_EQ(first.output, second.output);
  EXPECT_TRUE(has(run_bench("--backend sim --ranks 2").output, "the simulator needs a topology"));
  EXPECT_TRUE(has(run_bench("--backend gpu").output, "--backend is \"host\", \"cuda\" or \"sim\""));
  // --timing-only: the same times with no data moved, so nothing is checked (#wrong N/A).
  const BenchResult timing = run_bench(args + " --timing-only");
  ASSERT_EQ(timing.code, 0) << timing.output;
  const auto times = [](const std::string& out) {  // each row's out-of-place time
    std::vector<std::string> t;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') {
        std::istringstream row(line);
        std::string field;
        for (int i = 0; i < 6 && row >> field; ++i) {}
        t.push_back(field);
      }
    return t;
  };
  EXPECT_EQ(times(timing.output), times(first.output));
  EXPECT_FALSE(times(first.output).empty()) << first.output;
  EXPECT_TRUE(has(timing.output, "N/A")) << timing.output;
  EXPECT_TRUE(has(run_bench("--timing-only").output, "--timing-only needs --backend sim"));
}

// --backend sim -G: each launch priced as a CUDA graph's replay (dgx-h100: graph_launch 1.3 us
// against launch 2.5 us), the eager time in its own column; calls back to back on a stream each
// save the difference.
TEST(BenchCli, SimPricesGraphReplays) {
  const BenchResult r = run_bench("--backend sim --topo " CCC_SOURCE_DIR "/topologies/dgx-h100.topo --ranks 8 -b 8 -e 8 "
                                  "-n 2 -w 0 -c 1 -G 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "as replays of a CUDA graph (each launch priced at graph_launch)")) << r.output;
  EXPECT_TRUE(has(r.output, "\n# Out of bounds values : 0 OK\n")) << r.output;
  std::istringstream in(r.output);
  std::vector<double> row;  // the size's fields that are numbers
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') {
      std::istringstream fields(line);
      for (std::string f; fields >> f;)
        if (f.find_first_not_of("0123456789.-") == std::string::npos) row.push_back(std::stod(f));
    }
  ASSERT_EQ(row.size(), 13u) << r.output;  // size count root, 2 x (time algbw busbw #wrong), maxulp, eager
  const double replayed = row[3], eager = row.back();
  EXPECT_NEAR(eager - replayed, 1.2, 0.01) << r.output;
}

TEST(BenchCli, ProtocolLlRunsAndChecksAndRefusesTooLarge) {
  const BenchResult ll = run_bench("--ranks 3 -b 1K -e 4K -f 4 -n 1 -w 0 -c 1 --algo twoshot --protocol ll");
  EXPECT_EQ(ll.code, 0) << ll.output;
  EXPECT_TRUE(has(ll.output, "\n# Out of bounds values : 0 OK\n")) << ll.output;
  EXPECT_TRUE(has(run_bench("--protocol fast").output, "--protocol is simple or ll"));
  const BenchResult big = run_bench("--ranks 2 -b 1M -e 1M -n 1 -w 0 -c 1 --algo oneshot --protocol ll");
  EXPECT_NE(big.code, 0) << big.output;
  EXPECT_TRUE(has(big.output, "protocol ll moves at most 262144 bytes per call")) << big.output;
}
