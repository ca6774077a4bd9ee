#include "ccc/nvrtc_compile.h"

#include <nvrtc.h>

#include <chrono>
#include <regex>
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

KernelResources parse_ptxas_report(const std::string& log) {
  KernelResources r;
  std::smatch m;
  if (std::regex_search(log, m, std::regex(R"(Used (\d+) registers)"))) r.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    r.stack_bytes = std::stoi(m[1]);
    r.spill_stores = std::stoi(m[2]);
    r.spill_loads = std::stoi(m[3]);
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
