// A plain reference for checking collectives: deterministic inputs, poisoned outputs, and a
// per-element comparison against the expected result.
//
// Inputs are chosen so every reduction is exact in every type for up to 15 ranks, whatever order
// a schedule combines them in: floats take values in {±0.5, ±1, ±2} (sums are multiples of 0.5,
// products powers of two), integers small values (|v| <= 7; sums and products wrap in two's
// complement exactly as the kernels' do). So integer results are compared bit-exactly and float
// results exactly, except avg, whose final division may round either way by one unit in the
// last place.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ccc/collective_call.h"

namespace ccc {

// Fills `elems` elements at `dst` with rank `rank`'s input (`salt` varies it between calls).
void fill_input(DataType dtype, int rank, uint64_t salt, uint64_t elems, void* dst);

// Fills `bytes` bytes with a pattern no expected result takes (NaN for floats).
void poison(DataType dtype, uint64_t elems, void* dst);

// The number of elements of rank `rank`'s recv buffer (`output`) that differ from what `call`
// must produce from `inputs` (every rank's send buffer as it was before the call), with the
// call's epilogue applied from `epilogue` (the rank's operands; for an RMSNorm the elements of
// its residual_out that differ from the pre-norm sum count too, and those of its fp8 quant_out that
// are not the output times 1 / quant_scale rounded to nearest e4m3). Reduce checks only the root's
// output. An RMSNorm's output may differ from the norm computed in double by the float
// arithmetic and one rounding: within 2^-m + 2^-20 of it, relatively, for a type of m mantissa bits.
uint64_t count_wrong(const CollectiveCall& call, int nranks, int rank, std::span<const void* const> inputs,
                     const void* output, const RankEpilogue& epilogue = {});

// Rank `rank`'s input for measuring rounding rather than checking: floats uniform in [-1, 1) on a
// grid of 2^-12 (every sum of up to 2^11 of them is exact in float and double, so what a kernel
// loses is its own rounding to the element type), integers as fill_input.
void fill_random(DataType dtype, int rank, uint64_t salt, uint64_t elems, void* dst);

// The largest error of rank `rank`'s output against the exact result computed in double, in
// units in the last place of the element type at the result's scale (a subnormal's spacing below
// the smallest normal). A sum's scale is the sum of its terms' magnitudes, which bounds every
// partial sum a kernel rounds (the exact sum may cancel to nearly 0, where ulps say nothing);
// avg's is that over the rank count; the other ops' the exact value. So 0.5 is one correct
// rounding, and a sum rounded once per pass can reach about half an ulp per pass. 0 for integer
// types and collectives that only move data (their results are exact or wrong: count_wrong);
// infinity for a NaN or an infinity. A fused allreduce's (`epilogue`: the residual, and the
// norm's weight) is against the residual added to the exact sum, then the norm computed in
// double, at the sum's scale through the norm's factors.
double max_ulp_error(const CollectiveCall& call, int nranks, int rank, std::span<const void* const> inputs,
                     const void* output, const RankEpilogue& epilogue = {});

// Every rank's host buffers for one collective call of `shape`. In place, send and recv share
// one allocation the way NCCL's in-place calls lay them out (reduce_scatter: recv is the rank's
// block of send; allgather: send is the rank's block of recv). Every buffer starts `offset`
// bytes into its 8-byte-aligned allocation. With an epilogue, each rank has a residual too, the
// same values on every rank (tensor parallelism's), refilled by each prepare.
class HostCollectiveBuffers {
 public:
  HostCollectiveBuffers(const CollectiveCall& shape, int nranks, bool in_place, size_t offset = 0);
  HostCollectiveBuffers(const HostCollectiveBuffers&) = delete;  // call() points into it
  HostCollectiveBuffers& operator=(const HostCollectiveBuffers&) = delete;

  // Poisons every output, then writes fresh inputs (in place they overlap: inputs win) and keeps
  // a copy of them for the check.
  void prepare(uint64_t salt);
  // `shape` with the buffers filled in, ready to run.
  const CollectiveCall& call() const { return call_; }
  // Wrong elements over every rank's output (count_wrong), against the inputs of the last prepare.
  uint64_t wrong_elements() const;

 private:
  CollectiveCall call_;
  int nranks_;
  std::vector<std::vector<uint64_t>> storage_;  // uint64_t: aligned for every element type
  std::vector<const void*> send_;
  std::vector<void*> recv_;
  std::vector<std::vector<unsigned char>> inputs_;
  std::vector<std::vector<uint64_t>> epilogue_storage_;  // shape.epilogue: each rank's operands
  std::vector<const void*> residual_, weight_;
  std::vector<void*> residual_out_, quant_out_;
};

}  // namespace ccc
