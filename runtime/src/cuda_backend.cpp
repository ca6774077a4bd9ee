#include "cuda_backend.h"

#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "ccc/errors.h"
#include "launch_errors.h"
#include "cuda_arena.h"
#include "cuda_registry.h"

namespace ccc {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, message);
}

// The ABI's view of one rank's sync state at `sync` (CudaSyncLayout).
ccc_rank_state rank_state(CUdeviceptr sync) {
  return {reinterpret_cast<unsigned long long*>(sync), reinterpret_cast<ccc_buffers*>(sync + CudaSyncLayout::kMailbox),
          reinterpret_cast<unsigned*>(sync + CudaSyncLayout::kError),
          reinterpret_cast<unsigned long long*>(sync + CudaSyncLayout::kInbox),
          nullptr};  // no registry: every buffer a launch names is peer-mapped or arena memory (the
                     // multi-process constructor gives the local rank its own)
}

}  // namespace

CudaLaunchShape cuda_launch_shape(int rank, int nranks, int channels, int threads_per_block) {
  const int blocks = rank < 0 ? nranks * channels : channels;
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(threads_per_block)};
}

std::vector<void*> cuda_kernel_params(ccc_launch_args& args) { return {&args}; }

std::string cuda_arch_name(int major, int minor) { return fmt::format("sm_{}{}", major, minor); }

bool cuda_programmatic_launch_allowed(const char* env) {
  if (env == nullptr || std::strcmp(env, "") == 0 || std::strcmp(env, "1") == 0) return true;
  if (std::strcmp(env, "0") == 0) return false;
  invalid(fmt::format("CCC_PDL={}: 0 turns programmatic dependent launch off, 1 (or unset) allows it", env));
}

std::string cuda_buffer_problem(uintptr_t p, uint64_t bytes, uintptr_t range_start, uint64_t range_size,
                                bool legacy_ipc, bool peers) {
  if (p < range_start || p - range_start > range_size || bytes > range_size - (p - range_start))
    return fmt::format("its {} bytes run past the end of the allocation that holds it ({} bytes from {:#x})",
                       bytes, range_size, range_start);
  // cuCtxEnablePeerAccess maps only cuMemAlloc/cudaMalloc allocations into the peers' address
  // spaces (CUDA Programming Guide, peer-to-peer memory access); memory from a stream-ordered
  // pool or from cuMemCreate has its own access rules and would fault when a peer reads it.
  if (peers && !legacy_ipc)
    return "it comes from a stream-ordered pool (cudaMallocAsync) or from virtual memory management "
           "(cuMemCreate, PyTorch's expandable segments), which peer access does not map; allocate it "
           "with cudaMalloc (PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False)";
  return "";
}

CudaRanks::CudaRanks(std::vector<int> devices, int virtual_ranks)
    : driver_(CudaDriver::get()), virtual_ranks_(virtual_ranks > 0) {
  CudaContextGuard guard(driver_);
  if (devices.empty()) invalid("no CUDA devices given");
  if (virtual_ranks_ && devices.size() != 1)
    invalid(fmt::format("virtual ranks run on one device, got {} devices", devices.size()));
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == devices[i]) invalid(fmt::format("CUDA device {} is listed twice", devices[i]));
    add_device(devices[i]);
  }
  for (const Device& a : devices_) {
    for (const Device& b : devices_) {
      if (a.ordinal == b.ordinal) continue;
      int can = 0;
      driver_.check(driver_.cuDeviceCanAccessPeer(&can, a.device, b.device), "cuDeviceCanAccessPeer");
      if (!can) invalid(fmt::format("CUDA device {} cannot access device {}'s memory (no peer access)", a.ordinal, b.ordinal));
      use(a);
      const CUresult r = driver_.cuCtxEnablePeerAccess(b.context, 0);
      if (r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) driver_.check(r, "cuCtxEnablePeerAccess");
    }
  }
  // Error words are written by their own rank only, inbox slots by one peer each (release
  // stores into the owner's memory), and both are read with plain (relaxed or acquire) loads, so
  // no peer atomics are needed across devices.
  const int n = virtual_ranks_ ? virtual_ranks : static_cast<int>(devices_.size());
  for (int r = 0; r < n; ++r) {
    Rank rank;
    rank.device = virtual_ranks_ ? 0 : r;
    use(devices_[rank.device]);
    rank.sync = alloc_zeroed(CudaSyncLayout::bytes(n));
    ranks_.push_back(rank);
    table_.push_back(rank_state(rank.sync));
  }
  write_tables();
}

