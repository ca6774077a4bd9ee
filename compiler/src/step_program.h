// The step program: a schedule instantiated for a concrete rank count N.
//
// This is the IR every pass after the front end consumes. Semantics are lock-step: steps are
// global (every rank has the same number of steps, some of them empty); every op of step k reads
// the state at the start of step k and its writes land at the end of step k.
//
// Buffers (per rank, each `nchunks` chunks long):
//   output  - the working buffer. Logically it starts equal to the rank's input (lowering makes
//             the first read of a not-yet-written chunk come from the input buffer), and it is
//             what the user gets back.
//   input   - the rank's original input. Read-only: an op may name it as a source.
//   scratch - per-rank staging space; its chunks start undefined. It has `nchunks` chunks
//             unless the schedule declares `scratch K` (nscratch).
//
// An op on rank r:  reduce: r.dst[c] = r.dst[c] (+) peer.src[c + shift]   for c in chunks
//                   copy:   r.dst[c] = peer.src[c + shift]
// (`shift` is 0 unless the op remaps: `copy chunk 2 from p as chunk 5` has chunks {5, 1} and
// shift -3.) A remap keeps a chunk's position within its block (chunk_position), so source and
// destination have the same size whatever the element count, unless it moves into or out of a
// slot of `scratch K slots`, which holds a chunk of any position (remap_allowed).
// Within one step a destination chunk may take any number of reduces (their sources combine,
// e.g. one-shot) or exactly one copy.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ccc/diagnostics.h"
#include "ccc/types.h"

namespace ccc {

enum class OpKind { Reduce, Copy };
enum class Buffer : uint8_t { Output, Input, Scratch };  // one byte: N x steps waits name one

const char* op_kind_name(OpKind k);         // "reduce", "copy"
// ", C = 3, D = 2": each parameter and its value, for the headers that name N (empty: none).
std::string params_text(const std::vector<std::pair<std::string, int64_t>>& params);
const char* buffer_name(Buffer b);          // "output", "input", "scratch"

// Half-open chunk range [begin, begin + count).
struct ChunkRange {
  int64_t begin = 0;
  int64_t count = 1;
  int64_t end() const { return begin + count; }
  bool overlaps(const ChunkRange& o) const { return begin < o.end() && o.begin < end(); }
  bool contains(int64_t c) const { return begin <= c && c < end(); }
  friend bool operator==(const ChunkRange&, const ChunkRange&) = default;
};

struct Op {
  OpKind kind = OpKind::Copy;
  ChunkRange chunks;             // the chunks of `dst` written
  int peer = 0;                  // the rank read from (may be the rank itself: a local op)
  Buffer src = Buffer::Output;   // peer's buffer read
  Buffer dst = Buffer::Output;   // own buffer written
  SourceLoc loc;                 // the DSL op that made it
  int64_t shift = 0;             // source chunk = destination chunk + shift (a remap; see above)
  // The chunks of the peer's `src` read.
  ChunkRange read_chunks() const { return {chunks.begin + shift, chunks.count}; }
  friend bool operator==(const Op&, const Op&) = default;
};

struct Phase {
  std::string name;
  SourceLoc loc;
};

// What is common to step k on every rank.
struct StepInfo {
  int phase = 0;       // index into StepProgram::phases
  std::string label;   // e.g. "reduce_scatter s=2" (loop variable values), for humans
  SourceLoc loc;       // the DSL `step` that made it
  bool staged = false; // inserted by the sync planner to stage writes through scratch (rewrites.h)
  // The step's number in the schedule as instantiated (`--emit steps`), which messages show: a
  // step the planner inserts has the number of the step it stages. -1: its index.
  int number = -1;
};

// Where an op's values came from, for diagnostics: what instantiation made the step program from
// (instantiate.h) can re-run one rank up to one op and say which `let`s, `param`s and loop
// variables gave its chunk and peer, and which `if`s let it run.
class OpProvenance {
 public:
  virtual ~OpProvenance() = default;
  // Notes in `diags` on op `op` of rank `rank`'s step `step` (a push: the op the sender ran).
  virtual void explain(int rank, int step, const Op& op, Diagnostics& diags) const = 0;
};

struct StepProgram {
  std::string file;              // schedule file name, for diagnostics
  std::string schedule;          // the schedule's name, e.g. "ring"
  SourceLoc loc;                 // the schedule's header: where errors about the whole program point
  Collective collective = Collective::AllReduce;
  int root = -1;                 // broadcast / reduce root; -1 otherwise
  int nranks = 0;
  int64_t nchunks = 0;
  int64_t nscratch = 0;          // scratch chunks from `scratch K`; 0 (no declaration): nchunks.
                                 // Read it through buffer_chunks.
  bool scratch_slots = false;    // `scratch K slots`: scratch chunk k is a slot that holds one chunk
                                 // of any position, not the chunk at position k % (nchunks / blocks)
  std::vector<std::pair<std::string, int64_t>> params;  // each `param` and its value, in order
  std::vector<Phase> phases;
  std::vector<StepInfo> steps;              // size nsteps()
  std::vector<std::vector<std::vector<Op>>> ops;  // ops[rank][step]; ops.size() == nranks
  std::shared_ptr<const OpProvenance> provenance;  // null for a program made by hand

  int nsteps() const { return static_cast<int>(steps.size()); }
  int64_t num_ops() const;
};

// How many chunks buffer b of a rank has: nchunks, or for scratch the declared nscratch.
int64_t buffer_chunks(const StepProgram& p, Buffer b);

// The user's buffers are `blocks` blocks of `count` elements each (N for reduce_scatter,
// allgather and alltoall, else 1), and every block is cut into nchunks / blocks chunks alike; a
// chunk's position is its index within its block, and two chunks of one position have the same
// size. Scratch chunks continue the same numbering (scratch chunk k sits where chunk k would).
int blocks(const StepProgram& p);
int64_t chunk_position(const StepProgram& p, int64_t chunk);
// Whether an op reading chunk `read` of buffer src may write chunk `written` of buffer dst: the
// same position, or a scratch slot on either side.
bool remap_allowed(const StepProgram& p, Buffer src, int64_t read, Buffer dst, int64_t written);

// Chunk ownership for reduce_scatter, allgather and alltoall: rank r owns chunks
// [r * nchunks / N, (r + 1) * nchunks / N). (nchunks must be a multiple of N for these.)
ChunkRange owned_chunks(const StepProgram& p, int rank);

// What the user's buffers hold, in the full-vector chunk space every schedule is written in.
// Input chunks the collective gives a rank (allgather: its own block; broadcast: the root's
// everything; otherwise all).
bool input_holds(const StepProgram& p, int rank, int64_t chunk);
// Output chunks that are part of the rank's result (reduce_scatter: its own block; reduce: the
// root's everything; otherwise all). The rest are working space the user does not see.
bool output_holds_result(const StepProgram& p, int rank, int64_t chunk);

// Where rank `rank`'s output chunks are completed, as a proved allreduce completes them: each
// chunk's last write into the output, where that is a reduce (then the chunk holds every rank's
// contribution: lowering's completing write, DataPass::completes, where a fused epilogue's
// residual is added). [chunk] -> {step, index of the op in the step}, or {-1, -1}. A schedule
// that completes a chunk in scratch and copies it into the output is not seen here.
std::vector<std::pair<int, int>> completing_reduces(const StepProgram& p, int rank);

}  // namespace ccc
