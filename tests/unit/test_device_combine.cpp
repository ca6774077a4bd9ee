// The prelude's data loop, run on the host against the host primitives: every split into scalar
// head, 16-byte vector body and scalar tail computes the same as element by element. And the
// interpreter's step tables: copied to block-shared memory when they fit, read in place when not.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "../../runtime/device/ccc_device.h"

namespace {

// dst = a + b over n ints, with dst, a and b starting `offsets` elements into 16-byte aligned
// storage; checks every element and that nothing outside [0, n) of dst changed.
void check_sum(int dst_offset, int a_offset, int b_offset, long long n) {
  alignas(16) int32_t dst_store[80], a_store[80], b_store[80];
  for (int i = 0; i < 80; ++i) {
    dst_store[i] = -1;
    a_store[i] = i * 3 + 1;
    b_store[i] = i * 1000;
  }
  int32_t* dst = dst_store + dst_offset;
  const int32_t* a = a_store + a_offset;
  const int32_t* b = b_store + b_offset;
  ccc::Sources<int32_t, 2> s{{a, b}};
  ccc::combine<int32_t, ccc::op_sum, 2, false, 2>(dst, s, n);
  for (int i = 0; i < 80; ++i) {
    const long long j = i - dst_offset;
    const int32_t want = j >= 0 && j < n ? a[j] + b[j] : -1;
    ASSERT_EQ(dst_store[i], want) << "offsets " << dst_offset << "/" << a_offset << "/" << b_offset << " n " << n
                                  << " at " << i;
  }
}

}  // namespace

TEST(DeviceCombine, SharedMisalignmentTakesHeadBodyTail) {
  for (int offset = 0; offset < 4; ++offset)
    for (long long n = 0; n <= 40; ++n) check_sum(offset, offset, offset, n);
}

TEST(DeviceCombine, DifferentMisalignmentsGoElementByElement) {
  for (long long n : {0LL, 1LL, 5LL, 17LL, 40LL}) {
    check_sum(0, 1, 0, n);
    check_sum(1, 0, 2, n);
    check_sum(3, 3, 1, n);
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