// Every process builds the same table (the arena lies at one address in all of them); each
// keeps it in its own memory, read only by its own launches.
CudaRanks::CudaRanks(CudaArena& arena) : driver_(CudaDriver::get()), arena_(&arena) {
  pdl_ = pdl_ && !arena.device_shared();
  CudaContextGuard guard(driver_);
  add_device(arena.ordinal());
  use(devices_[0]);
  driver_.check(driver_.cuStreamCreate(&control_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (int r = 0; r < arena.nranks(); ++r) {
    Rank rank;
    rank.sync = arena.sync(r);  // zeroed by its owner before any rank could launch
    ranks_.push_back(rank);
    table_.push_back(rank_state(rank.sync));
  }
  // Read only by the local rank's launches: its peers' registered buffers as this process maps them.
  registry_ = std::make_unique<CudaRegistry>(driver_, arena);
  table_[arena.rank()].registry = registry_->device();
  write_tables();
}

void CudaRanks::add_device(int ordinal) {
  if (ordinal < 0 || ordinal >= driver_.device_count())
    invalid(fmt::format("CUDA device {} does not exist ({} present)", ordinal, driver_.device_count()));
  Device d;
  d.ordinal = ordinal;
  driver_.check(driver_.cuDeviceGet(&d.device, ordinal), "cuDeviceGet");
  int major = 0, minor = 0;
  driver_.check(driver_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.device), "cuDeviceGetAttribute");
  driver_.check(driver_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.device), "cuDeviceGetAttribute");
  if (major < 8)
    invalid(fmt::format("CUDA device {} is {}: ccc's kernels need sm_80 or newer", ordinal, cuda_arch_name(major, minor)));
  const std::string arch = cuda_arch_name(major, minor);
  if (devices_.empty()) arch_ = arch;
  if (arch != arch_)
    invalid(fmt::format("CUDA devices {} ({}) and {} ({}) differ in architecture", devices_[0].ordinal, arch_, ordinal, arch));
  // Programmatic dependent launch needs compute capability 9.0 (CUDA C++ Programming Guide,
  // "Programmatic Dependent Launch and Synchronization").
  d.programmatic_launch = major >= 9;
  driver_.check(driver_.cuDevicePrimaryCtxRetain(&d.context, d.device), "cuDevicePrimaryCtxRetain");
  devices_.push_back(d);
}

void CudaRanks::write_tables() {
  const uint64_t bytes = sizeof(ccc_rank_state) * table_.size();
  for (Device& d : devices_) {
    use(d);
    d.state = alloc_zeroed(bytes);
    driver_.check(driver_.cuMemcpyHtoD(d.state, table_.data(), bytes), "cuMemcpyHtoD");
    // The zeroing and the table must be complete before a kernel on any stream (a non-blocking
    // one does not wait for the legacy default stream) reads them.
    driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
  }
}

CudaRanks::~CudaRanks() {
  // Best effort: a failing driver at teardown has nothing left to report to.
  CUcontext saved = nullptr;
  driver_.cuCtxGetCurrent(&saved);
  for (const Device& d : devices_) {
    driver_.cuCtxSetCurrent(d.context);
    driver_.cuCtxSynchronize();  // launches still queued read what is freed below
  }
  for (const Rank& r : ranks_) {  // in the arena, the arena frees them
    if (arena_ != nullptr) break;
    driver_.cuCtxSetCurrent(devices_[r.device].context);
    driver_.cuMemFree(r.sync);
    for (const Pool* pool : {&r.scratch, &r.ll})
      for (CUdeviceptr s : pool->blocks) driver_.cuMemFree(s);
  }
  if (control_ != nullptr) {
    driver_.cuCtxSetCurrent(devices_[0].context);
    driver_.cuStreamDestroy(control_);
    registry_.reset();  // the device is idle (above); closes the peers' buffers
  }
  for (const auto& [key, table] : virtual_tables_) {
    driver_.cuCtxSetCurrent(devices_[0].context);
    driver_.cuMemFree(table);
  }
  for (const Device& d : devices_) {
    driver_.cuCtxSetCurrent(d.context);
    driver_.cuMemFree(d.state);
    for (CUmodule m : d.modules) driver_.cuModuleUnload(m);
    driver_.cuDevicePrimaryCtxRelease(d.device);
  }
  driver_.cuCtxSetCurrent(saved);
}

