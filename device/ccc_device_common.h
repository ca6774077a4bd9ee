/* Target-independent part of the device prelude: dtypes, reduction ops, chunk geometry, the
 * progress protocol and the data-moving passes generated kernels call. Built only on the target
 * primitives (ccc_device_cuda.h / ccc_device_host.h).
 *
 * Geometry. A collective's `count` elements are cut into the schedule's chunks, each chunk into
 * one slice per channel, each slice into windows of `pipeline` tiles. Every cut falls on a 64-byte
 * multiple and the leftover goes to the last pieces, so the cut depends only on (count, dtype,
 * chunks, channels, tile, pipeline): identical on every rank, which is what lets the waits of the
 * sync plan hold slice by slice. Channel c of a rank only ever touches, and only ever waits for,
 * channel c of its peers. For reduce_scatter and allgather the vector is N blocks of `count`
 * elements (one per rank, as the user's buffers lay them out) and every block is cut alike.
 *
 * Buffers. Generated code names a rank's buffers by chunk-space position: in(r), out(r),
 * scratch(r), staging(r) are views whose element i is the vector's element i. A view of a buffer
 * that holds one block only (a reduce_scatter's output, an allgather's input) is shifted by that
 * block's start; the lowering only ever touches such a view inside its block.
 *
 * Step programs. A generated kernel lists each rank's work as a table of instructions (Instr),
 * built in the generated source by wait(), reduce(), reduce_last(), copy(), done(), wait_exit()
 * and end(): per step its waits, its data passes and a done; after the steps, the waits that
 * guard the exit. Channel::run interprets the table once per window, then runs the exit waits.
 * Tables rather than straight-line code because NVRTC spends 7-10 ms compiling each step written
 * as code (ring at N = 8: 0.8 s as code, 0.23 s as tables; docs/performance.md). The data
 * passes stay compiled code: one instantiation per kind (sources, finish) the kernel lists.
 *
 * Progress. Each (rank, channel) publishes one 64-bit value:
 *     value = epoch << 40 | (window * steps + step + 1)
 * after finishing `step` of `window` (windows run in order, steps in order within a window), and
 * epoch << 40 on entering a launch. The epoch is the launch number (mod 2^24), taken from the
 * channel's own progress word at entry (which keeps the epoch it last entered), so nothing is
 * reset between launches and a captured graph replays unchanged. Values are compared with
 * serial-number arithmetic (signed difference), so the epoch may wrap: peers are never more
 * than one launch apart.
 *
 * Push the signal, poll locally. A producer writes each value into its slot of the inbox that
 * every consumer has in its own memory (ccc_abi.h), and a wait polls its own inbox: a dependency
 * costs the one-way flight of one store, where polling the producer's memory cost a round trip
 * per poll. Thread q of the block pushes to the q-th receiver, so the stores fly together. Step
 * values go to the rank's consumers only, the ranks whose programs wait on it (the generated
 * kernel lists them: a ring rank has two, so a step costs two stores, not N - 1); "entered" goes
 * to every peer, so every slot is refreshed at every launch and never lags more than one launch
 * behind, which the serial arithmetic on the 24-bit epoch needs (a slot left alone for 2^23
 * launches by a kernel that did not wait on it would read as ahead). The peers' error words stay
 * in their own memory: a wait reads them once per 64 polls only (see poll).
 *
 * Buffers of peers. A launch knows only its own buffers (ccc_abi.h). On entering, thread 0 of
 * each (rank, channel) writes them into the channel's mailbox slot for this launch, then the
 * channel pushes "entered"; a peer reads the slot the first time a pass of its program reads that
 * rank (the slots of a pass's ranks by threads of their own, in parallel), which the sync plan
 * orders after the rank's "entered" (every read of a peer's buffer
 * waits, directly or through other ranks' waits, for the peer to have entered or written it).
 * The slot's call signature must equal the reader's: a rank whose peer called with another
 * kernel or count records CCC_ERR_MISMATCH before it touches any of the peer's data. Where the
 * rank has a registry (several processes), a peer's input and output are translated into this
 * process's mapping of them, and one that no entry covers records CCC_ERR_UNREGISTERED, again
 * before any data is touched (see reach). */
#ifndef CCC_DEVICE_COMMON_H
#define CCC_DEVICE_COMMON_H

