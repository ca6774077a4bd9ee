/* CUDA primitives of the device prelude (see ccc_device.h). Needs sm_80 or newer: __nanosleep
 * and ld.acquire / st.release need sm_70, the bf16 conversion (cvt.rn.bf16.f32) sm_80. Self-
 * contained: no includes beyond ccc_abi.h, so NVRTC compiles it without the CUDA headers (and without <cuda/atomic>,
 * which would add seconds to every cold compile). */
#ifndef CCC_DEVICE_CUDA_H
#define CCC_DEVICE_CUDA_H

#define CCC_FN __device__ __forceinline__
#define CCC_NOINLINE __device__ __noinline__
/* Builders of step-program tables, evaluated when the tables are initialised. */
#define CCC_CONSTEXPR __device__ constexpr
/* Keeps a loop rolled: its body is unrolled already, or runs rarely, and each unrolled copy is
 * NVRTC compile time for nothing. */
#define CCC_ROLLED _Pragma("unroll 1")
/* A step-program table: read-only device memory (not __constant__, whose 64 KiB large N would
 * outgrow), read through the non-coherent cache. */
#define CCC_PROGRAM __device__ constexpr
/* The kernel entry: one ccc_launch_args by value; `threads` is the block size it is built for. */
#define CCC_KERNEL(name, threads) \
  extern "C" __global__ void __launch_bounds__(threads) name(ccc_launch_args args)
#define CCC_BLOCK_INDEX (static_cast<int>(blockIdx.x))

namespace ccc {

typedef uint4 Vec16;

CCC_FN unsigned thread_index() { return threadIdx.x; }
CCC_FN unsigned block_threads() { return blockDim.x; }
CCC_FN void barrier() { __syncthreads(); }
/* A barrier that also tells every thread whether `p` held on all of them. */
CCC_FN bool barrier_and(bool p) { return __syncthreads_and(p ? 1 : 0) != 0; }

/* The sum of every thread's `v`, returned to every thread of the block, in an order fixed by the
 * block's size (so every rank, running the same block, gets the same bits): each warp's lanes by
 * a butterfly of shuffles (__shfl_xor_sync with the full mask: every lane takes part, as a
 * 512-thread block's do; a lane and its partner add the same two values, so all lanes agree),
 * then thread 0 adds the warps' sums in order. The first barrier keeps this call's writes from
 * the previous call's readers. All threads of the block must call it. */
CCC_FN float block_sum(float v) {
  __shared__ float warp_sums[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31u) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (unsigned w = 0; w < (blockDim.x + 31u) / 32u; ++w) s += warp_sums[w];
    total = s;
  }
  __syncthreads();
  return total;
}
/* 1 / sqrt(x): the hardware's approximation (rsqrt.approx.f32, CUDA's rsqrtf: 2 ulp). */
CCC_FN float rsqrt(float x) { return rsqrtf(x); }

/* The scope of every sync operation below (progress, inbox, error words, ll lines). The PTX
 * memory consistency model makes two strong operations "morally strong" only when each one's
 * scope includes the other's thread (PTX ISA, "Memory Consistency Model", sections "Scope" and
 * "Morally strong operations"), and only morally strong release/acquire pairs synchronize.
 * .sys covers every thread of the system: peers on other GPUs, reading over NVLink/PCIe, or in
 * other processes. .gpu covers every thread of the same device, so when every rank runs on one
 * device (virtual ranks in one grid, a one-device communicator: the generated kernel defines
 * CCC_SCOPE_GPU, KernelOptions::one_device) .gpu pairs are morally strong too, and the hardware
 * need not make them coherent beyond the device (what that saves is to be measured on a GPU:
 * docs/codegen.md, "Memory scope"). Host-side readers of these words only read them once the
 * kernel has completed, which orders them without any scope. */
#ifdef CCC_SCOPE_GPU
#define CCC_SCOPE "gpu"
#else
#define CCC_SCOPE "sys"
#endif