void CudaRanks::use(const Device& d) const {
  driver_.check(driver_.cuCtxSetCurrent(d.context), "cuCtxSetCurrent");
}

CUdeviceptr CudaRanks::alloc_zeroed(uint64_t bytes) {
  CUdeviceptr p = 0;
  driver_.check(driver_.cuMemAlloc(&p, bytes), "cuMemAlloc");
  driver_.check(driver_.cuMemsetD8(p, 0, bytes), "cuMemsetD8");
  return p;
}

bool CudaRanks::capturing(void* stream) const {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  driver_.check(driver_.cuStreamIsCapturing(static_cast<CUstream>(stream), &status), "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

int CudaRanks::local_rank() const { return arena_ != nullptr ? arena_->rank() : -1; }

bool CudaRanks::peers_read_in_place(const void* p, uint64_t bytes) const {
  return arena_ == nullptr || arena_->contains(p, bytes) || registered(p, bytes);
}

ArenaHeap* CudaRanks::heap() { return arena_ != nullptr ? &arena_->heap() : nullptr; }

NvrtcRequest CudaRanks::nvrtc_request(const std::string& source, const EmittedKernel& kernel) const {
  NvrtcRequest req;
  req.source = source;
  req.name = kernel.kernel_name + ".cu";
  req.arch = arch_;
  return req;
}

namespace {

// A kernel's module and function on each device, in CudaRanks::devices_ order; unloaded at the
// end unless install() took them.
struct CudaBuiltKernel final : Backend::BuiltKernel {
  explicit CudaBuiltKernel(const CudaDriver& d) : driver(d) {}
  ~CudaBuiltKernel() override {
    if (loaded.empty()) return;
    CUcontext saved = nullptr;
    driver.cuCtxGetCurrent(&saved);
    for (size_t i = 0; i < loaded.size(); ++i) {
      driver.cuCtxSetCurrent(contexts[i]);
      driver.cuModuleUnload(loaded[i].first);
    }
    driver.cuCtxSetCurrent(saved);
  }
  const CudaDriver& driver;
  std::vector<CUcontext> contexts;
  std::vector<std::pair<CUmodule, CUfunction>> loaded;
};

}  // namespace

std::unique_ptr<Backend::BuiltKernel> CudaRanks::build(JitCache& cache, const std::string& source,
                                                       const EmittedKernel& kernel) const {
  std::unique_ptr<BuiltKernel> built;
  nvrtc_build_cached(cache, nvrtc_request(source, kernel),
                     [&](const std::string& cubin) { built = load_cubin(cubin, kernel.kernel_name); });
  return built;
}

std::function<void()> CudaRanks::compile_task(JitCache& cache, const std::string& source,
                                              const EmittedKernel& kernel) const {
  return [&cache, req = nvrtc_request(source, kernel)] { nvrtc_build_cached(cache, req); };
}

std::unique_ptr<Backend::BuiltKernel> CudaRanks::load_cubin(const std::string& cubin,
                                                            const std::string& kernel_name) const {
  CudaContextGuard guard(driver_);
  // All devices or none (a failure unloads what loaded): a cubin that fails on one is rebuilt.
  auto built = std::make_unique<CudaBuiltKernel>(driver_);
  for (const Device& d : devices_) {
    use(d);
    CUmodule module = nullptr;
    driver_.check(driver_.cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");
    built->contexts.push_back(d.context);
    built->loaded.push_back({module, nullptr});
    driver_.check(driver_.cuModuleGetFunction(&built->loaded.back().second, module, kernel_name.c_str()),
                  "cuModuleGetFunction");
    // Loaded now, not at its first launch: with lazy loading (the default since CUDA 12.2) that
    // launch may have to synchronise the context to load it, and so wait for kernels already
    // running, such as a peer's rank that waits for this one (CUDA C++ Programming Guide,
    // "Lazy Loading"). A driver older than 12.4 has no cuFuncLoad and loads lazily.
    if (driver_.cuFuncLoad != nullptr) driver_.check(driver_.cuFuncLoad(built->loaded.back().second), "cuFuncLoad");
  }
  return built;
}

int CudaRanks::install(std::unique_ptr<BuiltKernel> kernel) {
  auto& built = static_cast<CudaBuiltKernel&>(*kernel);
  for (Device& d : devices_) {  // no push_back below may throw: `built` would unload them too
    d.modules.reserve(d.modules.size() + 1);
    d.functions.reserve(d.functions.size() + 1);
  }
  for (size_t i = 0; i < devices_.size(); ++i) {
    devices_[i].modules.push_back(built.loaded[i].first);
    devices_[i].functions.push_back(built.loaded[i].second);
  }
  built.loaded.clear();  // the devices' now
  return static_cast<int>(devices_[0].functions.size()) - 1;
}

void CudaRanks::check_buffer(int rank, const void* p, uint64_t bytes, const char* what) const {
  const auto ptr = reinterpret_cast<CUdeviceptr>(p);
  int ordinal = -1;
  const CUresult r = driver_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr);
  const int expected = devices_[ranks_[rank].device].ordinal;
  if (r != CUDA_SUCCESS)
    invalid(fmt::format("rank {}: {} buffer {} is not CUDA device memory", rank, what, p));
  if (ordinal != expected)
    invalid(fmt::format("rank {}: {} buffer {} is on CUDA device {}, the rank's device is {}", rank,
                        what, p, ordinal, expected));
  CUdeviceptr start = 0;
  size_t size = 0;
  int legacy_ipc = 0;
  driver_.check(driver_.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr), "cuPointerGetAttribute");
  driver_.check(driver_.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr), "cuPointerGetAttribute");
  driver_.check(driver_.cuPointerGetAttribute(&legacy_ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr),
                "cuPointerGetAttribute");
  const std::string problem = cuda_buffer_problem(ptr, bytes, start, size, legacy_ipc != 0, devices_.size() > 1);
  if (!problem.empty()) invalid(fmt::format("rank {}: {} buffer {}: {}", rank, what, p, problem));
}

