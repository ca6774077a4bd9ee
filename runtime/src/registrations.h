// A rank's registered buffers (cccCommRegister) and graph registrations
// (cccCommGraphRegisterBegin/End). Across processes they go to the backend's PeerRegistry, where
// peers open the buffers in place; in one process every buffer is reachable already, and a
// registration is only a handle to give back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "backend.h"

namespace ccc {

// Between begin_graph and end_graph (CUDA across processes): the buffers launches captured in a
// graph use in place, to be registered when the capture ends, and the streams that captured
// them (place_buffers fills both in).
struct GraphRegistration {
  bool active = false;
  std::set<std::pair<uintptr_t, uint64_t>> buffers;
  std::set<void*> streams;
};

class Registrations {
 public:
  explicit Registrations(Backend& backend) : backend_(backend) {}

  // Collective across processes: registers [p, p + bytes); returns the handle for deregister.
  void* register_buffer(void* p, uint64_t bytes);
  void deregister_buffer(void* handle);
  // Graph registration mode: begin_graph, captures, end_graph registers what they used.
  void begin_graph();
  void* end_graph();
  GraphRegistration& graph() { return graph_; }

 private:
  // The backend's registry; null in one process. Across processes without one (the host
  // backend, whose peers share only the arena), `what` is refused.
  PeerRegistry* peer_registry(const char* what) const;
  void* local_handle();

  Backend& backend_;
  // One process: the handles given, each the address of a byte of its own (so no two are equal).
  std::map<void*, std::unique_ptr<char>> local_;
  GraphRegistration graph_;
};

}  // namespace ccc
