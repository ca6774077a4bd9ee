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

#include "ccc/collective_call.h"

namespace ccc {

// Fills `elems` elements at `dst` with rank `rank`'s input (`salt` varies it between calls).
void fill_input(DataType dtype, int rank, uint64_t salt, uint64_t elems, void* dst);

// Fills `bytes` bytes with a pattern no expected result takes (NaN for floats).
void poison(DataType dtype, uint64_t elems, void* dst);

// The number of elements of rank `rank`'s recv buffer (`output`) that differ from what `call`
// must produce from `inputs` (every rank's send buffer as it was before the call). Reduce
// checks only the root's output.
uint64_t count_wrong(const CollectiveCall& call, int nranks, int rank,
                     std::span<const void* const> inputs, const void* output);

}  // namespace ccc
