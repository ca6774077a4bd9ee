// Warnings about a step program that verifies but does work for nothing (pass: verify).
//
//   - a write that nobody reads before it is overwritten (or, in scratch or in output chunks
//     that are not part of the result, before the end);
//   - a step in which no rank does anything.
//
// Unused `let`s and two phases with one name are warned about by the checker (check.h), where
// the names still exist. Warnings never stop the pipeline unless Diagnostics::warnings_are_errors
// (`--Werror`) turns them into errors.
#pragma once

#include "ccc/diagnostics.h"
#include "step_program.h"

namespace ccc {

// Adds the warnings for `p` to `diags`: one per DSL op or step (with a count of the further
// (rank, chunk) pairs of that op), at most 8 in all. Linear in the ops and their chunks.
void lint(const StepProgram& p, Diagnostics& diags);

}  // namespace ccc
