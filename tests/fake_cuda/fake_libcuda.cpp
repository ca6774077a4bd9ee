// A recording stand-in for libcuda, loaded through $CCC_LIBCUDA by tests/unit/test_cuda_call_path.cpp.
// It keeps the CUDA backend's call path honest between GPU runs: every driver call ccc makes is
// logged (with the calling thread's current device and the stream), so a test can check what was
// enqueued where, that nothing synchronous happens while a stream captures, that the caller's
// context survives, and that virtual ranks get a cooperative launch. Memory is host memory, so
// copies and memsets work (cuMemAlloc's a memfd, which CUDA IPC shares with other processes);
// kernels are recorded, never run. It is no substitute for the GPU check.
//
// Knobs (environment, read at cuInit): FAKE_CUDA_DEVICES (default 2), FAKE_CUDA_BLOCKS_PER_SM
// (occupancy answer, default 4). Every device is sm_90 unless a test says otherwise. Test
// controls: the fake_cuda_* functions at the end.
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ccc_abi.h"

namespace {

constexpr int kSms = 132;

struct FakeContext {
  int device;
};

struct FakeModule {
  std::vector<std::unique_ptr<int>> functions;  // a CUfunction is the address of one
};

struct Allocation {
  size_t size;
  int device;
  int fd = -1;          // cuMemAlloc's memfd (its pages shared through CUDA IPC); -1: an arena part
  bool opened = false;  // a peer's allocation mapped by cuIpcOpenMemHandle
};

struct State {
  std::mutex mutex;
  std::vector<std::string> log;
  int devices = 2;
  int blocks_per_sm = 4;
  int compute_capability = 90;  // of every device: major * 10 + minor
  std::vector<std::unique_ptr<FakeContext>> contexts;  // the primary context of each device
  std::set<std::pair<int, int>> peer_enabled;          // (from device, to device)
  std::map<uintptr_t, Allocation> allocations;         // by start address
  std::set<CUstream> capturing;
  std::set<CUstream> invalidated;  // capturing, but a prohibited call invalidated the capture
  ccc_launch_args last_launch{};  // the arguments of the last kernel launched
};

State& state() {
  static State s;
  return s;
}

thread_local FakeContext* current = nullptr;

int current_device() { return current != nullptr ? current->device : -1; }

void record(const std::string& line) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.log.push_back(line);
}

std::string stream_name(CUstream s) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", static_cast<void*>(s));
  return text;
}

std::string call(const char* name, const std::string& details = "") {
  std::string line = std::string(name) + " dev=" + std::to_string(current_device());
  if (!details.empty()) line += " " + details;
  return line;
}

// The allocation holding [p, p + bytes), or nullptr.
const Allocation* find(uintptr_t p, uintptr_t* start) {
  State& s = state();
  auto it = s.allocations.upper_bound(p);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  if (p - it->first >= it->second.size) return nullptr;
  *start = it->first;
  return &it->second;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// `details`: what else the launch asked for (cuLaunchKernelEx's attributes), logged last.
CUresult launch(const char* name, CUfunction f, unsigned grid, unsigned block, CUstream stream, void** params,
                const std::string& details = "") {
  if (f == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* args = static_cast<const ccc_launch_args*>(params[0]);
  // Where a rank's buffers point: fake device memory, null, or elsewhere.
  auto where = [](const void* p) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    uintptr_t start = 0;
    return p == nullptr ? "null" : find(reinterpret_cast<uintptr_t>(p), &start) != nullptr ? "device" : "other";
  };
  {
    State& s = state();
    std::lock_guard lock(s.mutex);
    s.last_launch = *args;
  }
  std::string buffers;
  if (args->rank >= 0)
    buffers = std::string(" input=") + where(args->own.input) + " output=" + where(args->own.output);
  record(call(name, "stream=" + stream_name(stream) + " grid=" + std::to_string(grid) + " block=" +
                        std::to_string(block) + " rank=" + std::to_string(args->rank) + buffers + details));
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuInit(unsigned int) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.contexts.empty()) {
    s.devices = env_int("FAKE_CUDA_DEVICES", 2);
    s.blocks_per_sm = env_int("FAKE_CUDA_BLOCKS_PER_SM", 4);
    for (int d = 0; d < s.devices; ++d) s.contexts.push_back(std::make_unique<FakeContext>(FakeContext{d}));
  }
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  *text = error == CUDA_SUCCESS ? "no error" : "fake CUDA error";
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  *count = state().devices;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= state().devices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = state().compute_capability / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = state().compute_capability % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = kSms; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = 2619000; break;  // kHz: H100 SXM's HBM3
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = 5120; break;
    default: *value = 1; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<size_t>(len), "Fake H100");
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice device) {
  std::snprintf(id, static_cast<size_t>(len), "0000:%02x:00.0", device + 0x10);
  return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int* can, CUdevice device, CUdevice peer) {
  record(call("cuDeviceCanAccessPeer", std::to_string(device) + "->" + std::to_string(peer)));
  *can = device != peer && device >= 0 && peer >= 0 && device < state().devices && peer < state().devices;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (device < 0 || device >= state().devices) return CUDA_ERROR_INVALID_DEVICE;
  *context = reinterpret_cast<CUcontext>(state().contexts[static_cast<size_t>(device)].get());
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }

