#include "nvrtc_compile.h"

#include <chrono>
#include <cctype>
#include <string_view>
#include <sstream>

#include "embedded_file.h"
#include "nvrtc_library.h"

namespace ccc {

namespace {

// "sm_90" -> "90", "sm_90a" -> "90a"; empty for anything else, so NVRTC never sees it.
std::string arch_digits(const std::string& arch) {
  const std::string rest = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : std::string();
  const size_t digits = rest.find_first_not_of("0123456789");
  const bool ok = rest.size() >= 2 && digits != 0 && (digits == std::string::npos || rest.substr(digits) == "a");
  return ok ? rest : std::string();
}

// Owns an nvrtcProgram so every exit path destroys it.
struct Program {
  const NvrtcLibrary& nvrtc;
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle != nullptr) nvrtc.DestroyProgram(&handle);
  }
};

// Drops trailing `chars`: NVRTC's text outputs end in a NUL, its log also in a newline.
void trim_end(std::string& s, std::string_view chars) {
  while (!s.empty() && chars.find(s.back()) != std::string_view::npos) s.pop_back();
}

}  // namespace

NvrtcOutput nvrtc_compile(const NvrtcRequest& req) {
  NvrtcOutput out;
  const auto start = std::chrono::steady_clock::now();
  const std::string digits = arch_digits(req.arch);
  if (digits.empty()) {
    out.log = "bad GPU architecture '" + req.arch + "' (expected sm_XY, e.g. sm_90)";
    return out;
  }
  const NvrtcLibrary* nvrtc = nvrtc_library(&out.log);
  if (nvrtc == nullptr) return out;  // the log says where ccc looked
  std::vector<const char*> names, texts;
  for (const EmbeddedFile& f : device_prelude_files()) {  // views of string literals: NUL-terminated
    names.push_back(f.name.data());
    texts.push_back(f.text.data());
  }
  Program prog{*nvrtc};
  nvrtcResult rc = nvrtc->CreateProgram(&prog.handle, req.source.c_str(), req.name.c_str(),
                                        static_cast<int>(names.size()), texts.data(), names.data());
  if (rc != NVRTC_SUCCESS) {
    out.log = std::string("nvrtcCreateProgram: ") + nvrtc->GetErrorString(rc);
    return out;
  }
  // sm_XY gives SASS (and PTX); compute_XY gives PTX only.
  const bool cubin = req.target == NvrtcTarget::Cubin;
  const std::string gpu = "--gpu-architecture=" + std::string(cubin ? "sm_" : "compute_") + digits;
  std::vector<const char*> opts = {gpu.c_str(), "-std=c++17"};
  // --minimal (NVRTC 12.4 on) leaves out of NVRTC's built-in header what the prelude never uses
  // (textures, the device runtime's cuda* functions and types): the same cubin, byte for byte,
  // about a tenth less compile time (docs/performance.md).
  if (nvrtc->major > 12 || (nvrtc->major == 12 && nvrtc->minor >= 4)) opts.push_back("--minimal");
  for (const std::string& o : req.options) opts.push_back(o.c_str());
  rc = nvrtc->CompileProgram(prog.handle, static_cast<int>(opts.size()), opts.data());
  size_t size = 0;
  nvrtc->GetProgramLogSize(prog.handle, &size);
  out.log.resize(size);
  nvrtc->GetProgramLog(prog.handle, out.log.data());
  trim_end(out.log, std::string_view("\0\n", 2));
  if (rc != NVRTC_SUCCESS) {
    out.log = "NVRTC failed to compile " + req.name + " for " + req.arch + ": " + nvrtc->GetErrorString(rc) + "\n" + out.log;
    return out;
  }
  if (cubin) {
    nvrtc->GetCUBINSize(prog.handle, &size);
    out.image.resize(size);
    nvrtc->GetCUBIN(prog.handle, out.image.data());
  } else {
    nvrtc->GetPTXSize(prog.handle, &size);
    out.image.resize(size);
    nvrtc->GetPTX(prog.handle, out.image.data());
    trim_end(out.image, std::string_view("\0", 1));
  }
  out.ok = true;
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string nvrtc_version() {
  const NvrtcLibrary* nvrtc = nvrtc_library();
  return nvrtc == nullptr ? "none" : std::to_string(nvrtc->major) + "." + std::to_string(nvrtc->minor);
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