namespace ccc {

/* 16-bit floats are carried as bits; arithmetic happens in float. */
struct f16 {
  unsigned short bits;
};
struct bf16 {
  unsigned short bits;
};

/* How a dtype enters arithmetic: Num<T>::Acc is the type values combine in. */
template <class T>
struct Num {
  typedef T Acc;
  static CCC_FN Acc to(T x) { return x; }
  static CCC_FN T from(Acc a) { return a; }
};
template <>
struct Num<f16> {
  typedef float Acc;
  static CCC_FN float to(f16 x) { return half_bits_to_float(x.bits); }
  static CCC_FN f16 from(float a) { return f16{float_to_half_bits(a)}; }
};
template <>
struct Num<bf16> {
  typedef float Acc;
  static CCC_FN float to(bf16 x) { return bf16_bits_to_float(x.bits); }
  static CCC_FN bf16 from(float a) { return bf16{float_to_bf16_bits(a)}; }
};

/* Integer sums and products wrap (two's complement) instead of overflowing signed types. */
template <class A> struct Wrap { typedef A Type; };
template <> struct Wrap<signed char> { typedef unsigned Type; };
template <> struct Wrap<unsigned char> { typedef unsigned Type; };
template <> struct Wrap<int> { typedef unsigned Type; };
template <> struct Wrap<long long> { typedef unsigned long long Type; };

/* Reduction ops: apply combines two values; finish runs once, in the write that completes a
 * value (every rank's contribution in), given the rank count. `finishes` is false where finish
 * is the identity, so that write shares the plain reduce's code (one instantiation fewer to
 * compile). */
struct op_sum {
  static const bool finishes = false;
  template <class A> static CCC_FN A apply(A a, A b) {
    typedef typename Wrap<A>::Type W;
    return static_cast<A>(static_cast<W>(a) + static_cast<W>(b));
  }
  template <class A> static CCC_FN A finish(A a, int) { return a; }
};
struct op_prod {
  static const bool finishes = false;
  template <class A> static CCC_FN A apply(A a, A b) {
    typedef typename Wrap<A>::Type W;
    return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
  }
  template <class A> static CCC_FN A finish(A a, int) { return a; }
};
struct op_min {
  static const bool finishes = false;
  template <class A> static CCC_FN A apply(A a, A b) { return b < a ? b : a; }
  template <class A> static CCC_FN A finish(A a, int) { return a; }
};
struct op_max {
  static const bool finishes = false;
  template <class A> static CCC_FN A apply(A a, A b) { return a < b ? b : a; }
  template <class A> static CCC_FN A finish(A a, int) { return a; }
};
/* avg on floats multiplies by the constant 1/N (within an ulp of dividing, and a true division
 * costs an out-of-line subroutine on the GPU); on integers it divides, truncating. */
template <class A> struct IsFloat { static const bool value = false; };
template <> struct IsFloat<float> { static const bool value = true; };
template <> struct IsFloat<double> { static const bool value = true; };
struct op_avg {
  static const bool finishes = true;
  template <class A> static CCC_FN A apply(A a, A b) { return op_sum::apply(a, b); }
  template <class A> static CCC_FN A finish(A a, int n) {
    if constexpr (IsFloat<A>::value) return a * (static_cast<A>(1) / static_cast<A>(n));
    else return static_cast<A>(a / static_cast<A>(n));
  }
};

/* A half-open element range. */
struct Range {
  long long begin;
  long long end;
};

/* Piece i of n cutting [0, len) on multiples of `unit` elements; the leftover whole units go
 * one each to the last pieces and the leftover elements to the very last. */
CCC_FN Range split(long long len, long long n, long long i, long long unit) {
  const long long units = len / unit, q = units / n, r = units % n;
  const long long b = i - (n - r), e = i + 1 - (n - r);
  Range out;
  out.begin = unit * (i * q + (b > 0 ? b : 0));
  out.end = i == n - 1 ? len : unit * ((i + 1) * q + (e > 0 ? e : 0));
  return out;
}

template <class T, int K>
struct Sources {
  const T* p[K];
};
/* The first K of `p`. */
template <int K, class T>
CCC_FN Sources<T, K> sources_of(const T* const* p) {
  Sources<T, K> s;
  for (int k = 0; k < K; ++k) s.p[k] = p[k];
  return s;
}

/* The address's offset past the last 16-byte boundary. */
CCC_FN unsigned misalignment16(const void* p) {
  return static_cast<unsigned>(reinterpret_cast<unsigned long long>(p) & 15u);
}

template <class T>
union Pack {
  Vec16 v;
  T e[16 / sizeof(T)];
};

/* dst[i] = finish(src0[i] (+) src1[i] (+) ... ) for one group of U 16-byte vectors per thread,
 * vectors v + u * stride (u < U) of those below nvec, v itself always one: every source's U loads
 * are issued before any of them is used. A vector at or past nvec is skipped without a branch
 * around its load: the load reads vector v again (so all U loads still go out together, with no
 * predicate), and only its store is skipped. So one loop also does the last, partial group of a
 * range, with no second, 1-vector copy of the loop for it (NVRTC time). */
template <class T, class Op, int K, bool Finish, int Ranks, int U>
CCC_FN void combine_vectors(T* dst, const Sources<T, K>& s, long long v, long long stride, long long nvec) {
  typedef typename Num<T>::Acc A;
  const int E = 16 / sizeof(T);
  bool live[U];
  long long at[U];  // the vectors' indices, those past nvec replaced by v
  for (int u = 0; u < U; ++u) {
    live[u] = v + u * stride < nvec;
    at[u] = live[u] ? v + u * stride : v;
  }
  Pack<T> in[U];
  for (int u = 0; u < U; ++u) in[u].v = load16(s.p[0] + at[u] * E);
  if constexpr (K == 1 && !Finish) {
    for (int u = 0; u < U; ++u)
      if (live[u]) store16(dst + at[u] * E, in[u].v);
  } else {
    A acc[U][E];
    for (int u = 0; u < U; ++u)
      for (int e = 0; e < E; ++e) acc[u][e] = Num<T>::to(in[u].e[e]);
    for (int k = 1; k < K; ++k) {
      for (int u = 0; u < U; ++u) in[u].v = load16(s.p[k] + at[u] * E);
      for (int u = 0; u < U; ++u)
        for (int e = 0; e < E; ++e) acc[u][e] = Op::apply(acc[u][e], Num<T>::to(in[u].e[e]));
    }
    for (int u = 0; u < U; ++u) {
      Pack<T> o;
      for (int e = 0; e < E; ++e)
        o.e[e] = Num<T>::from(Finish ? Op::finish(acc[u][e], Ranks) : acc[u][e]);
      if (live[u]) store16(dst + at[u] * E, o.v);
    }
  }
}

/* dst[i] = fold of the K sources at i, element by element, for i in [0, head) and [tail, n). */
template <class T, class Op, int K, bool Finish, int Ranks>
CCC_FN void combine_elements(T* dst, const Sources<T, K>& s, long long head, long long tail, long long n) {
  typedef typename Num<T>::Acc A;
  const long long stride = block_threads(), count = head + (n - tail);
  CCC_ROLLED
  for (long long j = thread_index(); j < count; j += stride) {
    const long long i = j < head ? j : tail + (j - head);
    A acc = Num<T>::to(s.p[0][i]);
    for (int k = 1; k < K; ++k) acc = Op::apply(acc, Num<T>::to(s.p[k][i]));
    dst[i] = Num<T>::from(Finish ? Op::finish(acc, Ranks) : acc);
  }
}

/* The one data-moving routine: dst[0, n) = fold of the K sources, the block's threads sharing
 * the work. When every pointer sits at the same offset past a 16-byte boundary (always so for
 * buffers from an allocator, at any element offset they share), 16-byte vectors do the body and
 * scalars the head before the first boundary and the tail after the last vector; element by
 * element, all of it a head, only when the pointers' offsets differ. Head and tail share one
 * scalar loop (each is a few elements; one copy of the loop less to compile), and the vectors
 * one loop of U-vector groups, the last one partial (combine_vectors). The loops stay rolled:
 * the vector groups are unrolled by hand already.
 *
 * Loads in flight: U vectors per thread per source, at least 8 per thread in all (what a peer
 * read over NVLink needs to cover its latency). A copy (K = 1) has only its own: U = 8. A fold
 * of K sources takes U = 4 (K <= 4) or 2 (more sources: 4 would spill past 128 registers), and
 * K * U >= 8 only because the compiler issues every source's loads before the first add, which
 * it does: the PTX NVRTC emits for a 2-source fold has its 8 ld.v4 ahead of any add.f32
 * (docs/codegen.md, "Data loops"). */
template <class T, class Op, int K, bool Finish, int Ranks>
CCC_NOINLINE void combine(T* dst, Sources<T, K> s, long long n) {
  if (!moves_data()) return;  // the simulator's timing-only mode (the pass is priced already)
  const int E = 16 / sizeof(T), U = K == 1 ? 8 : K > 4 ? 2 : 4;
  const unsigned offset = misalignment16(dst);
  bool vectors = true;
  for (int k = 0; k < K; ++k) vectors = vectors && misalignment16(s.p[k]) == offset;
  // Buffers are aligned to their element size (the runtime checks it), so the head is whole
  // elements.
  long long head = vectors ? static_cast<long long>((16u - offset) & 15u) / static_cast<long long>(sizeof(T)) : n;
  if (head > n) head = n;
  Sources<T, K> body = s;
  for (int k = 0; k < K; ++k) body.p[k] += head;
  T* const out = dst + head;
  const long long nvec = (n - head) / E, stride = block_threads();
  CCC_ROLLED
  for (long long v = thread_index(); v < nvec; v += U * stride)
    combine_vectors<T, Op, K, Finish, Ranks, U>(out, body, v, stride, nvec);
  combine_elements<T, Op, K, Finish, Ranks>(dst, s, head, head + nvec * E, n);
}

/* A step's chunk copies, done together: dst[k][0, n[k]) = src[k][0, n[k]) for the kn <= G copies,
 * the block's threads sharing the work. A thread loads its vector (or element) of every copy
 * before it stores any, so each copy's peer round trip overlaps the others' rather than
 * following them (two-shot's all-gather: N-1 copies from N-1 peers, one round trip where a copy
 * at a time paid N-1). Vectors where a copy's two pointers sit at the same offset past a
 * 16-byte boundary, as in combine; element by element otherwise, and for heads and tails. */
template <class T, int G>
CCC_NOINLINE void copy_together(T* const* dst, const T* const* src, const long long* n, int kn) {
  if (!moves_data()) return;  // the simulator's timing-only mode (the batch is priced already)
  const int E = 16 / sizeof(T);
  const long long stride = block_threads();
  long long head[G], nvec[G], most = 0;
  for (int k = 0; k < G; ++k) {
    head[k] = nvec[k] = 0;
    if (k >= kn) continue;
    const unsigned offset = misalignment16(dst[k]);
    head[k] = misalignment16(src[k]) == offset ? static_cast<long long>((16u - offset) & 15u) / static_cast<long long>(sizeof(T)) : n[k];
    if (head[k] > n[k]) head[k] = n[k];
    nvec[k] = (n[k] - head[k]) / E;
    if (nvec[k] > most) most = nvec[k];
  }
  CCC_ROLLED
  for (long long v = thread_index(); v < most; v += stride) {
    Vec16 in[G];
    for (int k = 0; k < G; ++k)
      if (v < nvec[k]) in[k] = load16(src[k] + head[k] + v * E);
    for (int k = 0; k < G; ++k)
      if (v < nvec[k]) store16(dst[k] + head[k] + v * E, in[k]);
  }
  // Heads and tails: copy k's scalars are [0, head) and [head + nvec * E, n), `rest` of them.
  long long rest[G];
  most = 0;
  for (int k = 0; k < G; ++k) {
    rest[k] = k < kn ? n[k] - nvec[k] * E : 0;
    if (rest[k] > most) most = rest[k];
  }
  CCC_ROLLED
  for (long long j = thread_index(); j < most; j += stride) {
    T x[G];
    for (int k = 0; k < G; ++k)
      if (j < rest[k]) x[k] = src[k][j < head[k] ? j : j + nvec[k] * E];
    for (int k = 0; k < G; ++k)
      if (j < rest[k]) dst[k][j < head[k] ? j : j + nvec[k] * E] = x[k];
  }
}

/* How the user's buffers lay out the vector (see Geometry). */
enum Layout {
  layout_full = 0,            /* input and output hold the whole vector of `count` elements */
  layout_reduce_scatter = 1,  /* input: N blocks of `count`; output: the rank's own block */
  layout_allgather = 2,       /* input: the rank's own block; output: N blocks of `count` */
  layout_alltoall = 3         /* input and output: N blocks of `count` */
};

/* Compile-time shape of a generated kernel. Staging (output chunks outside the rank's result)
 * starts the scratch allocation, or follows the schedule's own scratch when it has one: then
 * StagingAfter_ is the blocks of `count` elements that scratch spans. */
template <class T_, class Op_, int Ranks_, int Chunks_, int Steps_, int Channels_, long long TileBytes_,
          int Pipeline_, int Layout_ = layout_full, int StagingAfter_ = 0, int LlBlocks_ = 0>
struct Config {
  typedef T_ T;
  typedef Op_ Op;
  static const int ranks = Ranks_, chunks = Chunks_, steps = Steps_, channels = Channels_;
  static const int pipeline = Pipeline_;
  static const int layout = Layout_;
  static const int blocks = Layout_ == layout_full ? 1 : Ranks_;
  static const int staging_after = StagingAfter_;
  /* Protocol ll (Channel::ll_pass) when > 0: the blocks of `count` elements a receive region
   * spans (the chunks read from it may lie in scratch past the vector's blocks). */
  static const int ll_blocks = LlBlocks_;
  static const bool ll = LlBlocks_ > 0;
  static const long long unit = 64 / sizeof(T_);  // elements per 64 bytes: every cut falls on one
  static const long long window = TileBytes_ / static_cast<long long>(sizeof(T_)) * Pipeline_;
};

/* Which buffer of which rank an instruction reads or writes; a remapped source is read `block`
 * blocks of `count` elements away from the chunk the pass writes (a remap keeps the chunk's
 * position within its block). */
enum BufferKind { buffer_input = 0, buffer_output = 1, buffer_scratch = 2, buffer_staging = 3, buffer_ll = 4 };
struct Ref {
  unsigned short buffer;
  unsigned short rank;
  int block;
};
CCC_CONSTEXPR Ref in(int r, int block = 0) { return Ref{buffer_input, static_cast<unsigned short>(r), block}; }
CCC_CONSTEXPR Ref out(int r, int block = 0) { return Ref{buffer_output, static_cast<unsigned short>(r), block}; }
CCC_CONSTEXPR Ref scratch(int r, int block = 0) { return Ref{buffer_scratch, static_cast<unsigned short>(r), block}; }
CCC_CONSTEXPR Ref staging(int r, int block = 0) { return Ref{buffer_staging, static_cast<unsigned short>(r), block}; }
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

/* One (rank, channel) of a launch: where its slices are, and the progress protocol. */
template <class Cfg_>
class Channel {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  static_assert(Cfg_::ranks <= CCC_MAX_DEVICE_RANKS, "more ranks than a block's shared memory holds (ccc_abi.h)");
#endif

