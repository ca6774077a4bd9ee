// `ccc trace-summary FILE`: a trace written by CCC_TRACE / --trace (docs/tracing.md), read back
// per call and step: which rank finished the step last (the critical path runs through it) and
// how long the ranks waited before its data passes, so a schedule's critical path reads in a
// terminal without Perfetto.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

using nlohmann::json;

// Nanoseconds from the trace's microseconds (three decimals: exact).
long long ns(const json& us) { return std::llround(us.get<double>() * 1000.0); }
std::string us(long long ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e3); }

struct Call {
  json args;                  // the collective span's arguments (the first channel's)
  long long begin = -1;       // earliest entry of any (rank, channel)
  long long end = -1;         // latest exit
  // (step) -> (rank, channel) -> its wait summed over windows, and when its last window ended.
  std::map<int, std::map<std::pair<int, int>, std::pair<long long, long long>>> steps;
};

void summarise(const std::map<int, Call>& calls, std::ostream& out) {
  for (const auto& [index, call] : calls) {
    const json& a = call.args;
    out << fmt::format("call {}: {} {}, {} ranks x {} channels, count {} {} ({} bytes): {} us\n", index,
                       a.at("collective").get<std::string>(), a.at("schedule").get<std::string>(),
                       a.at("ranks").get<int>(), a.at("channels").get<int>(), a.at("count").get<uint64_t>(),
                       a.at("dtype").get<std::string>(), a.at("bytes").get<uint64_t>(), us(call.end - call.begin));
    for (const auto& [step, channels] : call.steps) {
      std::pair<int, int> slowest, longest;
      long long done = -1, wait_min = -1, wait_max = -1, wait_sum = 0;
      for (const auto& [who, t] : channels) {
        const auto [wait, end] = t;
        if (end > done) done = end, slowest = who;
        if (wait > wait_max) wait_max = wait, longest = who;
        if (wait_min < 0 || wait < wait_min) wait_min = wait;
        wait_sum += wait;
      }
      out << fmt::format("  step {}: last done by rank {} channel {} at {} us; waits {} / {} / {} us "
                         "(min / mean / max; longest: rank {} channel {})\n",
                         step, slowest.first, slowest.second, us(done - call.begin), us(wait_min),
                         us(wait_sum / static_cast<long long>(channels.size())), us(wait_max), longest.first,
                         longest.second);
    }
  }
}

int run_trace_summary(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const Command& cmd = trace_summary_command();
  if (args.positional.size() != 1) return usage_error(cmd, "expected one trace FILE", err);
  const std::string& path = args.positional[0];
  std::ifstream in(path);
  if (!in) {
    err << fmt::format("ccc trace-summary: error: cannot read {}\n", path);
    return kExitScheduleError;
  }
  std::map<int, Call> calls;
  try {
    const json trace = json::parse(in);
    for (const json& e : trace.at("traceEvents")) {
      if (e.at("ph") != "X") continue;
      Call& call = calls[e.at("args").at("call").get<int>()];
      const long long ts = ns(e.at("ts")), end = ts + ns(e.at("dur"));
      const std::pair<int, int> who{e.at("pid").get<int>(), e.at("tid").get<int>()};
      if (e.at("cat") == "collective") {
        if (call.begin < 0) call.args = e.at("args");
        call.begin = call.begin < 0 ? ts : std::min(call.begin, ts);
        call.end = std::max(call.end, end);
      } else if (e.at("name") == "wait" || e.at("name") == "pass") {
        auto& [wait, done] = call.steps[e.at("args").at("step").get<int>()][who];
        if (e.at("name") == "wait") wait += end - ts;
        else done = std::max(done, end);
      }
    }
  } catch (const json::exception& e) {
    err << fmt::format("ccc trace-summary: error: {} is not a ccc trace: {}\n", path, e.what());
    return kExitScheduleError;
  }
  if (calls.empty()) {
    err << fmt::format("ccc trace-summary: error: {} holds no traced collective\n", path);
    return kExitScheduleError;
  }
  for (const auto& [index, call] : calls) {
    if (call.begin < 0) {
      err << fmt::format("ccc trace-summary: error: {}: call {} has steps but no collective span\n", path, index);
      return kExitScheduleError;
    }
  }
  summarise(calls, out);
  return kExitOk;
}

}  // namespace

const Command& trace_summary_command() {
  static const Command cmd{"trace-summary",
                           "per call and step of a trace (--trace, CCC_TRACE): the rank that finished last, how long ranks waited",
                           "ccc trace-summary FILE", {}, &run_trace_summary};
  return cmd;
}

}  // namespace ccc::cli
