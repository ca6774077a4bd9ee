// A stand-in for a Python wheel's libnvrtc.so.12 (nvidia-cuda-nvrtc-cu12): every function ccc
// looks up, NVRTC 12.9 by its version; it compiles nothing. test_nvrtc_library.cpp puts it where
// a wheel keeps its NVRTC and checks that ccc's search finds it there.
#include <nvrtc.h>

extern "C" {

nvrtcResult nvrtcVersion(int* major, int* minor) {
  *major = 12;
  *minor = 9;
  return NVRTC_SUCCESS;
}
const char* nvrtcGetErrorString(nvrtcResult) { return "the stand-in NVRTC compiles nothing"; }
nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) {
  return NVRTC_ERROR_OUT_OF_MEMORY;
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram*) { return NVRTC_SUCCESS; }
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return NVRTC_ERROR_COMPILATION; }
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t* size) {
  *size = 1;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char* log) {
  *log = '\0';
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetPTXSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INVALID_PROGRAM; }
nvrtcResult nvrtcGetPTX(nvrtcProgram, char*) { return NVRTC_ERROR_INVALID_PROGRAM; }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INVALID_PROGRAM; }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char*) { return NVRTC_ERROR_INVALID_PROGRAM; }

}  // extern "C"