CUresult cuCtxSetCurrent(CUcontext context) {
  current = reinterpret_cast<FakeContext*>(context);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* context) {
  *context = reinterpret_cast<CUcontext>(current);
  return CUDA_SUCCESS;
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int) {
  if (current == nullptr || peer == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  record(call("cuCtxEnablePeerAccess", "peer=" + std::to_string(reinterpret_cast<FakeContext*>(peer)->device)));
  State& s = state();
  std::lock_guard lock(s.mutex);
  const bool inserted = s.peer_enabled.insert({current->device, reinterpret_cast<FakeContext*>(peer)->device}).second;
  return inserted ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

CUresult cuCtxSynchronize() {
  record(call("cuCtxSynchronize"));
  // Synchronising a context one of whose streams captures is prohibited during stream capture
  // (CUDA Programming Guide, "Prohibited and Unhandled Operations"); the fake has one context
  // per device and counts every capturing stream as the caller's.
  // The attempt also invalidates those captures ("Invalidation"): their end fails.
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.invalidated.insert(s.capturing.begin(), s.capturing.end());
  return s.capturing.empty() ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult cuStreamSynchronize(CUstream stream) {
  record(call("cuStreamSynchronize", "stream=" + stream_name(stream)));
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  *status = s.capturing.contains(stream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  // Tests stand for a broken image with one that starts "not a cubin".
  if (image == nullptr || std::strncmp(static_cast<const char*>(image), "not a cubin", 11) == 0)
    return CUDA_ERROR_INVALID_IMAGE;
  record(call("cuModuleLoadData"));
  *module = reinterpret_cast<CUmodule>(new FakeModule);
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule module) {
  record(call("cuModuleUnload"));
  delete reinterpret_cast<FakeModule*>(module);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  record(call("cuModuleGetFunction", std::string("name=") + name));
  auto* m = reinterpret_cast<FakeModule*>(module);
  m->functions.push_back(std::make_unique<int>(0));
  *function = reinterpret_cast<CUfunction>(m->functions.back().get());
  return CUDA_SUCCESS;
}

CUresult cuFuncLoad(CUfunction function) {
  record(call("cuFuncLoad", function == nullptr ? "null" : "function"));
  return function == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned grid, unsigned, unsigned, unsigned block, unsigned, unsigned,
                        unsigned, CUstream stream, void** params, void**) {
  return launch("cuLaunchKernel", f, grid, block, stream, params);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned grid, unsigned, unsigned, unsigned block, unsigned,
                                   unsigned, unsigned, CUstream stream, void** params) {
  return launch("cuLaunchCooperativeKernel", f, grid, block, stream, params);
}

// Logs each attribute: " programmatic=<0|1>" for programmatic stream serialization, else
// " attribute=<id>".
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr || extra != nullptr || (config->numAttrs > 0 && config->attrs == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  if (config->gridDimY != 1 || config->gridDimZ != 1 || config->blockDimY != 1 || config->blockDimZ != 1)
    return CUDA_ERROR_INVALID_VALUE;  // ccc's grids are one-dimensional
  std::string attributes;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      attributes += " programmatic=" + std::to_string(a.value.programmaticStreamSerializationAllowed);
    else
      attributes += " attribute=" + std::to_string(static_cast<int>(a.id));
  }
  return launch("cuLaunchKernelEx", f, config->gridDimX, config->blockDimX, config->hStream, params, attributes);
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction, int, size_t) {
  *blocks = state().blocks_per_sm;
  return CUDA_SUCCESS;
}

// A memfd mapped shared, so that another process can map the same bytes through a fake IPC
// handle (cuIpcGetMemHandle below).
CUresult cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const size_t size = std::max<size_t>(bytes, 1);
  const int fd = memfd_create("fake-cuda-alloc", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  void* memory = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0)
    memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  record(call("cuMemAlloc", std::to_string(bytes)));
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.allocations[reinterpret_cast<uintptr_t>(memory)] = {size, current->device, fd};
  *p = reinterpret_cast<CUdeviceptr>(memory);
  return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr p) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(static_cast<uintptr_t>(p));
  if (it == s.allocations.end() || it->second.fd < 0 || it->second.opened) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(p), it->second.size);
  close(it->second.fd);
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  record(call("cuMemcpyHtoD", std::to_string(bytes)));
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  record(call("cuMemcpyDtoH", std::to_string(bytes)));
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  record(call("cuMemcpyDtoDAsync", "stream=" + stream_name(stream)));
  std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t bytes) {
  record(call("cuMemsetD8", std::to_string(bytes)));
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream) {
  record(call("cuMemsetD8Async", "stream=" + stream_name(stream)));
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  uintptr_t start = 0;
  const Allocation* a = find(static_cast<uintptr_t>(p), &start);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = a->device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = start; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = a->size; break;
    // cuMemAlloc memory only (its own, not a peer's opened through IPC); cuMemCreate memory is not.
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *static_cast<int*>(data) = a->fd >= 0 && !a->opened; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* event, unsigned int) {
  *event = reinterpret_cast<CUevent>(new int(0));
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent, CUstream stream) {
  record(call("cuEventRecord", "stream=" + stream_name(stream)));
  return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent) {
  record(call("cuEventSynchronize"));
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float* ms, CUevent, CUevent) {
  *ms = 1.0f;
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent event) {
  delete reinterpret_cast<int*>(event);
  return CUDA_SUCCESS;
}

