// Timelines of collectives (docs/tracing.md): the per-(rank, channel) records a traced kernel
// writes (ccc_abi.h), collected call by call and written as Chrome trace-event JSON, which
// Perfetto and chrome://tracing open.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ccc_abi.h"

namespace ccc {

// The source of the traced variant of a generated kernel: the same text compiled with
// CCC_TRACE_ENABLED defined. A different text, so the JIT cache keeps the two apart.
std::string traced_kernel_source(const std::string& source);

// What a traced call was: the trace's arguments for its events.
struct TraceCall {
  std::string collective;
  std::string schedule;
  std::string dtype;
  std::string op;
  uint64_t count = 0;
  uint64_t bytes = 0;  // the larger of a rank's send and receive buffers
  int nranks = 0;
  int channels = 0;
  int64_t tile_bytes = 0;
  int pipeline = 0;  // tiles per window
  std::shared_ptr<const std::vector<std::string>> step_labels;  // EmittedKernel::step_labels, or null
};

class TraceLog {
 public:
  // Adds rank `rank`'s records of call number `call_index` (its channels' records, in channel
  // order). A channel that never entered adds nothing; one that failed adds no "left" time.
  void add(uint64_t call_index, const TraceCall& call, int rank, const ccc_trace_channel* records,
           int channels);
  bool empty() const { return channels_.empty(); }
  // Records past CCC_TRACE_CAPACITY that kernels counted but could not keep.
  uint64_t dropped() const { return dropped_; }
  // The Chrome trace-event JSON: one process per rank, one thread per channel; per channel and
  // call a span from entering to leaving, inside it one "wait" and one "pass" span per step and
  // window. Times are microseconds from the earliest entry in the log.
  std::string json() const;
  // Writes json() to `path`; false with `error` set if it cannot.
  bool write(const std::filesystem::path& path, std::string* error) const;

 private:
  struct Channel {
    uint64_t call_index;
    TraceCall call;
    int rank;
    int channel;
    ccc_trace_channel record;
  };
  std::vector<Channel> channels_;
  uint64_t dropped_ = 0;
};

}  // namespace ccc
