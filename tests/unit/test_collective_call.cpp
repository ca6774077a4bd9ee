#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ccc/collective_call.h"
#include "ccc/errors.h"

using namespace ccc;

namespace {

// Buffers for `n` ranks carved out of one arena, so tests can make them overlap on purpose.
struct Arena {
  std::vector<uint64_t> words = std::vector<uint64_t>(1 << 16);
  std::byte* at(size_t byte) { return reinterpret_cast<std::byte*>(words.data()) + byte; }
};

std::string failure(const CollectiveCall& call, int n) {
  try {
    validate_call(call, n);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    return e.what();
  }
  return "";
}

struct Call {
  std::vector<const void*> send;
  std::vector<void*> recv;
  CollectiveCall call;
  Call(Collective c, uint64_t count, std::vector<const void*> s, std::vector<void*> r)
      : send(std::move(s)), recv(std::move(r)) {
    call.collective = c;
    call.count = count;
    call.send = send;
    call.recv = recv;
  }
};

}  // namespace

TEST(ValidateCall, AcceptsOutOfPlaceAndInPlace) {
  Arena a;
  Call out_of_place(Collective::AllReduce, 100, {a.at(0), a.at(4096)}, {a.at(8192), a.at(12288)});
  EXPECT_EQ(failure(out_of_place.call, 2), "");
  Call in_place(Collective::AllReduce, 100, {a.at(0), a.at(4096)}, {a.at(0), a.at(4096)});
  EXPECT_EQ(failure(in_place.call, 2), "");
  // reduce_scatter in place: recv is the rank's block of send (count 10 f32 = 40 bytes).
  Call rs(Collective::ReduceScatter, 10, {a.at(0), a.at(4096)}, {a.at(0), a.at(4096 + 40)});
  EXPECT_EQ(failure(rs.call, 2), "");
  Call ag(Collective::AllGather, 10, {a.at(0), a.at(4096 + 40)}, {a.at(0), a.at(4096)});
  EXPECT_EQ(failure(ag.call, 2), "");
  EXPECT_EQ(send_bytes(rs.call, 2), 80u);
  EXPECT_EQ(recv_bytes(rs.call, 2), 40u);
  EXPECT_EQ(recv_bytes(ag.call, 2), 80u);
  Call nothing(Collective::AllReduce, 0, {nullptr, nullptr}, {nullptr, nullptr});
  EXPECT_EQ(failure(nothing.call, 2), "");
}

TEST(ValidateCall, NamesTheProblem) {
  Arena a;
  Call null_recv(Collective::AllReduce, 4, {a.at(0), a.at(64)}, {a.at(128), nullptr});
  EXPECT_EQ(failure(null_recv.call, 2), "allreduce: rank 1: null recv buffer");
  Call misaligned(Collective::AllReduce, 4, {a.at(2), a.at(64)}, {a.at(128), a.at(256)});
  EXPECT_NE(failure(misaligned.call, 2).find("rank 0: send buffer 0x"), std::string::npos);
  EXPECT_NE(failure(misaligned.call, 2).find("is not aligned to 4 bytes (f32)"), std::string::npos);
  misaligned.call.dtype = DataType::U8;
  EXPECT_EQ(failure(misaligned.call, 2), "") << "bytes need no alignment";
  Call wrong_n(Collective::AllReduce, 4, {a.at(0)}, {a.at(64)});
  EXPECT_EQ(failure(wrong_n.call, 2),
            "allreduce: expected 2 send and 2 recv buffers (one per rank), got 1 and 1");
  Call partial(Collective::AllReduce, 100, {a.at(0), a.at(4096)}, {a.at(8), a.at(8192)});
  EXPECT_EQ(failure(partial.call, 2),
            "allreduce: rank 0: send and recv buffers overlap without being in place");
  Call shared_recv(Collective::AllReduce, 100, {a.at(0), a.at(4096)}, {a.at(8192), a.at(8192 + 396)});
  EXPECT_EQ(failure(shared_recv.call, 2),
            "allreduce: rank 0's recv buffer overlaps rank 1's recv buffer; a buffer that a rank writes must not "
            "overlap another rank's buffers");
  Call rs_wrong_block(Collective::ReduceScatter, 10, {a.at(0), a.at(4096)}, {a.at(40), a.at(4096 + 40)});
  EXPECT_EQ(failure(rs_wrong_block.call, 2),
            "reduce_scatter: rank 0: send and recv buffers overlap without being in place");
  Call huge(Collective::AllGather, uint64_t{1} << 61, {a.at(0), a.at(64)}, {a.at(128), a.at(256)});
  EXPECT_EQ(failure(huge.call, 2),
            "allgather: count 2305843009213693952 of f32 over 2 ranks overflows the address space");
  Call bcast(Collective::Broadcast, 4, {a.at(0), a.at(64)}, {a.at(128), a.at(256)});
  bcast.call.root = 2;
  EXPECT_EQ(failure(bcast.call, 2), "broadcast: root 2 is not a rank of this communicator (0..1)");
  bcast.call.root = 1;
  EXPECT_EQ(failure(bcast.call, 2), "");
}

