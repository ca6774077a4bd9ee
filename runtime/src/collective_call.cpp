#include "ccc/collective_call.h"

#include "rank_call_ledger.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "ccc/errors.h"

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
  const bool blocked = call.collective == Collective::ReduceScatter || call.collective == Collective::AllToAll;
  return blocked ? static_cast<uint64_t>(nranks) : 1;
}

uint64_t recv_blocks(const CollectiveCall& call, int nranks) {
  const bool blocked = call.collective == Collective::AllGather || call.collective == Collective::AllToAll;
  return blocked ? static_cast<uint64_t>(nranks) : 1;
}

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool overlap(uintptr_t a, uint64_t a_bytes, uintptr_t b, uint64_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

// Rank `rank`'s buffers, at index `i` of the call's spans: root, sizes, null, alignment, and
// send/recv overlap other than in place; an epilogue's residual.
void validate_buffers(const CollectiveCall& call, int nranks, int rank, size_t i) {
  const char* what = collective_name(call.collective);
  validate_shape(call, nranks);
  if (call.count == 0) return;
  if (call.epilogue != Epilogue::None) {
    const uint64_t elem = data_type_size(call.dtype), bytes = call.count * elem;
    auto aligned = [&](const char* name, const void* p) {
      if (p == nullptr) invalid(fmt::format("{}: rank {}: null {} buffer", what, rank, name));
      if (address(p) % elem != 0)
        invalid(fmt::format("{}: rank {}: {} buffer {} is not aligned to {} bytes ({})", what, rank, name, p, elem,
                            data_type_name(call.dtype)));
    };
    const void* residual = call.residual[i];
    aligned("residual", residual);
    if (call.recv[i] != nullptr && overlap(address(residual), bytes, address(call.recv[i]), bytes))
      invalid(fmt::format("{}: rank {}: the residual buffer overlaps recv; schedules keep partial sums in recv "
                          "before they add the residual, so pass the residual in a buffer of its own",
                          what, rank));
    if (call.epilogue == Epilogue::ResidualRmsNorm) {
      aligned("weight", call.weight[i]);
      const void* out = call.residual_out.empty() ? nullptr : call.residual_out[i];
      // A buffer the norm writes must not overlap any other of the call's buffers.
      auto written_alone = [&](const char* written, const void* p, uint64_t n) {
        const std::tuple<const char*, const void*, uint64_t> others[] = {
            {"send", call.send[i], bytes},
            {"recv", call.recv[i], bytes},
            {"residual", residual, bytes},
            {"weight", call.weight[i], call.hidden * elem},
            {"residual_out", out, bytes}};
        for (auto [name, q, m] : others)
          if (q != nullptr && std::string_view(name) != written && overlap(address(p), n, address(q), m))
            invalid(fmt::format("{}: rank {}: {} overlaps {}", what, rank, written, name));
      };
      if (out != nullptr) {
        aligned("residual_out", out);
        written_alone("residual_out", out, bytes);
      }
      if (call.quant_scale) {
        void* quant = call.quant_out[i];
        if (quant == nullptr) invalid(fmt::format("{}: rank {}: null quant_out buffer (the fp8 output)", what, rank));
        written_alone("quant_out", quant, call.count);
      }
    }
  }
  const uint64_t elem = data_type_size(call.dtype);
  const auto [in_bytes, out_bytes] = checked_call_bytes(call, nranks);
  const void* send = call.send[i];
  const void* recv = call.recv[i];
  for (auto [name, p, used] : {std::tuple{"send", send, uses_send(call, rank)},
                               std::tuple{"recv", recv, uses_recv(call, rank)}}) {
    if (p == nullptr && !used) continue;  // NCCL allows it; the runtime supplies one
    if (p == nullptr) invalid(fmt::format("{}: rank {}: null {} buffer", what, rank, name));
    if (address(p) % elem != 0)
      invalid(fmt::format("{}: rank {}: {} buffer {} is not aligned to {} bytes ({})", what, rank,
                          name, p, elem, data_type_name(call.dtype)));
  }
  // In place, every rank would overwrite blocks of its send buffer that peers have yet to read
  // (block p goes out to rank p and comes in from it): no schedule can order that without a copy.
  if (call.collective == Collective::AllToAll && send == recv)
    invalid(fmt::format("alltoall: rank {}: in-place alltoall (send == recv) is not supported; use separate send and "
                        "recv buffers", rank));
  if (send != nullptr && recv != nullptr && overlap(address(send), in_bytes, address(recv), out_bytes) &&
      !is_in_place(call, rank, send, recv))
    invalid(fmt::format("{}: rank {}: send and recv buffers overlap without being in place", what, rank));
}

}  // namespace