void* CudaRanks::scratch(int rank, uint64_t bytes, void* stream) {
  return grow(rank, &Rank::scratch, bytes, stream, "scratch", false);
}

void* CudaRanks::ll_slots(int rank, uint64_t bytes, void* stream) {
  return grow(rank, &Rank::ll, bytes, stream, "LL receive slots", true);
}

void* CudaRanks::grow(int rank, Pool Rank::*pool, uint64_t bytes, void* stream, const char* what, bool zero) {
  Rank& r = ranks_.at(rank);
  Pool& p = r.*pool;
  if (bytes > p.bytes && arena_ != nullptr) {
    // From the arena's heap, where peers can read it: no synchronous driver call, so also while
    // capturing. Exact fit (the heap is fixed); the blocks queued launches may still use go back
    // to the heap at the next synchronize. The heap hands out used memory: a block that must
    // start zeroed is zeroed on `stream`, before the launch that uses it (a memset node when
    // captured).
    const auto block = reinterpret_cast<CUdeviceptr>(arena_->heap().allocate(bytes, what));
    if (zero) {
      CudaContextGuard guard(driver_);
      use(devices_[r.device]);
      driver_.check(driver_.cuMemsetD8Async(block, 0, bytes, static_cast<CUstream>(stream)), "cuMemsetD8Async");
    }
    p.blocks.push_back(block);
    p.sizes.push_back(bytes);
    p.bytes = bytes;
  } else if (bytes > p.bytes) {
    if (capturing(stream))
      throw Error(ErrorKind::InvalidUsage,
                  fmt::format("rank {}: this collective needs {} bytes of {}, more than the communicator "
                              "has, and allocating is not allowed while a stream captures a graph; issue it "
                              "once before capturing",
                              rank, bytes, what));
    CudaContextGuard guard(driver_);
    use(devices_[r.device]);
    // Doubling bounds what the kept allocations add up to at twice the largest.
    const uint64_t size = std::max(bytes, 2 * p.bytes);
    CUdeviceptr d = 0;
    driver_.check(driver_.cuMemAlloc(&d, size), "cuMemAlloc");
    // On `stream`, before the launch that uses it: a synchronous cuMemsetD8 runs on the legacy
    // default stream, which a launch on a non-blocking stream does not wait for (CUDA Runtime
    // API, "API synchronization behavior" and "Stream synchronization behavior").
    if (zero) driver_.check(driver_.cuMemsetD8Async(d, 0, size, static_cast<CUstream>(stream)), "cuMemsetD8Async");
    p.blocks.push_back(d);
    p.sizes.push_back(size);
    p.bytes = size;
  }
  if (p.blocks.empty()) return nullptr;
  // A graph that captures this launch will launch with this block again (synchronize keeps it).
  if (arena_ != nullptr && capturing(stream)) p.captured.insert(p.blocks.back());
  return reinterpret_cast<void*>(p.blocks.back());
}

