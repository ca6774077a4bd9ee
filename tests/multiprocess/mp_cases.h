// The collectives the multi-process tests run (tests/unit/test_multiprocess.cpp, which compiles
// their kernels ahead, and the rank driver, which runs them).
#pragma once

#include <cstdint>
#include <vector>

#include "ccc/collective_call.h"

namespace ccc::mp {

struct Case {
  Collective collective;
  DataType dtype;
  ReduceOp op;
  int root;        // -1: none
  uint64_t count;  // odd, so no rank's share is a whole number of tiles
  bool in_place;
};

// Every collective, a few types and ops, in and out of place (alltoall: out of place only).
inline std::vector<Case> cases(int nranks) {
  const int last = nranks - 1;
  return {
      {Collective::AllReduce, DataType::I32, ReduceOp::Sum, -1, 1001, false},
      {Collective::AllReduce, DataType::F32, ReduceOp::Max, -1, 37, true},
      {Collective::ReduceScatter, DataType::I64, ReduceOp::Prod, -1, 129, false},
      {Collective::ReduceScatter, DataType::U8, ReduceOp::Min, -1, 333, true},
      {Collective::AllGather, DataType::BF16, ReduceOp::Sum, -1, 211, false},
      {Collective::Broadcast, DataType::F64, ReduceOp::Sum, last, 77, false},
      {Collective::Reduce, DataType::U32, ReduceOp::Sum, last, 4099, false},
      {Collective::AllToAll, DataType::I32, ReduceOp::Sum, -1, 517, false},
  };
}

// The small-arena scenario's allreduce: 40000 bytes, in place.
inline Case small_arena_case() { return {Collective::AllReduce, DataType::I32, ReduceOp::Sum, -1, 10000, true}; }

}  // namespace ccc::mp