 public:
  typedef Cfg_ Cfg;
  typedef typename Cfg::T T;

  CCC_FN Channel(const ccc_launch_args& args, int block)
      : state_(block_rank_state<Cfg::ranks>(args.ranks)),
        count_(static_cast<long long>(args.count)), timeout_ns_(args.timeout_ns),
        peers_(block_shared<ccc_buffers, Cfg::ranks>()) {
#ifdef CCC_TRACE_ENABLED
    trace_ = args.trace != nullptr && thread_index() == 0 ? args.trace + block : nullptr;
#endif
    rank_ = args.rank >= 0 ? args.rank : block / Cfg::channels;
    channel_ = args.rank >= 0 ? block : block % Cfg::channels;
    own_ = args.rank >= 0 ? args.own : args.virtual_own[rank_ < Cfg::ranks ? rank_ : 0];
    const Range last = piece(Cfg::chunks - 1);
    windows_ = (last.end - last.begin + Cfg::window - 1) / Cfg::window;
  }

  CCC_FN int rank() const { return rank_; }

  /* Starts this launch: takes the epoch, publishes this launch's buffers in the mailbox and
   * pushes "entered" (step -1) to every peer. `consumers[r]` lists where rank r pushes its step
   * progress: a count, then the ranks (the generated kernel's table; a shared program has rank
   * 0's alone, which `map` relabels, see RankMap). False (and nothing
   * announced) when the rank's error word still holds an earlier failure: the counters are
   * inconsistent until the runtime resets them, and the peers see the error word and fail
   * instead of waiting. */
  template <class Map = Unmapped>
  CCC_FN bool enter(const int* const* consumers, Map = Map()) {
    // Programmatic dependent launch (ccc_device_cuda.h). Up to here the block has read only what
    // no grid writes: the launch arguments and, through them, the ranks' fixed state (copied to
    // shared memory by the constructor; written once before the first launch, ccc_abi.h) and a
    // virtual-rank launch's buffer table (immutable, CudaRanks::launch_all). From here on it
    // reads and writes what the stream's previous grid may still be writing (progress, inbox,
    // mailbox, error words, ll slots, scratch, the user's buffers), so every thread waits first.
    // Every block waits, even one that runs no (rank, channel): then this grid completes only
    // after its predecessor, and whatever waits for this grid's completion (a later launch
    // without PDL, an event, a synchronize) has waited for the predecessor's too.
    wait_for_prior_grids();
    // Then releases the stream's next grid at once, to hide its launch latency behind this one.
    // Safe for this grid's progress: the next grid is scheduled only once every block of this
    // grid has executed the release or exited (PTX ISA, griddepcontrol.launch_dependents), and a
    // block not yet running has done neither, so the next grid's blocks never take the place of
    // a block of this grid that its peers wait for. Issued after the wait, a grid releases its
    // successor only once its own predecessor has completed: at most two grids of a stream are
    // resident at once, this one and a successor parked in its wait, never a growing chain. That
    // parked grid holds SM resources while this one runs; ranks that share a device (processes
    // under MPS) need room for both (docs/runtime.md, "Programmatic dependent launch").
    allow_dependent_launch();
    if (rank_ >= Cfg::ranks || channel_ >= Cfg::channels) return false;
    consumers_ = consumers[Map::shared ? 0 : rank_];  // a shared list is relabelled in done()
    CCC_ROLLED
    for (int p = static_cast<int>(thread_index()); p < Cfg::ranks; p += static_cast<int>(block_threads())) {
      peers_[p] = own_;
      if (p != rank_) peers_[p].call = 0;  // not loaded yet in this launch
    }
    unsigned long long* mine = state_[rank_].progress + channel_;
    base_ = ((load_acquire(mine) >> 40) + 1) << 40;
    // Every thread has read the old epoch (and filled its peers_ entries) before it changes.
    if (!barrier_and(load_relaxed(state_[rank_].error) == CCC_OK)) return false;
    if (thread_index() == 0) {
      publish(mailbox(rank_));
      store_relaxed(mine, base_);  // read by this channel only, at its next launch
    }
    // The mailbox write precedes every thread's push (see push: the barrier, then a release).
    barrier();
    CCC_ROLLED
    for (int p = static_cast<int>(thread_index()); p < Cfg::ranks; p += static_cast<int>(block_threads()))
      if (p != rank_) push(p, base_);
#ifdef CCC_TRACE_ENABLED
    if (trace_ != nullptr) {
      trace_->enter = step_begin_ = now_ns();
      trace_->exit = 0;
      trace_->count = trace_->dropped = 0;
    }
#endif
    return true;
  }
  /* Runs this rank's step program (a table of Length instructions, end() past its last): its
   * steps once per window, then its exit waits, reading the table from shared memory where it
   * fits (shared_program). False if a wait failed (timeout, failed peer), a peer called with
   * other arguments, or the program names a pass the kernel lacks. */
  template <class PassList, int Length, int S, class Map = Unmapped>
  CCC_NOINLINE bool run(const Instr<S>* table, Map map = Map()) {
    const Instr<S>* const program = shared_program<Length, SharedBudget<Cfg::ranks>::program>(table);
    for (long long w = 0; w < windows_; ++w) {
      for (const Instr<S>* i = program; i->code != instr_end; ++i) {
        if (i->code == instr_wait) {
          const Instr<S>* end = i + 1;  // the step's waits: every consecutive wait, polled at once
          CCC_ROLLED
          while (end->code == instr_wait) ++end;
          if (!wait_all(i, end, w, map)) return false;
          i = end - 1;
        } else if (i->code == instr_done) {
          done(w, i->a, map);
#ifdef CCC_TRACE_ENABLED
          trace_step(w, i->a);
#endif
        } else if (i->code == instr_pass) {
#ifdef CCC_TRACE_ENABLED
          if (trace_ != nullptr && pass_begin_ == 0) pass_begin_ = now_ns();
#endif
          if (!load_peers(i, map)) return false;
          if (!PassList::template has<typename Cfg::Op>(*i)) {
            if (thread_index() == 0) record_error(state_[rank_].error, CCC_ERR_BAD_PROGRAM);
            return false;
          }
          if constexpr (!Cfg::ll) {
            if (is_copy(*i)) {  // with the copies after it (copy_passes)
              i = copy_passes<PassList>(w, i, map) - 1;
              continue;
            }
          }
          if (!pass<PassList>(w, *i, map)) return false;
        }
      }
    }
    const Instr<S>* end = program;
    CCC_ROLLED
    while (end->code != instr_end) ++end;
    if (!wait_all(program, end, -1, map)) return false;
#ifdef CCC_TRACE_ENABLED
    if (trace_ != nullptr) trace_->exit = now_ns();
#endif
    return true;
  }

