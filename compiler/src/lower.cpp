#include "lower.h"

#include <algorithm>
#include <climits>
#include <map>
#include <tuple>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <fmt/format.h>

#include "fold_order.h"
#include "lower_error.h"
#include "rank_symmetry.h"
#include "small_sort.h"
#include "verify_bits.h"

namespace ccc {

namespace {

constexpr int kBuffers = 3;  // Output, Input, Scratch
int index(Buffer b) { return static_cast<int>(b); }
// The schedule's buffer a storage holds chunks of: staging holds output chunks.
int index(Storage s) {
  switch (s) {
    case Storage::Output:
    case Storage::Staging: return index(Buffer::Output);
    case Storage::Input: return index(Buffer::Input);
    case Storage::Scratch:
    case Storage::Slot:
    case Storage::Ll: return index(Buffer::Scratch);  // receive regions lie in scratch; no schedule chunk
  }
  return 0;
}

// The value a chunk holds, as far as lowering cares: how many ranks' contributions it carries
// (completion) and the lowest of those ranks (fold order, fold_order.h).
struct Held {
  int contributions = 0;
  int lowest_rank = INT_MAX;
  Held operator+(const Held& o) const { return {contributions + o.contributions, std::min(lowest_rank, o.lowest_rank)}; }
};
constexpr Held kUndefined{-1, INT_MAX};  // scratch never written

// What each (rank, buffer, chunk) holds: whether a step has written it, and its value.
struct State {
  std::vector<std::vector<std::vector<bool>>> written;  // [rank][buffer][chunk]
  std::vector<std::vector<std::vector<Held>>> held;     // [rank][buffer][chunk]
  // `scratch K slots`: the chunk each slot of each rank holds (the chunk of the pass that wrote
  // it): a slot is read back at that chunk's position.
  std::vector<std::vector<int64_t>> slot_chunk;         // [rank][slot]

