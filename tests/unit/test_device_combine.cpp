// The prelude's data loop, run on the host against the host primitives: every split into scalar
// head, 16-byte vector body and scalar tail computes the same as element by element. And the
// interpreter's step tables: copied to block-shared memory when they fit, read in place when not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../../device/ccc_device.h"

namespace {

// These tests call the prelude's functions directly, outside a block run (host_block.h): as the
// one thread of a block. gtest runs every test on the thread that initialises this file.
int alone_barrier_and(const ccc_host_thread*, int p) { return p; }
void alone_relax(const ccc_host_thread*) {}
const ccc_host_thread kAlone{0, 1, 1, nullptr, alone_barrier_and, alone_relax, nullptr};
[[maybe_unused]] const bool alone = (ccc::host_self_ = &kAlone, true);

// Source values whose sums are exact in every element type (f16 included: below 2048).
template <class T>
T value(size_t i, int source) {
  const int v = static_cast<int>(source == 0 ? i * 3 + 1 : i * 7) % 1000;
  if constexpr (std::is_same_v<T, ccc::f16>) return ccc::Num<ccc::f16>::from(static_cast<float>(v));
  else return static_cast<T>(v);
}

// The fold the data loop must compute, in the element type's own arithmetic.
template <class T>
T sum(T a, T b) {
  typedef ccc::Num<T> N;
  return N::from(N::to(a) + N::to(b));
}

// dst = a (K == 1: a copy) or a + b (K == 2) over n elements of T, with dst, a and b starting
// `offsets` elements into 16-byte aligned storage, or in place (dst is a) when dst_offset < 0;
// checks every element, bit for bit, and that nothing outside [0, n) of dst changed. The sources
// are heap blocks that end at element n, so a read past the range is an error under
// AddressSanitizer (make test-asan). Residual: the epilogue's completing write, + r[j] (r at
// `r_offset`), as add_residual<op_sum> with Finish.
template <class T, int K, bool Residual = false>
void check_fold(int dst_offset, int a_offset, int b_offset, long long n, int r_offset = 0) {
  std::vector<T> a_store(a_offset + n), b_store(b_offset + n), dst_store(dst_offset + n + 16), r_store(r_offset + n);
  for (size_t i = 0; i < r_store.size(); ++i) r_store[i] = value<T>(i + 5, 1);
  const T* const r = r_store.data() + r_offset;
  ASSERT_EQ(reinterpret_cast<uintptr_t>(a_store.data()) % 16, 0u);  // malloc's alignment on x86-64
  ASSERT_EQ(reinterpret_cast<uintptr_t>(b_store.data()) % 16, 0u);
  for (size_t i = 0; i < a_store.size(); ++i) a_store[i] = value<T>(i, 0);
  for (size_t i = 0; i < b_store.size(); ++i) b_store[i] = value<T>(i, 1);
  std::memset(dst_store.data(), 0xff, dst_store.size() * sizeof(T));  // poison
  const bool in_place = dst_offset < 0;
  std::vector<T>& out = in_place ? a_store : dst_store;
  T* const dst = in_place ? a_store.data() + a_offset : dst_store.data() + dst_offset;
  const T* const a = a_store.data() + a_offset;
  const T* const b = b_store.data() + b_offset;
  std::vector<T> want = out;
  const long long at = dst - out.data();
  for (long long j = 0; j < n; ++j) want[at + j] = K == 1 ? a[j] : sum(a[j], b[j]);
  if constexpr (Residual) {
    for (long long j = 0; j < n; ++j) want[at + j] = sum(want[at + j], r[j]);
    const T* const sources[] = {a, b};
    ccc::combine<T, ccc::add_residual<ccc::op_sum>, K, true, 2>(dst, ccc::sources_of<K>(sources), n, r);
  } else if constexpr (K == 1) {
    ccc::combine<T, ccc::op_sum, 1, false, 2>(dst, ccc::Sources<T, 1>{{a}}, n, nullptr);
  } else {
    ccc::combine<T, ccc::op_sum, 2, false, 2>(dst, ccc::Sources<T, 2>{{a, b}}, n, nullptr);
  }
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(std::memcmp(&out[i], &want[i], sizeof(T)), 0)
        << sizeof(T) << "-byte elements, K " << K << " offsets " << dst_offset << "/" << a_offset << "/"
        << b_offset << " n " << n << " at " << i << (Residual ? " with a residual" : "");
}

// Every head (each offset into a 16-byte line) and every partial group: a copy moves groups of 8
// vectors and a 2-source fold groups of 4, so n runs past two groups of 8 vectors (and to 150
// elements at least).
template <class T>
void check_every_split(bool in_place) {
  const int per_vector = 16 / sizeof(T);
  const long long last = std::max(150, 2 * 8 * per_vector + 2 * per_vector);
  for (int offset = 0; offset < per_vector; ++offset)
    for (long long n = 0; n <= last; ++n) {
      check_fold<T, 2>(in_place ? -1 : offset, offset, offset, n);
      check_fold<T, 1>(in_place ? -1 : offset, offset, 0, n);
    }
}

}  // namespace

