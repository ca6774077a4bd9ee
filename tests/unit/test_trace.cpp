// Tracing (docs/tracing.md): a traced run on the host backend gives every (rank, channel, step)
// exactly one wait and one pass, in order, with non-decreasing timestamps; untraced kernels carry
// no tracing code; the traced kernels compile with NVRTC for Ampere and Hopper.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "collective_reference.h"
#include "ccc/communicator.h"
#include "emit_cuda.h"
#include "lower.h"
#include "nvrtc_compile.h"
#include "trace.h"
#include "codegen_pipeline.h"

namespace ccc {
namespace {

namespace fs = std::filesystem;

JitCache& test_cache() {
  static JitCache cache(fs::path(CCC_BINARY_DIR) / "jit-cache");
  return cache;
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("ccc-trace-{}-{}", ::getpid(), name);
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Nanoseconds from the trace's microseconds (written with three decimals: exact).
long long ns(const nlohmann::json& us) { return std::llround(us.get<double>() * 1000.0); }

// Runs `calls` all-reduces of `count` floats on `nranks` host ranks with `options` (ring).
void run_allreduces(CommOptions options, int nranks, uint64_t count, int calls) {
  options.algo = "ring";
  options.cache = &test_cache();
  options.timeout_seconds = 60;
  Communicator comm = Communicator::host(nranks, options);
  CollectiveCall shape;
  shape.collective = Collective::AllReduce;
  shape.count = count;
  shape.dtype = DataType::F32;
  shape.op = ReduceOp::Sum;
  for (int i = 0; i < calls; ++i) {
    HostCollectiveBuffers buffers(shape, nranks, /*in_place*/ false, /*offset*/ 0);
    buffers.prepare(count);
    const CollectiveCall& c = buffers.call();
    comm.all_reduce(c.send, c.recv, c.count, c.dtype, c.op);
    ASSERT_EQ(buffers.wrong_elements(), 0u);
  }
  comm.destroy();
}

TEST(Trace, EveryRankChannelAndStepWaitsThenPassesOnceInOrder) {
  const fs::path file = temp_file("ring.json");
  CommOptions options;
  options.trace_file = file.string();
  options.channels = 2;
  const int n = 4, calls = 2;
  // 4096 floats: every channel's slice fits one window, so each step runs once per call.
  run_allreduces(options, n, 4096, calls);
  const nlohmann::json trace = read_json(file);
  fs::remove(file);

  // (call, rank, channel) -> its collective span and its step events, in file order.
  struct Track {
    long long begin = -1, end = -1;
    std::vector<std::tuple<std::string, int, long long, long long>> steps;  // name, step, ts, end
  };
  std::map<std::tuple<int, int, int>, Track> tracks;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const auto key = std::tuple{e.at("args").at("call").get<int>(), e.at("pid").get<int>(), e.at("tid").get<int>()};
    Track& t = tracks[key];
    const long long ts = ns(e.at("ts")), end = ts + ns(e.at("dur"));
    if (e.at("cat") == "collective") {
      EXPECT_EQ(e.at("name"), "allreduce");
      EXPECT_EQ(e.at("args").at("schedule"), "ring");
      EXPECT_EQ(e.at("args").at("count"), 4096);
      EXPECT_EQ(e.at("args").at("bytes"), 4096 * 4);
      EXPECT_EQ(e.at("args").at("channels"), 2);
      EXPECT_EQ(e.at("args").at("completed"), true);
      t.begin = ts;
      t.end = end;
    } else {
      EXPECT_EQ(e.at("args").at("window"), 0);
      const int step = e.at("args").at("step").get<int>();
      EXPECT_EQ(e.at("args").at("label"), step < n - 1 ? fmt::format("reduce_scatter s={}", step)
                                                       : fmt::format("all_gather s={}", step - (n - 1)));
      t.steps.emplace_back(e.at("name"), step, ts, end);
    }
  }
  ASSERT_EQ(tracks.size(), static_cast<size_t>(calls * n * 2));
  const int steps = 2 * (n - 1);  // ring: reduce-scatter then all-gather, N - 1 steps each
  for (const auto& [key, t] : tracks) {
    const auto [call, rank, channel] = key;
    SCOPED_TRACE(fmt::format("call {} rank {} channel {}", call, rank, channel));
    ASSERT_GE(t.begin, 0) << "no collective span";
    ASSERT_EQ(t.steps.size(), static_cast<size_t>(2 * steps));
    long long last = t.begin;
    for (int i = 0; i < 2 * steps; ++i) {
      const auto& [name, step, ts, end] = t.steps[i];
      EXPECT_EQ(name, i % 2 == 0 ? "wait" : "pass");
      EXPECT_EQ(step, i / 2);
      EXPECT_GE(ts, last);
      EXPECT_GE(end, ts);
      last = end;
    }
    EXPECT_GE(t.end, last);
  }
}

TEST(Trace, TheEnvironmentTurnsItOn) {
  const fs::path file = temp_file("env.json");
  ASSERT_EQ(setenv("CCC_TRACE", file.c_str(), 1), 0);
  run_allreduces({}, 2, 1000, 1);
  unsetenv("CCC_TRACE");
  ASSERT_TRUE(fs::exists(file));
  const nlohmann::json trace = read_json(file);
  fs::remove(file);
  int spans = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) spans += e.at("ph") == "X" && e.at("cat") == "collective";
  EXPECT_EQ(spans, 2);  // one per rank (one channel each on the host)
}

TEST(Trace, AWriteThatFailsIsAWarning) {
  CommOptions options;
  options.trace_file = "/nonexistent-ccc-dir/trace.json";
  ::testing::internal::CaptureStderr();
  run_allreduces(options, 2, 1000, 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ccc: warning: cannot write trace /nonexistent-ccc-dir/trace.json"), std::string::npos) << err;
}

TEST(Trace, RecordsPastTheCapacityAreCountedNotKept) {
  ccc_trace_channel record{};
  record.enter = 100;
  record.exit = 200;
  record.count = 1;
  record.dropped = 3;
  record.steps[0] = {110, 120, 130, 0, 0};
  TraceLog log;
  log.add(0, TraceCall{"allreduce", "ring", "f32", "sum", 10, 40, 2, 1, 64, 2, nullptr}, 0, &record, 1);
  EXPECT_EQ(log.dropped(), 3u);
  const nlohmann::json trace = nlohmann::json::parse(log.json());
  int steps = 0;
  for (const nlohmann::json& e : trace.at("traceEvents")) steps += e.value("cat", "") == "step";
  EXPECT_EQ(steps, 2);
}

testing::Planned ring4() { return testing::plan_shipped("ring", 4); }

// The untraced kernel is the one without the switch: its source never defines it and its PTX
// reads the clock only where the waits' timeout needs it.
TEST(Trace, UntracedKernelsCarryNoTracingCode) {
  const testing::Planned p = ring4();
  ASSERT_TRUE(p.planned) << p.errors;
  const EmittedKernel k = emit_cuda(testing::lowered(*p.planned, {}));
  EXPECT_EQ(k.source.find("CCC_TRACE_ENABLED"), std::string::npos);
  auto ptx = [&](const std::string& source) {
    NvrtcRequest req;
    req.source = source;
    req.arch = "sm_90";
    req.target = NvrtcTarget::Ptx;
    NvrtcOutput out = nvrtc_compile(req);
    EXPECT_TRUE(out.ok) << out.log;
    return out.image;
  };
  auto clock_reads = [](const std::string& text) {
    int reads = 0;
    for (size_t at = text.find("%globaltimer"); at != std::string::npos; at = text.find("%globaltimer", at + 1)) ++reads;
    return reads;
  };
  const std::string plain = ptx(k.source), traced = ptx(traced_kernel_source(k.source));
  EXPECT_EQ(clock_reads(plain), 1) << "only the wait's timeout reads the clock";
  EXPECT_GT(clock_reads(traced), clock_reads(plain));
}

TEST(Trace, TracedKernelsCompileForAmpereAndHopper) {
  for (const std::string& name : test::shipped_schedule_names()) {
    const testing::Planned p = testing::plan_shipped(name, 8);
    ASSERT_TRUE(p.planned) << name << ": " << p.errors;
    const EmittedKernel k = emit_cuda(testing::lowered(*p.planned, {}));
    for (const char* arch : {"sm_80", "sm_90"}) {
      NvrtcRequest req;
      req.source = traced_kernel_source(k.source);
      req.arch = arch;
      req.target = NvrtcTarget::Cubin;
      const NvrtcOutput out = nvrtc_compile(req);
      EXPECT_TRUE(out.ok) << name << " " << arch << ":\n" << out.log;
      EXPECT_EQ(nvrtc_warnings(out.log), "") << name << " " << arch;
    }
  }
}

}  // namespace
}  // namespace ccc
