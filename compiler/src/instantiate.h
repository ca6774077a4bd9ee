// Instantiation: a checked schedule + a rank count N -> the step program (step_program.h).
//
// Every rank runs the schedule's statements in order with `r` bound to its rank; each iteration of
// a `step` makes one global step. Ranks must agree on the sequence of steps and on `chunks`.
// Errors found here (division by zero, a chunk or peer out of range, a requirement not met, two
// writes to one destination in a step, a limit exceeded) name N, r and the step.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ast.h"
#include "ccc/diagnostics.h"
#include "step_program.h"

namespace ccc {

// Limits (docs/dsl.md): they keep bad or oversized input from exhausting time or memory.
inline constexpr int kMaxRanks = 4096;
inline constexpr int64_t kMaxChunks = int64_t{1} << 20;          // 1 Mi
inline constexpr int64_t kMaxOps = int64_t{1} << 24;             // 16 Mi op executions, all ranks
inline constexpr int64_t kMaxSteps = int64_t{1} << 20;           // 1 Mi steps
inline constexpr int64_t kMaxRankSteps = int64_t{1} << 24;       // 16 Mi: N x steps
inline constexpr int64_t kMaxLoopIterations = int64_t{1} << 24;  // 16 Mi, all loops of all ranks
inline constexpr int64_t kMaxEvaluations = int64_t{1} << 28;     // 256 Mi expression nodes evaluated

// The work limits, adjustable so that a fuzzer can keep every input fast; the defaults are the
// documented limits.
struct WorkLimits {
  int64_t ops = kMaxOps;
  int64_t loop_iterations = kMaxLoopIterations;
  int64_t evaluations = kMaxEvaluations;
};

struct InstantiateOptions {
  int nranks = 0;
  int root = 0;  // broadcast / reduce root (the DSL's `root`); ignored by other collectives
  WorkLimits limits = {};
  // Values for the schedule's `param NAME = E`, replacing E; naming no parameter is an error.
  std::map<std::string, int64_t> defines = {};
};

// The names of `schedule`'s `param`s, in order (what InstantiateOptions::defines may set).
std::vector<std::string> schedule_params(const ast::Schedule& schedule);

// `schedule` must come from parse_schedule (names resolved). Returns nullopt with errors in diags.
std::optional<StepProgram> instantiate(const ast::Schedule& schedule, const InstantiateOptions& options,
                                       const SourceFile& file, Diagnostics& diags);

}  // namespace ccc
