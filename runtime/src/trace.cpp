#include "trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>

namespace ccc {

std::string traced_kernel_source(const std::string& source) {
  return "#define CCC_TRACE_ENABLED 1\n" + source;
}

void TraceLog::add(uint64_t call_index, const TraceCall& call, int rank, const ccc_trace_channel* records,
                   int channels) {
  for (int c = 0; c < channels; ++c) {
    if (records[c].enter == 0) continue;
    dropped_ += records[c].dropped;
    channels_.push_back({call_index, call, rank, c, records[c]});
  }
}

namespace {

// A JSON string literal. Names here are schedule, collective and type names; escaping keeps a
// user's schedule name with odd characters from breaking the file.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(ch)));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace

std::string TraceLog::json() const {
  uint64_t origin = std::numeric_limits<uint64_t>::max();
  for (const Channel& c : channels_) origin = std::min<uint64_t>(origin, c.record.enter);
  // Microseconds with nanosecond digits: the unit the format wants, without losing resolution.
  auto us = [&](uint64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns - origin) / 1e3); };
  std::vector<std::string> events;
  std::vector<std::pair<int, int>> named;  // (rank, channel) tracks given names already
  for (const Channel& c : channels_) {
    const TraceCall& k = c.call;
    if (std::find(named.begin(), named.end(), std::pair{c.rank, -1}) == named.end()) {
      named.emplace_back(c.rank, -1);
      events.push_back(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"rank {}"}}}})",
                                   c.rank, c.rank));
    }
    if (std::find(named.begin(), named.end(), std::pair{c.rank, c.channel}) == named.end()) {
      named.emplace_back(c.rank, c.channel);
      events.push_back(
          fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"channel {}"}}}})",
                      c.rank, c.channel, c.channel));
    }
    const std::string where = fmt::format(R"("pid":{},"tid":{})", c.rank, c.channel);
    const ccc_trace_channel& r = c.record;
    const uint64_t left = r.exit != 0 ? r.exit : r.count > 0 ? r.steps[r.count - 1].end : r.enter;
    events.push_back(fmt::format(
        R"({{"ph":"X","name":{},"cat":"collective",{},"ts":{},"dur":{:.3f},"args":{{"call":{},"collective":{},)"
        R"("schedule":{},"count":{},"bytes":{},"dtype":{},"op":{},"ranks":{},"channels":{},"tile_bytes":{},"pipeline":{},)"
        R"("completed":{}}}}})",
        quoted(k.collective), where, us(r.enter), static_cast<double>(left - r.enter) / 1e3, c.call_index,
        quoted(k.collective), quoted(k.schedule), k.count, k.bytes, quoted(k.dtype), quoted(k.op), k.nranks,
        k.channels, k.tile_bytes, k.pipeline, r.exit != 0 ? "true" : "false"));
    for (unsigned i = 0; i < r.count && i < CCC_TRACE_CAPACITY; ++i) {
      const ccc_trace_step& s = r.steps[i];
      const bool labelled = k.step_labels != nullptr && s.step >= 0 && static_cast<size_t>(s.step) < k.step_labels->size();
      const std::string args =
          fmt::format(R"("args":{{"call":{},"step":{},"window":{}{}}})", c.call_index, s.step, s.window,
                      labelled ? R"(,"label":)" + quoted((*k.step_labels)[static_cast<size_t>(s.step)]) : std::string());
      events.push_back(fmt::format(R"({{"ph":"X","name":"wait","cat":"step",{},"ts":{},"dur":{:.3f},{}}})", where,
                                   us(s.begin), static_cast<double>(s.pass - s.begin) / 1e3, args));
      events.push_back(fmt::format(R"({{"ph":"X","name":"pass","cat":"step",{},"ts":{},"dur":{:.3f},{}}})", where,
                                   us(s.pass), static_cast<double>(s.end - s.pass) / 1e3, args));
    }
  }
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i) out += events[i] + (i + 1 < events.size() ? ",\n" : "\n");
  return out + "]}\n";
}

bool TraceLog::write(const std::filesystem::path& path, std::string* error) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out << json();
  out.close();
  if (out) return true;
  *error = fmt::format("cannot write trace {}: {}", path.string(), std::strerror(errno));
  return false;
}

}  // namespace ccc
