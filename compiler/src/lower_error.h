// Inside the lowering (lower.cpp, verify_bits.cpp): a check fails deep in a walk over ranks and
// steps, throws a LowerError, and the pass's entry points (lower, check_ll_plan) report it as one
// error in the caller's Diagnostics. No LowerError leaves the pass.
#pragma once

#include <stdexcept>
#include <string>

#include "ccc/diagnostics.h"

namespace ccc {

// A schedule or option the kernel cannot implement; the message names rank, step and chunk.
class LowerError : public std::runtime_error {
 public:
  LowerError(SourceLoc loc, const std::string& message) : std::runtime_error(message), loc(loc) {}
  SourceLoc loc;
};

// Runs `body`; a LowerError it throws becomes an error in `diags`, and the result false.
template <class Body>
bool reporting_lower_errors(Diagnostics& diags, Body&& body) {
  try {
    body();
    return true;
  } catch (const LowerError& e) {
    diags.error(e.loc, e.what());
    return false;
  }
}

}  // namespace ccc
