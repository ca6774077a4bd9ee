// Memory dependencies of a step program: which access must wait for which.
//
// One pass over the program in lock-step order classifies every pair of accesses to the same
// (rank, buffer, chunk) memory:
//   RAW    a read of the latest earlier write;
//   WAR    a read before the next write, which may be in the same step (reads see the state at
//          the start of their step);
//   WAW    consecutive writes, always on the writer's own rank;
//   Entry  a read of a location nothing has written yet: it needs its owner to have started;
//   Exit   the last read of a location: its owner must not hand the buffer back before it.
// Consecutive chunks with the same partner are one dependency on a chunk range.
#pragma once

#include <cstdint>
#include <functional>

#include "step_program.h"

namespace ccc {

enum class DepKind { Program, RAW, WAR, WAW, Entry, Exit };
const char* dep_kind_name(DepKind k);  // "program", "RAW", ...

// An op of the program, or a rank's virtual start (step -1) or end (step nsteps); op is -1 for
// those two.
struct OpRef {
  int rank = 0;
  int step = -1;
  int op = -1;
  friend bool operator==(const OpRef&, const OpRef&) = default;
};

// `to` must not start before `from` has finished. The memory is chunks `chunks` of `buffer` on
// rank `owner` (the buffer as the program names it at the reading side for RAW/Entry/Exit and at
// the writing side for WAR/WAW).
struct Dependency {
  OpRef from;
  OpRef to;
  DepKind kind = DepKind::RAW;
  int owner = 0;
  Buffer buffer = Buffer::Output;
  ChunkRange chunks;
  SourceLoc from_loc, to_loc;  // the DSL ops of `from` and `to` (none for a start or end)
};

// When `in_place` is set a rank's input and output are the same memory, so an access to one
// conflicts with an access to the other.
void for_each_dependency(const StepProgram& p, bool in_place,
                         const std::function<void(const Dependency&)>& visit);

}  // namespace ccc
