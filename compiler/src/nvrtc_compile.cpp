#include "ccc/nvrtc_compile.h"

#include <nvrtc.h>

#include <chrono>
#include <cctype>
#include <string_view>
#include <sstream>

namespace ccc {

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& arch, bool cubin, bool verbose_ptxas) {
  NvrtcOutput out;
  const auto start = std::chrono::steady_clock::now();
  std::vector<const char*> names, texts;
  for (const PreludeHeader& h : device_prelude_headers()) {
    names.push_back(h.name);
    texts.push_back(h.text);
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(&prog, source.c_str(), "ccc_kernel.cu", static_cast<int>(names.size()),
                                      texts.data(), names.data());
  if (rc != NVRTC_SUCCESS) {
    out.log = std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(rc);
    return out;
  }
  // sm_XX gives SASS (and PTX); compute_XX gives PTX only.
  const std::string gpu = "--gpu-architecture=" + (cubin ? arch : "compute_" + arch.substr(arch.find('_') + 1));
  std::vector<const char*> opts = {gpu.c_str(), "-std=c++17"};
  if (verbose_ptxas && cubin) opts.push_back("--ptxas-options=-v");
  rc = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t size = 0;
  nvrtcGetProgramLogSize(prog, &size);
  out.log.resize(size);
  nvrtcGetProgramLog(prog, out.log.data());
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  if (rc == NVRTC_SUCCESS) {
    nvrtcGetPTXSize(prog, &size);
    out.ptx.resize(size);
    nvrtcGetPTX(prog, out.ptx.data());
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
    if (cubin) {
      nvrtcGetCUBINSize(prog, &size);
      out.cubin.resize(size);
      nvrtcGetCUBIN(prog, out.cubin.data());
    }
    out.ok = true;
  }
  nvrtcDestroyProgram(&prog);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

namespace {

// The integer written just before `label` in `log` ("Used 84 registers" -> 84 for " registers"),
// or -1 when the label is absent.
int number_before(const std::string& log, std::string_view label) {
  const size_t at = log.find(label);
  if (at == std::string::npos) return -1;
  size_t begin = at;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(log[begin - 1]))) --begin;
  return begin == at ? -1 : std::stoi(log.substr(begin, at - begin));
}

}  // namespace

KernelResources parse_ptxas_report(const std::string& log) {
  KernelResources r;
  if (const int n = number_before(log, " registers"); n >= 0) r.registers = n;
  const int stack = number_before(log, " bytes stack frame");
  const int stores = number_before(log, " bytes spill stores");
  const int loads = number_before(log, " bytes spill loads");
  if (stack >= 0 && stores >= 0 && loads >= 0) {
    r.stack_bytes = stack;
    r.spill_stores = stores;
    r.spill_loads = loads;
  }
  return r;
}

std::string nvrtc_warnings(const std::string& log) {
  std::istringstream in(log);
  std::string line, out;
  while (std::getline(in, line))
    if (!line.empty() && line.rfind("ptxas", 0) != 0) out += line + "\n";
  return out;
}

}  // namespace ccc
