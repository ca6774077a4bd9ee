// The compiler's side of a collective call: a schedule instantiated, verified, sync-planned,
// lowered and emitted as one kernel for one call shape (the same text for NVRTC and the host).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ccc/errors.h"
#include "ccc/diagnostics.h"
#include "emit_cuda.h"
#include "kernel_plan.h"
#include "step_program.h"

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
  Protocol protocol = Protocol::Simple;
  bool one_device = false;  // every rank on one device: KernelOptions::one_device (.gpu scope)
  Epilogue epilogue = Epilogue::None;
};

// Generates the kernel for `schedule` (a schedule file's text) and `shape`. Throws
// Error(InvalidArgument) with the rendered diagnostics when the schedule does not parse, does
// not fit the shape (another collective, `requires N is pow2`, ...), fails verification or
// cannot be lowered. `defines` set the schedule's parameters (InstantiateOptions::defines).
EmittedKernel generate_kernel(const SourceFile& schedule, const KernelShape& shape,
                              const std::map<std::string, int64_t>& defines = {});

}  // namespace ccc