TEST(ValidateCall, RefusesARecvThatOverlapsAnotherRanksSend) {
  Arena a;
  // Rank 1 writes into the middle of rank 0's input: rank 0 would send changing data.
  Call aliased(Collective::AllReduce, 100, {a.at(0), a.at(4096)}, {a.at(8192), a.at(200)});
  EXPECT_EQ(failure(aliased.call, 2),
            "allreduce: rank 0's send buffer overlaps rank 1's recv buffer; a buffer that a rank writes must not "
            "overlap another rank's buffers");
  // Not adjacent ranks, and the recv before the send it overlaps.
  Call far(Collective::AllReduce, 100, {a.at(1000), a.at(4096), a.at(8192)}, {a.at(12288), a.at(16384), a.at(800)});
  EXPECT_NE(failure(far.call, 3).find("rank 0's send buffer overlaps rank 2's recv buffer"), std::string::npos);
  // In place counts for the rank itself only: rank 1's in-place buffer is rank 0's recv.
  Call in_place(Collective::AllReduce, 100, {a.at(0), a.at(0)}, {a.at(0), a.at(0)});
  EXPECT_NE(failure(in_place.call, 2).find("rank 0's recv buffer overlaps rank 1's send buffer"), std::string::npos);
  // Ranks may share a buffer they only read.
  Call shared_send(Collective::AllReduce, 100, {a.at(0), a.at(0), a.at(0)}, {a.at(4096), a.at(8192), a.at(12288)});
  EXPECT_EQ(failure(shared_send.call, 3), "");
  // Touching is not overlapping.
  Call adjacent(Collective::AllReduce, 100, {a.at(0), a.at(400)}, {a.at(800), a.at(1200)});
  EXPECT_EQ(failure(adjacent.call, 2), "");
}

TEST(ValidateCall, OverlapCheckIsNotQuadratic) {
  // 2^18 ranks (validate_call itself has no rank limit) and one aliasing pair at the far ends of
  // the order: a pairwise check takes 2^35 steps, minutes; the sorted sweep well under a second.
  constexpr int n = 1 << 18;
  std::vector<uint64_t> words(2 * n * 4);
  std::vector<const void*> send(n);
  std::vector<void*> recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = &words[static_cast<size_t>(8 * r)];
    recv[r] = &words[static_cast<size_t>(8 * r + 4)];
  }
  Call ok(Collective::AllReduce, 8, send, recv);
  EXPECT_EQ(failure(ok.call, n), "");
  recv[n - 1] = &words[0];
  Call bad(Collective::AllReduce, 8, send, recv);
  EXPECT_NE(failure(bad.call, n).find("rank 0's send buffer overlaps rank 262143's recv buffer"), std::string::npos);
}

// NCCL lets a rank pass NULL for a buffer it does not use: send off the root of a broadcast,
// recv off the root of a reduce. Only those; every rank checks only the buffers it uses.
TEST(ValidateCall, AcceptsNullWhereARankDoesNotUseTheBuffer) {
  Arena a;
  Call bcast(Collective::Broadcast, 4, {a.at(0), nullptr, nullptr}, {a.at(64), a.at(128), a.at(192)});
  bcast.call.root = 0;
  EXPECT_EQ(failure(bcast.call, 3), "");
  bcast.call.root = 1;
  EXPECT_EQ(failure(bcast.call, 3), "broadcast: rank 1: null send buffer");
  Call bcast_recv(Collective::Broadcast, 4, {a.at(0), a.at(64)}, {a.at(128), nullptr});
  bcast_recv.call.root = 0;
  EXPECT_EQ(failure(bcast_recv.call, 2), "broadcast: rank 1: null recv buffer") << "every rank gets the result";

  Call reduce(Collective::Reduce, 4, {a.at(0), a.at(64), a.at(128)}, {nullptr, a.at(192), nullptr});
  reduce.call.root = 1;
  EXPECT_EQ(failure(reduce.call, 3), "");
  reduce.call.root = 0;
  EXPECT_EQ(failure(reduce.call, 3), "reduce: rank 0: null recv buffer");
  Call reduce_send(Collective::Reduce, 4, {a.at(0), nullptr}, {a.at(64), a.at(128)});
  reduce_send.call.root = 0;
  EXPECT_EQ(failure(reduce_send.call, 2), "reduce: rank 1: null send buffer") << "every rank contributes";

  Call allreduce(Collective::AllReduce, 4, {a.at(0), nullptr}, {a.at(64), a.at(128)});
  EXPECT_EQ(failure(allreduce.call, 2), "allreduce: rank 1: null send buffer");

  // Rank by rank (the C API) the same.
  CollectiveCall one;
  one.collective = Collective::Broadcast;
  one.count = 4;
  one.root = 0;
  EXPECT_NO_THROW(validate_rank_call(one, 2, 1, nullptr, a.at(0)));
  EXPECT_THROW(validate_rank_call(one, 2, 0, nullptr, a.at(0)), Error);
  one.collective = Collective::Reduce;
  EXPECT_NO_THROW(validate_rank_call(one, 2, 1, a.at(0), nullptr));
  EXPECT_THROW(validate_rank_call(one, 2, 0, a.at(0), nullptr), Error);
}