void validate_shape(const CollectiveCall& call, int nranks) {
  const bool rooted = call.collective == Collective::Broadcast || call.collective == Collective::Reduce;
  if (rooted && (call.root < 0 || call.root >= nranks))
    invalid(fmt::format("{}: root {} is not a rank of this communicator (0..{})", collective_name(call.collective),
                        call.root, nranks - 1));
  if (call.count != 0) checked_call_bytes(call, nranks);
}

std::pair<uint64_t, uint64_t> checked_call_bytes(const CollectiveCall& call, int nranks) {
  const uint64_t elem = data_type_size(call.dtype);
  const auto in_bytes = checked_bytes(call.count, send_blocks(call, nranks), elem);
  const auto out_bytes = checked_bytes(call.count, recv_blocks(call, nranks), elem);
  if (!in_bytes || !out_bytes)
    invalid(fmt::format("{}: count {} of {} over {} ranks overflows the address space",
                        collective_name(call.collective), call.count, data_type_name(call.dtype), nranks));
  return {*in_bytes, *out_bytes};
}

bool uses_send(const CollectiveCall& call, int rank) {
  return call.collective != Collective::Broadcast || rank == call.root;
}

bool uses_recv(const CollectiveCall& call, int rank) {
  return call.collective != Collective::Reduce || rank == call.root;
}

bool omits_unused_buffer(const CollectiveCall& call, int rank, const void* send, const void* recv) {
  return (send == nullptr && !uses_send(call, rank)) || (recv == nullptr && !uses_recv(call, rank));
}

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

void validate_rank_call(const CollectiveCall& call, int nranks, int rank, const void* send, const void* recv,
                        const RankEpilogue& epilogue) {
  validate_epilogue(call);
  const void* const sends[] = {send};
  void* const recvs[] = {const_cast<void*>(recv)};
  const void* const residuals[] = {epilogue.residual};
  const void* const weights[] = {epilogue.weight};
  void* const residual_outs[] = {epilogue.residual_out};
  void* const quant_outs[] = {epilogue.quant_out};
  CollectiveCall one = call;
  one.send = sends;
  one.recv = recvs;
  one.residual = residuals;
  one.weight = weights;
  one.residual_out = residual_outs;
  one.quant_out = quant_outs;
  validate_buffers(one, nranks, rank, 0);
}

void validate_epilogue(const CollectiveCall& call) {
  const char* what = collective_name(call.collective);
  if (call.epilogue != Epilogue::None && call.collective != Collective::AllReduce)
    invalid(fmt::format("{}: epilogue {}: only allreduce has one", what, epilogue_name(call.epilogue)));
  if (call.quant_scale && call.epilogue != Epilogue::ResidualRmsNorm)
    invalid(fmt::format("{}: an fp8 output (a quant scale) needs epilogue residual-rmsnorm, not {}", what,
                        epilogue_name(call.epilogue)));
  if (call.epilogue != Epilogue::ResidualRmsNorm) return;
  if (call.quant_scale && !(*call.quant_scale > 0 && std::isfinite(*call.quant_scale)))
    invalid(fmt::format("{}: epilogue {}: fp8 scale {} must be finite and positive", what,
                        epilogue_name(call.epilogue), *call.quant_scale));
  if (call.dtype != DataType::F32 && call.dtype != DataType::F16 && call.dtype != DataType::BF16)
    invalid(fmt::format("{}: epilogue {}: normalises f32, f16 or bf16, not {}", what, epilogue_name(call.epilogue),
                        data_type_name(call.dtype)));
  if (call.hidden == 0 || call.count % call.hidden != 0)
    invalid(fmt::format("{}: epilogue {}: count {} is not a whole number of rows of hidden {}", what,
                        epilogue_name(call.epilogue), call.count, call.hidden));
  if (!(call.eps >= 0) || !std::isfinite(call.eps))
    invalid(fmt::format("{}: epilogue {}: eps {} must be finite and not negative", what, epilogue_name(call.epilogue),
                        call.eps));
}

