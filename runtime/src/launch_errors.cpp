#include <fmt/format.h>

#include "launch_errors.h"
#include "ccc_abi.h"

namespace ccc {

namespace {

const char* launch_error_text(unsigned code) {
  switch (code) {
    case CCC_ERR_TIMEOUT:
      // A peer compiling its first kernel of a shape cold (seconds, more at large N) looks the
      // same from here as one that never came.
      return "timed out waiting for a peer (one that has not issued this collective, or is still compiling its "
             "kernel: warm_up / cccCommWarmUp compiles ahead)";
    case CCC_ERR_PEER_FAILED: return "stopped after a peer failed";
    case CCC_ERR_BAD_PROGRAM: return "its step program names a data pass the kernel lacks (a ccc bug)";
    case CCC_ERR_MISMATCH:
      return "a peer called with another collective, count, type, op, root or placement (in place or out of place; every "
             "rank must pass the same)";
    case CCC_ERR_ABORTED: return "aborted (cccCommAbort)";
    case CCC_ERR_UNREGISTERED:
      return "a peer's input or output is neither arena memory nor a buffer registered with this rank";
    case CCC_ERR_BARRIER_DIVERGED:
      return "some threads of a block left the kernel while others waited at a block barrier (a ccc bug)";
  }
  return nullptr;
}

}  // namespace

std::string launch_failures(const unsigned* error_words, int nranks) {
  std::string failures;
  for (int r = 0; r < nranks; ++r) {
    if (error_words[r] == CCC_OK) continue;
    const char* text = launch_error_text(error_words[r]);
    failures += fmt::format("{}rank {}: {}", failures.empty() ? "" : "; ", r,
                            text != nullptr ? std::string(text) : fmt::format("error word {}", error_words[r]));
  }
  return failures;
}

}  // namespace ccc
