/* Target-independent data code of the device prelude: dtypes, reduction ops, and the loops that
 * move and fold data (combine, copy_together), on the target primitives alone (ccc_device_cuda.h
 * / ccc_device_host.h). Every protocol's passes end here. */
#ifndef CCC_DATA_H
#define CCC_DATA_H

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

/* OCP 8-bit floats, carried as bits; arithmetic happens in float. E exponent bits, M mantissa
 * bits, bias 2^(E-1) - 1; Fn: no infinity, NaN only at all ones (E4M3). Converting from float
 * rounds to nearest even and saturates to the largest finite value (infinity too), as NCCL's fp8
 * reductions do (__NV_SATFINITE); NaN stays NaN. Integer code on both targets, so host emulation
 * gives the GPU's bits (sm_80 has no fp8 conversion instruction; the unit tests compare this code
 * with cuda_fp8.h's on every fp8 value and a sweep of floats). */
template <int E, int M, bool Fn>
struct Fp8 {
  static constexpr int bias = (1 << (E - 1)) - 1;
  static constexpr unsigned max_finite = Fn ? 0x7eu : (((1u << E) - 2) << M) | ((1u << M) - 1);
  static CCC_FN float to_float(unsigned char b) {
    const unsigned sign = (b & 0x80u) << 24, exp = (b >> M) & ((1u << E) - 1), mant = b & ((1u << M) - 1);
    if (Fn ? (b & 0x7fu) == 0x7fu : exp == (1u << E) - 1)  // NaN, or E5M2's infinity
      return bits_float(sign | 0x7f800000u | (Fn || mant != 0 ? 0x400000u : 0u));
    if (exp == 0) {  // zero or subnormal: mant * 2^(1 - bias - M), exact in float
      const float mag = static_cast<float>(mant) * bits_float(static_cast<unsigned>(128 - bias - M) << 23);
      return sign ? -mag : mag;
    }
    return bits_float(sign | ((exp + 127 - bias) << 23) | (mant << (23 - M)));
  }
  static CCC_FN unsigned char from_float(float f) {
    const unsigned x = float_bits(f), sign = (x >> 24) & 0x80u, ax = x & 0x7fffffffu, e = ax >> 23;
    if (ax > 0x7f800000u) return static_cast<unsigned char>(sign | 0x7fu);
    unsigned r;
    if (e >= static_cast<unsigned>(128 - bias)) {  // normal: rebias, round the dropped bits to nearest even
      const unsigned u = ax - (static_cast<unsigned>(127 - bias) << 23), drop = 23 - M;
      r = (u + (1u << (drop - 1)) - 1u + ((u >> drop) & 1u)) >> drop;
    } else {  // subnormal: mant24 * 2^(e - 150), in units of 2^(1 - bias - M)
      const unsigned shift = static_cast<unsigned>(151 - bias - M) - e;
      if (e == 0 || shift > 24u) return static_cast<unsigned char>(sign);
      const unsigned mant = (ax & 0x7fffffu) | 0x800000u, half = 1u << (shift - 1), rem = mant & ((1u << shift) - 1u);
      r = mant >> shift;
      if (rem > half || (rem == half && (r & 1u))) ++r;
    }
    return static_cast<unsigned char>(sign | (r > max_finite ? max_finite : r));
  }
};
struct f8e4m3 {
  unsigned char bits;
};
struct f8e5m2 {
  unsigned char bits;
};
typedef Fp8<4, 3, true> Fp8E4M3;
typedef Fp8<5, 2, false> Fp8E5M2;
template <>
struct Num<f8e4m3> {
  typedef float Acc;
  static CCC_FN float to(f8e4m3 x) { return Fp8E4M3::to_float(x.bits); }
  static CCC_FN f8e4m3 from(float a) { return f8e4m3{Fp8E4M3::from_float(a)}; }
};
template <>
struct Num<f8e5m2> {
  typedef float Acc;
  static CCC_FN float to(f8e5m2 x) { return Fp8E5M2::to_float(x.bits); }
  static CCC_FN f8e5m2 from(float a) { return f8e5m2{Fp8E5M2::from_float(a)}; }
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

/* The fused epilogue of an allreduce + residual add: the write that completes a value (the op's
 * finish applied) adds the rank's residual at that element, in the accumulation type, and rounds
 * once: out = finish(x0 (+) x1 ...) + residual. The lowering places that write where the proof
 * says a value first holds every rank's contribution, once per element, so the copies that carry
 * it on (an all-gather) carry the epilogue's result. */
template <class Op>
struct add_residual {
  static const bool finishes = true;
  template <class A> static CCC_FN A apply(A a, A b) { return Op::apply(a, b); }
  template <class A> static CCC_FN A finish(A a, int n) { return Op::finish(a, n); }
};
/* The same, then RMSNorm over rows of `hidden` elements once every write of the rank's output
 * is done (Channel::run, rmsnorm_rows): out = rmsnorm(allreduce(x) + residual) * weight. */
template <class Op>
struct add_residual_rmsnorm : add_residual<Op> {};
template <class Op> struct HasResidual { static const bool value = false; };
template <class Op> struct HasResidual<add_residual<Op> > { static const bool value = true; };
template <class Op> struct HasResidual<add_residual_rmsnorm<Op> > { static const bool value = true; };
template <class Op> struct HasRmsNorm { static const bool value = false; };
template <class Op> struct HasRmsNorm<add_residual_rmsnorm<Op> > { static const bool value = true; };
/* The completing write's value: the op's finish, then residual[i] where the kernel has one
 * (residual is null in the others, and never offset there). */
template <class T, class Op, bool Finish>
CCC_FN T finished(typename Num<T>::Acc acc, int ranks, const T* residual, long long i) {
  if constexpr (!Finish) return Num<T>::from(acc);
  else if constexpr (HasResidual<Op>::value)
    return Num<T>::from(op_sum::apply(Op::finish(acc, ranks), Num<T>::to(residual[i])));
  else return Num<T>::from(Op::finish(acc, ranks));
}

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
CCC_FN void combine_vectors(T* dst, const Sources<T, K>& s, const T* residual, long long v, long long stride,
                            long long nvec) {
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
    if constexpr (Finish && HasResidual<Op>::value)
      for (int u = 0; u < U; ++u) in[u].v = load16(residual + at[u] * E);
    for (int u = 0; u < U; ++u) {
      Pack<T> o;
      for (int e = 0; e < E; ++e) o.e[e] = finished<T, Op, Finish>(acc[u][e], Ranks, in[u].e, e);
      if (live[u]) store16(dst + at[u] * E, o.v);
    }
  }
}

