// NVRTC, loaded at run time with dlopen as the CUDA driver is (cuda_driver.h), never linked: a
// ccc built against CUDA 13 then starts, and compiles, where the only NVRTC is CUDA 12's, or a
// Python wheel's (nvidia-cuda-nvrtc-cu12, which PyTorch installs), or none at all until a kernel
// is needed. nvrtc.h supplies the types and signatures only.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace ccc {

// The NVRTC functions ccc calls, and where they came from.
struct NvrtcLibrary {
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcGetPTXSize) GetPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) GetPTX = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
  std::string path;  // the file loaded (as given to dlopen)
  int major = 0, minor = 0;
};

// Where ccc looks for NVRTC, in order: $CCC_NVRTC (a file); libnvrtc.so.13, .so.12 and .so in
// the lib64 folder of $CUDA_HOME, $CUDA_PATH and /usr/local/cuda; those names through the
// dynamic loader's own search ($LD_LIBRARY_PATH, the ld.so cache); then the wheels' folders of
// every Python site-packages directory given (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib).
std::vector<std::string> nvrtc_candidates(const std::vector<std::string>& site_packages);

// Loads the first of `candidates` that opens and has every function above; NVRTC 12 and 13
// serve. Throws std::runtime_error naming each candidate and why it was passed over.
NvrtcLibrary load_nvrtc(const std::vector<std::string>& candidates);

// The process's NVRTC, loaded on first use from nvrtc_candidates(the site-packages added so far),
// once ($CCC_DEBUG=INFO says which to stderr); null when none loads, `why` then says where ccc looked.
const NvrtcLibrary* nvrtc_library(std::string* why = nullptr);

// Site-packages folders to search (the Python module adds its interpreter's at import). Only
// effective before the first nvrtc_library().
void add_nvrtc_site_packages(const std::vector<std::string>& dirs);

}  // namespace ccc
