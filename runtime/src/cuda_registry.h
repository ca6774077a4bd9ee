// The buffers registered with one rank of a multi-process CUDA communicator (cccCommRegister,
// cccCommGraphRegisterEnd; docs/runtime.md, "Buffers."). Registration is collective: every rank
// registers its own buffers (one, or those its captured graphs use) in the same call, and the
// ranks all-gather, over the communicator's control channel
// (bootstrap.h), the allocation holding each (its base and size in the owner's process, from
// cuMemGetAddressRange, and a CUDA IPC handle, cuIpcGetMemHandle). Each rank opens its peers'
// allocations (cuIpcOpenMemHandle; an allocation registered again, e.g. a second buffer in it,
// is opened once and reference-counted) and lists them in its device-resident ccc_registry,
// which its kernels use to translate a peer's pointers into this process's mapping
// (ccc_abi.h). A buffer this rank registered is then used in place by its collectives (no
// staging copy).
//
// Both calls run with no launch of this rank in flight (they synchronise the rank's device
// first, and the communicator's lock keeps new ones out), and the exchange completes only once
// every rank has synchronised: so after a deregistration no peer still reads the buffer. A graph
// replayed meanwhile from another thread reads a table the call does not rewrite (device()). Neither is allowed while a stream of the
// device captures a graph (the synchronisation is prohibited then).
//
// A failure on any rank (a bad argument, an allocation that cannot be opened) fails the call on
// every rank, with nothing changed: each rank's outcome is exchanged too.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "cuda_driver.h"
#include "ccc_abi.h"

namespace ccc {

class CudaArena;

class CudaRegistry {
 public:
  // Allocates the rank's ccc_registry on the arena's device (its context current), empty, with
  // the arena as the shared range.
  CudaRegistry(const CudaDriver& driver, CudaArena& arena);
  // Closes what this process opened and frees the registry; the rank's device must be idle and
  // its context current.
  ~CudaRegistry();
  CudaRegistry(const CudaRegistry&) = delete;
  CudaRegistry& operator=(const CudaRegistry&) = delete;

  // The table launches are to read from now on (CudaRanks writes it into the rank's state).
  // There are two: a change writes the one no launch was given since the last change, then
  // switches, so a launch still in flight (a graph replayed while another thread registers)
  // keeps reading a table nobody rewrites; the next change, which synchronises the device first,
  // writes it again only once that launch is over. Both lie in one 4 GiB-aligned range, so the
  // state's pointer differs in its low 32 bits only, and a kernel copying the state by 4-byte
  // words reads the one table or the other, never a mix.
  const ccc_registry* device() const {
    return reinterpret_cast<const ccc_registry*>(tables_ + active_ * sizeof(ccc_registry));
  }

  // Collective: registers [p, p + bytes), device memory of the rank's device, and returns its
  // handle. Memory in the arena needs nothing opened (it is shared already) but still takes part.
  // Throws Error(InvalidArgument) for a bad buffer, Error(InvalidUsage) during capture, for a full
  // registry or when a peer's call failed (naming it), Error(Remote) for a peer that did not
  // take part within the timeout.
  void* add(void* p, uint64_t bytes);
  // [base, base + bytes) in the rank's process.
  struct Buffer {
    uintptr_t base;
    uint64_t bytes;
  };
  // Collective, as add, for any number of buffers per rank (none on some ranks), as one
  // registration: its handle deregisters them all. `what` names the call in errors.
  // `precondition` runs first, inside the exchange: what it throws fails the call on every rank.
  void* add_buffers(std::span<const Buffer> buffers, const char* what,
                    const std::function<void()>& precondition = {});
  // Collective: every rank deregisters its registration of the same add call. Error
  // (InvalidArgument) for a handle this rank does not know, Error(InvalidUsage) for ranks that
  // deregister different registrations.
  void remove(void* handle);
  // [p, p + bytes) lies inside a buffer this rank registered: its peers can read it in place.
  bool covers(const void* p, uint64_t bytes) const;

  struct Wire;    // what each rank contributes to an exchange (cuda_registry.cpp)
  struct Shared;  // one allocation a rank shares with its peers

 private:
  struct Key {  // a peer's allocation
    int owner;
    uint64_t owner_base;
    auto operator<=>(const Key&) const = default;
  };
  struct Opened {
    uint64_t bytes;
    CUdeviceptr local;  // where this process mapped it
    int refs;
    CUipcMemHandle handle;  // what opened it: a later registration of the same base must match
  };
  struct Registration {
    uint64_t serial;  // its add call's number, equal on every rank
    std::vector<Buffer> buffers;  // this rank's
    std::vector<Key> peers;       // what it opened (one reference each)
  };
  std::vector<Wire> exchange(const Wire& mine, const std::string& what);
  std::optional<Shared> shareable(const Buffer& b, const char* what) const;
  Key open(int owner, const Shared& s, const char* what);
  void synchronize_outside_capture(const char* what);
  void release(const std::vector<Key>& keys);
  void write_registry();  // the entries, then the header with the count; waits for both

  const CudaDriver& driver_;
  CudaArena& arena_;
  CUdeviceptr tables_ = 0;  // [2] ccc_registry
  int active_ = 0;
  std::map<Key, Opened> opened_;
  std::map<void*, std::unique_ptr<Registration>> registrations_;  // by handle
  uint64_t serial_ = 0;  // add calls so far
};

}  // namespace ccc
