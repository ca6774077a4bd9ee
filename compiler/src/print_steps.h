// The step program as a readable table (`ccc compile --emit steps`, --dump-after=instantiate):
// a header, then for each step one line per rank listing its ops in DSL syntax. With a fused
// allreduce epilogue (`--epilogue`), where it runs: "+ residual" on each completing reduce
// (completing_reduces), and the norm's line after the steps.
#pragma once

#include <string>

#include "step_program.h"

namespace ccc {

std::string print_steps(const StepProgram& p, Epilogue epilogue = Epilogue::None);
std::string print_op(const Op& op);  // e.g. "reduce chunk 3 from 2", "copy chunks 0..3 into scratch from input of 1"

}  // namespace ccc
