/* Host primitives of the device prelude (see ccc_device.h): the same generated kernel compiled by
 * a host C++20 compiler. A thread block is one host thread running the block's threads as fibers
 * (the runtime's host_block.h): each thread has its own thread_index(), barrier() is a real block
 * barrier, and block_shared() memory is shared by the block's threads. Counters use
 * std::atomic_ref with the acquire/release pairing the CUDA side gets from ld.acquire/st.release.
 * Under the simulator (ccc_abi.h, ccc_sim_hooks) the same primitives go to its hooks instead. */
#ifndef CCC_DEVICE_HOST_H
#define CCC_DEVICE_HOST_H

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#define CCC_FN inline
#define CCC_NOINLINE inline
#define CCC_CONSTEXPR constexpr
#define CCC_ROLLED
#define CCC_PROGRAM constexpr
/* The kernel entry the host backend looks up with dlsym (ccc_abi.h, ccc_host_thread): it makes
 * `self` the calling fiber's thread record, then runs the body. */
#define CCC_KERNEL(name, threads)                                                                  \
  static void name##_body(ccc_launch_args args, int ccc_block_index_);                            \
  extern "C" void name(ccc_launch_args args, int block, const ccc_host_thread* self) {            \
    ccc::host_self_ = self;                                                                        \
    name##_body(args, block);                                                                      \
  }                                                                                                \
  static void name##_body(ccc_launch_args args, int ccc_block_index_)
#define CCC_BLOCK_INDEX ccc_block_index_

namespace ccc {

/* Like CUDA's uint4: 16-byte aligned, so load16/store16 below are the device's typed accesses and
 * a misaligned one is caught here too (UBSan's alignment check in make test-asan; on the GPU a
 * misaligned ld.v4 is a fault). may_alias: it reads and writes buffers of any element type. */
struct __attribute__((may_alias, aligned(16))) Vec16 {
  unsigned char bytes[16];
};

/* The running thread's record. The fibers of a block share their host thread's thread_local, so
 * every call that may switch fibers (barrier, relax) sets it back when it returns. */
inline thread_local const ccc_host_thread* host_self_ = nullptr;

CCC_FN unsigned thread_index() { return host_self_->index; }
CCC_FN unsigned block_threads() { return host_self_->count; }
CCC_FN bool barrier_and(bool p) {
  const ccc_host_thread* self = host_self_;
  const bool all = self->barrier_and(self, p) != 0;
  host_self_ = self;
  return all;
}
CCC_FN void barrier() { barrier_and(true); }

/* The simulator's hooks (ccc_abi.h, ccc_sim_hooks), or null: plain host emulation. A hook may
 * switch fibers, so the callers below set host_self_ back after one. */
CCC_FN const ccc_sim_hooks* sim() { return host_self_->sim; }
CCC_FN unsigned long long sim_load(const void* p, int bytes) {
  const ccc_host_thread* self = host_self_;
  const unsigned long long v = self->sim->load(self, p, bytes);
  host_self_ = self;
  return v;
}
CCC_FN void sim_store(void* p, unsigned long long v, int bytes, bool release) {
  const ccc_host_thread* self = host_self_;
  self->sim->store(self, p, v, bytes, release ? 1 : 0);
  host_self_ = self;
}

CCC_FN unsigned long long load_acquire(const unsigned long long* p) {
  if (sim() != nullptr) return sim_load(p, 8);
  return std::atomic_ref<unsigned long long>(*const_cast<unsigned long long*>(p))
      .load(std::memory_order_acquire);
}
CCC_FN void store_release(unsigned long long* p, unsigned long long v) {
  if (sim() != nullptr) return sim_store(p, v, 8, true);
  std::atomic_ref<unsigned long long>(*p).store(v, std::memory_order_release);
}
CCC_FN void store_relaxed(unsigned long long* p, unsigned long long v) {
  if (sim() != nullptr) return sim_store(p, v, 8, false);
  std::atomic_ref<unsigned long long>(*p).store(v, std::memory_order_relaxed);
}
CCC_FN unsigned long long load_relaxed(const unsigned long long* p) {
  if (sim() != nullptr) return sim_load(p, 8);
  return std::atomic_ref<unsigned long long>(*const_cast<unsigned long long*>(p)).load(std::memory_order_relaxed);
}
CCC_FN unsigned load_relaxed(const unsigned* p) {
  if (sim() != nullptr) return static_cast<unsigned>(sim_load(p, 4));
  return std::atomic_ref<unsigned>(*const_cast<unsigned*>(p)).load(std::memory_order_relaxed);
}
/* LL lines (ccc_protocol_ll.h): data and flag in one 8-byte atomic, so a reader
 * that sees the flag sees the data of the same store. Relaxed suffices: the line is one atomic
 * object, read whole, and a reader needs nothing else the producer wrote. */
CCC_FN void ll_store(unsigned long long* line, unsigned data, unsigned flag) {
  const unsigned long long v = static_cast<unsigned long long>(flag) << 32 | data;
  if (sim() != nullptr) return sim_store(line, v, 8, false);
  std::atomic_ref<unsigned long long>(*line).store(v, std::memory_order_relaxed);
}
CCC_FN unsigned long long ll_load(const unsigned long long* line) {
  if (sim() != nullptr) return sim_load(line, 8);
  return std::atomic_ref<unsigned long long>(*const_cast<unsigned long long*>(line)).load(std::memory_order_relaxed);
}
/* Keeps the first error a rank records. */
CCC_FN void record_error(unsigned* word, unsigned code) {
  if (const ccc_host_thread* self = host_self_; self->sim != nullptr) {
    self->sim->record_error(self, word, code);
    host_self_ = self;
    return;
  }
  unsigned expected = 0;
  std::atomic_ref<unsigned>(*word).compare_exchange_strong(expected, code);
}
/* A data pass of the block over `bytes` of each operand (`gather`: copies of `bytes` from each
 * source at once), priced by the simulator (where the operands live, the links and memories they
 * cross); nothing to do otherwise. */
CCC_FN void account_move(const int* src, int nsrc, int dst, long long bytes, int gather) {
  if (const ccc_host_thread* self = host_self_; self->sim != nullptr) {
    self->sim->move(self, src, nsrc, dst, bytes, gather);
    host_self_ = self;
  }
}

/* False in the simulator's timing-only mode (ccc_sim_hooks::move_data): data loops skip their
 * loads and stores. */
CCC_FN bool moves_data() {
  const ccc_host_thread* self = host_self_;
  return self->sim == nullptr || self->sim->move_data != 0;
}

/* Programmatic dependent launch (ccc_device_cuda.h) is a CUDA launch feature: the host backend
 * runs a launch only after the one before it on its stream has returned, so there is nothing to
 * wait for and no one to release. */
CCC_FN void wait_for_prior_grids() {}
CCC_FN void allow_dependent_launch() {}

CCC_FN unsigned long long now_ns() {
  if (const ccc_host_thread* self = host_self_; self->sim != nullptr) return self->sim->now(self);
  return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count());
}
/* A poll found nothing yet: the block's other threads run, then (ranks usually outnumber cores
 * here) the host thread gives its core to the one being waited for. */