void* CudaRanks::trace_alloc(int rank, uint64_t bytes, void* stream) {
  if (capturing(stream))
    throw Error(ErrorKind::InvalidUsage, "tracing does not work with graph capture (each traced launch gets fresh "
                                         "records); capture without CCC_TRACE");
  CudaContextGuard guard(driver_);
  use(devices_[ranks_.at(rank).device]);
  const CUdeviceptr records = alloc_zeroed(bytes);
  // The zeroing runs on the legacy default stream: done before a launch on any stream reads it.
  driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
  return reinterpret_cast<void*>(records);
}

void CudaRanks::trace_read(int rank, void* records, void* host, uint64_t bytes) {
  CudaContextGuard guard(driver_);
  use(devices_[ranks_.at(rank).device]);
  const auto p = reinterpret_cast<CUdeviceptr>(records);
  const CUresult copied = driver_.cuMemcpyDtoH(host, p, bytes);
  driver_.cuMemFree(p);
  driver_.check(copied, "cuMemcpyDtoH");
}

int CudaRanks::max_rank_blocks() const {
  return one_device() || (arena_ != nullptr && arena_->device_shared()) ? 0 : CCC_MAX_CHANNELS;
}

void CudaRanks::launch(int rank, const RankLaunch& l) {
  const int channels = l.channels;
  if (channels < 1 || channels + l.norm_blocks > CCC_MAX_CHANNELS)
    throw Error(ErrorKind::Internal, fmt::format("a kernel with {} channels and {} norm blocks; the launch ABI "
                                                 "allows at most {} blocks",
                                                 channels, l.norm_blocks, CCC_MAX_CHANNELS));
  CudaContextGuard guard(driver_);
  const Device& d = devices_[ranks_.at(rank).device];
  use(d);
  int blocks = channels + l.norm_blocks;
  // An RMSNorm kernel's blocks (its channels, then its norm blocks) wait for each other
  // (Progress::meet_own_channels), so they must all be resident at once: on a GPU that holds
  // them they are, once other work leaves room (nothing they wait for waits for them); more than
  // it holds could never meet. So the channels must fit, and the norm blocks, which only speed
  // the norm up, take no more than what is left.
  if (l.epilogue.weight != nullptr) {
    const Occupancy o = occupancy(l.kernel, cuda_launch_shape(rank, nranks(), channels, l.block_threads).block);
    if (channels > o.blocks())
      invalid(fmt::format("an allreduce + RMSNorm kernel's {} channels must be co-resident; device {} holds {} ({} per "
                          "SM x {} SMs)",
                          channels, d.ordinal, o.blocks(), o.per_sm, o.sms));
    blocks = static_cast<int>(std::min<int64_t>(blocks, o.blocks()));
  }
  ccc_launch_args args{reinterpret_cast<const ccc_rank_state*>(d.state), l.own, nullptr, l.count, rank, l.timeout_ns,
                       l.trace, l.epilogue, nullptr, blocks};
  const CudaLaunchShape shape = cuda_launch_shape(rank, nranks(), blocks, l.block_threads);
  std::vector<void*> params = cuda_kernel_params(args);
  const auto s = static_cast<CUstream>(l.stream);
  auto copy = [&](const StagingCopy* c, const char* what) {
    if (c == nullptr) return;
    driver_.check(driver_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(c->to), reinterpret_cast<CUdeviceptr>(c->from),
                                        c->bytes, s),
                  what);
  };
  copy(l.before, "cuMemcpyAsync (staging in)");
  const CUfunction f = d.functions.at(l.kernel);
  // Programmatic dependent launch: the kernel may begin while the stream's previous kernel is
  // still running, once every block of that one has released it (or exited), and waits for its
  // completion itself (griddepcontrol.wait, Channel::enter) before it touches anything that
  // kernel may write. What it hides is the launch latency behind the previous kernel, a ccc
  // collective or the user's own. Not while capturing: that a graph keeps the programmatic edge
  // of a captured launch is not checked on a GPU yet, so a captured launch keeps the plain
  // full-completion dependency (docs/runtime.md, "Programmatic dependent launch").
  if (pdl_ && d.programmatic_launch && !capturing(l.stream)) {
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = shape.grid;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = shape.block;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = s;
    config.attrs = &attribute;
    config.numAttrs = 1;
    driver_.check(driver_.cuLaunchKernelEx(&config, f, params.data(), nullptr), "cuLaunchKernelEx");
  } else {
    driver_.check(driver_.cuLaunchKernel(f, shape.grid, 1, 1, shape.block, 1, 1, 0, s, params.data(), nullptr),
                  "cuLaunchKernel");
  }
  copy(l.after, "cuMemcpyAsync (staging out)");
}