  explicit State(const StepProgram& p)
      : written(p.nranks), held(p.nranks),
        slot_chunk(p.scratch_slots ? p.nranks : 0, std::vector<int64_t>(static_cast<size_t>(p.nscratch), -1)) {
    for (int r = 0; r < p.nranks; ++r)
      for (Buffer b : {Buffer::Output, Buffer::Input, Buffer::Scratch}) {
        const size_t n = static_cast<size_t>(buffer_chunks(p, b));
        written[r].emplace_back(n, false);
        held[r].emplace_back(n, b == Buffer::Scratch ? kUndefined : Held{1, r});
      }
  }
};

void check_options(const KernelOptions& o) {
  if (o.tile_bytes < 64 || o.tile_bytes % 64 != 0 || o.tile_bytes > (int64_t{1} << 30))
    throw LowerError({}, fmt::format("tile size {} B: must be a multiple of 64 between 64 B and 1 GiB", o.tile_bytes));
  if (o.channels < 1 || o.channels > 64)
    throw LowerError({}, fmt::format("{} channels: must be between 1 and 64", o.channels));
  if (o.pipeline < 1 || o.pipeline > 64)
    throw LowerError({}, fmt::format("pipeline depth {}: must be between 1 and 64", o.pipeline));
  // ProtocolLl::ll_pass counts a chunk's part of a window in 32-bit registers (the 64-register
  // budget of its line loop), so the window must hold fewer than 2^30 elements of any type. The
  // runtime caps ll calls far below that (kLlMaxBytes), so only an absurd tile is refused.
  if (o.protocol == Protocol::Ll && o.tile_bytes * o.pipeline >= (int64_t{1} << 30))
    throw LowerError({}, fmt::format("protocol ll: tile size {} B x pipeline depth {} must stay below 1 GiB",
                                     o.tile_bytes, o.pipeline));
}

// An epilogue finishes an allreduce's result; the other collectives have no completing write
// of a whole vector to put it in.
void check_epilogue(const StepProgram& p, const KernelOptions& o) {
  if (o.epilogue != Epilogue::None && p.collective != Collective::AllReduce)
    throw LowerError({}, fmt::format("epilogue {}: only an allreduce has one; this schedule is a {}",
                                     epilogue_name(o.epilogue), collective_name(p.collective)));
  if (o.epilogue != Epilogue::ResidualRmsNorm) return;
  if (o.dtype != DataType::F32 && o.dtype != DataType::F16 && o.dtype != DataType::BF16)
    throw LowerError({}, fmt::format("epilogue {}: normalises f32, f16 or bf16, not {}", epilogue_name(o.epilogue),
                                     data_type_name(o.dtype)));
}

void check_program(const PlannedProgram& pp) {
  const StepProgram& p = pp.program;
  if (p.nranks < 1 || p.nchunks < 1 || static_cast<int>(p.ops.size()) != p.nranks)
    throw LowerError({}, "malformed step program: rank or chunk count");
  if (blocks(p) > 1 && p.nchunks % p.nranks != 0)
    throw LowerError({}, fmt::format("{}: {} chunks do not split into {} equal blocks, one per rank",
                                     collective_name(p.collective), p.nchunks, p.nranks));
  if (static_cast<int>(pp.sync.waits.size()) != p.nranks)
    throw LowerError({}, "sync plan does not match the program: wrong number of ranks");
  for (int r = 0; r < p.nranks; ++r) {
    if (static_cast<int>(p.ops[r].size()) != p.nsteps() || static_cast<int>(pp.sync.waits[r].size()) != p.nsteps() + 1)
      throw LowerError({}, fmt::format("malformed plan: rank {} has the wrong number of steps", r));
    for (const auto& step : p.ops[r])
      for (const Op& op : step) {
        const ChunkRange read = op.read_chunks();
        if (op.peer < 0 || op.peer >= p.nranks || read.begin < 0 || read.count < 1 || read.end() > buffer_chunks(p, op.src))
          throw LowerError(op.loc, fmt::format("rank {}: op reads rank {} chunks [{}, {}) outside 0..{} x {} chunks", r, op.peer,
                                               read.begin, read.end(), p.nranks - 1, buffer_chunks(p, op.src)));
        if (op.chunks.begin < 0 || op.chunks.end() > buffer_chunks(p, op.dst) || op.dst == Buffer::Input)
          throw LowerError(op.loc, fmt::format("rank {}: op writes {} chunks [{}, {}), which it cannot", r, buffer_name(op.dst),
                                               op.chunks.begin, op.chunks.end()));
        if (!remap_allowed(p, op.src, read.begin, op.dst, op.chunks.begin))
          throw LowerError(op.loc, fmt::format("rank {}: op moves chunk {} onto chunk {}, another position in a block (the "
                                               "chunks' sizes may differ)", r, read.begin, op.chunks.begin));
      }
  }
}

// At most one wait per peer (the latest step: progress is monotonic), none on the rank itself.
// Ascending by peer. (A handful of waits per step, N x steps times: sorted in place, no map.)
// Works in place on the planned waits, so a released plan's vector becomes the step's.
Waits merge_waits(Waits waits, int rank) {
  std::erase_if(waits, [rank](const Wait& w) { return w.peer == rank; });
  // The latest step first within a peer; among equal steps the first planned, as before.
  stable_sort_small(waits.begin(), waits.end(), [](const Wait& a, const Wait& b) {
    return a.peer != b.peer ? a.peer < b.peer : a.step > b.step;
  });
  waits.erase(std::unique(waits.begin(), waits.end(), [](const Wait& a, const Wait& b) { return a.peer == b.peer; }),
              waits.end());
  return waits;
}

class Lowerer {
 public:
  Lowerer(const PlannedProgram& pp, const KernelOptions& o)
      : p_(pp.program), opt_(o), state_(p_), per_block_(p_.nchunks / blocks(p_)) {}

  DataPasses step_passes(int rank, int step) {
    const std::vector<Op>& ops = p_.ops[rank][step];
    // Every (destination buffer, chunk) an op writes, then sorted: the ops writing one chunk
    // stay in program order. This runs N x steps times, so its buffers are members, reused.
    writes_.clear();
    for (const Op& op : ops)
      for (int64_t c = op.chunks.begin; c < op.chunks.end(); ++c) writes_.push_back({index(op.dst), c, &op});
    stable_sort_small(writes_.begin(), writes_.end(), [](const Write& a, const Write& b) {
      return a.buffer != b.buffer ? a.buffer < b.buffer : a.chunk < b.chunk;
    });
    DataPasses chunk_passes;
    for (size_t i = 0; i < writes_.size();) {
      writers_.clear();
      size_t j = i;
      for (; j < writes_.size() && writes_[j].buffer == writes_[i].buffer && writes_[j].chunk == writes_[i].chunk; ++j)
        writers_.push_back(writes_[j].op);
      chunk_passes.push_back(chunk_pass(rank, step, static_cast<Buffer>(writes_[i].buffer), writes_[i].chunk, writers_));
      i = j;
    }
    check_no_self_hazard(rank, step, chunk_passes);
    return fuse_adjacent(std::move(chunk_passes));
  }

