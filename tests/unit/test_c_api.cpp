// The C API's handle management and argument checks (collectives that run are tested in
// test_communicator.cpp).
#include <gtest/gtest.h>

#include <string>

#include "ccc/ccc.h"

namespace {

std::string last_error() { return cccGetLastError(nullptr); }

}  // namespace

TEST(CApi, HandlesKnowTheirRankAndCount) {
  cccComm_t comms[3];
  ASSERT_EQ(cccCommInitAllHost(comms, 3), cccSuccess);
  for (int r = 0; r < 3; ++r) {
    int rank = -1, count = -1;
    EXPECT_EQ(cccCommUserRank(comms[r], &rank), cccSuccess);
    EXPECT_EQ(cccCommCount(comms[r], &count), cccSuccess);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(count, 3);
  }
  for (cccComm_t c : comms) EXPECT_EQ(cccCommDestroy(c), cccSuccess);
}

TEST(CApi, UseAfterDestroyIsInvalidUsage) {
  cccComm_t comms[2];
  ASSERT_EQ(cccCommInitAllHost(comms, 2), cccSuccess);
  ASSERT_EQ(cccCommDestroy(comms[0]), cccSuccess);
  int count = 0;
  EXPECT_EQ(cccCommCount(comms[1], &count), cccSuccess) << "the other rank lives on";
  EXPECT_EQ(cccCommCount(comms[0], &count), cccInvalidUsage);
  EXPECT_EQ(last_error(), "communicator used after cccCommDestroy (or never created)");
  float x = 0;
  EXPECT_EQ(cccAllReduce(&x, &x, 1, cccFloat32, cccSum, comms[0], nullptr), cccInvalidUsage);
  EXPECT_EQ(cccCommDestroy(comms[0]), cccInvalidUsage);
  EXPECT_EQ(cccCommDestroy(comms[1]), cccSuccess);
}

TEST(CApi, RejectsBadArguments) {
  EXPECT_EQ(cccCommInitAllHost(nullptr, 2), cccInvalidArgument);
  cccComm_t comms[2];
  EXPECT_EQ(cccCommInitAllHost(comms, 0), cccInvalidArgument);
  EXPECT_EQ(last_error(), "need at least one rank, got 0");
  ASSERT_EQ(cccCommInitAllHost(comms, 2), cccSuccess);
  float a[4] = {}, b[4] = {};
  EXPECT_EQ(cccAllReduce(a, b, 4, static_cast<cccDataType_t>(42), cccSum, comms[0], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "unsupported data type 42");
  EXPECT_EQ(cccAllReduce(a, b, 4, cccFloat32, static_cast<cccRedOp_t>(-1), comms[0], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "unsupported reduction op -1");
  EXPECT_EQ(cccAllReduce(a, b, 4, cccFloat32, cccSum, nullptr, nullptr), cccInvalidArgument);
  EXPECT_EQ(cccCommCount(comms[0], nullptr), cccInvalidArgument);
  // The last rank to arrive launches, so buffer problems surface there.
  EXPECT_EQ(cccAllReduce(a, b, 4, cccFloat32, cccSum, comms[0], nullptr), cccSuccess);
  EXPECT_EQ(cccAllReduce(a, nullptr, 4, cccFloat32, cccSum, comms[1], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(), "allreduce: rank 1: null recv buffer");
  for (cccComm_t c : comms) cccCommDestroy(c);
}

TEST(CApi, RanksMustAgreeAndCallOnce) {
  cccComm_t comms[3];
  ASSERT_EQ(cccCommInitAllHost(comms, 3), cccSuccess);
  float a[8] = {}, b[8] = {};
  ASSERT_EQ(cccAllReduce(a, b, 8, cccFloat32, cccSum, comms[0], nullptr), cccSuccess);
  EXPECT_EQ(cccAllReduce(a, b, 8, cccFloat32, cccSum, comms[0], nullptr), cccInvalidUsage);
  EXPECT_EQ(last_error(), "rank 0 called allreduce twice before every rank called it once");
  EXPECT_EQ(cccAllReduce(a, b, 4, cccFloat32, cccSum, comms[1], nullptr), cccInvalidArgument);
  EXPECT_EQ(last_error(),
            "rank 1 called allreduce with other arguments than the ranks before it; the pending "
            "collective was dropped");
  EXPECT_EQ(cccAllReduce(a, b, 8, cccFloat32, cccSum, comms[0], nullptr), cccSuccess)
      << "a dropped collective starts afresh";
  for (cccComm_t c : comms) cccCommDestroy(c);
}

TEST(CApi, ErrorStringsAndNoDevice) {
  EXPECT_STREQ(cccGetErrorString(cccSuccess), "no error");
  EXPECT_STREQ(cccGetErrorString(cccInvalidUsage), "invalid usage");
  EXPECT_STREQ(cccGetErrorString(static_cast<cccResult_t>(99)), "unknown result code");
  cccComm_t comms[1];
  const cccResult_t r = cccCommInitAll(comms, 1, nullptr);
  if (r == cccSuccess) {
    cccCommDestroy(comms[0]);
    GTEST_SKIP() << "a CUDA device is present";
  }
  EXPECT_EQ(r, cccSystemError);
  EXPECT_EQ(last_error().rfind("no CUDA device", 0), 0u) << last_error();
}
