// NVRTC: generated source -> PTX or cubin, with the device prelude (embedded_file.h) supplied
// from memory as named headers. The one
// place that drives NVRTC: the runtime's JIT (nvrtc_jit.h) adds its cache and exceptions on top.
#pragma once

#include <string>
#include <vector>

namespace ccc {

enum class NvrtcTarget { Ptx, Cubin };

struct NvrtcRequest {
  std::string source;
  std::string name = "kernel.cu";    // the program name NVRTC reports in its log
  std::string arch = "sm_90";        // sm_XY or sm_XYa; PTX is generated for compute_XY
  NvrtcTarget target = NvrtcTarget::Cubin;
  std::vector<std::string> options;  // extra NVRTC options, e.g. kPtxasVerbose or "-lineinfo"
};

// Adds ptxas' resource report (registers, spills) to the log.
inline constexpr const char* kPtxasVerbose = "--ptxas-options=-v";

struct NvrtcOutput {
  bool ok = false;
  std::string log;    // NVRTC's log (ptxas' report included), or why nothing was compiled
  std::string image;  // the PTX text or the cubin bytes; empty unless ok
  double compile_ms = 0;
};

// Compiles `req`; never throws. A bad arch is reported like a compile error (ok = false).
NvrtcOutput nvrtc_compile(const NvrtcRequest& req);

// "13.0": the NVRTC ccc loaded (nvrtc_library.h), or "none".
std::string nvrtc_version();

// From ptxas' -v report for one kernel.
struct KernelResources {
  int registers = -1;
  int spill_stores = -1;  // bytes
  int spill_loads = -1;   // bytes
  int stack_bytes = -1;
};
KernelResources parse_ptxas_report(const std::string& log);

// The log minus ptxas' informational lines: non-empty means NVRTC warned.
std::string nvrtc_warnings(const std::string& log);

}  // namespace ccc