  /* One data pass (see Instr) over this channel's slice of window w, chunk by chunk, with the
   * data code of the kind (PassList) it names, which run() has checked the kernel has. Out of
   * line, and the chunk loop kept rolled: NVRTC time. False only for protocol ll, when a line it
   * waited for never came (the error is recorded). */
  template <class PassList, int S, class Map>
  CCC_NOINLINE bool pass(long long w, const Instr<S>& i, const Map& map) {
    if constexpr (Cfg::ll) {
      bool ok = false;
      PassList::template visit<typename Cfg::Op>(i, LlPass<S, Map>{*this, w, i, map, ok});
      return ok;
    } else {
      return pull_pass<PassList>(w, i, map);
    }
  }

 private:
  /* Protocol simple: every source is a buffer, a peer's read in place. One body for every kind:
   * the views and the chunk loop do not depend on it, only each chunk's fold (combine, compiled
   * once per kind) does, so a kernel compiles this once rather than once per kind (NVRTC time;
   * the per-chunk cost is a few compares and the sources' pointers through local memory). */
  template <class PassList, int S, class Map>
  CCC_FN bool pull_pass(long long w, const Instr<S>& i, const Map& map) {
    const int sources = i.sources;
    const int to = map.peer(i.dst.rank);
    const View dst = view(i.dst, to);
    View src[S];
    int from[S];  // the ranks whose buffers the sources are
    const int lowest = map.lowest(i, sources);  // the fold begins at this source
    CCC_ROLLED
    for (int k = 0; k < sources; ++k) {
      const Ref& ref = fold_source(i, lowest, k, sources);
      from[k] = map.peer(ref.rank);
      src[k] = view(ref, from[k]);
    }
    const int first = map.first(i);
    CCC_ROLLED
    for (int c = first; c < first + (i.b - i.a); ++c) {
      const Range r = window_of(w, c);
      if (r.begin >= r.end) continue;
      const T* at[S];
      CCC_ROLLED
      for (int k = 0; k < sources; ++k) at[k] = src[k].base + (r.begin - src[k].shift);
      account_move(from, sources, to, (r.end - r.begin) * static_cast<long long>(sizeof(T)), 0);
      PassList::template visit<typename Cfg::Op>(i, Fold{dst.base + (r.begin - dst.shift), at, r.end - r.begin});
    }
    return true;
  }
  /* A pass that copies one source, the op's finish aside. */
  template <int S>
  static CCC_FN bool is_copy(const Instr<S>& i) {
    return i.sources == 1 && !(i.finish != 0 && Cfg::Op::finishes);
  }
  /* Protocol simple: the copies of a step from `first` up to its next other instruction, their
   * chunks in batches of up to 4 copied together (copy_together); returns the instruction after
   * the last. A step's passes never read what another of them writes (the compiler checks it:
   * lower.cpp, check_no_self_hazard), so they may run in any order and at once. */
  template <class PassList, int S, class Map>
  CCC_NOINLINE const Instr<S>* copy_passes(long long w, const Instr<S>* first, const Map& map) {
    const int G = 4;  // 8 made ptxas spill in combine and ll_pass too (Nvrtc tests)
    T* dst[G];
    const T* src[G];
    long long n[G];
    int from[G];
    int kn = 0;
    const Instr<S>* i = first;
    CCC_ROLLED
    for (; i->code == instr_pass && is_copy(*i) && PassList::template has<typename Cfg::Op>(*i); ++i) {
      const View d = view(i->dst, map.peer(i->dst.rank));
      const int f = map.peer(i->src[0].rank);
      const View s = view(i->src[0], f);
      const int c0 = map.first(*i);
      CCC_ROLLED
      for (int c = c0; c < c0 + (i->b - i->a); ++c) {
        const Range r = window_of(w, c);
        if (r.begin >= r.end) continue;
        dst[kn] = d.base + (r.begin - d.shift);
        src[kn] = s.base + (r.begin - s.shift);
        n[kn] = r.end - r.begin;
        from[kn] = f;
        if (++kn == G) {
          copy_batch<G>(dst, src, n, from, kn);
          kn = 0;
        }
      }
    }
    if (kn > 0) copy_batch<G>(dst, src, n, from, kn);
    return i;
  }
  /* kn chunk copies into this rank: together when that takes a thread no more round trips
   * than copying them one at a time (combine keeps 8 vectors of one copy in flight, so a large
   * copy goes faster alone). The decision depends on sizes only, so it is uniform over the
   * block, and counts the GPU's block (CCC_BLOCK_THREADS), so host emulation and the simulator,
   * which may run fewer threads, take the GPU's path. */
  template <int G>
  CCC_FN void copy_batch(T* const* dst, const T* const* src, const long long* n, const int* from, int kn) {
    const long long round = CCC_BLOCK_THREADS * (16 / static_cast<long long>(sizeof(T)));  // elements per GPU round
    long long together = 0, apart = 0, most = 0;
    CCC_ROLLED
    for (int k = 0; k < kn; ++k) {
      const long long rounds = (n[k] + round - 1) / round;
      if (rounds > together) together = rounds;
      apart += (rounds + 7) / 8;
      if (n[k] > most) most = n[k];
    }
    if (kn > 1 && together <= apart) {
      account_move(from, kn, rank_, most * static_cast<long long>(sizeof(T)), 1);
      copy_together<T, G>(dst, src, n, kn);
      return;
    }
    CCC_ROLLED
    for (int k = 0; k < kn; ++k) {
      account_move(from + k, 1, rank_, n[k] * static_cast<long long>(sizeof(T)), 0);
      combine<T, typename Cfg::Op, 1, false, Cfg::ranks>(dst[k], sources_of<1>(src + k), n[k]);
    }
  }
  /* The fold of one chunk with the data loop of the kind visited (Passes::visit). */
  struct Fold {
    T* dst;
    const T* const* src;
    long long n;
    template <class Kind>
    CCC_FN void operator()(Kind) const {
      combine<T, typename Cfg::Op, Kind::sources, Kind::finish, Cfg::ranks>(dst, sources_of<Kind::sources>(src), n);
    }
  };
  /* Protocol ll: pass i with the ll_pass of the kind visited. */
  template <int S, class Map>
  struct LlPass {
    Channel& ch;
    long long w;
    const Instr<S>& i;
    const Map& map;
    bool& ok;
    template <class Kind>
    CCC_FN void operator()(Kind) const {
      ok = ch.template ll_pass<Kind::finish, Kind::sources>(w, i, map);
    }
  };