  // Lock-step: the writes of a step land once every rank's passes for it are known.
  void commit(int rank, const DataPasses& passes) {
    for (const DataPass& pass : passes)
      for (int64_t c = pass.chunks.begin; c < pass.chunks.end(); ++c) {
        next_written_.emplace_back(rank, index(pass.dst), written_chunk(pass, c));
        next_held_.push_back(fold(pass.operands, c));
        if (pass.dst == Storage::Slot) next_slot_chunk_.emplace_back(rank, pass.to.slot, c);
      }
  }
  void end_step() {
    for (size_t i = 0; i < next_written_.size(); ++i) {
      auto [r, b, c] = next_written_[i];
      state_.written[r][b][c] = true;
      state_.held[r][b][c] = next_held_[i];
    }
    for (auto [r, slot, c] : next_slot_chunk_) state_.slot_chunk[r][slot] = c;
    next_written_.clear();
    next_held_.clear();
    next_slot_chunk_.clear();
  }

  std::vector<DataPass> passthrough(int rank) const {
    std::vector<DataPass> out;
    if (opt_.in_place) return out;
    for (int64_t c = 0; c < p_.nchunks; ++c) {
      if (state_.written[rank][index(Buffer::Output)][c] || !output_holds_result(p_, rank, c) || !input_holds(p_, rank, c))
        continue;
      if (!out.empty() && out.back().chunks.end() == c) {
        ++out.back().chunks.count;
        continue;
      }
      DataPass pass;
      pass.kind = OpKind::Copy;
      pass.chunks = {c, 1};
      pass.operands = {{rank, Storage::Input}};
      out.push_back(std::move(pass));
    }
    return out;
  }

 private:
  Held held(const Operand& o, int64_t c) const {
    return o.buffer == Storage::Input ? Held{1, o.rank} : state_.held[o.rank][index(o.buffer)][operand_chunk(o, c)];
  }
  Held fold(const Operands& operands, int64_t c) const {
    Held total;
    for (const Operand& o : operands) total = total + held(o, c);
    return total;
  }

  std::string where(int rank, int step, int64_t chunk) const {
    return fmt::format("rank {}, step {} ({}), chunk {}", rank, step, p_.steps[step].label, chunk);
  }

  // In place, a rank's output chunk is its input chunk where both are the user's buffers.
  bool aliased(int rank, int64_t chunk) const {
    return opt_.in_place && output_holds_result(p_, rank, chunk) && input_holds(p_, rank, chunk);
  }
  Storage output_storage(int rank, int64_t chunk) const {
    return output_holds_result(p_, rank, chunk) ? Storage::Output : Storage::Staging;
  }

  // The physical buffer a pass writing `chunk` reads for `op` (at chunk + op.shift).
  Operand resolve(int rank, int step, const Op& op, int64_t chunk) const {
    Operand o = resolve(rank, step, op.peer, op.src, chunk + op.shift, op.loc);
    if (o.buffer != Storage::Slot) o.shift = op.shift;
    return o;
  }

  // The physical buffer a read of (peer, buffer, chunk) at the current step touches.
  Operand resolve(int rank, int step, int peer, Buffer buffer, int64_t chunk, SourceLoc loc) const {
    const auto& written = state_.written[peer];
    // Scratch chunks may lie past the output's (`scratch K`).
    const bool output_written = buffer != Buffer::Scratch && written[index(Buffer::Output)][chunk];
    switch (buffer) {
      case Buffer::Output:
        if (output_written) return {peer, output_storage(peer, chunk)};
        if (aliased(peer, chunk)) return {peer, Storage::Output};  // still the input's value
        if (!input_holds(p_, peer, chunk))
          throw LowerError(loc, fmt::format("{}: reads rank {}'s output before anything wrote it, and a {} gives that rank no such input chunk",
                                            where(rank, step, chunk), peer, collective_name(p_.collective)));
        return {peer, Storage::Input};
      case Buffer::Input:
        if (!input_holds(p_, peer, chunk))
          throw LowerError(loc, fmt::format("{}: reads rank {}'s input, which a {} does not give that rank",
                                            where(rank, step, chunk), peer, collective_name(p_.collective)));
        if (aliased(peer, chunk) && output_written)
          throw LowerError(loc, fmt::format("{}: reads rank {}'s input after its output overwrote it; the schedule cannot run in place",
                                            where(rank, step, chunk), peer));
        return {peer, Storage::Input};
      case Buffer::Scratch:
        if (!written[index(Buffer::Scratch)][chunk])
          throw LowerError(loc, fmt::format("{}: reads rank {}'s scratch before anything wrote it", where(rank, step, chunk), peer));
        if (p_.scratch_slots) return {peer, Storage::Slot, 0, static_cast<int>(chunk)};
        return {peer, Storage::Scratch};
    }
    return {peer, Storage::Output};
  }