CudaRanks::Occupancy CudaRanks::occupancy(int kernel, int threads) const {
  CudaContextGuard guard(driver_);
  const Device& d = devices_[0];
  use(d);
  Occupancy o;
  driver_.check(driver_.cuOccupancyMaxActiveBlocksPerMultiprocessor(&o.per_sm, d.functions.at(kernel), threads, 0),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  driver_.check(driver_.cuDeviceGetAttribute(&o.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.device),
                "cuDeviceGetAttribute");
  return o;
}

CUdeviceptr CudaRanks::virtual_table(char kind, const void* data, uint64_t bytes, void* stream) {
  // One immutable table per set: a captured graph keeps reading the table it captured.
  const std::string key = kind + std::string(static_cast<const char*>(data), bytes);
  auto it = virtual_tables_.find(key);
  if (it == virtual_tables_.end()) {
    if (capturing(stream))
      throw Error(ErrorKind::InvalidUsage, "virtual ranks: a new set of buffers while a stream captures a graph; "
                                           "issue the collective with these buffers once before capturing");
    const CUdeviceptr table = alloc_zeroed(bytes);
    driver_.check(driver_.cuMemcpyHtoD(table, data, bytes), "cuMemcpyHtoD");
    // cuMemcpyHtoD from pageable memory returns once the data is staged, not written; the
    // kernel may run on a non-blocking stream, so wait for the copy.
    driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
    it = virtual_tables_.emplace(key, table).first;
  }
  return it->second;
}

void CudaRanks::launch_all(std::span<const RankLaunch> launches) {
  const int n = nranks();
  const RankLaunch& first = launches[0];  // every rank's launch differs only in its buffers
  const int kernel = first.kernel, channels = first.channels, threads = first.block_threads;
  void* const stream = first.stream;
  std::vector<ccc_buffers> own;
  for (const RankLaunch& l : launches) own.push_back(l.own);
  CudaContextGuard guard(driver_);
  const Device& d = devices_[0];
  use(d);
  CUfunction f = d.functions.at(kernel);
  // Every block spins on others: all must be resident at once. A cooperative launch guarantees
  // it or fails (CUDA Programming Guide, grid synchronisation); the occupancy check turns that
  // failure into an error that says why, before anything is queued.
  const Occupancy o = occupancy(kernel, threads);
  if (static_cast<int64_t>(n) * channels > o.blocks())
    invalid(fmt::format("{} virtual ranks x {} channels need {} co-resident blocks; device {} holds {} ({} per SM x {} SMs)",
                        n, channels, n * channels, d.ordinal, o.blocks(), o.per_sm, o.sms));
  std::vector<ccc_epilogue_args> epilogues;
  for (const RankLaunch& l : launches) epilogues.push_back(l.epilogue);
  const bool epilogue = first.epilogue.residual != nullptr;
  ccc_launch_args args{reinterpret_cast<const ccc_rank_state*>(d.state), {},
                       reinterpret_cast<const ccc_buffers*>(virtual_table('b', own.data(), own.size() * sizeof(ccc_buffers), stream)),
                       first.count, -1, first.timeout_ns, first.trace, {},
                       epilogue ? reinterpret_cast<const ccc_epilogue_args*>(virtual_table(
                                      'e', epilogues.data(), epilogues.size() * sizeof(ccc_epilogue_args), stream))
                                : nullptr,
                       channels};  // no norm blocks (max_rank_blocks)
  const CudaLaunchShape shape = cuda_launch_shape(-1, n, channels, threads);
  std::vector<void*> params = cuda_kernel_params(args);
  driver_.check(driver_.cuLaunchCooperativeKernel(f, shape.grid, 1, 1, shape.block, 1, 1, 0,
                                                  static_cast<CUstream>(stream), params.data()),
                "cuLaunchCooperativeKernel");
}

void CudaRanks::read_failures() {
  std::vector<unsigned> words(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    use(devices_[ranks_[r].device]);
    driver_.check(driver_.cuMemcpyDtoH(&words[r], reinterpret_cast<CUdeviceptr>(table_[r].error), sizeof(unsigned)),
                  "cuMemcpyDtoH");
  }
  const std::string failures = launch_failures(words.data(), nranks());
  if (failures.empty()) return;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (words[r] == CCC_OK) continue;
    ranks_[r].failure = failures;
  }
  // Every device is idle (the caller synchronised them): nothing reads the state while it is
  // zeroed, and the synchronous memsets finish before this returns.
  for (const Rank& r : ranks_) {
    use(devices_[r.device]);
    driver_.check(driver_.cuMemsetD8(r.sync, 0, CudaSyncLayout::kMailbox), "cuMemsetD8");
    driver_.check(driver_.cuMemsetD8(r.sync + CudaSyncLayout::kError, 0, sizeof(unsigned)), "cuMemsetD8");
    driver_.check(driver_.cuMemsetD8(r.sync + CudaSyncLayout::kInbox, 0, CudaSyncLayout::inbox_bytes(nranks())), "cuMemsetD8");
    // The epochs start again from zero: so do the ll receive slots, every block (graphs may still
    // use older ones; ProtocolLl::ll_flag).
    for (size_t b = 0; b < r.ll.blocks.size(); ++b)
      driver_.check(driver_.cuMemsetD8(r.ll.blocks[b], 0, r.ll.sizes[b]), "cuMemsetD8");
    driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
  }
}

