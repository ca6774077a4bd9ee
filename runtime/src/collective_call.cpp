#include "ccc/collective_call.h"

#include <fmt/format.h>

namespace ccc {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, message);
}

// count * elements-per-count-unit * element size, or nullopt when that overflows a pointer
// difference.
std::optional<uint64_t> checked_bytes(uint64_t count, uint64_t blocks, uint64_t elem) {
  const uint64_t limit = static_cast<uint64_t>(PTRDIFF_MAX);
  if (count != 0 && blocks > limit / count) return std::nullopt;
  const uint64_t elems = count * blocks;
  if (elems != 0 && elem > limit / elems) return std::nullopt;
  return elems * elem;
}

uint64_t send_blocks(const CollectiveCall& call, int nranks) {
  return call.collective == Collective::ReduceScatter ? static_cast<uint64_t>(nranks) : 1;
}

uint64_t recv_blocks(const CollectiveCall& call, int nranks) {
  return call.collective == Collective::AllGather ? static_cast<uint64_t>(nranks) : 1;
}

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool overlap(uintptr_t a, uint64_t a_bytes, uintptr_t b, uint64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

// Rank `rank`'s buffers, at index `i` of the call's spans: root, sizes, null, alignment, and
// send/recv overlap other than in place.
void validate_buffers(const CollectiveCall& call, int nranks, int rank, size_t i) {
  const char* what = collective_name(call.collective);
  const bool rooted = call.collective == Collective::Broadcast || call.collective == Collective::Reduce;
  if (rooted && (call.root < 0 || call.root >= nranks))
    invalid(fmt::format("{}: root {} is not a rank of this communicator (0..{})", what, call.root,
                        nranks - 1));
  if (call.count == 0) return;
  const uint64_t elem = data_type_size(call.dtype);
  const auto in_bytes = checked_bytes(call.count, send_blocks(call, nranks), elem);
  const auto out_bytes = checked_bytes(call.count, recv_blocks(call, nranks), elem);
  if (!in_bytes || !out_bytes)
    invalid(fmt::format("{}: count {} of {} over {} ranks overflows the address space", what,
                        call.count, data_type_name(call.dtype), nranks));
  const void* send = call.send[i];
  const void* recv = call.recv[i];
  for (auto [name, p] : {std::pair{"send", send}, std::pair{"recv", recv}}) {
    if (p == nullptr) invalid(fmt::format("{}: rank {}: null {} buffer", what, rank, name));
    if (address(p) % elem != 0)
      invalid(fmt::format("{}: rank {}: {} buffer {} is not aligned to {} bytes ({})", what, rank,
                          name, p, elem, data_type_name(call.dtype)));
  }
  if (overlap(address(send), *in_bytes, address(recv), *out_bytes) &&
      !is_in_place(call, rank, send, recv))
    invalid(fmt::format("{}: rank {}: send and recv buffers overlap without being in place", what, rank));
}

}  // namespace

bool is_in_place(const CollectiveCall& call, int rank, const void* send, const void* recv) {
  const uint64_t block_bytes = call.count * data_type_size(call.dtype);
  switch (call.collective) {
    case Collective::ReduceScatter: return address(recv) == address(send) + rank * block_bytes;
    case Collective::AllGather: return address(send) == address(recv) + rank * block_bytes;
    default: return send == recv;
  }
}

uint64_t send_bytes(const CollectiveCall& call, int nranks) {
  return call.count * send_blocks(call, nranks) * data_type_size(call.dtype);
}

uint64_t recv_bytes(const CollectiveCall& call, int nranks) {
  return call.count * recv_blocks(call, nranks) * data_type_size(call.dtype);
}

void validate_rank_call(const CollectiveCall& call, int nranks, int rank, const void* send, const void* recv) {
  const void* const sends[] = {send};
  void* const recvs[] = {const_cast<void*>(recv)};
  CollectiveCall one = call;
  one.send = sends;
  one.recv = recvs;
  validate_buffers(one, nranks, rank, 0);
}

void validate_call(const CollectiveCall& call, int nranks) {
  const char* what = collective_name(call.collective);
  if (call.send.size() != static_cast<size_t>(nranks) || call.recv.size() != static_cast<size_t>(nranks))
    invalid(fmt::format("{}: expected {} send and {} recv buffers (one per rank), got {} and {}",
                        what, nranks, nranks, call.send.size(), call.recv.size()));
  for (int r = 0; r < nranks; ++r) validate_buffers(call, nranks, r, r);
  if (call.count == 0) return;
  const uint64_t out_bytes = recv_bytes(call, nranks);
  for (int r = 0; r < nranks; ++r)
    for (int q = 0; q < r; ++q)
      if (overlap(address(call.recv[q]), out_bytes, address(call.recv[r]), out_bytes))
        invalid(fmt::format("{}: ranks {} and {} have overlapping recv buffers", what, q, r));
}

}  // namespace ccc
