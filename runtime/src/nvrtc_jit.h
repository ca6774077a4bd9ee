// The JIT's view of NVRTC (nvrtc_compile.h, which works without a GPU): failures as exceptions,
// and compiles through the JIT cache. The device prelude is available to the source as named
// headers (#include "ccc_abi.h").
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "ccc/jit_cache.h"
#include "nvrtc_compile.h"

namespace ccc {

// A failed compile (host or NVRTC); what() includes the compiler's log.
class JitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Compiles `req`; throws JitError carrying NVRTC's log on failure (or a bad arch).
NvrtcOutput nvrtc_build(const NvrtcRequest& req);

// The same through `cache`, keyed by source, options, arch, target, NVRTC version and prelude;
// `load` as for JitCache::get (a cached image that does not load is rebuilt).
std::shared_ptr<const std::string> nvrtc_build_cached(JitCache& cache, const NvrtcRequest& req,
                                                      const std::function<void(const std::string&)>& load = {});

}  // namespace ccc
