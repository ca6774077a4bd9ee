// The prelude's data loop, run on the host against the host primitives: every split into scalar
// head, 16-byte vector body and scalar tail computes the same as element by element. And the
// interpreter's step tables: copied to block-shared memory when they fit, read in place when not.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "../../runtime/device/ccc_device.h"

namespace {

// dst = a (K == 1: a copy) or a + b (K == 2) over n ints, with dst, a and b starting `offsets`
// elements into 16-byte aligned storage, or in place (dst is a) when dst_offset < 0; checks every
// element and that nothing outside [0, n) of dst changed. The sources are heap blocks that end at
// element n, so a read past the range is an error under AddressSanitizer (make test-asan). A copy
// moves groups of 8 vectors and a 2-source fold groups of 4, so n up to 150 ends in every partial
// group.
template <int K>
void check_fold(int dst_offset, int a_offset, int b_offset, long long n) {
  std::vector<int32_t> a_store(a_offset + n), b_store(b_offset + n), dst_store(160, -1);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(a_store.data()) % 16, 0u);  // malloc's alignment on x86-64
  ASSERT_EQ(reinterpret_cast<uintptr_t>(b_store.data()) % 16, 0u);
  for (size_t i = 0; i < a_store.size(); ++i) a_store[i] = static_cast<int32_t>(i * 3 + 1);
  for (size_t i = 0; i < b_store.size(); ++i) b_store[i] = static_cast<int32_t>(i * 1000);
  const bool in_place = dst_offset < 0;
  std::vector<int32_t>& out = in_place ? a_store : dst_store;
  int32_t* const dst = in_place ? a_store.data() + a_offset : dst_store.data() + dst_offset;
  const int32_t* const a = a_store.data() + a_offset;
  const int32_t* const b = b_store.data() + b_offset;
  std::vector<int32_t> want = out;
  const long long at = dst - out.data();
  for (long long j = 0; j < n; ++j) want[at + j] = K == 1 ? a[j] : a[j] + b[j];
  if constexpr (K == 1) {
    ccc::combine<int32_t, ccc::op_sum, 1, false, 2>(dst, ccc::Sources<int32_t, 1>{{a}}, n);
  } else {
    ccc::combine<int32_t, ccc::op_sum, 2, false, 2>(dst, ccc::Sources<int32_t, 2>{{a, b}}, n);
  }
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], want[i]) << "K " << K << " offsets " << dst_offset << "/" << a_offset << "/" << b_offset
                               << " n " << n << " at " << i;
}

}  // namespace

TEST(DeviceCombine, SharedMisalignmentTakesHeadBodyTail) {
  for (int offset = 0; offset < 4; ++offset)
    for (long long n = 0; n <= 150; ++n) {
      check_fold<2>(offset, offset, offset, n);
      check_fold<1>(offset, offset, 0, n);
    }
}

TEST(DeviceCombine, InPlaceEveryPartialGroup) {
  for (int offset = 0; offset < 4; ++offset)
    for (long long n = 0; n <= 150; ++n) {
      check_fold<2>(-1, offset, offset, n);
      check_fold<1>(-1, offset, 0, n);
    }
}

TEST(DeviceCombine, DifferentMisalignmentsGoElementByElement) {
  for (long long n : {0LL, 1LL, 5LL, 17LL, 40LL, 150LL}) {
    check_fold<2>(0, 1, 0, n);
    check_fold<2>(1, 0, 2, n);
    check_fold<2>(3, 3, 1, n);
    check_fold<1>(1, 2, 0, n);
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
  const Instr* copy = ccc::shared_program<fits>(small);
  EXPECT_NE(copy, small);
  EXPECT_EQ(std::memcmp(copy, small, sizeof small), 0);
  EXPECT_EQ(ccc::shared_program<fits + 1>(large), large);
}
