// CUDA source -> PTX or cubin with NVRTC (works without a GPU), plain or through the JIT cache.
// The device prelude is available to the source as named headers (#include "ccc_abi.h").
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ccc/jit_cache.h"

namespace ccc {

// A failed compile (host or NVRTC); what() includes the compiler's log.
class JitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class NvrtcTarget { Ptx, Cubin };

struct NvrtcRequest {
  std::string source;
  std::string name = "kernel.cu";   // the program name NVRTC reports in its log
  std::string arch = "sm_90";       // sm_XY; PTX is generated for compute_XY
  NvrtcTarget target = NvrtcTarget::Cubin;
  std::vector<std::string> options;  // extra NVRTC options, e.g. "-lineinfo"
};

struct NvrtcResult {
  std::string image;  // the PTX text or cubin bytes
  std::string log;    // NVRTC's log (warnings), possibly empty
};

// Compiles `req`; throws JitError carrying NVRTC's log on failure (or a bad arch).
NvrtcResult nvrtc_build(const NvrtcRequest& req);

// The same through `cache`, keyed by source, options, arch, target, NVRTC version and prelude.
std::shared_ptr<const std::string> nvrtc_build_cached(JitCache& cache, const NvrtcRequest& req);

// "13.0": the NVRTC this library is linked against.
std::string nvrtc_version();

}  // namespace ccc