TEST(DeviceCombine, SharedMisalignmentTakesHeadBodyTail) {
  check_every_split<int8_t>(false);
  check_every_split<ccc::f16>(false);
  check_every_split<int32_t>(false);
  check_every_split<double>(false);
}

TEST(DeviceCombine, InPlaceEveryPartialGroup) {
  check_every_split<int8_t>(true);
  check_every_split<ccc::f16>(true);
  check_every_split<int32_t>(true);
  check_every_split<double>(true);
}

// The epilogue's completing write adds the residual: in vectors where the residual shares the
// others' offset past a 16-byte boundary, element by element where it does not.
TEST(DeviceCombine, ResidualJoinsTheVectorsOrTheElements) {
  for (long long n : {0LL, 1LL, 5LL, 17LL, 40LL, 150LL}) {
    for (int offset = 0; offset < 4; ++offset) {
      check_fold<int32_t, 2, true>(offset, offset, offset, n, offset);       // vectors
      check_fold<int32_t, 2, true>(offset, offset, offset, n, offset ^ 1);   // elements
      check_fold<ccc::f16, 2, true>(offset, offset, offset, n, offset);
      check_fold<ccc::f16, 1, true>(-1, offset, 0, n, offset);               // in place, one source
    }
    check_fold<double, 2, true>(1, 1, 1, n, 0);
  }
}

TEST(DeviceCombine, DifferentMisalignmentsGoElementByElement) {
  for (long long n : {0LL, 1LL, 5LL, 17LL, 40LL, 150LL}) {
    check_fold<int32_t, 2>(0, 1, 0, n);
    check_fold<int32_t, 2>(1, 0, 2, n);
    check_fold<int32_t, 2>(3, 3, 1, n);
    check_fold<int32_t, 1>(1, 2, 0, n);
    check_fold<int8_t, 2>(5, 3, 0, n);
    check_fold<ccc::f16, 2>(0, 1, 3, n);
    check_fold<double, 1>(1, 0, 0, n);
  }
}

// A table of at most kSharedProgramBytes is read from a block-shared copy (the same instructions);
// a larger one stays where it is.
TEST(DeviceSharedProgram, FittingTablesAreCopiedLargerOnesStay) {
  typedef ccc::Instr<2> Instr;
  constexpr int fits = ccc::kSharedProgramBytes / static_cast<int>(sizeof(Instr));
  static Instr small[fits], large[fits + 1];
  for (int i = 0; i < fits; ++i) small[i] = ccc::reduce(i, i + 1, ccc::out(0), ccc::in(1), ccc::in(i % 3, -1));
  small[fits - 1] = ccc::end();
  const Instr* copy = ccc::shared_program<fits, ccc::kSharedProgramBytes>(small);
  EXPECT_NE(copy, small);
  EXPECT_EQ(std::memcmp(copy, small, sizeof small), 0);
  EXPECT_EQ((ccc::shared_program<fits + 1, ccc::kSharedProgramBytes>(large)), large);
  EXPECT_EQ((ccc::shared_program<fits, sizeof small - 1>(small)), small) << "a budget a byte short keeps it where it is";
}

// Up to 256 ranks both per-rank tables and a 16 KiB program go to shared memory, as they always
// did; past that the ranks' state stays in global memory and the program gets what is left, so
// every kernel up to CCC_MAX_DEVICE_RANKS declares at most the 48 KiB a block may.
TEST(DeviceSharedProgram, SharedMemoryStaysWithinWhatABlockMayDeclare) {
  static_assert(ccc::SharedBudget<256>::state && !ccc::SharedBudget<257>::state);
  static_assert(ccc::SharedBudget<256>::program == ccc::kSharedProgramBytes);
  static_assert(ccc::SharedBudget<CCC_MAX_DEVICE_RANKS>::program >= 4096, "room for a small program still");
  auto declared = [](long long ranks_bytes, long long program) { return ranks_bytes + program; };
  EXPECT_LE(declared(ccc::SharedBudget<CCC_MAX_DEVICE_RANKS>::ranks, ccc::SharedBudget<CCC_MAX_DEVICE_RANKS>::program),
            48 * 1024);
  EXPECT_LE(declared(ccc::SharedBudget<700>::ranks, ccc::SharedBudget<700>::program), 48 * 1024)
      << "ring at N = 700 used to declare 0xdac0 bytes";
  EXPECT_LE(declared(ccc::SharedBudget<256>::ranks, ccc::SharedBudget<256>::program), 48 * 1024);
  // The state a block reads: a copy in shared memory while it fits, else the launch's own.
  static ccc_rank_state ranks[300] = {};
  EXPECT_NE(ccc::block_rank_state<3>(ranks), ranks);
  EXPECT_EQ(ccc::block_rank_state<300>(ranks), ranks);
}