  /* Protocol ll. A receive region holds one 8-byte line per 4 bytes of Cfg::ll_blocks blocks,
   * block by block (each block's lines start afresh, so a line never spans two blocks, whatever
   * `count`), indexed by the chunks of the pass that reads it; the low 4 bytes are data, the high 4 the
   * flag. Rank `rank`'s region `region`, in its receive slots (ccc_buffers::ll): */
  CCC_FN unsigned long long* ll_lines(int rank, int region) const {
    return static_cast<unsigned long long*>(peers_[rank].ll) + region * Cfg::ll_blocks * ll_lines_per_block();
  }
  CCC_FN long long ll_lines_per_block() const { return (count_ * static_cast<long long>(sizeof(T)) + 3) / 4; }
  /* The flag of this launch's lines: (the epoch + 1) << 6 | the channel. Never 0, so zeroed
   * memory is never taken for data. The epoch changes every launch of this channel, and the
   * consumer clears each line it has read (ll_pass), so no line of an earlier launch is left to be
   * taken for this one's, even once the 24-bit epoch has wrapped to its value; a failed launch
   * may leave lines, and the runtime zeroes every receive block before epochs restart. The
   * channel is in the flag because each channel counts its own launches while every ll kernel of
   * the communicator shares the rank's receive slots: a kernel with fewer channels moves channel
   * 0's epoch and not channel 1's, and may cut its slices elsewhere, so without it a line channel
   * 0 wrote could carry the very flag channel 1 waits for later. CCC_MAX_CHANNELS is 64: 6 bits,
   * and 24 + 6 bits fit the 32 of the flag. */
  static_assert(CCC_MAX_CHANNELS <= 64, "the channel takes 6 bits of an ll flag");
  CCC_FN unsigned ll_flag() const {
    return ((static_cast<unsigned>(base_ >> 40) + 1u) << 6) | static_cast<unsigned>(channel_);
  }

  /* Polls one line of this rank's receive region until it carries `flag`, with poll()'s
   * checks for a failed producer, this rank's failure and the timeout; the line's data in
   * `data`. The region is source k (fold order) of pass i; its producer, needed only by the
   * checks every 64 polls, is derived from the table there rather than held in a register
   * through ll_pass's line loop. */
  template <int K, int S, class Map>
  CCC_FN bool ll_wait(const unsigned long long* line, unsigned flag, const Instr<S>& i, int k, const Map& map, unsigned& data) {
    unsigned long long start = 0;
    for (unsigned polls = 0;; ++polls) {
      const unsigned long long v = ll_load(line);
      if (static_cast<unsigned>(v >> 32) == flag) {
        data = static_cast<unsigned>(v);
        return true;
      }
      if (polls % 64 == 63 && !keep_waiting(map.peer(fold_source(i, map.lowest(i, K), k, K).rank), polls, start))
        return false;
      relax();
    }
  }

  /* Polls group g's lines of every region among the K sources (bit k of `regions`; source k's
   * lines start at at[k]) until all carry `flag`: each sweep loads every line before it looks at
   * any, so the loads are in flight together. poll()'s checks, on the first source still
   * missing, as ll_wait makes them. */
  template <int K, int S, class Map>
  CCC_FN bool ll_wait_all(const void* const* at, const unsigned* regions, int g, unsigned flag, const Instr<S>& i,
                          const Map& map) {
    const int L = ll_group / 4;
    unsigned long long start = 0;
    for (unsigned polls = 0;; ++polls) {
      int missing = K;
      for (int k = K - 1; k >= 0; --k)
        if (regions[k / 32] >> (k % 32) & 1u)
          for (int l = 0; l < L; ++l)
            if (static_cast<unsigned>(ll_load(static_cast<const unsigned long long*>(at[k]) + g * L + l) >> 32) != flag)
              missing = k;
      if (missing == K) return true;
      if (polls % 64 == 63 && !keep_waiting(map.peer(fold_source(i, map.lowest(i, K), missing, K).rank), polls, start))
        return false;
      relax();
    }
  }

  /* A group: the bytes one thread moves at a time, whole lines and whole elements (4 bytes,
   * or one element of 8: two lines). */
  static const int ll_group = sizeof(T) > 4 ? static_cast<int>(sizeof(T)) : 4;
  union LlGroup {
    T e[ll_group / sizeof(T)];
    unsigned line[ll_group / 4];
  };

