#include "registrations.h"

#include <vector>

#include <fmt/format.h>

#include "ccc/errors.h"

namespace ccc {

PeerRegistry* Registrations::peer_registry(const char* what) const {
  PeerRegistry* registry = backend_.peer_registry();
  if (backend_.multi_process() && registry == nullptr)
    throw Error(ErrorKind::InvalidUsage,
                fmt::format("{}: the {} backend across processes shares only its arena with the other processes, "
                            "not memory from malloc (and has no graphs): allocate buffers with cccCommMemAlloc (used "
                            "in place), or pass them unregistered (staged through the arena)",
                            what, backend_.kind() == BackendKind::Host ? "host" : "cuda"));
  return registry;
}

void* Registrations::local_handle() {
  auto byte = std::make_unique<char>();
  void* handle = byte.get();
  local_.emplace(handle, std::move(byte));
  return handle;
}

void* Registrations::register_buffer(void* p, uint64_t bytes) {
  if (PeerRegistry* registry = peer_registry("register")) return registry->register_buffer(p, bytes);
  if (p == nullptr) throw Error(ErrorKind::InvalidArgument, "register: buff is null");
  if (bytes == 0) throw Error(ErrorKind::InvalidArgument, "register: size is 0");
  return local_handle();
}

void Registrations::deregister_buffer(void* handle) {
  if (PeerRegistry* registry = peer_registry("deregister")) return registry->deregister_buffer(handle);
  if (local_.erase(handle) == 0)
    throw Error(ErrorKind::InvalidArgument,
                fmt::format("deregister: {} is not a handle cccCommRegister gave on this communicator (or it was "
                            "deregistered already)", handle));
}

void Registrations::begin_graph() {
  peer_registry("graph registration");
  if (graph_.active)
    throw Error(ErrorKind::InvalidUsage, "cccCommGraphRegisterBegin: this rank is between Begin and End already "
                                         "(they do not nest)");
  graph_.active = true;
}

void* Registrations::end_graph() {
  PeerRegistry* registry = peer_registry("graph registration");
  // The mode ends whatever happens: after a failure the graphs captured in it cannot be
  // replayed (their buffers are not registered), and keeping the buffers would fail every
  // later End the same way if one of them is gone.
  const GraphRegistration ended = std::exchange(graph_, {});
  auto precondition = [&] {
    if (!ended.active)
      throw Error(ErrorKind::InvalidUsage, "cccCommGraphRegisterEnd: no cccCommGraphRegisterBegin on this rank "
                                           "before it");
    // Checked before the registration synchronises the device, which would invalidate the
    // capture (CUDA Programming Guide, stream capture, "Invalidation").
    for (void* s : ended.streams)
      if (backend_.capturing(s))
        throw Error(ErrorKind::InvalidUsage, fmt::format("cccCommGraphRegisterEnd: stream {} still captures a "
                                                         "graph; end its capture first", s));
  };
  if (registry == nullptr) {  // one process: every buffer is reachable already
    precondition();
    return local_handle();
  }
  std::vector<CudaRegistry::Buffer> buffers;
  for (const auto& [base, bytes] : ended.buffers) buffers.push_back({base, bytes});
  return registry->register_buffers(buffers, "cccCommGraphRegisterEnd", precondition);
}

}  // namespace ccc