// Streams and graphs, for callers that capture (ccc-bench -G, the GPU tests): capture marks the
// stream as cuStreamIsCapturing reports it; a graph launch is recorded, never run.
CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  *stream = reinterpret_cast<CUstream>(new int(0));
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream stream) {
  delete reinterpret_cast<int*>(stream);
  return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode) {
  record(call("cuStreamBeginCapture", "stream=" + stream_name(stream)));
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.capturing.insert(stream);
  return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  record(call("cuStreamEndCapture", "stream=" + stream_name(stream)));
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.capturing.erase(stream) == 0) return CUDA_ERROR_ILLEGAL_STATE;
  if (s.invalidated.erase(stream) != 0) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  *graph = reinterpret_cast<CUgraph>(new int(0));
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph, unsigned long long) {
  *exec = reinterpret_cast<CUgraphExec>(new int(0));
  return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec, CUstream stream) {
  record(call("cuGraphLaunch", "stream=" + stream_name(stream)));
  return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  delete reinterpret_cast<int*>(exec);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<int*>(graph);
  return CUDA_SUCCESS;
}

// Virtual memory management, for the multi-process arena (cuda_arena.h): an allocation is a
// memfd, its shareable handle a descriptor of it, a reservation an anonymous PROT_NONE mapping
// (at the hint if it is free, else where the kernel puts it, as the driver does), and a mapping
// the memfd mapped shared over it, so processes that map one allocation share its bytes.
constexpr size_t kGranularity = size_t{2} << 20;

struct FakeHandle {
  int fd;
  size_t size;
};

