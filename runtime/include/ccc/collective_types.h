// The errors the runtime reports (element types and ops are in ccc/data_type.h).
#pragma once

#include <stdexcept>
#include <string>

#include "ccc/data_type.h"

namespace ccc {

// Why a runtime call failed; the C API maps these to cccResult_t.
enum class ErrorKind {
  InvalidArgument,  // a bad buffer, count, type, op, root or rank
  InvalidUsage,     // e.g. a communicator used after destroy
  NoDevice,         // no CUDA driver or device
  Cuda,             // a CUDA driver call failed
  Compile,          // generating or compiling a kernel failed
  Remote,           // a peer timed out or failed during a collective
  System,           // the operating system refused a resource (a thread, memory)
  Internal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// "rank 1: timed out waiting for a peer; rank 3: ..." for every rank whose launch error word
// (a CCC_ERR_* code of ccc_abi.h) is set; empty when none is.
std::string launch_failures(const unsigned* error_words, int nranks);

}  // namespace ccc
