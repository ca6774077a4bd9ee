// ccc::Communicator: collectives over N local ranks, compiled for the machine they run on.
//
// One Communicator drives every rank of a single process (like ncclCommInitAll): each call
// passes one send and one recv buffer per rank. Backends:
//   host - N ranks as threads; buffers are host memory; calls return when the collective is done.
//   cuda - one rank per CUDA device (or N virtual ranks on one device); buffers are device memory
//          of the rank's device; calls are asynchronous on the given streams (one per rank, or
//          none: the default stream) and synchronize() reports a failed collective.
// Each call picks a schedule and its channels and tile size (CommOptions::algo, else $CCC_ALGO,
// else the cost model over the topology: detected for real CUDA devices, else read from
// CommOptions::topology_file or $CCC_TOPO; with no topology, ring), generates and JIT-compiles
// the kernel once per shape (cached in memory and on disk), and launches it.
// Errors are ccc::Error (collective_types.h); a failed call leaves the communicator usable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ccc/collective_call.h"
#include "ccc/collective_types.h"
#include "ccc/diagnostics.h"
#include "ccc/jit_cache.h"

namespace ccc {

struct CommOptions {
  std::string algo;             // schedule name for every call; empty: $CCC_ALGO, else selection
  std::optional<SourceFile> schedule;  // run this schedule (not a shipped one) for its collective
  int channels = 0;             // thread blocks per rank; 0: the selection's choice
  int64_t tile_bytes = 0;       // 0: the selection's choice
  std::string topology_file;    // for selection on the host backend and virtual ranks
  double timeout_seconds = 30;  // a rank waiting longer on a peer fails the collective
  JitCache* cache = nullptr;    // null: JitCache::process_cache()
};

enum class BackendKind { Host, Cuda };

class Communicator {
 public:
  static constexpr int kMaxChannels = 64;  // lowering's limit

  // N ranks on host threads.
  static Communicator host(int nranks, CommOptions options = {});
  // One rank per CUDA device ordinal in `devices`. Throws Error(NoDevice) without a driver.
  static Communicator cuda(std::vector<int> devices, CommOptions options = {});
  // `nranks` virtual ranks on one CUDA device, launched together as one grid (for testing).
  static Communicator cuda_virtual(int device, int nranks, CommOptions options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  int size() const;
  BackendKind backend() const;

  using Sends = std::span<const void* const>;
  using Recvs = std::span<void* const>;
  using Streams = std::span<void* const>;

  void all_reduce(Sends send, Recvs recv, uint64_t count, DataType dtype, ReduceOp op,
                  Streams streams = {});
  // send holds size() * recv_count elements per rank; recv gets the rank's block.
  void reduce_scatter(Sends send, Recvs recv, uint64_t recv_count, DataType dtype, ReduceOp op,
                      Streams streams = {});
  // recv holds size() * send_count elements per rank.
  void all_gather(Sends send, Recvs recv, uint64_t send_count, DataType dtype,
                  Streams streams = {});
  void broadcast(Sends send, Recvs recv, uint64_t count, DataType dtype, int root,
                 Streams streams = {});
  void reduce(Sends send, Recvs recv, uint64_t count, DataType dtype, ReduceOp op, int root,
              Streams streams = {});
  // Any of the above, spelled as a CollectiveCall.
  void run(const CollectiveCall& call, Streams streams = {});

  // Waits for the ranks' outstanding work (cuda); throws Error(Remote) if a collective failed.
  void synchronize();

  // The schedule `call` would run (its buffers are not looked at).
  std::string algorithm_for(const CollectiveCall& call) const;

  // Releases everything; any later call throws Error(InvalidUsage).
  void destroy();

 private:
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  Impl& live() const;  // throws Error(InvalidUsage) after destroy
  std::unique_ptr<Impl> impl_;
};

}  // namespace ccc