  DataPass chunk_pass(int rank, int step, Buffer dst, int64_t chunk, const std::vector<const Op*>& writers) const {
    const Op& first = *writers.front();
    DataPass pass;
    pass.kind = first.kind;
    pass.dst = dst == Buffer::Scratch ? Storage::Scratch : output_storage(rank, chunk);
    if (dst == Buffer::Scratch && p_.scratch_slots) {
      pass.dst = Storage::Slot;
      pass.to = {rank, Storage::Slot, 0, static_cast<int>(chunk)};
    }
    pass.chunks = {chunk, 1};
    if (first.kind == OpKind::Copy) {
      if (writers.size() != 1)
        throw LowerError(writers[1]->loc, fmt::format("{}: a copy and another write land on {} in one step", where(rank, step, chunk), buffer_name(dst)));
      pass.operands.push_back(resolve(rank, step, first, chunk));
      pass.locs.push_back(first.loc);
      place_slot_pass(rank, step, pass);
      return pass;
    }
    pass.operands.push_back(resolve(rank, step, rank, dst, chunk, first.loc));  // the old value
    for (const Op* op : writers) {
      if (op->kind != OpKind::Reduce)
        throw LowerError(op->loc, fmt::format("{}: a copy and a reduce land on {} in one step", where(rank, step, chunk), buffer_name(dst)));
      pass.operands.push_back(resolve(rank, step, *op, chunk));
      if (std::find(pass.locs.begin(), pass.locs.end(), op->loc) == pass.locs.end()) pass.locs.push_back(op->loc);
    }
    place_slot_pass(rank, step, pass);
    const int64_t at = pass.chunks.begin;
    sort_into_fold_order(pass.operands, [&](const Operand& o) { return held(o, at).lowest_rank; });
    pass.completes = fold(pass.operands, at).contributions == p_.nranks;
    return pass;
  }

  // A pass that touches a scratch slot runs at the chunk its data is (the device finds a chunk's
  // size and slice from it): the chunk it writes, else the one it reads from a buffer, else the
  // one the slot it reads holds. Every operand must hold a chunk of that position, since a slot
  // is sized for any chunk but gives back only as many elements as the pass's chunk has.
  void place_slot_pass(int rank, int step, DataPass& pass) const {
    if (!touches_slot(pass)) return;
    const int64_t written = pass.chunks.begin;  // the chunk, or for a slot destination the slot
    int64_t at = pass.dst == Storage::Slot ? -1 : written;
    for (const Operand& o : pass.operands)
      if (at < 0 && o.buffer != Storage::Slot) at = written + o.shift;
    for (const Operand& o : pass.operands)
      if (at < 0 && o.buffer == Storage::Slot) at = state_.slot_chunk[o.rank][o.slot];
    for (Operand& o : pass.operands) {
      const int64_t held = o.buffer == Storage::Slot ? state_.slot_chunk[o.rank][o.slot] : written + o.shift;
      if (held % per_block_ != at % per_block_) {
        const std::string what =
            o.buffer == Storage::Slot
                ? fmt::format("rank {}'s scratch slot {} holds chunk {}", o.rank, o.slot, held)
                : fmt::format("it reads chunk {} of rank {}'s {}", held, o.rank, storage_name(o.buffer));
        throw LowerError(pass.locs.front(),
                         fmt::format("{}: {} (position {}), but the pass moves chunk {} (position {}): a slot gives "
                                     "a chunk back only at its own position (chunks of other positions may differ in "
                                     "size; {} chunks per block)", where(rank, step, at), what, held % per_block_, at,
                                     at % per_block_, per_block_));
      }
      if (o.buffer != Storage::Slot) o.shift = held - at;
    }
    pass.chunks = {at, 1};
  }

