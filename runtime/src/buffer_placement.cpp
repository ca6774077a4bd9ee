#include "buffer_placement.h"

#include <algorithm>
#include <cstddef>

namespace ccc {
namespace {

uint64_t round_up(uint64_t bytes, uint64_t to) { return (bytes + to - 1) / to * to; }

// Whether peers in other processes can read [p, p + bytes) where it is, or (graph registration,
// `stream` capturing) will once the capture ends: the buffer is remembered, to be registered
// before the graph runs, when it can be shared.
bool peers_will_read_in_place(Backend& backend, const void* p, uint64_t bytes, void* stream,
                              GraphRegistration& registration) {
  if (backend.peers_read_in_place(p, bytes)) return true;
  PeerRegistry* registry = backend.peer_registry();
  if (!registration.active || registry == nullptr || !backend.capturing(stream) || !registry->shareable(p))
    return false;
  registration.buffers.insert({reinterpret_cast<uintptr_t>(p), bytes});
  registration.streams.insert(stream);
  return true;
}

}  // namespace

PlacedBuffers place_buffers(Backend& backend, const LaunchNeeds& needs, const CollectiveCall& call, int rank,
                            const void* send, void* recv, void* stream, GraphRegistration& registration) {
  const int n = backend.nranks();
  const bool omitted = omits_unused_buffer(call, rank, send, recv);
  if (omitted && needs.in_place) {
    if (send == nullptr) send = recv;
    else recv = const_cast<void*>(send);  // unused by this rank, so not written as a result
  }
  uint64_t end = needs.scratch_bytes;
  auto room = [&end](uint64_t bytes) {
    const uint64_t at = round_up(end, 256);
    end = at + bytes;
    return at;
  };
  const bool stand_in = omitted && !needs.in_place;
  const uint64_t stand_in_at = !stand_in ? 0 : room(send == nullptr ? send_bytes(call, n) : recv_bytes(call, n));
  // What to stage: [from, from + bytes) of the user's memory at `at` after the scratch.
  struct Staged {
    const std::byte* from = nullptr;
    uint64_t bytes = 0, at = 0;
  } in, out;
  const auto* s = static_cast<const std::byte*>(send);
  const auto* r = static_cast<const std::byte*>(recv);
  const uint64_t sb = send_bytes(call, n), rb = recv_bytes(call, n);
  auto in_place_for_peers = [&](const void* p, uint64_t bytes) {
    return peers_will_read_in_place(backend, p, bytes, stream, registration);
  };
  if (backend.multi_process()) {
    if (needs.in_place) {
      const std::byte* lo = std::min(s, r);
      const uint64_t bytes = static_cast<uint64_t>(std::max(s + sb, r + rb) - lo);
      if (!in_place_for_peers(lo, bytes)) in = out = {lo, bytes, room(bytes)};
    } else {
      if (!(stand_in && send == nullptr) && !in_place_for_peers(s, sb)) in = {s, sb, room(sb)};
      if (!(stand_in && recv == nullptr) && !in_place_for_peers(r, rb)) out = {r, rb, room(rb)};
    }
  }
  PlacedBuffers placed;
  void* scratch = backend.scratch(rank, end, stream);
  std::byte* base = static_cast<std::byte*>(scratch);
  if (stand_in) {
    if (send == nullptr) send = base + stand_in_at;
    else recv = base + stand_in_at;
  }
  // The kernel's pointer for user pointer `u` inside a staged region.
  auto moved = [base](const Staged& st, const std::byte* u) { return base + st.at + (u - st.from); };
  if (in.bytes > 0) {
    placed.before = StagingCopy{base + in.at, in.from, in.bytes};
    send = moved(in, s);
    if (needs.in_place) recv = moved(in, r);
  }
  if (out.bytes > 0) {
    placed.after = StagingCopy{const_cast<std::byte*>(out.from), base + out.at, out.bytes};
    if (!needs.in_place) recv = moved(out, r);
  }
  void* ll = needs.ll_bytes == 0 ? nullptr : backend.ll_slots(rank, needs.ll_bytes, stream);
  placed.own = {send, recv, scratch, needs.signature, ll};
  return placed;
}

}  // namespace ccc
