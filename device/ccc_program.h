/* Step programs. A generated kernel lists each rank's work as a table of instructions (Instr),
 * built in the generated source by wait(), reduce(), reduce_last(), copy(), send(), done(),
 * wait_exit() and end(): per step its waits, its data passes and a done; after the steps, the
 * waits that guard the exit. Channel::run (ccc_channel.h) interprets the table once per window,
 * then runs the exit waits. Tables rather than straight-line code because NVRTC spends 7-10 ms
 * compiling each step written as code (ring at N = 8: 0.8 s as code, 0.23 s as tables;
 * docs/performance.md). The data passes stay compiled code: one instantiation per kind (sources,
 * finish) the kernel lists. Also here: the kernel's compile-time shape (Config) and what of it
 * lives in block-shared memory. */
#ifndef CCC_PROGRAM_H
#define CCC_PROGRAM_H

#include "ccc_data.h"

namespace ccc {

/* How a kernel moves data between ranks: each protocol is a type of its own (ccc_protocol_*.h),
 * which specialises ProtocolFor for its value; Config::protocol picks one. */
enum ProtocolKind { protocol_simple = 0, protocol_ll = 1 };
template <class Cfg, int Kind = Cfg::protocol>
struct ProtocolFor;

/* How the user's buffers lay out the vector (see ccc_geometry.h). */
enum Layout {
  layout_full = 0,            /* input and output hold the whole vector of `count` elements */
  layout_reduce_scatter = 1,  /* input: N blocks of `count`; output: the rank's own block */
  layout_allgather = 2,       /* input: the rank's own block; output: N blocks of `count` */
  layout_alltoall = 3         /* input and output: N blocks of `count` */
};

/* Compile-time shape of a generated kernel. Staging (output chunks outside the rank's result)
 * starts the scratch allocation, or follows the schedule's own scratch when it has one: then
 * StagingAfter_ is the blocks of `count` elements that scratch spans, or, for a schedule whose
 * scratch is ScratchSlots_ slots (`scratch K slots`), staging follows the slots. */
template <class T_, class Op_, int Ranks_, int Chunks_, int Steps_, int Channels_, long long TileBytes_,
          int Pipeline_, int Layout_ = layout_full, int StagingAfter_ = 0, int LlBlocks_ = 0, int ScratchSlots_ = 0>
struct Config {
  typedef T_ T;
  typedef Op_ Op;
  static const int ranks = Ranks_, chunks = Chunks_, steps = Steps_, channels = Channels_;
  static const int pipeline = Pipeline_;
  static const int layout = Layout_;
  static const int blocks = Layout_ == layout_full ? 1 : Ranks_;
  static const int staging_after = StagingAfter_;
  /* Scratch slots (`scratch K slots`): each holds one chunk of any position, the largest
   * chunk's size rounded up to `unit` (slot_stride), so any chunk fits any slot. */
  static const int scratch_slots = ScratchSlots_;
  /* Protocol ll (ccc_protocol_ll.h) when > 0: the blocks of `count` elements a receive region
   * spans (the chunks read from it may lie in scratch past the vector's blocks). */
  static const int ll_blocks = LlBlocks_;
  static const int protocol = LlBlocks_ > 0 ? protocol_ll : protocol_simple;
  static const long long unit = 64 / sizeof(T_);  // elements per 64 bytes: every cut falls on one
  static const long long window = TileBytes_ / static_cast<long long>(sizeof(T_)) * Pipeline_;
};

/* Which buffer of which rank an instruction reads or writes; a remapped source is read `block`
 * blocks of `count` elements away from the chunk the pass writes (a remap keeps the chunk's
 * position within its block). A scratch slot (buffer_slot, `block` holds the slot) has no
 * position: it holds the pass's chunk, whichever it is (the compiler makes such passes one chunk
 * long). */
enum BufferKind { buffer_input = 0, buffer_output = 1, buffer_scratch = 2, buffer_staging = 3, buffer_ll = 4, buffer_slot = 5 };
struct Ref {
  unsigned short buffer;
  unsigned short rank;
  int block;
};
CCC_CONSTEXPR Ref in(int r, int block = 0) { return Ref{buffer_input, static_cast<unsigned short>(r), block}; }
CCC_CONSTEXPR Ref out(int r, int block = 0) { return Ref{buffer_output, static_cast<unsigned short>(r), block}; }
CCC_CONSTEXPR Ref scratch(int r, int block = 0) { return Ref{buffer_scratch, static_cast<unsigned short>(r), block}; }
CCC_CONSTEXPR Ref staging(int r, int block = 0) { return Ref{buffer_staging, static_cast<unsigned short>(r), block}; }
/* Scratch slot `slot` of rank r (`scratch K slots`). */
CCC_CONSTEXPR Ref slot(int r, int slot) { return Ref{buffer_slot, static_cast<unsigned short>(r), slot}; }
/* Protocol ll: receive region `region`. As a source, the reading rank's own region, which rank
 * r fills; as a send's destination, rank r's region. (`block` holds the region.) */
CCC_CONSTEXPR Ref ll(int r, int region) { return Ref{buffer_ll, static_cast<unsigned short>(r), region}; }

enum InstrCode { instr_end = 0, instr_wait = 1, instr_pass = 2, instr_done = 3, instr_wait_exit = 4 };

/* One instruction of a step program; S is the most sources any pass of the kernel reads.
 *   wait:      a = peer, b = step (-1: the peer has entered this launch)
 *   pass:      chunks [a, b): dst = fold of src[0, sources), `finish` on the completing write
 *   done:      a = step
 *   wait_exit: a = peer, b = step of the peer's last window */
template <int S>
struct Instr {
  unsigned char code;
  unsigned char finish;
  unsigned short sources;
  int a, b;
  Ref dst;
  Ref src[S];
};

/* What the builders return: an instruction with K sources, which fits any table with room for
 * at least K. */
template <int K>
struct InstrBuilder {
  unsigned char code, finish;
  int a, b;
  Ref dst;
  Ref src[K > 0 ? K : 1];
  template <int S>
  CCC_CONSTEXPR operator Instr<S>() const {
    static_assert(K <= S, "a pass reads more sources than the table has room for");
    Instr<S> i{code, finish, static_cast<unsigned short>(K), a, b, dst, {}};
    for (int k = 0; k < K; ++k) i.src[k] = src[k];
    return i;
  }
};
CCC_CONSTEXPR InstrBuilder<0> control(InstrCode code, int a, int b) {
  return InstrBuilder<0>{static_cast<unsigned char>(code), 0, a, b, Ref{0, 0, 0}, {}};
}
/* Waits until `peer` has finished `step` of this window (step -1: the peer has entered). */
CCC_CONSTEXPR InstrBuilder<0> wait(int peer, int step) { return control(instr_wait, peer, step); }
/* Publishes "finished `step` of this window". */
CCC_CONSTEXPR InstrBuilder<0> done(int step) { return control(instr_done, step, 0); }
/* After the last window: waits until `peer` has finished `step` of its last window. */
CCC_CONSTEXPR InstrBuilder<0> wait_exit(int peer, int step) { return control(instr_wait_exit, peer, step); }
/* The end of a rank's table. */
CCC_CONSTEXPR InstrBuilder<0> end() { return control(instr_end, 0, 0); }
/* dst[c] = src0[c] (+) src1[c] ... over chunks [c0, c1), this channel's slice of the window. */
template <class... R>
CCC_CONSTEXPR InstrBuilder<sizeof...(R)> reduce(int c0, int c1, Ref dst, R... src) {
  return InstrBuilder<sizeof...(R)>{instr_pass, 0, c0, c1, dst, {src...}};
}
/* The same, for the write that completes a value: the op's finish (avg: / ranks) fuses here. */
template <class... R>
CCC_CONSTEXPR InstrBuilder<sizeof...(R)> reduce_last(int c0, int c1, Ref dst, R... src) {
  return InstrBuilder<sizeof...(R)>{instr_pass, 1, c0, c1, dst, {src...}};
}
CCC_CONSTEXPR InstrBuilder<1> copy(int c0, int c1, Ref dst, Ref src) { return reduce(c0, c1, dst, src); }
/* Protocol ll: chunks [c0, c1) of the rank's own src, pushed into a peer's receive region (an
 * ll() ref) as lines of data and flag. */
CCC_CONSTEXPR InstrBuilder<1> send(int c0, int c1, Ref region, Ref src) { return copy(c0, c1, region, src); }

/* How a rank reads its step program (compiler/src/rank_symmetry.h). Unmapped: the rank
 * has a table of its own. RankMap: every rank runs rank 0's table relabelled by its rank r,
 * rotated (peer p -> (p + r) % Ranks, chunks [a, b) -> [(a + r * Stride) % Chunks, + (b - a))) or
 * xored (p -> p ^ r, [a, b) -> [(a ^ (r * Stride)) & ~(b - a - 1), + (b - a))), with a pass's
 * sources rotated to start at the lowest rank (their fold order: fold_order.h). Protocol ll
 * too: a send's destination and a receive region's producer are peers, region numbers stay (the
 * compiler numbers every rank's regions alike). The compiler
 * shares a table only after checking that this map gives every rank's own program exactly.
 * The map is applied field by field where the interpreter reads them (no copy of the table). */
struct Unmapped {
  static constexpr bool shared = false;  // each rank has tables of its own
  CCC_FN int peer(int p) const { return p; }
  template <int S>
  CCC_FN int first(const Instr<S>& i) const { return i.a; }
  template <int S>
  CCC_FN int lowest(const Instr<S>&, int) const { return 0; }
};
template <int Ranks, int Chunks, int Stride, bool Xor>
struct RankMap {
  static constexpr bool shared = true;  // rank 0's tables, for every rank
  int r;
  long long shift;  // r * Stride; rotated, reduced modulo Chunks once per launch
  CCC_FN explicit RankMap(int rank)
      : r(rank), shift(Xor ? static_cast<long long>(rank) * Stride : static_cast<long long>(rank) * Stride % Chunks) {}
  /* p and r are ranks, so a rotation wraps at most once: a compare, not a division. */
  CCC_FN int peer(int p) const { return Xor ? p ^ r : p + r < Ranks ? p + r : p + r - Ranks; }
  /* The first chunk of pass i (a chunk of rank 0's table plus the reduced shift wraps at most
   * once). */
  template <int S>
  CCC_FN int first(const Instr<S>& i) const {
    if constexpr (Xor) return static_cast<int>((i.a ^ shift) & ~static_cast<long long>(i.b - i.a - 1));
    const int c = i.a + static_cast<int>(shift);
    return c < Chunks ? c : c - Chunks;
  }
  /* The source of pass i whose relabelled rank is lowest: the fold starts there. `sources` ==
   * i.sources (a constant where the caller has one: protocol ll's line loop has no register to
   * spare for it). Rolled: it runs once per pass (and per check of a protocol ll wait), and
   * unrolled it costs code and, in that line loop, registers. */
  template <int S>
  CCC_FN int lowest(const Instr<S>& i, int sources) const {
    int best = 0;
    CCC_ROLLED
    for (int k = 1; k < sources; ++k)
      if (peer(i.src[k].rank) < peer(i.src[best].rank)) best = k;
    return best;
  }
};

/* Source k of pass i in the order its fold reads them: from source `lowest` (the map's lowest()),
 * wrapping around. `sources` == i.sources (a constant where the caller has one). */
template <int S>
CCC_FN const Ref& fold_source(const Instr<S>& i, int lowest, int k, int sources) {
  return i.src[k + lowest < sources ? k + lowest : k + lowest - sources];
}

/* A data-pass kind a kernel compiles: how many sources it folds, and whether it applies the op's
 * finish. A kernel lists the kinds its tables use in Passes; each kind's data code (combine, or
 * ll_pass under protocol ll) is instantiated once. */
template <int Sources, bool Finish = false>
struct Pass {
  static const int sources = Sources;
  static const bool finish = Finish;
};
template <class... P>
struct Passes {
  /* Calls f(kind) with the kind (a Pass) that pass i names, for reduction Op; false, and f not
   * called, if the kernel was not built with that kind. (f is a function object with a template
   * call operator: NVRTC compiles no generic lambda in device code.) */
  template <class Op, int S, class F>
  static CCC_FN bool visit(const Instr<S>& i, [[maybe_unused]] const F& f) {
    [[maybe_unused]] const bool finish = i.finish != 0 && Op::finishes;
    return ((i.sources == P::sources && finish == P::finish ? (f(P()), true) : false) || ...);
  }
  /* Whether the kernel was built with the kind pass i names. */
  template <class Op, int S>
  static CCC_FN bool has(const Instr<S>& i) {
    return visit<Op>(i, Ignore());
  }

