// What the compiler adds to the API's types (ccc/types.h): properties of element types and
// ops that lowering and emission need, and the protocol ll's size cap.
#pragma once

#include <cstdint>

#include "ccc/types.h"

namespace ccc {

bool data_type_is_float(DataType t);
const char* data_type_device_type(DataType t);  // the device prelude's spelling: "float", "ccc::f16", ...
// Whether the write that completes a value applies a finish (avg: / N); the device prelude's
// Op::finishes.
bool reduce_op_finishes(ReduceOp op);

// The most bytes of the collective's vector (blocks * count * dtype size) an `ll` launch moves.
// Every remote read owns a receive region of the whole vector at twice its size (half of each
// line is flag), so the receive slots a rank needs grow with this cap times its remote reads.
constexpr int64_t kLlMaxBytes = 256 * 1024;

}  // namespace ccc
