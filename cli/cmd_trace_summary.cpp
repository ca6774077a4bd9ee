// `ccc trace-summary FILE`: a trace written by CCC_TRACE / --trace (docs/tracing.md), read back
// per call and step: which rank finished the step last (the critical path runs through it) and
// how long the ranks waited before its data passes, so a schedule's critical path reads in a
// terminal without Perfetto.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

using nlohmann::json;

// A file that is not what ccc writes. The message names the event and the field, never the JSON
// library's own words.
struct NotATrace {
  std::string why;
};

// The fields of one event, checked as they are read.
class Event {
 public:
  Event(const json& e, size_t index) : e_(e), index_(index) {
    if (!e.is_object()) fail("", "an object");
  }
  std::string text(const char* key) const { return at(key, json::value_t::string, "a string").get<std::string>(); }
  // `key`'s text, or "" where the event has no such key (older traces have no step labels).
  std::string optional_text(const char* key) const { return e_.contains(key) ? text(key) : std::string(); }
  long long integer(const char* key) const { return at(key, json::value_t::number_integer, "an integer").get<long long>(); }
  // Nanoseconds from the trace's microseconds (three decimals: exact). Bounded (11 days), so
  // sums of them cannot overflow.
  long long ns(const char* key) const {
    const double us = at(key, json::value_t::number_float, "a number").get<double>();
    if (!(std::fabs(us) <= 1e12)) fail(key, "a number of microseconds within 1e12");
    return std::llround(us * 1000.0);
  }
  // The event's "args", as an event of its own (same index).
  Event args() const { return Event(at("args", json::value_t::object, "an object"), index_, "args."); }

 private:
  Event(const json& e, size_t index, std::string prefix) : e_(e), index_(index), prefix_(std::move(prefix)) {}
  const json& at(const char* key, json::value_t type, const char* what) const {
    const auto it = e_.find(key);
    const bool number = type == json::value_t::number_float || type == json::value_t::number_integer;
    const bool fits = it != e_.end() && (number ? (type == json::value_t::number_float ? it->is_number() : it->is_number_integer())
                                               : it->type() == type);
    if (!fits) fail(key, what);
    return *it;
  }
  [[noreturn]] void fail(const char* key, const char* what) const {
    if (*key == '\0') throw NotATrace{fmt::format("event {} is not {}", index_, what)};
    throw NotATrace{fmt::format("event {}: \"{}{}\" is missing or not {}", index_, prefix_, key, what)};
  }
  const json& e_;
  size_t index_;
  std::string prefix_;
};

std::string us(long long ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e3); }

struct Call {
  std::string heading;        // the collective span's arguments (the first channel's), as printed
  long long begin = -1;       // earliest entry of any (rank, channel)
  long long end = -1;         // latest exit
  // (step) -> (rank, channel) -> its wait summed over windows, and when its last window ended.
  std::map<int, std::map<std::pair<int, int>, std::pair<long long, long long>>> steps;
  std::map<int, std::string> labels;  // (step) -> its label ("all_gather s=1"), where the trace has one
};

void summarise(const std::map<long long, Call>& calls, std::ostream& out) {
  for (const auto& [index, call] : calls) {
    out << fmt::format("call {}: {}: {} us\n", index, call.heading, us(call.end - call.begin));
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
      const auto label = call.labels.find(step);
      out << fmt::format("  step {}{}: last done by rank {} channel {} at {} us; waits {} / {} / {} us "
                         "(min / mean / max; longest: rank {} channel {})\n",
                         step, label != call.labels.end() ? " (" + label->second + ")" : std::string(), slowest.first,
                         slowest.second, us(done - call.begin), us(wait_min),
                         us(wait_sum / static_cast<long long>(channels.size())), us(wait_max), longest.first,
                         longest.second);
    }
  }
}

// The calls of `trace`, parsed JSON; NotATrace where it is not what ccc writes.
std::map<long long, Call> read_calls(const json& trace) {
  const auto events = trace.is_object() ? trace.find("traceEvents") : trace.end();
  if (!trace.is_object() || events == trace.end() || !events->is_array())
    throw NotATrace{"it has no \"traceEvents\" array"};
  std::map<long long, Call> calls;
  for (size_t index = 0; index < events->size(); ++index) {
    const Event e((*events)[index], index);
    if (e.text("ph") != "X") continue;
    const Event args = e.args();
    Call& call = calls[args.integer("call")];
    const long long ts = e.ns("ts"), end = ts + e.ns("dur");
    const std::pair<int, int> who{static_cast<int>(e.integer("pid")), static_cast<int>(e.integer("tid"))};
    const std::string name = e.text("name");
    if (e.text("cat") == "collective") {
      if (call.begin < 0)
        call.heading = fmt::format("{} {}, {} ranks x {} channels, count {} {} ({} bytes)", args.text("collective"),
                                   args.text("schedule"), args.integer("ranks"), args.integer("channels"),
                                   args.integer("count"), args.text("dtype"), args.integer("bytes"));
      call.begin = call.begin < 0 ? ts : std::min(call.begin, ts);
      call.end = std::max(call.end, end);
    } else if (name == "wait" || name == "pass") {
      const int step = static_cast<int>(args.integer("step"));
      auto& [wait, done] = call.steps[step][who];
      if (std::string label = args.optional_text("label"); !label.empty()) call.labels[step] = std::move(label);
      if (name == "wait") wait += end - ts;
      else done = std::max(done, end);
    }
  }
  return calls;
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
  const json trace = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded()) {
    err << fmt::format("ccc trace-summary: error: {} is not JSON, so not a ccc trace (docs/tracing.md)\n", path);
    return kExitScheduleError;
  }
  std::map<long long, Call> calls;
  try {
    calls = read_calls(trace);
  } catch (const NotATrace& e) {
    err << fmt::format("ccc trace-summary: error: {} is not a ccc trace: {}\n", path, e.why);
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
