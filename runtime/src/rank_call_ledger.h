// Cross-rank buffer checks for collectives issued rank by rank (Communicator::run_rank, the C
// API). There, no single call sees every rank's buffers: rank i's k-th collective meets its
// peers' k-th only inside the kernel. The ledger keeps the buffers of each collective that some
// ranks have issued and others not yet, and checks a rank's buffers against its peers' when the
// rank issues its part: the rank that completes an overlap is refused (Error(InvalidArgument),
// nothing queued), as validate_call refuses a whole call. Ranks that issued earlier are already
// queued; without the refused rank their collective fails after the timeout, like any collective
// a rank does not join. Internal (not installed).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ccc/collective_call.h"

namespace ccc {

// One rank's buffer of one call as a byte range.
struct BufferExtent {
  uintptr_t begin = 0;
  uint64_t bytes = 0;
  int rank = 0;
  bool written = false;  // recv; send is only read
  const char* epilogue_name = nullptr;  // an epilogue's operand ("residual", "residual_out", ...), else null
  uintptr_t end() const { return begin + bytes; }
  const char* name() const { return epilogue_name != nullptr ? epilogue_name : written ? "recv" : "send"; }
};

// Whether two ranks' buffers may not share bytes: they belong to different ranks, one of them
// is written, and they overlap.
bool buffers_conflict(const BufferExtent& a, const BufferExtent& b);
// Throws Error(InvalidArgument) saying that `a` and `b` (which conflict) overlap; the message
// is the same whichever order they come in.
[[noreturn]] void refuse_overlap(Collective collective, const BufferExtent& a, const BufferExtent& b);

// What every rank of one collective must pass alike (ccc.h): the arguments of the call that
// make its kernel, placement included. Broadcast and reduce have a root; allgather, broadcast
// and alltoall take no op.
struct CallShape {
  Collective collective = Collective::AllReduce;
  uint64_t count = 0;
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = -1;
  bool in_place = false;
  Epilogue epilogue = Epilogue::None;
  // Epilogue::ResidualRmsNorm's row length, eps and fp8 scale: the rows decide where the kernel
  // cuts the vector, so ranks that disagree would cut it differently.
  uint64_t hidden = 0;
  float eps = 0;
  std::optional<float> quant_scale;
};

class RankCallLedger {
 public:
  explicit RankCallLedger(int nranks) : issued_(static_cast<size_t>(nranks), 0), failed_(static_cast<size_t>(nranks)) {}

  // Rank `rank`'s buffers for its next collective (after validate_rank_call, count > 0), its
  // epilogue's operands included: throws Error(InvalidArgument) if one of them conflicts with a
  // buffer that a peer passed to the same collective, else returns them for record(). O(N).
  std::vector<BufferExtent> check(const CollectiveCall& call, int rank, const void* send, const void* recv,
                                  const RankEpilogue& epilogue = {});
  // Whether rank `rank`'s next collective, of this shape, matches what its peers issued for the
  // same collective so far: "" if it does, else why not, naming both ranks and what differs
  // ("broadcast: rank 1 passed root 1, rank 0 root 0"). Once a collective has mismatched, every
  // rank's part of it gets that answer, and every rank that issued it, before or now, has it
  // in failed().
  std::string agree(const CallShape& shape, int rank);
  // The mismatches found for collectives rank `rank` had issued when they were found (each
  // once): its synchronize reports them.
  std::vector<std::string> failed(int rank);
  // Rank `rank` queued its next collective, of this shape, with these buffers (from check(),
  // with no other call of the rank in between: the communicator's call lock gives that), or
  // queued nothing because agree() refused it.
  void record(int rank, const std::vector<BufferExtent>& extents, const CallShape& shape);
  // Every rank issued one collective at once (a whole call, checked by validate_call).
  void record_all();
  // A collective failed: what ranks still owe is void (the peers' state is reset), so earlier
  // buffers must not refuse later calls.
  void forget();

 private:
  struct Meeting {
    std::vector<BufferExtent> extents;  // of the ranks that issued it so far
    int arrived = 0;
    std::vector<int> ranks;  // that issued it so far
    std::optional<std::pair<int, CallShape>> first;  // the first rank to issue it, and its shape
    std::string mismatch;  // why it cannot run, once a rank disagreed
  };
  std::mutex mutex_;  // forget() runs from synchronize, outside the communicator's call lock
  std::vector<uint64_t> issued_;        // per rank: collectives issued so far
  std::map<uint64_t, Meeting> meetings_;  // by collective index, while some rank owes it
  std::vector<std::vector<std::string>> failed_;  // per rank: mismatches not yet reported
};

}  // namespace ccc
