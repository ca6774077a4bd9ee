// One collective call over the N ranks of a communicator, and its argument validation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "ccc/types.h"

namespace ccc {

// `count` follows the launch ABI (ccc_abi.h): elements per buffer for allreduce, broadcast and
// reduce; per rank block for reduce_scatter (output elements), allgather (input elements) and
// alltoall (elements each rank sends to each peer: send and recv hold N blocks of count).
// In place means send == recv for allreduce, broadcast and reduce; for reduce_scatter the rank's
// recv is its block of send (send + rank * count), for allgather its send is its block of recv;
// alltoall cannot run in place (validate_call refuses send == recv).
// As in NCCL, a rank may pass NULL for a buffer it does not use: send on a broadcast rank that is
// not the root, recv on a reduce rank that is not the root (uses_send, uses_recv). The runtime
// then gives the kernel a buffer of its own in that place (communicator.cpp).
struct CollectiveCall {
  Collective collective = Collective::AllReduce;
  uint64_t count = 0;
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;  // unused by allgather and broadcast
  int root = -1;                // broadcast and reduce only
  std::span<const void* const> send;  // [N]
  std::span<void* const> recv;        // [N]
  // Allreduce only: what the kernel does with the result before it writes it (ccc/types.h), and
  // Epilogue::Residual's inputs, each rank's `count` elements of dtype, read only and by their
  // own rank only (they may not overlap any rank's recv).
  Epilogue epilogue = Epilogue::None;
  std::span<const void* const> residual = {};  // [N]
  // Epilogue::ResidualRmsNorm: each rank's weight (`hidden` elements), where each rank's pre-norm
  // sum goes too (`count` elements, written by its rank; empty, or a null entry: nowhere), the
  // row length (count is rows x hidden) and eps.
  std::span<const void* const> weight = {};  // [N]
  std::span<void* const> residual_out = {};  // [N] or empty
  uint64_t hidden = 0;
  float eps = 1e-6f;
  // Epilogue::ResidualRmsNorm with an fp8 output (FlashInfer's "residual + RMSNorm + fp8 quant"
  // with the norm's output kept): where quant_scale has a value, each rank's quant_out (`count`
  // bytes, written by its rank) gets f8e4m3(recv * (1 / quant_scale)), the reciprocal taken in
  // float, rounded to nearest even and saturating at +-448. quant_scale is finite and positive.
  std::optional<float> quant_scale = std::nullopt;
  std::span<void* const> quant_out = {};  // [N] when quant_scale has a value
};

// One rank's epilogue operands, for calls issued rank by rank (Communicator::run_rank).
struct RankEpilogue {
  const void* residual = nullptr;
  const void* weight = nullptr;
  void* residual_out = nullptr;
  void* quant_out = nullptr;
};

// Whether rank `rank` needs its send (recv) buffer: false only where NCCL allows NULL (above).
bool uses_send(const CollectiveCall& call, int rank);
bool uses_recv(const CollectiveCall& call, int rank);
// Whether rank `rank` passed NULL for a buffer it does not use; such a rank takes either
// placement, in place or not, from the others.
bool omits_unused_buffer(const CollectiveCall& call, int rank, const void* send, const void* recv);

// Whether rank `rank`'s send and recv are in place (see above).
bool is_in_place(const CollectiveCall& call, int rank, const void* send, const void* recv);

// What a call's shape alone must satisfy (its buffers are not looked at): a root in range for
// broadcast and reduce, and byte sizes that fit in a pointer difference; else
// Error(InvalidArgument). validate_call and Communicator::warm_up both start here.
void validate_shape(const CollectiveCall& call, int nranks);

// Bytes of one rank's send and recv buffers, or Error(InvalidArgument) when they do not fit in
// a pointer difference.
std::pair<uint64_t, uint64_t> checked_call_bytes(const CollectiveCall& call, int nranks);

// Bytes of one rank's send and recv buffers (valid after validate_call).
uint64_t send_bytes(const CollectiveCall& call, int nranks);
uint64_t recv_bytes(const CollectiveCall& call, int nranks);

// Throws Error(InvalidArgument) naming the rank and the problem: wrong number of buffers (and
// residuals, with an epilogue), a null buffer the rank uses (or a null residual), a misaligned buffer (for the element type), a byte size that overflows, send and recv that
// overlap other than in place, a recv buffer (which its rank writes) that overlaps any buffer of
// another rank (send buffers, only read, may be shared), a root out of range. O(N log N).
// A call with count 0 is valid whatever the pointers are.
void validate_call(const CollectiveCall& call, int nranks);

// The same checks for one rank's part of `call` (its spans are not read), issued rank by rank:
// what one rank can know alone. Overlaps with other ranks' buffers cannot be seen from here.
// `epilogue`: the rank's epilogue operands, where the call has an epilogue.
void validate_rank_call(const CollectiveCall& call, int nranks, int rank, const void* send, const void* recv,
                        const RankEpilogue& epilogue = {});
// Error(InvalidArgument) for an epilogue on a collective other than allreduce, and an RMSNorm's
// bad shape (hidden 0 or not dividing count, eps negative or not finite, a type it cannot norm).
void validate_epilogue(const CollectiveCall& call);

}  // namespace ccc
