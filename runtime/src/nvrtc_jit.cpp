#include "ccc/nvrtc_jit.h"

#include <nvrtc.h>

#include <fmt/format.h>

#include "ccc/content_hash.h"
#include "ccc/embedded_files.h"

namespace ccc {

namespace {

void check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) throw JitError(fmt::format("NVRTC {}: {}", what, nvrtcGetErrorString(r)));
}

// "sm_90" -> "90", "sm_90a" -> "90a"; anything else is rejected before NVRTC sees it.
std::string arch_digits(const std::string& arch) {
  const std::string rest = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : std::string();
  const size_t digits = rest.find_first_not_of("0123456789");
  const bool ok = rest.size() >= 2 && digits != 0 &&
                  (digits == std::string::npos || rest.substr(digits) == "a");
  if (!ok) throw JitError(fmt::format("bad GPU architecture '{}' (expected sm_XY, e.g. sm_90)", arch));
  return rest;
}

// Owns an nvrtcProgram so every exit path destroys it.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle != nullptr) nvrtcDestroyProgram(&handle);
  }
};

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  check(nvrtcGetProgramLogSize(prog, &size), "log size");
  std::string log(size, '\0');
  check(nvrtcGetProgramLog(prog, log.data()), "log");
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "version");
  return fmt::format("{}.{}", major, minor);
}

NvrtcResult nvrtc_build(const NvrtcRequest& req) {
  const std::string digits = arch_digits(req.arch);
  std::vector<const char*> header_texts, header_names;
  for (const EmbeddedFile& f : device_prelude_files()) {
    header_texts.push_back(f.text.data());  // embedded as string literals: NUL-terminated
    header_names.push_back(f.name.data());
  }
  Program prog;
  check(nvrtcCreateProgram(&prog.handle, req.source.c_str(), req.name.c_str(),
                           static_cast<int>(header_texts.size()), header_texts.data(),
                           header_names.data()),
        "create program");

  std::vector<std::string> options = {
      fmt::format("--gpu-architecture={}_{}",
                  req.target == NvrtcTarget::Cubin ? "sm" : "compute", digits),
      "-std=c++17"};
  options.insert(options.end(), req.options.begin(), req.options.end());
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  const nvrtcResult compiled =
      nvrtcCompileProgram(prog.handle, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  NvrtcResult out;
  out.log = program_log(prog.handle);
  if (compiled != NVRTC_SUCCESS) {
    throw JitError(fmt::format("NVRTC failed to compile {} for {}: {}\n{}", req.name, req.arch,
                               nvrtcGetErrorString(compiled), out.log));
  }
  size_t size = 0;
  if (req.target == NvrtcTarget::Cubin) {
    check(nvrtcGetCUBINSize(prog.handle, &size), "cubin size");
    out.image.resize(size);
    check(nvrtcGetCUBIN(prog.handle, out.image.data()), "cubin");
  } else {
    check(nvrtcGetPTXSize(prog.handle, &size), "ptx size");
    out.image.resize(size);
    check(nvrtcGetPTX(prog.handle, out.image.data()), "ptx");
    if (!out.image.empty() && out.image.back() == '\0') out.image.pop_back();
  }
  return out;
}

std::shared_ptr<const std::string> nvrtc_build_cached(JitCache& cache, const NvrtcRequest& req) {
  ContentHash key;
  key.add("nvrtc").add(nvrtc_version()).add(req.arch)
      .add(static_cast<uint64_t>(req.target)).add(req.source).add(device_prelude_hash());
  for (const std::string& o : req.options) key.add(o);
  const std::string what = fmt::format("nvrtc {} {} ({})", req.name, req.arch,
                                       req.target == NvrtcTarget::Cubin ? "cubin" : "ptx");
  return cache.get(key.hex(), what, [&] { return nvrtc_build(req).image; }).bytes;
}

}  // namespace ccc
