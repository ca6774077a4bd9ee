// NVRTC: generated source -> PTX or cubin, with the device prelude supplied from memory.
#pragma once

#include <string>
#include <vector>

namespace ccc {

struct PreludeHeader {
  const char* name;  // as included: "ccc_device.h"
  const char* text;
};
// Every file of runtime/device/, embedded at build time.
const std::vector<PreludeHeader>& device_prelude_headers();

struct NvrtcOutput {
  bool ok = false;
  std::string log;            // NVRTC's log, ptxas' resource report included
  std::string ptx;
  std::vector<char> cubin;    // empty unless asked for
  double compile_ms = 0;
};

// Compiles `source` for `arch` ("sm_90"); `cubin` selects a cubin (SASS) over PTX only.
// `verbose_ptxas` adds --ptxas-options=-v so the log reports registers and spills.
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& arch, bool cubin, bool verbose_ptxas = false);

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