  // Passes of one step run in any order and in parallel, so none may read what another writes.
  void check_no_self_hazard(int rank, int step, const DataPasses& passes) const {
    for (const DataPass& writer : passes)
      for (const DataPass& reader : passes) {
        if (&writer == &reader) continue;
        for (const Operand& o : reader.operands)
          if (reads_what_writes(reader, o, writer, rank))
            throw LowerError(reader.locs.front(), fmt::format("{}: the step reads its own {} chunk {} that it also writes; stage it through scratch",
                                                              where(rank, step, writer.chunks.begin), storage_name(o.buffer),
                                                              written_chunk(writer, writer.chunks.begin)));
      }
  }

  // Adjacent chunks with the same destination buffer, operands and completion become one pass.
  static DataPasses fuse_adjacent(DataPasses passes) {
    if (passes.size() < 2) return passes;  // most steps
    DataPasses out;
    for (DataPass& pass : passes) {
      if (!out.empty()) {
        DataPass& prev = out.back();
        // A pass that touches a slot stays one chunk long (a slot holds one).
        if (prev.kind == pass.kind && prev.dst == pass.dst && prev.chunks.end() == pass.chunks.begin &&
            prev.operands == pass.operands && prev.completes == pass.completes && !touches_slot(pass)) {
          ++prev.chunks.count;
          for (SourceLoc loc : pass.locs)
            if (std::find(prev.locs.begin(), prev.locs.end(), loc) == prev.locs.end()) prev.locs.push_back(loc);
          continue;
        }
      }
      out.push_back(std::move(pass));
    }
    return out;
  }

  // What step_passes collects, per written (buffer, chunk).
  struct Write {
    int buffer;
    int64_t chunk;
    const Op* op;
  };

