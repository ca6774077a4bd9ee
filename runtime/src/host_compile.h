// Generated C++ -> shared object with the system C++ compiler, and loading it (host backend).
// The device prelude is written next to the source, so `#include "ccc_abi.h"` etc. resolve.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ccc/jit_cache.h"
#include "nvrtc_jit.h"  // JitError

namespace ccc {

struct HostCompileRequest {
  std::string source;
  std::string name = "kernel.cpp";   // the source's file name, as the compiler reports it
  std::vector<std::string> options;  // extra compiler flags, after ccc's own
};

// $CCC_HOST_CXX, else "g++".
std::string host_compiler();
// The first line of `host_compiler() --version`; part of every host cache key.
const std::string& host_compiler_version();

// Compiles `req` into a shared object and returns its bytes; throws JitError with the
// compiler's output on failure. Flags: -std=c++20 -O2 -fPIC -shared -pthread, the sanitizer
// the runtime was built with, $CCC_HOST_CXXFLAGS (split on spaces), then req.options.
std::string host_compile(const HostCompileRequest& req);

// The same through `cache`, keyed by source, flags, compiler version and prelude; `load` as for
// JitCache::get (a cached object that does not load is rebuilt).
std::shared_ptr<const std::string> host_compile_cached(JitCache& cache, const HostCompileRequest& req,
                                                       const std::function<void(const std::string&)>& load = {});

// A shared object loaded from bytes (dlopen of a private temporary copy, unlinked at once).
class SharedObject {
 public:
  explicit SharedObject(std::string_view image);
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;

  // The address of `name`; throws JitError if the object does not export it.
  void* symbol(const char* name) const;

 private:
  void* handle_ = nullptr;
};

}  // namespace ccc
