// The errors the runtime reports, as exceptions; the C API maps them to cccResult_t.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace ccc
