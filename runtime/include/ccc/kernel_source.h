// The compiler's side of a collective call: a schedule instantiated, verified, lowered and
// emitted as one kernel's source for one call shape (the same text for NVRTC and the host).
#pragma once

#include <cstdint>
#include <string>

#include "ccc/collective_types.h"
#include "ccc/diagnostics.h"
#include "ccc/step_program.h"

namespace ccc {

struct KernelShape {
  Collective collective = Collective::AllReduce;
  int nranks = 0;
  int root = -1;  // broadcast and reduce
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  int channels = 0;        // 0: the code generator's default
  int64_t tile_bytes = 0;  // 0: the code generator's default
  bool in_place = false;
};

struct KernelSource {
  std::string name;    // the exported kernel symbol
  std::string source;  // includes the device prelude by name
  int channels = 0;    // blocks per rank
  int threads = 0;     // CUDA threads per block
  bool uses_scratch = false;  // scratch holds `count` elements per rank when true
};

// Generates the kernel for `schedule` (a schedule file's text) and `shape`; throws
// Error(InvalidArgument) with rendered diagnostics when the schedule does not parse, does not
// fit the shape (e.g. `requires N is pow2`) or fails verification.
KernelSource generate_kernel(const SourceFile& schedule, const KernelShape& shape);

}  // namespace ccc