  /* A pass of an ll kernel, a group per thread at a time: each source is a buffer of this rank
   * (read directly) or a receive region (every line polled until it carries this launch's
   * flag), and the destination is a buffer of this rank or, for a send, a peer's region. Elements
   * past the pass's range in a group's last line (a block's end) are zero in a send and ignored
   * by a read. The barrier first: a send reads what other threads wrote in this step's passes.
   * `map` relabels peers and chunks as pull_pass does; region numbers are the same on every rank
   * (the compiler numbers them so).
   *
   * Register budget: ptxas gives these kernels 64 registers, and the line loop must fit them
   * (Nvrtc.LlEveryDtypeForAmpereAndHopper fails on any spill here). So the relabelling happens
   * per chunk, outside the line loop: each operand is resolved from the table to one pointer at
   * the chunk's first group (a bit per source says whether it is a region), and the line loop
   * holds those, one destination pointer, the flag and 32-bit counters; the chunk loop reads the
   * table again for each chunk rather than keep the map's first chunk, and a wait derives its
   * producer from the table only when it checks (ll_wait). Holding a view and a line pointer per
   * source for the whole pass spilled 12-148 B under RankMap; per chunk, a data and a line
   * pointer per source, or two destination pointers, or 64-bit counters still spilled 4-8 B
   * (8-source one-shot, f16 and i64). */
  template <bool Finish, int K, int S, class Map>
  CCC_NOINLINE bool ll_pass(long long w, const Instr<S>& i, const Map& map) {
    // The lowering refuses ll kernels whose window would not fit (compiler/src/lower.cpp).
    static_assert(Cfg::window < (1ll << 30), "ll_pass counts a chunk's groups of a window in int");
    typedef typename Num<T>::Acc A;
    const int E = ll_group / sizeof(T), L = ll_group / 4;
    const bool send = i.dst.buffer == buffer_ll;
    if (send) barrier();
    const unsigned flag = ll_flag();
    bool ok = true;
    CCC_ROLLED
    for (int c = i.a; c < i.b && ok; ++c) {
      const Range r = window_of(w, map.first(i) + (c - i.a));
      if (r.begin >= r.end) continue;
      // The chunk's groups, from its first (the block's lines start afresh at each block). Counted
      // in int: a chunk's range lies in one window.
      const long long block = r.begin / count_, block_start = block * count_;
      const long long first = block_start + (r.begin - block_start) / E * E;  // the first group's first element
      const int groups = static_cast<int>((r.end - first + E - 1) / E);
      const int end = static_cast<int>(r.end - first);
      const long long line0 = block * ll_lines_per_block() + (first - block_start) / E * L;
      // Each operand at the first group, relabelled from the table once per chunk.
      void* const to = send ? static_cast<void*>(ll_lines(map.peer(i.dst.rank), i.dst.block) + line0)
                            : static_cast<void*>(ll_data(i.dst, map, first));  // lines or elements
      const void* at[K];                     // a region's lines or a buffer's elements
      unsigned regions[(K + 31) / 32] = {};  // bit k: source k is a region
      const int lowest = map.lowest(i, K);
      for (int k = 0; k < K; ++k) {
        const Ref& ref = fold_source(i, lowest, k, K);
        const bool region = ref.buffer == buffer_ll;
        if (region) {
          at[k] = ll_lines(rank_, ref.block) + line0;
          regions[k / 32] |= 1u << (k % 32);
        } else {
          at[k] = ll_data(ref, map, first);
        }
      }
      bool several = false;  // two or more regions among the sources
      if constexpr (K > 2)
        for (int w32 = 0, seen = 0; w32 < (K + 31) / 32; ++w32) {
          several = several || (regions[w32] & (regions[w32] - 1u)) != 0 || (seen != 0 && regions[w32] != 0);
          seen = seen || regions[w32] != 0;
        }
      CCC_ROLLED
      for (int g = static_cast<int>(thread_index()); g < groups && ok; g += static_cast<int>(block_threads())) {
        const int n = end - g * E < E ? end - g * E : E;  // the group's elements in the chunk
        // With several regions (one-shot, two-shot, tree), every region's lines of the group
        // carry the flag before any is read as data: one sweep loads them all, in flight
        // together, rather than each source's poll after the one before it matched. Not for two
        // sources (butterfly, ring: a buffer and a region), where it would cost a spill.
        if constexpr (K > 2)
          if (several) ok = ll_wait_all<K>(at, regions, g, flag, i, map);
        A acc[E] = {};
        for (int k = 0; k < K && ok; ++k) {
          LlGroup in = {};
          if (regions[k / 32] >> (k % 32) & 1u) {
            const unsigned long long* lines = static_cast<const unsigned long long*>(at[k]) + g * L;
            for (int l = 0; l < L && ok; ++l) ok = ll_wait<K>(lines + l, flag, i, k, map, in.line[l]);
          } else {
            const T* data = static_cast<const T*>(at[k]) + g * E;
            for (int e = 0; e < n; ++e) in.e[e] = data[e];
          }
          for (int e = 0; e < n; ++e) acc[e] = k == 0 ? Num<T>::to(in.e[e]) : Cfg::Op::apply(acc[e], Num<T>::to(in.e[e]));
        }
        if (!ok) break;
        LlGroup o;
        for (int l = 0; l < L; ++l) o.line[l] = 0;
        for (int e = 0; e < n; ++e) o.e[e] = Num<T>::from(Finish ? Cfg::Op::finish(acc[e], Cfg::ranks) : acc[e]);
        if (send) {
          for (int l = 0; l < L; ++l) ll_store(static_cast<unsigned long long*>(to) + g * L + l, o.line[l], flag);
        } else {
          for (int e = 0; e < n; ++e) static_cast<T*>(to)[g * E + e] = o.e[e];
        }
      }
      // The region lines this thread read, each read once per launch (the lowering proves it),
      // cleared, so that none outlives its launch to meet its flag again when the 24-bit epoch
      // wraps (ll_flag). The producer's next write to a line follows this rank's next entry,
      // which follows these stores (the entry's barrier and release, the producer's acquire
      // before it sends). A loop of its own: inside the line loop it costs registers it lacks.
      if (ok)
        for (int k = 0; k < K; ++k)
          if (regions[k / 32] >> (k % 32) & 1u)
            for (int g = static_cast<int>(thread_index()); g < groups; g += static_cast<int>(block_threads()))
              for (int l = 0; l < L; ++l)
                store_relaxed(static_cast<unsigned long long*>(const_cast<void*>(at[k])) + g * L + l, 0ull);
    }
    return barrier_and(ok);
  }

  /* Where element `at` of ref (one the pass reads or writes there) lies, on the ref's rank
   * relabelled by `map`. */
  template <class Map>
  CCC_FN T* ll_data(const Ref& ref, const Map& map, long long at) const {
    const View v = view(ref, map.peer(ref.rank));
    return v.base + (at - v.shift);
  }

  /* A rank's buffer seen from the vector: element i lives at base[i - shift]. The blocked
   * layouts shift a buffer that holds one block (a reduce_scatter's output, an allgather's
   * input); a remapped source shifts by its block offset (Ref::block, zero unless the schedule
   * remaps). */
  struct View {
    T* base;
    long long shift;
  };
  /* Ref's buffer and block shift, on rank `rank` (the ref's rank, relabelled by the rank map). */
  CCC_FN View view(const Ref& ref, int rank) const {
    const ccc_buffers& b = peers_[rank];
    const long long block = static_cast<long long>(rank) * count_;
    View v;
    v.shift = -static_cast<long long>(ref.block) * count_;
    if (ref.buffer == buffer_input) {
      v.base = static_cast<T*>(const_cast<void*>(b.input));
      if (Cfg::layout == layout_allgather) v.shift += block;
    } else if (ref.buffer == buffer_output) {
      v.base = static_cast<T*>(b.output);
      if (Cfg::layout == layout_reduce_scatter) v.shift += block;
    } else {
      v.base = static_cast<T*>(b.scratch);
      if (ref.buffer == buffer_staging) v.base += Cfg::staging_after * count_;
    }
    return v;
  }

