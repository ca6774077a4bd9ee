// Parser for the schedule DSL (grammar in docs/dsl.md): tokens -> ast::Schedule, then
// check_schedule resolves names. Syntax errors are reported with recovery at statement
// boundaries, so one run reports several.
#pragma once

#include <optional>

#include "ast.h"
#include "ccc/diagnostics.h"

namespace ccc {

// Blocks and expressions nest at most this deep (deeper input is refused, never a stack overflow).
inline constexpr int kMaxNesting = 64;

// Lexes, parses and checks `file`. Returns the resolved schedule, or nullopt with errors in diags.
std::optional<ast::Schedule> parse_schedule(const SourceFile& file, Diagnostics& diags);

}  // namespace ccc
