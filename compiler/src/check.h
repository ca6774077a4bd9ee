// The checker: resolves names into slots and function indices, checks arity and where each
// statement may appear, and works out whether the schedule's shape depends on r. Everything that
// can be known without a rank count is reported here; the rest waits for instantiation.
#pragma once

#include "ast.h"
#include "ccc/diagnostics.h"

namespace ccc {

// Returns false (with errors in diags) if the schedule is malformed.
bool check_schedule(ast::Schedule& s, Diagnostics& diags);

}  // namespace ccc
