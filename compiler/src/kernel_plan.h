// The kernel plan: a planned step program lowered to what one fused kernel per rank does.
//
// Per rank and step: the waits to pass, then passes. A pass writes one destination chunk range
// of the rank's own buffer from one or more operands (fusion: every reduce of a step into one
// destination is one multi-source pass; adjacent chunks that do the same thing are one pass).
// Operands are resolved to physical buffers: a read of an output chunk nobody has written yet
// reads the input instead (first touch), so out-of-place needs no copy. Output chunks a schedule
// never writes get a passthrough copy from the input (out-of-place only).
//
// Collectives other than allreduce map the schedule's full-vector chunk space onto the user's
// NCCL-shaped buffers: a reduce_scatter's output and an allgather's input hold only the rank's
// own block (chunk geometry cuts every block alike, ccc_geometry.h), and output chunks that
// are not part of a rank's result (other blocks of a reduce_scatter, a reduce's non-root ranks)
// live in staging, scratch space the user never sees.
//
// Tiling is not spelled out here: every chunk splits into one slice per channel and every slice
// into windows of `pipeline` tiles, all at run time from `count` (ccc_geometry.h); the plan's
// passes and waits apply to every (channel, window) alike.
#pragma once

#include <array>
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "data_type.h"
#include "sync_plan.h"