  /* This launch's call as its mailbox slot carries it: the runtime's signature (ccc_abi.h) in
   * the low 40 bits, the launch's epoch (base_) in the high 24, so that a reader tells this
   * launch's slot from the one the rank writes two launches later (same parity). Never 0: the
   * signature is odd. */
  static const unsigned long long kSignatureBits = (1ull << 40) - 1;
  CCC_FN unsigned long long stamp() const { return (own_.call & kSignatureBits) | base_; }

  /* Writes this launch's buffers into `slot`, the call as one 8-byte strong store, since
   * same_call may read it while the rank writes the slot again two launches on (the other
   * fields are read only after a wait that orders them: load_peers). */
  CCC_FN void publish(ccc_buffers* slot) const {
    slot->input = own_.input;
    slot->output = own_.output;
    slot->scratch = own_.scratch;
    slot->ll = own_.ll;
    store_relaxed(&slot->call, stamp());
  }

  /* After an exit wait on `peer`: whether the peer runs the same call. A peer whose buffers this
   * launch loaded was checked then (load_peers); one it only waits for (a broadcast root waits
   * for its readers to finish) was checked nowhere, and a peer that called another root, count
   * or collective could reach the awaited step all the same, so both would succeed with
   * different data. The peer's slot holds this launch's stamp, which it wrote before the
   * progress the wait acquired, unless the peer has since finished this launch and the next (the
   * slot is two launches on, its epoch differs): then it ran this launch's call to the end and
   * proves nothing either way. The cost: one 8-byte peer load after the wait, counted by the
   * cost model. False, with CCC_ERR_MISMATCH recorded, when the calls differ. */
  CCC_FN bool same_call(int peer) {
    if (peers_[peer].call != 0) return true;
    const unsigned long long theirs = load_relaxed(&mailbox(peer)->call);
    if ((theirs ^ base_) >> 40 != 0 || theirs == stamp()) return true;
    record_error(state_[rank_].error, CCC_ERR_MISMATCH);
    return false;
  }

  /* Rank p's mailbox slot for this channel and launch (slots alternate by launch parity, so a
   * rank that has moved on to its next launch never overwrites what a slower peer may still be
   * reading). */
  CCC_FN ccc_buffers* mailbox(int p) const {
    return state_[p].mailbox + 2 * channel_ + static_cast<int>((base_ >> 40) & 1);
  }

  /* Makes the buffers of every rank that the passes from *first up to the next wait read known
   * to the block (copy_passes runs them at once), reading the mailbox of each peer this launch
   * has not touched yet: the mailboxes of every pass from
   * *first up to the next wait or publish at once, one round trip for all of them instead of one
   * per pass (a one-shot ll send is a pass per peer). Every peer read is ordered after the
   * peer's "entered" by the sync plan's waits (directly or through a chain of waits), and the
   * mailbox was written before it, so the slot holds this launch's buffers; the passes up to the
   * next wait are ordered by the same waits as *first, so reading their peers' slots now is as
   * safe as when they run. Uniform across the block: peers_ is shared and only changes between
   * barriers. False if a peer's call differs. */
  template <int S, class Map>
  CCC_FN bool load_peers(const Instr<S>* first, const Map& map) {
    // The ranks whose buffers pass i touches: its sources', except receive regions (this rank's
    // own, named by their producer), and a send's destination (protocol ll: the producer waited
    // for that rank's entry before its first send).
    auto touched = [&](const Instr<S>& i, int k) {
      const Ref& ref = k < i.sources ? i.src[k] : i.dst;
      const bool own_region = k < i.sources && ref.buffer == buffer_ll;
      const bool own_dst = k == i.sources && ref.buffer != buffer_ll;
      return own_region || own_dst ? rank_ : map.peer(ref.rank);
    };
    bool missing = false;
    CCC_ROLLED
    for (const Instr<S>* i = first; i->code == instr_pass && !missing; ++i) {
      CCC_ROLLED
      for (int k = 0; k <= i->sources; ++k) missing = missing || peers_[touched(*i, k)].call == 0;
    }
    if (!missing) return true;
    barrier();  // every thread has read the flags before any is filled in
    // Rank p's mailbox (and registry lookup) is read by thread p % block_threads(): the peers'
    // round trips are in flight together, and each entry of peers_ has one writer.
    bool ok = true;
    CCC_ROLLED
    for (int p = static_cast<int>(thread_index()); p < Cfg::ranks && ok; p += static_cast<int>(block_threads())) {
      if (peers_[p].call != 0) continue;
      bool needed = false;
      CCC_ROLLED
      for (const Instr<S>* i = first; i->code == instr_pass && !needed; ++i) {
        CCC_ROLLED
        for (int k = 0; k <= i->sources && !needed; ++k) needed = touched(*i, k) == p;
      }
      if (!needed) continue;
      const ccc_buffers* slot = mailbox(p);
      ccc_buffers b;
      b.input = slot->input;
      b.output = slot->output;
      b.scratch = slot->scratch;
      b.ll = slot->ll;
      b.call = load_relaxed(&slot->call);  // as same_call reads it (publish)
      if (b.call != stamp()) {
        record_error(state_[rank_].error, CCC_ERR_MISMATCH);
        ok = false;
      } else if (!reach(p, b)) {
        record_error(state_[rank_].error, CCC_ERR_UNREGISTERED);
        ok = false;
      } else {
        peers_[p] = b;
      }
    }
    return barrier_and(ok);
  }

  /* Makes peer p's input and output usable here: as they are without a registry (ccc_abi.h) or
   * in the shared arena, else translated through the registry's entry for p that covers them.
   * False when one lies in neither (the peer passed memory this process cannot reach). Scratch
   * and ll are always the runtime's arena memory. */
  CCC_FN bool reach(int p, ccc_buffers& b) const {
    const ccc_registry* registry = state_[rank_].registry;
    if (registry == nullptr) return true;
    unsigned long long address[2] = {reinterpret_cast<unsigned long long>(b.input),
                                     reinterpret_cast<unsigned long long>(b.output)};
    CCC_ROLLED
    for (int a = 0; a < 2; ++a)
      if (!translate(*registry, p, address[a])) return false;
    b.input = reinterpret_cast<const void*>(address[0]);
    b.output = reinterpret_cast<void*>(address[1]);
    return true;
  }
  static CCC_FN bool translate(const ccc_registry& registry, int owner, unsigned long long& address) {
    // Null is never read (a non-root broadcast's input); the unsigned differences test both ends.
    if (address == 0 || address - registry.shared_base < registry.shared_bytes) return true;
    CCC_ROLLED
    for (unsigned e = 0; e < registry.count; ++e) {
      const ccc_registration& r = registry.entries[e];
      if (r.owner == owner && address - r.owner_base < r.bytes) {
        address = r.local_base + (address - r.owner_base);
        return true;
      }
    }
    return false;
  }

  /* Publishes "finished `step` of window w" to the consumers once every thread's writes are
   * done: thread k pushes to the k-th consumer. */
  template <class Map>
  CCC_FN void done(long long w, int step, const Map& map) {
    barrier();
    const unsigned long long value = base_ + static_cast<unsigned long long>(w * Cfg::steps + step + 1);
    CCC_ROLLED
    for (int k = static_cast<int>(thread_index()); k < consumers_[0]; k += static_cast<int>(block_threads()))
      push(map.peer(consumers_[1 + k]), value);
  }