void CudaRanks::synchronize_all() {
  if (arena_ != nullptr) return synchronize(arena_->rank());
  CudaContextGuard guard(driver_);
  for (const Device& d : devices_) {
    use(d);
    driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
  }
  read_failures();
  std::string failure;
  for (Rank& r : ranks_) {
    if (failure.empty()) failure = r.failure;
    r.failure.clear();
  }
  if (!failure.empty()) throw Error(ErrorKind::Remote, "collective failed: " + failure);
}

std::vector<unsigned> CudaRanks::arena_error_words() {
  std::vector<unsigned> words(ranks_.size(), CCC_OK);
  for (size_t r = 0; r < ranks_.size(); ++r)
    driver_.check(driver_.cuMemcpyDtoHAsync(&words[r], reinterpret_cast<CUdeviceptr>(table_[r].error), sizeof(unsigned),
                                            control_), "cuMemcpyDtoHAsync");
  driver_.check(driver_.cuStreamSynchronize(control_), "cuStreamSynchronize");
  return words;
}

std::string CudaRanks::async_error(int rank) {
  if (arena_ == nullptr)
    throw Error(ErrorKind::InvalidUsage, "async_error: the CUDA backend in one process reports failures at synchronize only");
  CudaContextGuard guard(driver_);
  use(devices_[0]);
  std::vector<unsigned> words = arena_error_words();
  if (words.at(rank) == CCC_OK) return {};
  return launch_failures(words.data(), nranks());  // the peers' words name who failed first
}

void CudaRanks::abort(int rank) {
  if (arena_ == nullptr) return;  // in one process, every rank goes with the communicator
  CudaContextGuard guard(driver_);
  use(devices_[0]);
  const auto error = reinterpret_cast<CUdeviceptr>(table_.at(rank).error);
  driver_.check(driver_.cuMemsetD32Async(error, CCC_ERR_ABORTED, 1, control_), "cuMemsetD32Async");
  driver_.check(driver_.cuStreamSynchronize(control_), "cuStreamSynchronize");
}