namespace {

// The extent that reaches furthest among those seen, and the furthest of another rank: whatever
// rank the next extent has, one of the two is the furthest-reaching extent of a different rank.
struct Reach {
  std::optional<BufferExtent> first, second;  // second->rank != first->rank

  void add(const BufferExtent& e) {
    if (!first || e.rank == first->rank) {
      if (!first || e.end() > first->end()) first = e;
    } else if (e.end() > first->end()) {
      second = first;
      first = e;
    } else if (!second || e.end() > second->end()) {
      second = e;
    }
  }
  const std::optional<BufferExtent>& other_than(int rank) const { return first && first->rank == rank ? second : first; }
};

// A buffer a rank writes must not overlap any buffer of another rank: the other rank would read
// data that changes under it, or two ranks would write the same bytes. Buffers that are only
// read may be shared. Sorted by start, an extent overlaps an earlier one iff the earlier one
// reaches past its start, so one sweep finds any overlap in O(N log N).
void check_cross_rank_overlap(const CollectiveCall& call, int nranks) {
  const uint64_t in_bytes = send_bytes(call, nranks);
  const uint64_t out_bytes = recv_bytes(call, nranks);
  std::vector<BufferExtent> extents;
  extents.reserve(2 * static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    if (call.send[r] != nullptr) extents.push_back({address(call.send[r]), in_bytes, r, false});
    if (call.recv[r] != nullptr) extents.push_back({address(call.recv[r]), out_bytes, r, true});
    if (call.epilogue != Epilogue::None)
      extents.push_back({address(call.residual[r]), call.count * data_type_size(call.dtype), r, false, "residual"});
    if (!call.residual_out.empty() && call.residual_out[r] != nullptr)  // written, like recv
      extents.push_back({address(call.residual_out[r]), call.count * data_type_size(call.dtype), r, true, "residual_out"});
    if (call.quant_scale) extents.push_back({address(call.quant_out[r]), call.count, r, true, "quant_out"});
  }
  // Ties by rank, send first: the same call always gets the same message.
  std::sort(extents.begin(), extents.end(), [](const BufferExtent& a, const BufferExtent& b) {
    return std::tuple{a.begin, a.rank, a.written} < std::tuple{b.begin, b.rank, b.written};
  });
  Reach any, written;
  for (const BufferExtent& e : extents) {
    // A written extent conflicts with any earlier one, a read one only with an earlier write.
    const std::optional<BufferExtent>& earlier = (e.written ? any : written).other_than(e.rank);
    if (earlier && earlier->end() > e.begin) refuse_overlap(call.collective, *earlier, e);
    any.add(e);
    if (e.written) written.add(e);
  }
}

}  // namespace

void validate_call(const CollectiveCall& call, int nranks) {
  const char* what = collective_name(call.collective);
  if (call.send.size() != static_cast<size_t>(nranks) || call.recv.size() != static_cast<size_t>(nranks))
    invalid(fmt::format("{}: expected {} send and {} recv buffers (one per rank), got {} and {}",
                        what, nranks, nranks, call.send.size(), call.recv.size()));
  validate_epilogue(call);
  auto per_rank = [&](const char* name, size_t size) {
    if (size != static_cast<size_t>(nranks))
      invalid(fmt::format("{}: expected {} {} buffers (one per rank), got {}", what, nranks, name, size));
  };
  if (call.epilogue != Epilogue::None) per_rank("residual", call.residual.size());
  if (call.epilogue == Epilogue::ResidualRmsNorm) {
    per_rank("weight", call.weight.size());
    if (!call.residual_out.empty()) per_rank("residual_out", call.residual_out.size());
    if (call.quant_scale) per_rank("quant_out", call.quant_out.size());
  }
  for (int r = 0; r < nranks; ++r) validate_buffers(call, nranks, r, r);
  if (call.count == 0) return;
  check_cross_rank_overlap(call, nranks);
}

}  // namespace ccc