  const StepProgram& p_;
  const KernelOptions& opt_;
  State state_;
  int64_t per_block_;  // chunks per block: a chunk's position is its index modulo this
  std::vector<std::tuple<int, int, int64_t>> next_written_;
  std::vector<Held> next_held_;
  std::vector<std::tuple<int, int, int64_t>> next_slot_chunk_;  // (rank, slot, chunk) this step writes
  std::vector<Write> writes_;  // step_passes' buffers
  std::vector<const Op*> writers_;
};

uint64_t hash_program(const StepProgram& p) {
  // FNV-1a on 64-bit words, each product's high half folded back into its low bits (which
  // otherwise never see a word's high bits): a word per multiply, not a byte (the byte-wise
  // hash took 0.11 s of ring's 2 M ops at N = 1024).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    h ^= h >> 32;
  };
  for (char ch : p.schedule) mix(ch);
  mix(static_cast<int>(p.collective));
  mix(p.nranks);
  mix(p.nchunks);
  if (p.nscratch != 0) mix(p.nscratch);
  if (p.scratch_slots) mix(-1);
  for (const auto& rank : p.ops)
    for (const auto& step : rank) {
      mix(-1);
      for (const Op& op : step) {
        mix(static_cast<int>(op.kind));
        mix(op.chunks.begin);
        mix(op.chunks.count);
        if (op.shift != 0) mix(op.shift);  // programs without remaps keep the hash they had
        mix(op.peer);
        mix(static_cast<int>(op.src));
        mix(static_cast<int>(op.dst));
      }
    }
  return h;
}

// Protocol ll (kernel_plan.h): every operand a pass reads from a peer becomes a receive region
// of the reading rank's own (one per operand, indexed like the pass's chunks), which the peer
// fills by sends: right after the step that last wrote the chunk (lock-step: a step reads the
// state at its start, so that step comes before the read), or at entry when no step wrote it
// (its input). No sync-plan wait is left: a read waits for its lines, nobody reads a peer's
// buffers (so no WAR or exit waits), and the only wait a producer needs is for the consumer to
// have entered before its first send to it (check_ll_plan).
//
// A rank numbers its regions in the order of what they receive, seen in rank 0's frame of
// `pull`, the pull form's rank symmetry (rank_symmetry.h): then a symmetric program reads and
// fills the same region numbers on every rank, and the ll kernel can share rank 0's table too.
// Without a symmetry the frame is every rank's own.
void to_ll(KernelPlan& plan, const RankSymmetry& pull) {
  // A region's receipt in rank 0's frame: step, chunks, producer, the reading pass's destination,
  // and the region's number in the order met (a tie-break that never decides for a symmetric
  // program, whose ties are receipts alike in every field).
  using Receipt = std::tuple<int, int64_t, int64_t, int, Storage, int>;
  std::vector<std::vector<Receipt>> receipts(static_cast<size_t>(plan.nranks));
  struct Send {
    int producer;
    int at;  // the producer's step; -1: entry
    DataPass pass;
  };
  std::map<std::tuple<int, int, int64_t>, int> last;  // (rank, buffer, chunk) -> step that wrote it
  std::vector<Send> sends;
  std::vector<int> slots(static_cast<size_t>(plan.nranks), 0);  // receive regions per rank
  const int64_t per_block = plan.nchunks / plan.blocks;
  for (int k = 0; k < plan.nsteps(); ++k) {
    for (int r = 0; r < plan.nranks; ++r)
      for (DataPass& pass : plan.ranks[r].steps[k].passes)
        for (Operand& o : pass.operands) {
          if (o.rank == r) continue;
          const Operand source = o;
          o = Operand{source.rank, Storage::Ll, 0, slots[static_cast<size_t>(r)]++};
          const int frame = pull.kind == RankSymmetry::Kind::None ? 0 : r;
          const ChunkRange seen = unmap_chunks(pull, plan.nchunks, frame, pass.chunks);
          receipts[static_cast<size_t>(r)].emplace_back(k, seen.begin, seen.count,
                                                        unmap_peer(pull, plan.nranks, frame, source.rank), pass.dst, o.slot);
          plan.ll_blocks = std::max(plan.ll_blocks, (pass.chunks.end() + per_block - 1) / per_block);
          for (int64_t c = pass.chunks.begin; c < pass.chunks.end(); ++c) {
            const auto it = last.find({source.rank, index(source.buffer), operand_chunk(source, c)});
            const int at = it == last.end() ? -1 : it->second;
            if (!sends.empty() && sends.back().pass.to == Operand{r, Storage::Ll, 0, o.slot} && sends.back().at == at &&
                sends.back().pass.chunks.end() == c) {
              ++sends.back().pass.chunks.count;  // chunks finished by the same step: one send
              continue;
            }
            Send& queued = sends.emplace_back();  // built in place: no DataPass moved
            queued.producer = source.rank;
            queued.at = at;
            DataPass& send = queued.pass;
            send.kind = OpKind::Copy;
            send.dst = Storage::Ll;
            send.to = {r, Storage::Ll, 0, o.slot};
            send.chunks = {c, 1};
            send.operands = {source};
            send.locs = pass.locs;
          }
        }
    for (int r = 0; r < plan.nranks; ++r)
      for (const DataPass& pass : plan.ranks[r].steps[k].passes)
        for (int64_t c = pass.chunks.begin; c < pass.chunks.end(); ++c) last[{r, index(pass.dst), written_chunk(pass, c)}] = k;
  }
  // slot[r][i]: the number of rank r's i-th region met, in the order of its receipts.
  std::vector<std::vector<int>> slot(static_cast<size_t>(plan.nranks));
  for (int r = 0; r < plan.nranks; ++r) {
    std::vector<Receipt>& mine = receipts[static_cast<size_t>(r)];
    std::vector<int>& number = slot[static_cast<size_t>(r)];
    std::sort(mine.begin(), mine.end());
    number.resize(mine.size());
    for (size_t i = 0; i < mine.size(); ++i) number[static_cast<size_t>(std::get<5>(mine[i]))] = static_cast<int>(i);
    for (StepPlan& step : plan.ranks[r].steps)
      for (DataPass& pass : step.passes)
        for (Operand& o : pass.operands)
          if (o.buffer == Storage::Ll) o.slot = number[static_cast<size_t>(o.slot)];
  }
  for (Send& send : sends) {
    Operand& to = send.pass.to;
    to.slot = slot[static_cast<size_t>(to.rank)][static_cast<size_t>(to.slot)];
    RankPlan& producer = plan.ranks[send.producer];
    StepPlan& step = producer.steps[std::max(send.at, 0)];
    const int consumer = send.pass.to.rank;
    bool waited = false;  // for the consumer's entry, at this step or before
    for (int k = 0; k <= std::max(send.at, 0) && !waited; ++k)
      for (const Wait& w : producer.steps[k].waits) waited = waited || w.peer == consumer;
    if (!waited) {
      Wait slots_free;
      slots_free.peer = consumer;
      slots_free.reason = SyncReason::LlSlots;
      step.waits.push_back(slots_free);
    }
    (send.at < 0 ? step.entry_sends : step.sends).push_back(std::move(send.pass));
  }
  plan.ll_slots = *std::max_element(slots.begin(), slots.end());
}

// check_ll_plan, throwing.
void require_safe_ll_plan(const KernelPlan& plan) {
  // (consumer, slot) -> chunks its pass reads, and the step of the read.
  struct Region {
    ChunkRange read;
    int step = -1;
    int producer = -1;
    std::vector<bool> sent;  // per chunk of `read`
  };
  std::map<std::pair<int, int>, Region> regions;
  for (int r = 0; r < plan.nranks; ++r)
    for (int k = 0; k < plan.nsteps(); ++k)
      for (const DataPass& pass : plan.ranks[r].steps[k].passes)
        for (const Operand& o : pass.operands) {
          if (o.buffer != Storage::Ll) continue;
          auto [it, fresh] = regions.try_emplace({r, o.slot});
          if (!fresh)
            throw LowerError(pass.locs.front(), fmt::format("ll: rank {} reads its receive region {} twice (step {})", r, o.slot, k));
          it->second = {pass.chunks, k, o.rank, std::vector<bool>(static_cast<size_t>(pass.chunks.count), false)};
        }
  for (int p = 0; p < plan.nranks; ++p) {
    std::vector<bool> entered(plan.nranks, false);  // consumers p has waited for, this launch
    for (int k = 0; k < plan.nsteps(); ++k) {
      const StepPlan& step = plan.ranks[p].steps[k];
      for (const Wait& w : step.waits) entered[w.peer] = true;
      auto check = [&](const DataPass& send, int at) {
        const int r = send.to.rank;
        const std::string what = fmt::format("ll: rank {} sends chunks [{}, {}) to rank {}'s receive region {} at step {}", p,
                                             send.chunks.begin, send.chunks.end(), r, send.to.slot, k);
        if (!entered[r])
          throw LowerError(send.locs.front(), what + " without first waiting for that rank to enter the launch: it could "
                                                     "overwrite lines the rank's previous launch has not read yet");
        auto it = regions.find({r, send.to.slot});
        if (it == regions.end() || it->second.producer != p)
          throw LowerError(send.locs.front(), what + ", which no pass of that rank reads from it");
        Region& region = it->second;
        if (at >= region.step)
          throw LowerError(send.locs.front(), fmt::format("{}, but the rank reads it at step {}", what, region.step));
        for (int64_t c = send.chunks.begin; c < send.chunks.end(); ++c) {
          if (c < region.read.begin || c >= region.read.end() || region.sent[static_cast<size_t>(c - region.read.begin)])
            throw LowerError(send.locs.front(), fmt::format("{}: chunk {} is not read there, or sent twice", what, c));
          region.sent[static_cast<size_t>(c - region.read.begin)] = true;
        }
      };
      for (const DataPass& send : step.entry_sends) check(send, -1);
      for (const DataPass& send : step.sends) check(send, k);
    }
  }
  for (const auto& [key, region] : regions)
    for (size_t i = 0; i < region.sent.size(); ++i)
      if (!region.sent[i])
        throw LowerError({}, fmt::format("ll: rank {} reads chunk {} of its receive region {} at step {}, which rank {} never "
                                         "sends: the read would wait for ever",
                                         key.first, region.read.begin + static_cast<int64_t>(i), key.second, region.step,
                                         region.producer));
}

// Hands the pages of blocks freed so far back to the system. The ops lowering releases are small
// blocks the plan's per-rank step arrays cannot reuse, and glibc keeps freed small blocks mapped:
// without this the plan grows beside the freed program instead of into its pages (ring at N =
// 1024: 937 -> 853 MiB peak).
void return_freed_pages() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// The plan's steps, in pull form (each read from the buffer that holds it). `release`: pp itself,
// whose ops and waits of each (rank, step) are freed once lowered; or null.
KernelPlan lower_steps(const PlannedProgram& pp, const KernelOptions& options, PlannedProgram* release) {
  check_options(options);
  check_program(pp);
  check_epilogue(pp.program, options);
  const StepProgram& p = pp.program;
  KernelPlan plan;
  plan.options = options;
  plan.file = p.file;
  plan.schedule = p.schedule;
  plan.params = p.params;
  plan.collective = p.collective;
  plan.root = p.root;
  plan.nranks = p.nranks;
  plan.nchunks = p.nchunks;
  plan.blocks = blocks(p);
  const int64_t per_block = p.nchunks / plan.blocks;
  plan.scratch_slots = p.scratch_slots ? p.nscratch : 0;
  plan.scratch_blocks = p.scratch_slots ? 0 : (buffer_chunks(p, Buffer::Scratch) + per_block - 1) / per_block;
  plan.phases = p.phases;
  plan.steps = p.steps;
  plan.cross_rank_edges = pp.sync.cross_rank_edges;
  plan.program_hash = hash_program(p);
  plan.ranks.resize(p.nranks);
  for (RankPlan& rank : plan.ranks) rank.steps.reserve(static_cast<size_t>(p.nsteps()));

  Lowerer lowerer(pp, options);
  const bool ll = options.protocol == Protocol::Ll;
  constexpr int kStepsPerTrim = 128;  // each trim walks the heap's free blocks: not every step
  // The planned waits of (r, k): taken from a released plan (whose vectors become the steps'),
  // else copied.
  auto take_waits = [&](int r, int k) { return release ? std::move(release->sync.waits[r][k]) : pp.sync.waits[r][k]; };
  for (int k = 0; k < p.nsteps(); ++k) {
    for (int r = 0; r < p.nranks; ++r) {
      StepPlan& step = plan.ranks[r].steps.emplace_back();  // built in place: a pass is 160 bytes
      Waits waits = take_waits(r, k);
      if (!ll) step.waits = merge_waits(std::move(waits), r);
      step.passes = lowerer.step_passes(r, k);
      if (release) std::vector<Op>().swap(release->program.ops[r][k]);
      lowerer.commit(r, step.passes);
    }
    lowerer.end_step();
    if (release && k % kStepsPerTrim == kStepsPerTrim - 1) return_freed_pages();
  }
  for (int r = 0; r < p.nranks; ++r) {
    RankPlan& rank = plan.ranks[r];
    rank.passthrough = lowerer.passthrough(r);
    Waits waits = take_waits(r, p.nsteps());
    if (!ll) rank.exit_waits = merge_waits(std::move(waits), r);
  }
  if (release) release->sync.waits.clear();
  return plan;
}

// The plan's totals, and each rank's consumers (the ranks that wait for it).
void count_waits(KernelPlan& plan) {
  const bool ll = plan.options.protocol == Protocol::Ll;
  for (int r = 0; r < plan.nranks; ++r) {
    RankPlan& rank = plan.ranks[r];
    plan.waits += static_cast<int64_t>(rank.exit_waits.size());
    for (const StepPlan& step : rank.steps) {
      plan.waits += static_cast<int64_t>(step.waits.size());
      for (const DataPass& pass : step.passes) {
        plan.uses_scratch = plan.uses_scratch || pass.dst == Storage::Scratch || pass.dst == Storage::Slot;
        plan.uses_staging = plan.uses_staging || pass.dst == Storage::Staging;
      }
    }
  }
  for (int r = 0; r < plan.nranks; ++r) {
    auto add = [&](const Wait& w) {
      if (ll && w.step < 0) return;  // "entered" goes to every peer anyway; ll waits for nothing else
      std::vector<int>& to = plan.ranks[w.peer].consumers;
      if (to.empty() || to.back() != r) to.push_back(r);  // ranks visited in order: stays sorted
    };
    for (const StepPlan& step : plan.ranks[r].steps)
      for (const Wait& w : step.waits) add(w);
    for (const Wait& w : plan.ranks[r].exit_waits) add(w);
  }
}

std::optional<KernelPlan> lower_planned(const PlannedProgram& pp, const KernelOptions& options, PlannedProgram* release,
                                        Diagnostics& diags) {
  std::optional<KernelPlan> plan;
  if (!reporting_lower_errors(diags, [&] { plan = lower_steps(pp, options, release); })) return std::nullopt;
  // The fold order is the program's, whatever the protocol: checked on the pull form, which
  // to_ll changes only in where each operand is read from.
  if (!verify_same_bits(*plan, diags)) return std::nullopt;
  if (options.protocol == Protocol::Ll) {
    if (!reporting_lower_errors(diags, [&] { to_ll(*plan, find_rank_symmetry(*plan)); })) return std::nullopt;
    if (!check_ll_plan(*plan, diags)) return std::nullopt;
  }
  count_waits(*plan);
  return plan;
}

}  // namespace

std::optional<KernelPlan> lower(const PlannedProgram& planned, const KernelOptions& options, Diagnostics& diags) {
  return lower_planned(planned, options, nullptr, diags);
}

std::optional<KernelPlan> lower_releasing(PlannedProgram& planned, const KernelOptions& options, Diagnostics& diags) {
  return lower_planned(planned, options, &planned, diags);
}

bool check_ll_plan(const KernelPlan& plan, Diagnostics& diags) {
  return reporting_lower_errors(diags, [&] { require_safe_ll_plan(plan); });
}

}  // namespace ccc