CUresult cuCtxGetDevice(CUdevice* device) {
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = current->device;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long) {
  if (size % kGranularity != 0 || prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_INVALID_VALUE;
  const int fd = memfd_create("fake-cuda", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  record(call("cuMemCreate", "bytes=" + std::to_string(size) + " device=" + std::to_string(prop->location.id)));
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(new FakeHandle{fd, size});
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto* h = reinterpret_cast<FakeHandle*>(handle);
  close(h->fd);
  delete h;
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                                      unsigned long long) {
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int*>(shareable) = fcntl(reinterpret_cast<FakeHandle*>(handle)->fd, F_DUPFD_CLOEXEC, 0);
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle, CUmemAllocationHandleType type) {
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  struct stat st {};
  const int fd = fcntl(static_cast<int>(reinterpret_cast<uintptr_t>(os_handle)), F_DUPFD_CLOEXEC, 0);
  if (fd < 0 || fstat(fd, &st) != 0) return CUDA_ERROR_INVALID_HANDLE;
  record(call("cuMemImportFromShareableHandle"));
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(new FakeHandle{fd, static_cast<size_t>(st.st_size)});
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long) {
  if (alignment != 0 && addr % alignment != 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(reinterpret_cast<void*>(addr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  record(call("cuMemAddressReserve", std::string(reinterpret_cast<CUdeviceptr>(p) == addr ? "at the hint" : "elsewhere")));
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long) {
  auto* h = reinterpret_cast<FakeHandle*>(handle);
  if (offset + size > h->size) return CUDA_ERROR_INVALID_VALUE;
  if (mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd,
           static_cast<off_t>(offset)) == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.allocations[ptr] = {size, current_device()};
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  // Back to a reservation, as the driver leaves it.
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.allocations.erase(ptr);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (count != 1 || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
  record(call("cuMemSetAccess", "bytes=" + std::to_string(size) + " device=" + std::to_string(desc->location.id)));
  return CUDA_SUCCESS;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  record(call("cuMemcpyAsync", "bytes=" + std::to_string(bytes) + " stream=" + stream_name(stream)));
  std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream) {
  record(call("cuMemsetD32Async", "stream=" + stream_name(stream)));
  std::fill_n(reinterpret_cast<unsigned*>(dst), count, value);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  record(call("cuMemcpyDtoHAsync", "stream=" + stream_name(stream)));
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

// CUDA IPC (cccCommRegister). A handle carries the owner's pid, the allocation's memfd in the
// owner and its size and address there; opening it maps /proc/<pid>/fd/<fd> shared at another
// address than the owner's (so a peer's pointer really needs translating), as the driver maps a
// peer's cudaMalloc memory wherever it finds room.
struct FakeIpcHandle {
  uint32_t magic;
  int32_t pid, fd;
  uint64_t size, owner_base;
};
constexpr uint32_t kIpcMagic = 0xfa4e1bc0;
static_assert(sizeof(FakeIpcHandle) <= sizeof(CUipcMemHandle));

CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  uintptr_t start = 0;
  const Allocation* a = find(static_cast<uintptr_t>(p), &start);
  if (a == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = start;
  if (size != nullptr) *size = a->size;
  return CUDA_SUCCESS;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(static_cast<uintptr_t>(p));  // the allocation's base, as the driver asks
  if (it == s.allocations.end() || it->second.fd < 0 || it->second.opened) return CUDA_ERROR_INVALID_VALUE;
  const FakeIpcHandle h{kIpcMagic, getpid(), it->second.fd, it->second.size, static_cast<uint64_t>(p)};
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr* p, CUipcMemHandle handle, unsigned int flags) {
  FakeIpcHandle h{};
  std::memcpy(&h, handle.reserved, sizeof h);
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (h.magic != kIpcMagic || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // the driver refuses its own process's handles
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  void* at = mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (at != MAP_FAILED && reinterpret_cast<uint64_t>(at) == h.owner_base) {  // by chance the owner's: move
    void* other = mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    munmap(at, h.size);
    at = other;
  }
  if (at == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  record(call("cuIpcOpenMemHandle", "pid=" + std::to_string(h.pid) + " bytes=" + std::to_string(h.size)));
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.allocations[reinterpret_cast<uintptr_t>(at)] = {h.size, current->device, fd, true};
  *p = reinterpret_cast<CUdeviceptr>(at);
  return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(static_cast<uintptr_t>(p));
  if (it == s.allocations.end() || !it->second.opened) return CUDA_ERROR_INVALID_VALUE;
  s.log.push_back(call("cuIpcCloseMemHandle", "bytes=" + std::to_string(it->second.size)));
  munmap(reinterpret_cast<void*>(p), it->second.size);
  close(it->second.fd);
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

// ---- test controls ----

extern "C" {

// The calls recorded since the last fake_cuda_take_log, one per line; the caller frees the text.
char* fake_cuda_take_log() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::string text;
  for (const std::string& line : s.log) text += line + "\n";
  s.log.clear();
  return strdup(text.c_str());
}

// Makes cuStreamIsCapturing report `stream` as capturing (on != 0) or not.
void fake_cuda_set_capturing(CUstream stream, int on) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (on) {
    s.capturing.insert(stream);
  } else {
    s.capturing.erase(stream);
    s.invalidated.erase(stream);
  }
}

// The arguments of the last kernel launched (its rank-state table and registry are host memory
// here, so a test can read them).
void fake_cuda_last_launch(ccc_launch_args* args) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  *args = s.last_launch;
}

// The occupancy cuOccupancyMaxActiveBlocksPerMultiprocessor reports from now on.
void fake_cuda_set_blocks_per_sm(int blocks) { state().blocks_per_sm = blocks; }

// The compute capability (major * 10 + minor) every device reports from now on (default 90).
void fake_cuda_set_compute_capability(int cc) { state().compute_capability = cc; }

}  // extern "C"
