// The synchronisation plan: lock-step relaxed into point-to-point waits.
//
// Ranks run at their own pace. Before rank r starts step k it waits until every peer named in
// waits[r][k] has *completed* the named step. Step -1 stands for the virtual start vertex ("the
// peer has entered this collective: its inputs are ready and it no longer reads the previous
// launch's data"); index nsteps in waits[r] holds the exit waits that must hold before rank r
// returns (no peer still reads r's buffers).
//
// Waits are per (rank, step) and apply identically to every tile and channel: tiles and channels
// partition every chunk the same way, so the dependency between (rank, step) pairs holds slice by
// slice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "step_program.h"

namespace ccc {

// LlSlots: a producer under the ll protocol waits for its consumer to have entered (step -1)
// before its first send: the consumer's previous launch has read its receive slots.
enum class SyncReason : uint8_t { RAW, WAR, WAW, Entry, Exit, LlSlots };
const char* sync_reason_name(SyncReason r);  // "RAW", "WAR", ...

struct Wait {
  int peer = 0;
  int step = -1;        // wait until `peer` has completed this step; -1 = peer has started
  SyncReason reason = SyncReason::RAW;
  // Why, as fields (wait_why() spells it out; a text per wait cost N x steps strings at large N):
  // the memory the dependency is on, and the DSL op behind it (the waiting rank's op, or at exit
  // the peer's op that still reads this rank). Ordered to pack into 40 bytes.
  Buffer buffer = Buffer::Output;
  bool in_place_input = false;  // a WAR on the input of an in-place run: that memory is the output
  SourceLoc loc;
  ChunkRange chunks;
};

// "reads output chunk 3 of rank 2, written at step 4 (ring s=1) (ring.sched:9)": `steps` and
// `file` of the program the wait was planned for.
std::string wait_why(const Wait& w, const std::vector<StepInfo>& steps, const std::string& file);

struct SyncPlan {
  // waits[r][k] for k in [0, nsteps]; k == nsteps are the exit waits.
  std::vector<std::vector<std::vector<Wait>>> waits;
  int64_t cross_rank_edges = 0;   // cross-rank dependencies before transitive reduction
  int64_t waits_kept = 0;         // after reduction
  std::vector<std::string> notes; // e.g. staging decisions taken
  bool rotated_clocks = false;    // planned from rank 0's vector clocks alone (sync.h)
};

// A verified schedule ready for lowering: the (possibly staged) program and its waits.
struct PlannedProgram {
  StepProgram program;
  SyncPlan sync;
};

}  // namespace ccc