void* CudaRanks::register_buffer(void* p, uint64_t bytes) {
  if (!registry_) throw Error(ErrorKind::Internal, "register_buffer: a CUDA communicator of one process has no registry");
  CudaContextGuard guard(driver_);
  use(devices_[0]);
  void* handle = registry_->add(p, bytes);
  publish_registry();
  return handle;
}

void* CudaRanks::register_buffers(std::span<const CudaRegistry::Buffer> buffers, const char* what,
                                  const std::function<void()>& precondition) {
  if (!registry_) throw Error(ErrorKind::Internal, "register_buffers: a CUDA communicator of one process has no registry");
  CudaContextGuard guard(driver_);
  use(devices_[0]);
  void* handle = registry_->add_buffers(buffers, what, precondition);
  publish_registry();
  return handle;
}

void CudaRanks::deregister_buffer(void* handle) {
  if (!registry_) throw Error(ErrorKind::Internal, "deregister_buffer: a CUDA communicator of one process has no registry");
  CudaContextGuard guard(driver_);
  use(devices_[0]);
  registry_->remove(handle);
  publish_registry();
}

void CudaRanks::publish_registry() {
  const int rank = arena_->rank();
  table_[rank].registry = registry_->device();
  // One 8-byte field of the rank's state: the next launches read the new table; one that read
  // the old pointer keeps its table, which this change did not touch (CudaRegistry::device).
  const CUdeviceptr field = devices_[0].state + static_cast<CUdeviceptr>(rank) * sizeof(ccc_rank_state) +
                            offsetof(ccc_rank_state, registry);
  driver_.check(driver_.cuMemcpyHtoD(field, &table_[rank].registry, sizeof table_[rank].registry),
                "cuMemcpyHtoD (the registry's table)");
  driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
}

bool CudaRanks::registered(const void* p, uint64_t bytes) const { return registry_ && registry_->covers(p, bytes); }

bool CudaRanks::shareable(const void* p) const {
  int legacy_ipc = 0;
  driver_.check(driver_.cuPointerGetAttribute(&legacy_ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                              reinterpret_cast<CUdeviceptr>(p)),
                "cuPointerGetAttribute");
  return legacy_ipc != 0;
}

void CudaRanks::synchronize(int rank) {
  if (rank < 0) return synchronize_all();
  CudaContextGuard guard(driver_);
  Rank& r = ranks_.at(rank);
  use(devices_[r.device]);
  driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
  if (arena_ != nullptr) {
    // The device is idle: of each pool, the newest block stays taken, and every block a captured
    // graph launches with (a replay stages into it, peers write ll lines into it), for the
    // communicator's life: handed back to the heap, which cccCommMemAlloc also serves, it would
    // be the user's memory when the graph runs again. The rest go back.
    for (Pool* pool : {&r.scratch, &r.ll}) {
      std::vector<CUdeviceptr> blocks;
      std::vector<uint64_t> sizes;
      for (size_t i = 0; i < pool->blocks.size(); ++i) {
        if (i + 1 == pool->blocks.size() || pool->captured.contains(pool->blocks[i])) {
          blocks.push_back(pool->blocks[i]);
          sizes.push_back(pool->sizes[i]);
        } else {
          arena_->heap().free(reinterpret_cast<void*>(pool->blocks[i]));
        }
      }
      pool->blocks = std::move(blocks);
      pool->sizes = std::move(sizes);
    }
    // Resetting the sync state would need every process idle at once, so a failure is final
    // (as NCCL's asynchronous errors are, and as the host backend's across processes).
    std::vector<unsigned> words = arena_error_words();
    if (words.at(rank) != CCC_OK)
      throw Error(ErrorKind::Remote, "collective failed: " + launch_failures(words.data(), nranks()) +
                                         " (a multi-process communicator stays failed: abort or destroy it)");
    return;
  }
  unsigned word = CCC_OK;
  driver_.check(driver_.cuMemcpyDtoH(&word, reinterpret_cast<CUdeviceptr>(table_[rank].error), sizeof word), "cuMemcpyDtoH");
  if (word != CCC_OK) {
    for (const Device& d : devices_) {
      use(d);
      driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
    }
    read_failures();
  }
  if (r.failure.empty()) return;
  const std::string failure = std::move(r.failure);
  r.failure.clear();
  throw Error(ErrorKind::Remote, "collective failed: " + failure);
}

}  // namespace ccc