namespace ccc {

struct KernelOptions {
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  int64_t tile_bytes = 64 * 1024;  // a multiple of 64
  int channels = 4;                // thread blocks per rank
  int pipeline = 2;                // tiles per channel between two progress updates
  bool in_place = false;           // input == output: reads never redirect to the input
  Protocol protocol = Protocol::Simple;
  // Every rank runs on one device (virtual ranks, a one-device communicator): the kernel's
  // acquire/release/relaxed sync operations take .gpu scope instead of .sys (docs/codegen.md,
  // "Memory scope"). A compile-time choice: it is in the kernel's name and text.
  bool one_device = false;
  // The write that completes each element also adds the rank's residual (allreduce only; the
  // device's add_residual<op>). In the kernel's name and text.
  Epilogue epilogue = Epilogue::None;
};

// Whether the write that completes a value does more than a plain reduce: the op's finish (avg:
// / N) or an epilogue.
bool completing_write_finishes(const KernelOptions& o);

// Where a pass reads or writes on some rank: the user's buffers, the schedule's scratch, or
// staging (the output chunks that are not part of the rank's result).
// Ll: one of the LL receive regions in a rank's scratch (protocol ll), after everything else.
// Slot: a slot of a schedule's `scratch K slots`, which holds one chunk of any position (the
// pass's chunk): a pass that touches a slot is one chunk long.
enum class Storage { Output, Input, Scratch, Staging, Ll, Slot };
const char* storage_name(Storage s);  // "output", "input", "scratch", "staging", "ll", "slot"

// A physical buffer of some rank, read at the pass's chunks + shift (a remap; a multiple of
// the chunks per block, so the device moves it by whole blocks of `count` elements).
//
// An Ll operand is the reading rank's own receive region `slot`, which rank `rank` (the
// producer) fills; it is indexed by the chunks of the pass that reads it (shift 0). A Slot
// operand is scratch slot `slot` of rank `rank`, holding the pass's chunk (shift 0).
struct Operand {
  int rank = 0;
  Storage buffer = Storage::Output;
  int64_t shift = 0;
  int slot = -1;  // Storage::Ll and Storage::Slot only
  friend auto operator<=>(const Operand&, const Operand&) = default;
};

// Most passes have one or two operands and one DSL op: inline, not on the heap (a plan holds
// N x steps passes).
using Operands = boost::container::small_vector<Operand, 2>;
using SourceLocs = boost::container::small_vector<SourceLoc, 1>;
using Waits = std::vector<Wait>;

struct DataPass {
  OpKind kind = OpKind::Copy;    // Copy: one operand. Reduce: operands fold left to right, in
                                 // fold order (fold_order.h)
  Storage dst = Storage::Output; // the rank's own buffer; Ll: a send (protocol ll), a copy of the
                                 // rank's own operand into `to`
  Operand to;                    // dst == Ll: the consumer (to.rank) and its receive region (to.slot);
                                 // dst == Slot: the rank and the scratch slot written (to.slot)
  ChunkRange chunks;
  Operands operands;
  bool completes = false;        // this write completes the value: the op's finish (avg) goes here
  SourceLocs locs;               // the DSL ops fused into it
};
// The chunk of its buffer that operand o touches while its pass is at chunk c: c + shift, or
// the slot.
inline int64_t operand_chunk(const Operand& o, int64_t c) { return o.buffer == Storage::Slot ? o.slot : c + o.shift; }
// The chunk of its destination buffer that `pass` writes while at chunk c: c, or the slot.
inline int64_t written_chunk(const DataPass& pass, int64_t c) { return pass.dst == Storage::Slot ? pass.to.slot : c; }
// Whether `pass` touches a scratch slot.
bool touches_slot(const DataPass& pass);
// Whether operand o of `reader` (a pass of the rank that also runs `writer`) reads something
// `writer` writes in the rank's own buffers.
bool reads_what_writes(const DataPass& reader, const Operand& o, const DataPass& writer, int rank);

// Most steps have one pass: inline (a plan holds N x steps of them; on the heap each cost an
// allocation and its free).
using DataPasses = boost::container::small_vector<DataPass, 1>;

struct StepPlan {
  Waits waits;                   // at most one per peer, self-waits dropped
  std::vector<DataPass> entry_sends;  // protocol ll, step 0 only: sends of values the rank holds
                                      // at entry (its input), before any pass can overwrite them
                                      // or wait on a peer's send
  DataPasses passes;
  std::vector<DataPass> sends;   // protocol ll: sends of values this step's passes finished
};

// A step's passes in the order they run: entry sends, passes, sends.
inline std::array<std::span<const DataPass>, 3> pass_lists(const StepPlan& step) {
  return {std::span(step.entry_sends), std::span(step.passes.data(), step.passes.size()), std::span(step.sends)};
}

struct RankPlan {
  std::vector<StepPlan> steps;       // one per program step
  std::vector<DataPass> passthrough;     // input -> output for chunks no step writes
  Waits exit_waits;
  std::vector<int> consumers;        // the ranks whose waits name this rank, ascending: where the
                                     // kernel pushes its step progress (ccc_progress.h)
};

// Chunks moved by one rank: bytes = chunks * count * dtype size / nchunks.
struct Traffic {
  int64_t read = 0;         // chunk reads, own and remote
  int64_t read_remote = 0;  // chunk reads from peers (NVLink traffic)
  int64_t written = 0;
};

struct KernelPlan {
  KernelOptions options;
  std::string file;
  std::string schedule;
  std::vector<std::pair<std::string, int64_t>> params;  // the schedule's parameters (StepProgram::params)
  Collective collective = Collective::AllReduce;
  int root = -1;                 // broadcast / reduce root
  int nranks = 0;
  int64_t nchunks = 0;
  std::vector<Phase> phases;
  std::vector<StepInfo> steps;
  std::vector<RankPlan> ranks;
  int blocks = 1;                // the chunk space is `blocks` blocks of `count` elements (N for
                                 // reduce_scatter, allgather and alltoall, else 1)
  int64_t scratch_blocks = 1;    // blocks of `count` the schedule's scratch spans (`blocks` unless it
                                 // declares `scratch K`: then K chunks, nchunks / blocks per block)
  int64_t scratch_slots = 0;     // `scratch K slots`: K slots of one chunk each (scratch_blocks 0)
  bool uses_scratch = false;     // the schedule's scratch: scratch_blocks * count elements per rank,
                                 // or scratch_slots slots
  bool uses_staging = false;     // staging: blocks * count more, after the scratch
  int ll_slots = 0;              // protocol ll: receive regions of the rank that has most (one
                                 // per remote read)
  int64_t ll_blocks = 0;         // protocol ll: blocks of `count` elements each region spans, in
                                 // lines: those of the chunks passes read it at (scratch chunks
                                 // past the vector's blocks included)
  int64_t waits = 0;             // waits in the kernel, all ranks
  int64_t cross_rank_edges = 0;  // from the sync plan
  uint64_t program_hash = 0;     // of the step program: provenance in the emitted header

  int nsteps() const { return static_cast<int>(steps.size()); }
};

// "count" or "4 * count": the elements of `blocks` blocks.
std::string blocks_text(int64_t blocks);
// "out[3] = sum(in[3], r2.out[3])": a pass of `rank`, operands named relative to it.
std::string pass_text(const DataPass& pass, int rank, ReduceOp op, Epilogue epilogue = Epilogue::None);
// "wait rank 2 step 4 (RAW: ...)", the wait of a rank of `plan`.
std::string wait_text(const Wait& wait, const KernelPlan& plan);
std::string traffic_text(const Traffic& t);

Traffic pass_traffic(const DataPass& pass, int rank);
Traffic rank_traffic(const RankPlan& plan, int rank);

// Human-readable plan (--dump-after=lower): options, per rank and step the waits and passes with
// the chunks each moves, and totals in chunks and in bytes per element of count.
std::string print_kernel_plan(const KernelPlan& plan);

}  // namespace ccc
