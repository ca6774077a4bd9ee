// Tracing of a communicator's collectives (docs/tracing.md): each launch gets fresh records,
// which the traced kernel fills in and which are collected once the launching rank's stream is
// idle (a synchronize), into one log written to the trace file when the communicator goes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "ccc/collective_call.h"
#include "ccc_abi.h"
#include "emit_cuda.h"
#include "trace.h"

namespace ccc {

class CallTracer {
 public:
  // `file`: where the log goes (empty: not tracing); the backend holds records a kernel writes
  // in device memory.
  CallTracer(std::string file, Backend& backend) : file_(std::move(file)), backend_(backend) {}
  // Waits for every rank, collects what is pending and writes the file; never throws.
  ~CallTracer();
  CallTracer(const CallTracer&) = delete;
  CallTracer& operator=(const CallTracer&) = delete;

  bool on() const { return !file_.empty(); }
  // Fresh records for one launch of `kernel` by `rank` (-1: every rank, one grid), remembered
  // until collected: host memory, or what the backend's trace_alloc gives. Null when not tracing.
  ccc_trace_channel* records(const EmittedKernel& kernel, const CollectiveCall& call, int rank, void* stream);
  // Collects the records of rank `rank`'s launches (-1: every rank's), whose streams are idle.
  void collect(int rank);

 private:
  struct Pending {
    uint64_t call_index;
    TraceCall call;
    int rank;  // -1: every rank (one grid)
    int channels;
    std::unique_ptr<ccc_trace_channel[]> records;  // [channels], or [N * channels] for rank -1
    void* device = nullptr;  // the backend's: where the kernel writes them, read back when collected
    uint64_t bytes() const;
  };

  const std::string file_;
  Backend& backend_;
  std::mutex mutex_;  // pending_ and log_: a synchronize collects without the communicator's lock
  std::vector<Pending> pending_;
  TraceLog log_;
  std::vector<uint64_t> calls_;  // per rank: its collectives so far (each rank issues the same)
};

}  // namespace ccc