CCC_FN unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire." CCC_SCOPE ".global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
CCC_FN void store_release(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release." CCC_SCOPE ".global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
CCC_FN void store_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed." CCC_SCOPE ".global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
CCC_FN unsigned long long load_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed." CCC_SCOPE ".global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
CCC_FN unsigned load_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed." CCC_SCOPE ".global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/* LL lines (ccc_protocol_ll.h): 8 bytes, the data in the low half and the flag in
 * the high half, written and read as one 8-byte access. A reader that sees the flag sees the
 * data of the same store: both accesses are strong (.relaxed) with CCC_SCOPE, which covers the
 * writing and the reading thread (see above), so they are morally strong, and the PTX ISA memory
 * consistency model performs morally strong accesses that overlap completely with single-copy
 * atomicity (sections "Morally strong operations" and "Axioms: Atomicity"): the load returns
 * all 8 bytes of one store, never the flag of one and the data of another. No fence is needed,
 * since the line carries its own data; nothing else of the producer's memory is read. */
CCC_FN void ll_store(unsigned long long* line, unsigned data, unsigned flag) {
  const unsigned long long v = static_cast<unsigned long long>(flag) << 32 | data;
  asm volatile("st.relaxed." CCC_SCOPE ".global.u64 [%0], %1;" ::"l"(line), "l"(v) : "memory");
}
CCC_FN unsigned long long ll_load(const unsigned long long* line) {
  unsigned long long v;
  asm volatile("ld.relaxed." CCC_SCOPE ".global.u64 %0, [%1];" : "=l"(v) : "l"(line) : "memory");
  return v;
}
/* Keeps the first error a rank records (an atomic of the kernel's scope: atomicCAS is .gpu). */
CCC_FN void record_error(unsigned* word, unsigned code) {
#ifdef CCC_SCOPE_GPU
  atomicCAS(word, 0u, code);
#else
  atomicCAS_system(word, 0u, code);
#endif
}

/* Programmatic dependent launch (PDL; CUDA C++ Programming Guide, "Programmatic Dependent Launch
 * and Synchronization"; PTX ISA, "griddepcontrol"). A grid the runtime launches with
 * CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (cuda_backend.cpp) may start while the
 * previous grid of its stream still runs. wait_for_prior_grids (griddepcontrol.wait) blocks until
 * every prerequisite grid has completed and its memory operations are performed and visible to
 * this grid; nothing a prior grid may write (progress, inbox, mailbox, error words, ll slots,
 * scratch, the user's buffers) may be touched before it. allow_dependent_launch
 * (griddepcontrol.launch_dependents) lets the stream's next grid be scheduled once every block of
 * this grid has executed it or exited; it orders no memory, the next grid's own wait does that.
 * In a grid launched without the attribute (a cooperative launch, PDL switched off, a capture)
 * there is no prerequisite grid in flight, so the wait returns at once, and launch_dependents
 * has no dependent to release. Both need sm_90: below it they are nothing, and the runtime never
 * asks for PDL there. The "memory" clobber keeps the compiler from moving this thread's loads or
 * stores across them. Where the kernel calls them, and why there: Channel::enter. */
CCC_FN void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
CCC_FN void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

CCC_FN unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
/* Host emulation's simulator prices data passes here (ccc_device_host.h); on a GPU the pass
 * itself takes its time. */
CCC_FN void account_move(const int*, int, int, long long, int) {}
/* The simulator's timing-only mode is host emulation's: a GPU always moves the data. */
CCC_FN bool moves_data() { return true; }
/* Back off between polls so a spinning thread leaves the memory system to the others. */
CCC_FN void relax() { __nanosleep(100); }

/* An array in the block's shared memory, one per instantiation: state every thread of a block
 * reads (the peers' buffers), kept out of local memory and read without a global load. */
template <class T, int N>
CCC_FN T* block_shared() {
  __shared__ T array[N];
  return array;
}

CCC_FN Vec16 load16(const void* p) { return *static_cast<const Vec16*>(p); }
CCC_FN void store16(void* p, Vec16 v) { *static_cast<Vec16*>(p) = v; }

CCC_FN float half_bits_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
CCC_FN unsigned short float_to_half_bits(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
CCC_FN unsigned float_bits(float f) { return __float_as_uint(f); }
CCC_FN float bits_float(unsigned u) { return __uint_as_float(u); }
CCC_FN float bf16_bits_to_float(unsigned short b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}
CCC_FN unsigned short float_to_bf16_bits(float f) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
}

}  // namespace ccc

#endif /* CCC_DEVICE_CUDA_H */