  /* This (rank, channel)'s inbox slot in `peer`'s memory. */
  CCC_FN unsigned long long* inbox_slot(int peer, int from) const {
    return state_[peer].inbox + channel_ * Cfg::ranks + from;
  }

  /* Stores `value` into this channel's slot of `peer`'s inbox. Every thread calls it after a
   * barrier that follows every thread's writes (data, mailbox), and each pushing thread's store
   * carries all of them, not only its own: bar.sync makes each thread's earlier writes precede
   * the pushing thread's release in causality order (PTX ISA, memory consistency model:
   * barrier operations on one barrier synchronize with each other, and base causality order is
   * transitive through them), and a consumer's ld.acquire that reads the release's value
   * synchronizes with it (a release and an acquire pattern on one location, both morally strong:
   * the kernel's scope, CCC_SCOPE, covers both threads:
   * ccc_device_cuda.h). The consumer's bar.sync after its acquire carries the
   * order on to its whole block, so by the causality axiom every read it then makes of this
   * rank's buffers or mailbox sees the writes. A slot has one writer, this (rank, channel), and
   * its pushes are ordered by those barriers (and by launch order across launches), so its
   * values only grow. */
  CCC_FN void push(int peer, unsigned long long value) const { store_release(inbox_slot(peer, rank_), value); }

#ifdef CCC_TRACE_ENABLED
  /* Records step `step` of window w, just published: its waits ran from step_begin_ until its
   * first pass (none: until now), its passes from there until now. The next step begins now. */
  CCC_FN void trace_step(long long w, int step) {
    if (trace_ == nullptr) return;
    const unsigned long long now = now_ns();
    if (trace_->count < CCC_TRACE_CAPACITY) {
      ccc_trace_step& s = trace_->steps[trace_->count++];
      s.begin = step_begin_;
      s.pass = pass_begin_ != 0 ? pass_begin_ : now;
      s.end = now;
      s.window = static_cast<int>(w);
      s.step = step;
    } else {
      ++trace_->dropped;
    }
    step_begin_ = now;
    pass_begin_ = 0;
  }
#endif

  /* This channel's slice of chunk c, in vector elements. */
  CCC_FN Range piece(int c) const {
    const int per_block = Cfg::chunks / Cfg::blocks;
    const long long block_start = (c / per_block) * count_;
    const Range chunk = split(count_, per_block, c % per_block, Cfg::unit);
    const Range slice = split(chunk.end - chunk.begin, Cfg::channels, channel_, Cfg::unit);
    Range r;
    r.begin = block_start + chunk.begin + slice.begin;
    r.end = block_start + chunk.begin + slice.end;
    return r;
  }

  /* This channel's part of chunk c in window w, empty when the window is past its end. Shared
   * by every instantiation of run. */
  CCC_NOINLINE Range window_of(long long w, int c) const {
    const Range p = piece(c);
    Range r;
    r.begin = p.begin + w * Cfg::window;
    r.end = r.begin + Cfg::window < p.end ? r.begin + Cfg::window : p.end;
    return r;
  }

  /* Waits for every wait instruction in [begin, end): the step waits of window w (w >= 0), or
   * the exit waits (w < 0). The k-th wait is polled by thread k % block_threads(), so the waits
   * for several peers' pushes overlap instead of adding up; then one barrier. Correct because an
   * acquire that reads a peer's release, followed by bar.sync, orders the peer's writes before
   * every thread of the block's later reads (PTX memory model: causality order is transitive through the
   * CTA barrier) — the pattern NCCL's primitives use with one polling thread per peer.
   * An entry wait ("the peer has entered", step -1) holds for the whole launch once it held,
   * so only window 0 polls it. False on every thread if any poll failed. Out of line: the step
   * waits and the exit waits share one copy (NVRTC time). */
  template <int S, class Map>
  CCC_NOINLINE bool wait_all(const Instr<S>* begin, const Instr<S>* end, long long w, const Map& map) {
    const InstrCode code = w < 0 ? instr_wait_exit : instr_wait;
    bool ok = true;
    unsigned k = 0;  // the wait's index modulo the block's threads
    CCC_ROLLED
    for (const Instr<S>* i = begin; i != end && ok; ++i) {
      if (i->code != code) continue;
      const bool mine = k == thread_index();
      if (++k == block_threads()) k = 0;
      if (!mine) continue;
      if (w < 0) {
        const int peer = map.peer(i->a);
        ok = poll(peer, windows_ == 0 ? 0 : (windows_ - 1) * Cfg::steps + i->b + 1) && same_call(peer);
      } else if (i->b >= 0 || w == 0) {
        ok = poll(map.peer(i->a), i->b < 0 ? 0 : w * Cfg::steps + i->b + 1);
      }
    }
    return barrier_and(ok);
  }

  /* Polls until `peer`'s progress, as it pushed it into this rank's inbox, reaches `progress`
   * (one thread); a timeout or a failed peer records the error and returns false. Each poll reads
   * local memory; the checks for a failure (the peer's error word, in its memory: a round trip),
   * this rank's error word and the clock run once per 64 polls, so a long wait notices a dead
   * peer within 64 polls while a short one costs no remote read at all. */
  CCC_NOINLINE bool poll(int peer, long long progress) {
    const unsigned long long* counter = inbox_slot(rank_, peer);
    const unsigned long long target = base_ + static_cast<unsigned long long>(progress);
    unsigned long long start = 0;
    for (unsigned polls = 0;; ++polls) {
      if (static_cast<long long>(load_acquire(counter) - target) >= 0) return true;
      if (!keep_waiting(peer, polls, start)) return false;
      relax();
    }
  }

  /* The checks of a wait on `peer` that has polled `polls` times, every 64 polls: the peer's
   * error word (in its memory: a round trip), this rank's and the clock (`start`: when the
   * first check ran). False, with the error recorded, when the wait must give up. */
  CCC_FN bool keep_waiting(int peer, unsigned polls, unsigned long long& start) {
    if (polls % 64 != 63) return true;
    unsigned* mine = state_[rank_].error;
    if (load_relaxed(state_[peer].error) != 0) {
      record_error(mine, CCC_ERR_PEER_FAILED);
      return false;
    }
    if (load_relaxed(mine) != 0) return false;  // another channel or thread of this rank gave up
    const unsigned long long now = now_ns();
    if (start == 0) start = now;
    if (now - start > timeout_ns_) {
      record_error(mine, CCC_ERR_TIMEOUT);
      return false;
    }
    return true;
  }

  const ccc_rank_state* state_;  // [ranks] every rank's fixed state (block_rank_state)
  long long count_;
  unsigned long long timeout_ns_;
  ccc_buffers* peers_;  // [ranks] in block-shared memory: the buffers of each rank this launch reads
  ccc_buffers own_;
  const int* consumers_ = nullptr;  // where this rank pushes step progress: count, then ranks
  int rank_ = 0;
  int channel_ = 0;
  long long windows_ = 0;
  unsigned long long base_ = 0;
#ifdef CCC_TRACE_ENABLED
  ccc_trace_channel* trace_ = nullptr;  // this block's record, on thread 0 only
  unsigned long long step_begin_ = 0;
  unsigned long long pass_begin_ = 0;   // 0: the current step has not begun a pass
#endif
};

}  // namespace ccc

#endif /* CCC_DEVICE_COMMON_H */