 private:
  struct Ignore {
    template <class Kind>
    CCC_FN void operator()(Kind) const {}
  };
};

/* Hot state in shared memory. The interpreter reads its step table (every instruction, every
 * window) and the ranks' fixed state (every poll: the inbox and error words) over and over;
 * from global memory each field is a load that misses again whenever the L1 is invalidated
 * (the acquires of a wait do that), from shared memory it is a few cycles. So at entry the block
 * copies both into block-shared memory and reads them from there. A table larger than
 * kSharedProgramBytes stays in global memory (read-only, cached), chosen at compile time from
 * its size; the ranks' state is a few bytes per rank and always moves.
 *
 * The copy needs no more than plain loads and one barrier: both sources are constant for the
 * launch (the table is __device__ constexpr data, written when the module loaded; the ranks'
 * state is written once before the first launch and never again, ccc_abi.h), so no load races
 * with a write and each returns the one value there is (the one exception, a registration
 * switching the rank's registry pointer, changes its low 32-bit word only, so a copy reads the
 * old table's address or the new one's, both valid for the launch); and the barrier makes every thread's
 * shared-memory stores visible to every thread of the block before any reads them (bar.sync:
 * PTX ISA, memory consistency model, barriers synchronize and causality order is transitive
 * through them; CUDA C++ Programming Guide, __syncthreads). On the host a block is one thread
 * and the shared array a thread-local one (block_shared). */
static const int kSharedProgramBytes = 16 * 1024;

/* What goes into block-shared memory, whose static declarations may total 48 KiB a block (more
 * needs dynamic shared memory and an opt-in). The peers table (a ccc_buffers per rank, written
 * each launch) always does; the ranks' state too while both per-rank tables fit kSharedRankBytes
 * (N <= 256), else each block reads it from global memory, where it is constant and cached; the
 * step table gets what is left, up to kSharedProgramBytes. So a kernel for up to
 * CCC_MAX_DEVICE_RANKS ranks stays within the 48 KiB (ptxas refuses more: "uses too much shared
 * data"), and kernels for N <= 256 are laid out as they always were. */
static const int kStaticSharedBytes = 48 * 1024;
static const int kSharedRankBytes = 20 * 1024;
template <int Ranks>
struct SharedBudget {
  static const bool state =
      Ranks * static_cast<long long>(sizeof(ccc_rank_state) + sizeof(ccc_buffers)) <= kSharedRankBytes;
  static const long long ranks = Ranks * static_cast<long long>(sizeof(ccc_buffers) + (state ? sizeof(ccc_rank_state) : 0));
  static const long long program =
      kStaticSharedBytes - ranks < kSharedProgramBytes ? kStaticSharedBytes - ranks : kSharedProgramBytes;
};

/* Copies `n` objects that stay constant for the launch from `from` into block-shared `to`, the
 * block's threads sharing the words (4-byte aligned objects: Instr, ccc_rank_state), then a
 * barrier (see above). */
template <class T>
CCC_FN const T* copy_to_shared(T* to, const T* from, int n) {
  static_assert(sizeof(T) % 4 == 0 && alignof(T) >= 4, "copied as 4-byte words");
  const unsigned* src = reinterpret_cast<const unsigned*>(from);
  unsigned* dst = reinterpret_cast<unsigned*>(to);
  const unsigned words = static_cast<unsigned>(n) * (sizeof(T) / 4);
  for (unsigned w = thread_index(); w < words; w += block_threads()) dst[w] = src[w];
  barrier();
  return to;
}

/* The step table an interpreter reads: `program` copied into shared memory when its Length
 * instructions fit `Budget` bytes (SharedBudget::program), else `program` itself. Tables are
 * declared with Length entries (the emitter pads shorter ones with end(), zero), so the copy
 * stays inside them. */
template <int Length, long long Budget, int S>
CCC_FN const Instr<S>* shared_program(const Instr<S>* program) {
  if constexpr (static_cast<long long>(sizeof(Instr<S>)) * Length > Budget) return program;
  else return copy_to_shared(block_shared<Instr<S>, Length>(), program, Length);
}

/* The ranks' fixed state as a block reads it: copied to shared memory where SharedBudget allows,
 * else in place. */
template <int Ranks>
CCC_FN const ccc_rank_state* block_rank_state(const ccc_rank_state* ranks) {
  if constexpr (SharedBudget<Ranks>::state) return copy_to_shared(block_shared<ccc_rank_state, Ranks>(), ranks, Ranks);
  else return ranks;
}

}  // namespace ccc

#endif /* CCC_PROGRAM_H */