/* dst[i] = fold of the K sources at i, element by element, for i in [0, head) and [tail, n). */
template <class T, class Op, int K, bool Finish, int Ranks>
CCC_FN void combine_elements(T* dst, const Sources<T, K>& s, const T* residual, long long head, long long tail,
                             long long n) {
  typedef typename Num<T>::Acc A;
  const long long stride = block_threads(), count = head + (n - tail);
  CCC_ROLLED
  for (long long j = thread_index(); j < count; j += stride) {
    const long long i = j < head ? j : tail + (j - head);
    A acc = Num<T>::to(s.p[0][i]);
    for (int k = 1; k < K; ++k) acc = Op::apply(acc, Num<T>::to(s.p[k][i]));
    dst[i] = finished<T, Op, Finish>(acc, Ranks, residual, i);
  }
}

/* The one data-moving routine: dst[0, n) = fold of the K sources (a completing write of an
 * epilogue kernel adds residual[0, n): finished), the block's threads sharing the work. When every pointer sits at the same offset past a 16-byte boundary (always so for
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
CCC_NOINLINE void combine(T* dst, Sources<T, K> s, long long n, const T* residual) {
  if (!moves_data()) return;  // the simulator's timing-only mode (the pass is priced already)
  const int E = 16 / sizeof(T), U = K == 1 ? 8 : K > 4 ? 2 : 4;
  const unsigned offset = misalignment16(dst);
  bool vectors = true;
  for (int k = 0; k < K; ++k) vectors = vectors && misalignment16(s.p[k]) == offset;
  if constexpr (Finish && HasResidual<Op>::value) vectors = vectors && misalignment16(residual) == offset;
  // Buffers are aligned to their element size (the runtime checks it), so the head is whole
  // elements.
  long long head = vectors ? static_cast<long long>((16u - offset) & 15u) / static_cast<long long>(sizeof(T)) : n;
  if (head > n) head = n;
  Sources<T, K> body = s;
  for (int k = 0; k < K; ++k) body.p[k] += head;
  T* const out = dst + head;
  const T* body_residual = residual;
  if constexpr (Finish && HasResidual<Op>::value) body_residual += head;
  const long long nvec = (n - head) / E, stride = block_threads();
  CCC_ROLLED
  for (long long v = thread_index(); v < nvec; v += U * stride)
    combine_vectors<T, Op, K, Finish, Ranks, U>(out, body, body_residual, v, stride, nvec);
  combine_elements<T, Op, K, Finish, Ranks>(dst, s, residual, head, head + nvec * E, n);
}

/* RMSNorm of the whole rows [begin, end) of `out` (rows of `hidden` elements), in place: each
 * element times rsqrt(mean square of its row + eps) times weight[column], in float, rounded
 * once; the pre-norm row copied to residual_out first where that is not null, and the rounded
 * output times quant_inv_scale written to quant_out as f8e4m3 where that is not null (so the fp8
 * output is the quantisation of `out` itself, as FlashInfer's norm-out + fp8 pattern). The block's
 * threads share each row, each thread the same elements in both loops (so no element is read by
 * one thread after another wrote it); block_sum's barriers make every thread of the block call
 * this, with the same rows. float types only (the lowering refuses the others). */
template <class T>
CCC_NOINLINE void rmsnorm_rows(T* out, const T* weight, T* residual_out, unsigned char* quant_out,
                               float quant_inv_scale, long long begin, long long end, long long hidden, float eps) {
  if (!moves_data()) return;  // the simulator's timing-only mode (priced by the caller)
  const long long stride = block_threads();
  CCC_ROLLED
  for (long long row = begin; row < end; row += hidden) {
    T* const x = out + row;
    float squares = 0.0f;
    CCC_ROLLED
    for (long long i = thread_index(); i < hidden; i += stride) {
      const float v = static_cast<float>(Num<T>::to(x[i]));
      squares += v * v;
    }
    const float scale = rsqrt(block_sum(squares) / static_cast<float>(hidden) + eps);
    CCC_ROLLED
    for (long long i = thread_index(); i < hidden; i += stride) {
      const T v = x[i];
      if (residual_out != nullptr) residual_out[row + i] = v;
      const T y = Num<T>::from(static_cast<float>(Num<T>::to(v)) * scale * static_cast<float>(Num<T>::to(weight[i])));
      x[i] = y;
      if (quant_out != nullptr)
        quant_out[row + i] = Fp8E4M3::from_float(static_cast<float>(Num<T>::to(y)) * quant_inv_scale);
    }
  }
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

}  // namespace ccc

#endif /* CCC_DATA_H */