CCC_FN void relax() {
  const ccc_host_thread* self = host_self_;
  self->relax(self);
  host_self_ = self;
}

/* Block-shared state: a block's threads are fibers of one host thread, so a thread-local array
 * serves (a worker thread runs one block at a time). Shared memory starts undefined on the GPU;
 * here the first use in each block run fills it with 0xA5 bytes, so a thread that reads before
 * the barrier that should order it after the writer reads garbage in host runs too. */
template <class T, int N>
CCC_FN T* block_shared() {
  // The simulator runs every block on one host thread: it keeps each block's arrays itself.
  static const char key = 0;
  if (const ccc_host_thread* self = host_self_; self->sim != nullptr)
    return static_cast<T*>(self->sim->shared(self, &key, sizeof(T) * N));
  thread_local T array[N];
  thread_local unsigned long long launch = 0;
  if (launch != host_self_->launch) {
    launch = host_self_->launch;
    std::memset(static_cast<void*>(array), 0xA5, sizeof array);
  }
  return array;
}

CCC_FN Vec16 load16(const void* p) { return *static_cast<const Vec16*>(p); }
CCC_FN void store16(void* p, Vec16 v) { *static_cast<Vec16*>(p) = v; }

/* The sum of every thread's `v`, returned to every thread of the block, in thread order (one
 * fixed order for the block's size, as on the GPU, though not the GPU's: its warps add by
 * shuffles). Host blocks have at most 1024 threads (CUDA's limit, which host_block.h keeps). */
CCC_FN float block_sum(float v) {
  float* part = block_shared<float, 1025>();  // [1024]: the total
  barrier();  // the previous call's readers are done with the total
  part[thread_index()] = v;
  barrier();
  if (thread_index() == 0) {
    float s = 0.0f;
    for (unsigned t = 0; t < block_threads(); ++t) s += part[t];
    part[1024] = s;
  }
  barrier();
  return part[1024];
}
/* 1 / sqrt(x), correctly rounded here (the GPU's rsqrtf is within 2 ulp of it). */
CCC_FN float rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }

CCC_FN unsigned float_bits(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
CCC_FN float bits_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/* IEEE binary16 <-> float, rounding to nearest even (what cvt.rn.f16.f32 does on the GPU). */
CCC_FN float half_bits_to_float(unsigned short h) {
  const unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}
CCC_FN unsigned short float_to_half_bits(float f) {
  const unsigned x = float_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<unsigned short>(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
  if (ax >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // rounds to inf
  if (ax >= 0x38800000u) {  // normal half: rebias the exponent, round the dropped 13 bits
    const unsigned u = ax - 0x38000000u;
    return static_cast<unsigned short>(sign | ((u + 0xfffu + ((u >> 13) & 1u)) >> 13));
  }
  const unsigned shift = 126u - (ax >> 23);  // subnormal half: mant24 * 2^-shift
  if (shift > 24u) return static_cast<unsigned short>(sign);
  const unsigned mant = (ax & 0x7fffffu) | 0x800000u, half = 1u << (shift - 1);
  const unsigned rem = mant & ((1u << shift) - 1u);
  unsigned r = mant >> shift;
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return static_cast<unsigned short>(sign | r);
}
CCC_FN float bf16_bits_to_float(unsigned short b) { return bits_float(static_cast<unsigned>(b) << 16); }
CCC_FN unsigned short float_to_bf16_bits(float f) {
  const unsigned x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((x >> 16) | 0x40u);
  return static_cast<unsigned short>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace ccc

#endif /* CCC_DEVICE_HOST_H */
