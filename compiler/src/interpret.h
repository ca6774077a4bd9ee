// A concrete interpreter for step programs, on 64-bit integer data with wrapping addition as the
// reduction. It is the verifier's independent cross-check (same verdict on every program) and the
// sync planner's: run under a SyncPlan, ranks interleave at random wherever the waits allow, a
// rank's buffers hold garbage before it starts and after it returns, and in-place runs alias
// input and output, so a missing wait or hazard shows up as a wrong result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "step_program.h"
#include "sync_plan.h"

namespace ccc {

// [rank][chunk]; nullopt = undefined (never written, or garbage).
using ChunkValues = std::vector<std::vector<std::optional<uint64_t>>>;

struct InterpretOptions {
  const SyncPlan* plan = nullptr;  // null: lock-step
  bool in_place = false;           // only with a plan: input and output are the same memory
  uint64_t seed = 1;               // input data, and the interleaving under a plan
};

struct InterpretResult {
  bool completed = false;  // false: the ranks blocked on their waits (the error says where)
  std::string error;
  ChunkValues output;      // each rank's output when it returned
};

// The inputs the interpreter starts from: random where the collective defines them.
ChunkValues interpreter_inputs(const StepProgram& p, uint64_t seed);

// The collective's expected output for those inputs; nullopt marks don't-care chunks.
ChunkValues reference_output(const StepProgram& p, uint64_t seed);

InterpretResult interpret(const StepProgram& p, const InterpretOptions& options = {});

// "" when the result matches the reference on every chunk that matters, else the first mismatch.
std::string compare_with_reference(const StepProgram& p, const InterpretResult& result, uint64_t seed);

}  // namespace ccc
