// The bootstrap of a multi-process communicator (docs/runtime.md, "Multi-process").
//
// bootstrap_unique_id starts a root on a thread of the calling process: it listens on TCP (the
// id carries its address and port, and a random session tag) and on an abstract Unix-domain
// socket named after the tag (nothing in the file system). Every rank connects to the root over
// TCP and says who it is; the root checks that the ranks agree (tag, rank count, backend, arena
// size, distinct ranks) and then shares the arena's memory over the Unix socket (SCM_RIGHTS):
//   - host: the root creates the arena (a memfd, so nothing in /dev/shm either) and hands every
//     rank its descriptor;
//   - cuda: every rank sends the descriptor of its own part (cuMemExportToShareableHandle), and
//     the root hands every rank all of them, in rank order (an all-gather).
// Then the root proposes an address, aligned as the ranks ask, that every rank maps the whole
// arena at (ArenaMapper). If any rank cannot, the root proposes another (one a refusing rank
// suggested first), a bounded number of times. Every wait has a deadline: the root waits the
// ranks' timeout from the first rank's arrival, a rank half as long again, so that the root's
// message why (the ranks that never joined) reaches it first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ccc/unique_id.h"

namespace ccc {

// `idle_ns`: a root that no rank has reached this long after it started gives up: its thread
// ends and its sockets close (a rank that comes later is refused), so ids made and never used
// do not keep a thread and descriptors each for the life of the process. What is left of such a
// root (asio's descriptors) goes at the next call.
UniqueId bootstrap_unique_id(uint64_t idle_ns);
// The TCP port the id's root listens on (Error(InvalidArgument) for an id that is not one).
uint16_t bootstrap_port(const UniqueId& id);
// The id's session tag, which names its root's sockets ("ccc-bootstrap-<tag in hex>").
uint64_t bootstrap_tag(const UniqueId& id);

enum class ArenaKind : uint32_t { Host, Cuda };

struct JoinRequest {
  int nranks = 0;
  int rank = 0;
  ArenaKind kind = ArenaKind::Host;
  uint64_t part_bytes = 0;   // each rank's share (host: its heap); every rank must ask the same
  uint64_t total_bytes = 0;  // the range every rank maps
  uint64_t alignment = 4096;  // of the address the root proposes (a power of two)
  uint64_t timeout_ns = 0;   // ~0: for ever
  int part_fd = -1;  // cuda: this rank's part, shared with every rank; host: -1 (the root makes one)
};

// A rank's side of the address agreement.
class ArenaMapper {
 public:
  virtual ~ArenaMapper() = default;
  // Maps the arena at exactly `address`, all or nothing: `fds` is the root's memfd (host) or
  // every rank's part in rank order (cuda); the descriptors are closed after bootstrap_join
  // returns, so keep what outlives them. Returns false, with nothing left mapped, if the address
  // is taken here; throws ccc::Error for any other failure.
  virtual bool map_at(uint64_t address, std::span<const int> fds) = 0;
  // Undoes a map_at that returned true (a peer could not map the same address).
  virtual void unmap() = 0;
  // After a map_at that returned false: an address (aligned as asked) where this process could
  // map the arena, which the root proposes next; 0 for none.
  virtual uint64_t suggestion() const { return 0; }
};

// The host's mapper, and the stand-in for the CUDA one in tests: reserves the range
// (MAP_FIXED_NOREPLACE), then maps fds[i] over [address + i * part_bytes, + part_bytes), shared
// and read/write. The mapping stays when the mapper goes if keep() was called (the arena owns it
// then), else the destructor unmaps it.
class FdMmapMapper : public ArenaMapper {
 public:
  FdMmapMapper(uint64_t total_bytes, uint64_t part_bytes) : total_(total_bytes), part_(part_bytes) {}
  ~FdMmapMapper() override { unmap(); }
  bool map_at(uint64_t address, std::span<const int> fds) override;
  void unmap() override;
  void* keep();  // the mapping, now the caller's

 private:
  uint64_t total_, part_;
  void* at_ = nullptr;
};

// A communicator's control channel, kept from the join for the communicator's life (NCCL keeps
// its bootstrap ring the same way): collective exchanges after init, such as registering buffers
// (cccCommRegister). A star: rank 0 listens on an abstract Unix-domain socket named after the
// session tag (the ranks share one machine, as the arena already requires), from before its
// hello, and every other rank connects to it once the join has succeeded. Every wait is bounded
// by the communicator's timeout: rank 0 waits that long for each peer's part, the others a half
// more (so that rank 0's message naming the rank that failed reaches them first). After a failed
// exchange the channel is broken for good (a late peer's message could still be on its way):
// every later exchange fails at once.
class ControlChannel {
 public:
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  int rank() const;
  int nranks() const;
  // Every rank passes `mine`, of the same size on every rank, in the same exchange `what` (a name
  // such as "cccCommRegister", compared across ranks); returns every rank's bytes in rank order.
  // Throws Error(Remote) naming a peer that did not take part within the timeout or whose
  // process went away, Error(InvalidUsage) naming one that made another exchange (another
  // `what`, another size, or a different number of exchanges so far).
  std::vector<std::byte> all_gather(std::span<const std::byte> mine, const std::string& what);

  struct Impl;
  explicit ControlChannel(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Joins the communicator `id`: returns the address every rank mapped the arena at, with
// `mapper` holding its mapping. Throws ccc::Error saying why it failed. With `control` non-null,
// also opens the control channel into *control (every rank must ask for one, or none).
uint64_t bootstrap_join(const UniqueId& id, const JoinRequest& request, ArenaMapper& mapper,
                        std::unique_ptr<ControlChannel>* control = nullptr);

}  // namespace ccc
