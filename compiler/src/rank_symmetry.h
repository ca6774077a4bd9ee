// Rank symmetry of a kernel plan: most schedules give every rank the same program up to a
// relabelling of ranks and chunks (ring and two-shot under rotation, butterfly under XOR). Then
// the kernel ships rank 0's instruction table alone and each rank maps it as it reads it
// (ccc_program.h: RankMap), so the generated source grows with the steps, not with
// N x steps. The maps, for rank r (N ranks, C chunks, `stride` chunks per rank):
//   rotation: peer p -> (p + r) % N, chunk range [a, b) -> [(a + r * stride) % C, + (b - a))
//   xor:      peer p -> p ^ r,       chunk range [a, b) -> [(a ^ (r * stride)) & ~(b - a - 1), + (b - a))
// and a pass's operands, relabelled, are rotated to start at the lowest rank. Protocol ll: a
// send's consumer and a receive region's producer are relabelled like any peer and region
// numbers stay (lowering numbers every rank's regions in rank 0's frame: to_ll). A pass folds its
// operands in a fixed order (fold_order.h) so that every rank ends with the same bits, and for
// the shipped schedules that order is ascending rank, which relabelling turns into a rotation of
// rank 0's list. A symmetry is reported only when mapping rank 0's plan gives every rank's plan
// exactly (the same passes with the same operands in the same order, the same waits and
// consumers in any order), so the shared table runs what the per-rank tables would, bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "kernel_plan.h"

namespace ccc {

struct RankSymmetry {
  enum class Kind { None, Rotation, Xor };
  Kind kind = Kind::None;
  int64_t stride = 0;  // chunks the map moves per rank
};

const char* symmetry_name(RankSymmetry::Kind k);  // "none", "rotation", "xor"

RankSymmetry find_rank_symmetry(const KernelPlan& plan);

// The maps themselves (the prelude applies the same formulas on the device).
int map_peer(const RankSymmetry& s, int nranks, int rank, int peer);
ChunkRange map_chunks(const RankSymmetry& s, int64_t nchunks, int rank, ChunkRange chunks);
Operands map_operands(const RankSymmetry& s, int nranks, int rank, Operands operands);
// Their inverses: what rank `rank` sees, in rank 0's frame.
int unmap_peer(const RankSymmetry& s, int nranks, int rank, int peer);
ChunkRange unmap_chunks(const RankSymmetry& s, int64_t nchunks, int rank, ChunkRange chunks);

}  // namespace ccc
