#include "ccc/communicator.h"

#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

#include "backend.h"
#include "bootstrap.h"
#include "buffer_placement.h"
#include "call_tracer.h"
#include "ccc_abi.h"  // CCC_MAX_DEVICE_RANKS
#include "cuda_arena.h"
#include "cuda_backend.h"
#include "cost_model.h"  // rmsnorm_rank_blocks
#include "cuda_topology.h"
#include "nccl_model.h"
#include "debug_log.h"
#include "host_backend.h"
#include "instantiate.h"  // kMaxRanks
#include "kernel_catalogue.h"
#include "nvrtc_jit.h"  // JitError
#include "rank_call_ledger.h"
#include "registrations.h"
#include "sim_engine.h"

namespace ccc {

static_assert(kMaxRankBlocks == CCC_MAX_CHANNELS, "a rank's blocks are its channels' slots");

static_assert(Communicator::kMaxChannels == CCC_MAX_CHANNELS, "the ABI sizes the per-rank state arrays");

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, message);
}

// Before any per-rank work: a communicator the code generator can never serve must not first
// allocate, start or check a million ranks.
void check_rank_count(int nranks, BackendKind backend) {
  if (nranks < 1 || nranks > kMaxRanks)
    invalid(fmt::format("a communicator has 1 .. {} ranks (the code generator's limit), got {}", kMaxRanks, nranks));
  if (backend == BackendKind::Cuda && nranks > CCC_MAX_DEVICE_RANKS)
    invalid(fmt::format("a CUDA communicator has at most {} ranks, got {}: each block of a kernel keeps a table of its "
                        "peers in shared memory, and more ranks would not fit the 48 KiB a block may declare",
                        CCC_MAX_DEVICE_RANKS, nranks));
}

// All ranks in place or none: the kernel is specialised for one of the two. A rank that omits a
// buffer it does not use follows the others (the root never omits one).
bool call_is_in_place(const CollectiveCall& call, int nranks) {
  int in_place = 0, placed = 0;
  for (int r = 0; r < nranks; ++r) {
    if (omits_unused_buffer(call, r, call.send[r], call.recv[r])) continue;
    ++placed;
    in_place += is_in_place(call, r, call.send[r], call.recv[r]);
  }
  if (in_place != 0 && in_place != placed)
    invalid(fmt::format("{}: {} of {} ranks are in place; all or none must be",
                        collective_name(call.collective), in_place, placed));
  return in_place != 0;
}

}  // namespace

struct Communicator::Impl {
  using Prepared = KernelCatalogue::Prepared;

  CommOptions options;
  uint64_t timeout_ns = 0;
  // The process that made the communicator. A child forked later has a copy of the object but
  // none of its threads, and shares its arena with the parent: the child's calls are refused
  // (live()), and its destroy leaves alone what is the parent's.
  const pid_t owner = ::getpid();
  std::mutex mutex;  // one call at a time (communicator.h)
  std::set<std::string> building;          // kernel keys a thread builds with `mutex` released
  std::condition_variable build_finished;  // one of them is done (build_unlocked)
  // Multi-process (host_rank, cuda_rank): the shared arena, before the backend, which uses it
  // until it goes.
  std::shared_ptr<void> arena;
  std::unique_ptr<Backend> backend;
  std::optional<Topology> topology;  // none: no cost model, ring unless forced
  std::string topology_origin = "none";  // "file F", "detected"
  // Made with the communicator (start()), after the backend they use; the tracer writes its file
  // once the backend is idle, and the catalogue's warm-up threads are joined first.
  std::optional<CallTracer> tracer;
  std::optional<KernelCatalogue> catalogue;
  // The buffers of collectives issued rank by rank that not every rank has issued yet, to refuse
  // overlaps across ranks (rank_call_ledger.h). Made with the communicator, unless multi-process.
  std::optional<RankCallLedger> ledger;
  // Registered buffers and graph registrations (made with the communicator, on the backend).
  std::optional<Registrations> registrations;

  // What every constructor starts from: the options and the timeout they give.
  static std::unique_ptr<Impl> make(CommOptions options) {
    auto impl = std::make_unique<Impl>();
    impl->options = std::move(options);
    impl->timeout_ns = Communicator::timeout_ns(impl->options.timeout_seconds);
    return impl;
  }

  // CommOptions::host_block_threads, resolved.
  unsigned host_block_threads(unsigned fallback = 1) const {
    int threads = options.host_block_threads;
    if (const char* env = std::getenv("CCC_HOST_BLOCK_THREADS"); threads == 0 && env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (*end != '\0' || v < 1 || v > static_cast<long>(kMaxHostBlockThreads))
        invalid(fmt::format("CCC_HOST_BLOCK_THREADS={} is not a number of threads from 1 to {}", env,
                            kMaxHostBlockThreads));
      threads = static_cast<int>(v);
    }
    if (threads == 0) return fallback;
    if (threads < 0 || threads > static_cast<int>(kMaxHostBlockThreads))
      invalid(fmt::format("host_block_threads {}: a thread block has 1 to {} threads", threads, kMaxHostBlockThreads));
    return static_cast<unsigned>(threads);
  }

  // Once the constructor has made the backend and found the topology. A multi-process rank has
  // no ledger: its peers' buffers live in other address spaces, and no collective of this
  // process's would ever be issued by every rank (its entries would pile up).
  void start() {
    std::string trace_file = options.trace_file;
    if (const char* env = std::getenv("CCC_TRACE"); trace_file.empty() && env != nullptr) trace_file = env;
    tracer.emplace(std::move(trace_file), *backend);
    catalogue.emplace(options, *backend, topology ? &*topology : nullptr, tracer->on());
    registrations.emplace(*backend);
    if (debug_info_on()) {
      std::string described = topology ? describe_topology(*topology) : "";
      if (!described.empty()) described.pop_back();  // its last newline
      debug_info(fmt::format("a communicator of {} ranks, topology from {}{}", nranks(), topology_origin,
                             topology ? ":\n" + described : " (each collective's ring, unless forced)"));
    }
    if (!multi_process()) ledger.emplace(nranks());
  }

  // Runs `wait` (a synchronize of rank `rank`, -1: of all), then collects the rank's trace records,
  // also when the wait throws: the stream is idle by then.
  template <typename Wait>
  void synchronized(int rank, Wait&& wait) {
    try {
      wait();
    } catch (...) {
      if (ledger) ledger->forget();  // the failed collectives' buffers must not refuse later calls
      tracer->collect(rank);
      report_mismatches(rank);  // the cause, rather than the timeout or abort it led to
      throw;
    }
    tracer->collect(rank);
    report_mismatches(rank);
  }

  // Throws Error(Remote) naming the collectives of rank `rank` (-1: every rank) whose ranks
  // passed arguments that differ (RankCallLedger::agree), if any.
  void report_mismatches(int rank) {
    if (!ledger) return;
    std::string why;
    for (int r = rank < 0 ? 0 : rank; r < (rank < 0 ? nranks() : rank + 1); ++r)
      for (const std::string& m : ledger->failed(r))
        if (why.find(m) == std::string::npos) why += fmt::format("{}{}", why.empty() ? "" : "; ", m);
    if (!why.empty())
      throw Error(ErrorKind::Remote, fmt::format("collective failed: the ranks' arguments differ: {} (every rank must "
                                                 "pass the same)", why));
  }

  int nranks() const { return backend->nranks(); }

  // Where no topology file gave one: the topology `detect` finds, then the calibration.
  template <typename Detect>
  void detect_topology(Detect&& detect) {
    if (topology) return;
    topology = detect();
    topology_origin = "detected";
    calibrate();
  }

  // The topology file ($CCC_TOPO), then the calibration.
  void load_topology_file() {
    std::string path = options.topology_file;
    if (const char* env = std::getenv("CCC_TOPO"); path.empty() && env != nullptr) path = env;
    if (!path.empty()) {
      std::string errors;
      topology = load_topology(path, errors);
      if (!topology) invalid(fmt::format("cannot use topology file {}:\n{}", path, errors));
      topology_origin = "file " + path;
    }
    calibrate();
  }

  // The calibration file ($CCC_CALIBRATION) replaces the topology's constants.
  void calibrate() {
    std::string errors, cal_path = options.calibration_file;
    if (const char* env = std::getenv("CCC_CALIBRATION"); cal_path.empty() && env != nullptr) cal_path = env;
    if (cal_path.empty() || !topology) return;  // nothing to calibrate: no cost model runs
    std::optional<Calibration> cal = load_calibration(cal_path, errors);
    if (!cal) invalid(fmt::format("cannot use calibration file {}:\n{}", cal_path, errors));
    apply_calibration(*topology, *cal);
  }

  bool multi_process() const { return backend->multi_process(); }
  // A multi-process communicator's rank here (-1: every rank is).
  int local_rank() const { return backend->local_rank(); }

  // `epilogue`: the rank's epilogue operands (used by its own rank only: never staged or shared).
  RankLaunch rank_launch(const Prepared& p, const CollectiveCall& call, const PlacedBuffers& placed, void* stream,
                         const RankEpilogue& epilogue) const {
    const EmittedKernel& k = p.loaded->kernel;
    const ccc_epilogue_args e{epilogue.residual,
                              epilogue.weight,
                              epilogue.residual_out,
                              static_cast<unsigned char*>(epilogue.quant_out),
                              call.hidden,
                              call.eps,
                              call.quant_scale ? 1.0f / *call.quant_scale : 0.0f};
    RankLaunch launch{p.loaded->handle, k.channels, k.block_threads, placed.own, e, call.count, timeout_ns, stream,
                      nullptr, placed.before ? &*placed.before : nullptr, placed.after ? &*placed.after : nullptr};
    // An RMSNorm kernel's norm blocks, as many as the backend allows (Backend::max_rank_blocks).
    if (call.epilogue == Epilogue::ResidualRmsNorm && call.hidden > 0)
      launch.norm_blocks = rmsnorm_rank_blocks(k.channels, static_cast<int64_t>(call.count / call.hidden),
                                               backend->max_rank_blocks()) -
                           k.channels;
    return launch;
  }

  void launch_rank(const Prepared& p, const CollectiveCall& call, int rank, const void* send, void* recv,
                   void* stream, const RankEpilogue& epilogue) {
    const PlacedBuffers placed = place_buffers(*backend, p.needs, call, rank, send, recv, stream, registrations->graph());
    RankLaunch launch = rank_launch(p, call, placed, stream, epilogue);
    launch.trace = tracer->records(p.loaded->kernel, call, rank, stream);
    backend->launch(rank, launch);
  }

  // Each buffer a rank passed must be memory its kernel can use (NULL ones are validated already).
  void check_buffers(int rank, const void* send, const void* recv, const CollectiveCall& call,
                     const RankEpilogue& epilogue) const {
    const int n = nranks();
    if (send != nullptr) backend->check_buffer(rank, send, send_bytes(call, n), "send");
    if (recv != nullptr) backend->check_buffer(rank, recv, recv_bytes(call, n), "recv");
    if (epilogue.residual != nullptr) backend->check_buffer(rank, epilogue.residual, recv_bytes(call, n), "residual");
    if (epilogue.weight != nullptr)
      backend->check_buffer(rank, epilogue.weight, call.hidden * data_type_size(call.dtype), "weight");
    if (epilogue.residual_out != nullptr)
      backend->check_buffer(rank, epilogue.residual_out, recv_bytes(call, n), "residual_out");
    if (epilogue.quant_out != nullptr) backend->check_buffer(rank, epilogue.quant_out, call.count, "quant_out");
  }
  static RankEpilogue epilogue_of(const CollectiveCall& call, int rank) {
    RankEpilogue e;
    if (call.epilogue == Epilogue::None) return e;
    e.residual = call.residual[rank];
    if (call.epilogue == Epilogue::ResidualRmsNorm) {
      e.weight = call.weight[rank];
      e.residual_out = call.residual_out.empty() ? nullptr : call.residual_out[rank];
      if (call.quant_scale) e.quant_out = call.quant_out[rank];
    }
    return e;
  }

  // Builds the kernel `call` needs if it is not loaded yet, with `lock` (on `mutex`) released
  // meanwhile: a build compiles for seconds, and loading its module may wait for the kernels
  // running on a device, which may wait for a peer rank whose thread must take the lock to launch
  // (Backend::build, docs/runtime.md "Threads"). One thread builds a kernel; the others that need
  // it wait for that build (with the lock released) instead of loading copies of their own, whose
  // loads could wait for a kernel that waits for them.
  void build_unlocked(std::unique_lock<std::mutex>& lock, const CollectiveCall& call, bool in_place) {
    for (;;) {
      std::optional<std::string> key = catalogue->missing(call, in_place);
      if (!key) return;
      if (building.contains(*key)) {
        build_finished.wait(lock);  // then look again: built, or failed (this thread tries)
        continue;
      }
      KernelCatalogue::Missing missing = catalogue->to_build(call, in_place, *key);
      building.insert(*key);
      lock.unlock();
      std::unique_ptr<Backend::BuiltKernel> built;
      try {
        built = catalogue->build(missing);
      } catch (...) {
        lock.lock();
        building.erase(*key);
        build_finished.notify_all();
        throw;
      }
      lock.lock();
      building.erase(*key);
      catalogue->add(std::move(missing), std::move(built));
      build_finished.notify_all();
      return;
    }
  }

  void run(std::unique_lock<std::mutex>& lock, const CollectiveCall& call, Streams streams) {
    const int n = nranks();
    if (multi_process())
      throw Error(ErrorKind::InvalidUsage, fmt::format("{}: this process holds rank {} of {} only: issue its part "
                                                       "with run_rank", collective_name(call.collective),
                                                       local_rank(), n));
    validate_call(call, n);
    if (!streams.empty() && streams.size() != static_cast<size_t>(n))
      invalid(fmt::format("{}: expected {} streams (one per rank), got {}",
                          collective_name(call.collective), n, streams.size()));
    if (call.count == 0) return;
    for (int r = 0; r < n; ++r) check_buffers(r, call.send[r], call.recv[r], call, epilogue_of(call, r));
    const bool in_place = call_is_in_place(call, n);
    build_unlocked(lock, call, in_place);
    // One grid: a kernel that fit_grid rebuilds with fewer channels is built under the lock, as
    // every rank launches from this one call.
    Prepared p = catalogue->prepare(call, in_place);
    if (backend->one_grid()) {
      p = catalogue->fit_grid(call, in_place, p);
      void* stream = streams.empty() ? nullptr : streams[0];
      std::vector<PlacedBuffers> placed(n);
      std::vector<RankLaunch> launches(n);
      for (int r = 0; r < n; ++r) {
        placed[r] = place_buffers(*backend, p.needs, call, r, call.send[r], call.recv[r], stream, registrations->graph());
        launches[r] = rank_launch(p, call, placed[r], stream, epilogue_of(call, r));
      }
      launches[0].trace = tracer->records(p.loaded->kernel, call, -1, stream);
      backend->launch_all(launches);
      return;
    }
    for (int r = 0; r < n; ++r)
      launch_rank(p, call, r, call.send[r], call.recv[r], streams.empty() ? nullptr : streams[r], epilogue_of(call, r));
    if (ledger) ledger->record_all();
    if (backend->calls_complete()) synchronized(-1, [&] { backend->synchronize(-1); });
  }

  void run_rank(std::unique_lock<std::mutex>& lock, const CollectiveCall& call, int rank, const void* send, void* recv,
                void* stream, const RankEpilogue& epilogue) {
    const int n = nranks();
    if (rank < 0 || rank >= n)
      invalid(fmt::format("{}: rank {} is not a rank of this communicator (0..{})",
                          collective_name(call.collective), rank, n - 1));
    if (multi_process() && rank != local_rank())
      invalid(fmt::format("{}: rank {} is in another process; this one holds rank {}",
                          collective_name(call.collective), rank, local_rank()));
    validate_rank_call(call, n, rank, send, recv, epilogue);
    if (call.count == 0) return;
    if (backend->one_grid())
      throw Error(ErrorKind::InvalidUsage, "virtual ranks launch as one grid: issue the collective for "
                                           "every rank at once, not rank by rank");
    check_buffers(rank, send, recv, call, epilogue);
    std::vector<BufferExtent> extents;
    const bool in_place = is_in_place(call, rank, send, recv);
    if (ledger) ledger->check(call, rank, send, recv, epilogue);  // an overlap is refused before any compile
    build_unlocked(lock, call, in_place);
    const CallShape shape{call.collective, call.count,  call.dtype, call.op,         call.root,
                          in_place,        call.epilogue, call.hidden, call.eps, call.quant_scale};
    if (ledger) {
      extents = ledger->check(call, rank, send, recv, epilogue);  // again: other ranks may have issued meanwhile
      if (!ledger->agree(shape, rank).empty()) {
        // Nothing of this rank's runs, and the ranks that queued theirs stop waiting for it
        // (host; a CUDA communicator in one process cannot abort a queued kernel, whose ranks wait
        // out the timeout). Every rank that issued the collective, now or later, hears why at
        // its synchronize.
        for (int r = 0; r < n; ++r) backend->abort(r);
        ledger->record(rank, {}, shape);
        return;
      }
    }
    const Prepared p = catalogue->prepare(call, in_place);
    launch_rank(p, call, rank, send, recv, stream, epilogue);
    if (ledger) ledger->record(rank, extents, shape);
  }
};

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->start(); }
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() { forget_if_forked(); }

Communicator Communicator::host(int nranks, CommOptions options) {
  check_rank_count(nranks, BackendKind::Host);
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->backend = std::make_unique<HostRanks>(nranks, impl->host_block_threads());
  impl->load_topology_file();
  return Communicator(std::move(impl));
}

Communicator Communicator::sim(int nranks, CommOptions options) {
  check_rank_count(nranks, BackendKind::Sim);
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->load_topology_file();
  if (!impl->topology)
    invalid("the simulator needs a topology: set CommOptions::topology_file or $CCC_TOPO (topologies/ has examples)");
  if (impl->options.sim_graph_replays) price_graph_replays(*impl->topology);
  // Unless set, as many threads a block as ranks (8 to 32): a step's waits and mailbox reads then
  // run in parallel, as on the GPU, and the time of a data pass does not depend on how many
  // threads share it; more threads would only cost host time.
  const unsigned threads = impl->host_block_threads(static_cast<unsigned>(std::clamp(nranks, 8, 32)));
  auto engine = std::make_shared<SimEngine>(*impl->topology, nranks, threads, !impl->options.sim_timing_only);
  impl->backend = std::make_unique<HostRanks>(nranks, std::move(engine));
  return Communicator(std::move(impl));
}

double Communicator::virtual_seconds() {
  std::optional<double> t = live().backend->virtual_seconds();
  if (!t) throw Error(ErrorKind::InvalidUsage, "virtual_seconds: only a simulator communicator (Communicator::sim) has virtual time");
  return *t;
}

std::string Communicator::critical_path() {
  std::optional<std::string> path = live().backend->critical_path();
  if (!path) throw Error(ErrorKind::InvalidUsage, "critical_path: only a simulator communicator (Communicator::sim) has one");
  return *path;
}

UniqueId Communicator::unique_id() {
  // As long as a rank that never joins holds up the others: 1.5 x the default timeout.
  const uint64_t timeout = timeout_ns(std::nullopt);
  return bootstrap_unique_id(timeout == ~0ULL ? ~0ULL : timeout + timeout / 2);
}

namespace {

uint64_t arena_heap_bytes(uint64_t asked) {
  if (asked > 0) return asked;
  const char* env = std::getenv("CCC_ARENA_BYTES");
  if (env == nullptr || *env == '\0') return uint64_t{64} << 20;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(env, &end, 10);
  if (*end != '\0' || v == 0) invalid(fmt::format("CCC_ARENA_BYTES={} is not a positive number of bytes", env));
  return v;
}

}  // namespace

Communicator Communicator::host_rank(const UniqueId& id, int nranks, int rank, CommOptions options,
                                     RankOptions rank_options) {
  check_rank_count(nranks, BackendKind::Host);
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->load_topology_file();
  const uint64_t heap = arena_heap_bytes(rank_options.arena_bytes);
  JoinRequest request;
  request.nranks = nranks;
  request.rank = rank;
  request.kind = ArenaKind::Host;
  request.part_bytes = heap;
  request.total_bytes = HostArena::total_bytes(nranks, heap);
  request.timeout_ns = impl->timeout_ns;
  FdMmapMapper mapper(request.total_bytes, request.total_bytes);
  bootstrap_join(id, request, mapper);
  auto arena = std::make_shared<HostArena>(mapper.keep(), nranks, rank, heap);
  impl->backend = std::make_unique<HostRanks>(*arena, impl->host_block_threads());
  impl->arena = std::move(arena);
  return Communicator(std::move(impl));
}

Communicator Communicator::cuda_rank(const UniqueId& id, int nranks, int rank, CommOptions options,
                                     RankOptions rank_options) {
  check_rank_count(nranks, BackendKind::Cuda);
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->load_topology_file();
  const uint64_t heap = arena_heap_bytes(rank_options.arena_bytes);
  try {
    const CudaDriver& driver = CudaDriver::get();
    const int device = rank_options.device >= 0 ? rank_options.device : current_cuda_device(driver);
    auto arena = std::make_shared<CudaArena>(id, nranks, rank, device, heap, impl->timeout_ns);
    // Every rank detects from the same exchanged devices, so every rank chooses alike.
    impl->detect_topology([&] { return topology_of_ranks(arena->devices()); });
    impl->backend = std::make_unique<CudaRanks>(*arena);
    impl->arena = std::move(arena);
  } catch (const NoCudaDevice& e) {
    throw Error(ErrorKind::NoDevice, e.what());
  } catch (const CudaError& e) {
    throw Error(ErrorKind::Cuda, e.what());
  }
  return Communicator(std::move(impl));
}

namespace {

std::unique_ptr<CudaRanks> open_cuda(std::vector<int> devices, int virtual_ranks) {
  try {
    return std::make_unique<CudaRanks>(std::move(devices), virtual_ranks);
  } catch (const NoCudaDevice& e) {
    throw Error(ErrorKind::NoDevice, e.what());
  } catch (const CudaError& e) {
    throw Error(ErrorKind::Cuda, e.what());
  }
}

}  // namespace

Communicator Communicator::cuda(std::vector<int> devices, CommOptions options) {
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->backend = open_cuda(devices, 0);
  impl->load_topology_file();
  impl->detect_topology([&] { return detect_cuda_topology(CudaDriver::get(), devices); });
  return Communicator(std::move(impl));
}

Communicator Communicator::cuda_virtual(int device, int nranks, CommOptions options) {
  check_rank_count(nranks, BackendKind::Cuda);
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->backend = open_cuda({device}, nranks);
  impl->load_topology_file();
  impl->detect_topology([&] { return detect_virtual_topology(CudaDriver::get(), device, nranks); });
  return Communicator(std::move(impl));
}

Communicator::Impl& Communicator::live() const {
  if (!impl_) throw Error(ErrorKind::InvalidUsage, "communicator used after destroy");
  if (const pid_t self = ::getpid(); self != impl_->owner)
    throw Error(ErrorKind::InvalidUsage,
                fmt::format("communicator used in process {}, a child forked from process {} that made it; a "
                            "forked process cannot use its parent's communicators (make its own)",
                            self, impl_->owner));
  return *impl_;
}

void Communicator::forget_if_forked() {
  // Tearing down the parent's communicator here would join threads this process does not have
  // and release memory and endpoints the parent still uses; the copy is left to the exit.
  if (impl_ && impl_->owner != ::getpid()) static_cast<void>(impl_.release());
}

int Communicator::size() const { return live().nranks(); }
BackendKind Communicator::backend() const { return live().backend->kind(); }

namespace {

// Runs `body`, turning the backends' own exceptions, and the allocations that fail in them
// (scratch, staging, per-rank state), into ccc::Error.
template <typename Body>
void translating(Body&& body) {
  try {
    body();
  } catch (const CudaError& e) {
    throw Error(ErrorKind::Cuda, e.what());
  } catch (const JitError& e) {
    throw Error(ErrorKind::Compile, e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::System, "out of host memory (a rank's scratch or state)");
  }
}

}  // namespace

uint64_t Communicator::timeout_ns(std::optional<double> seconds) {
  const char* env = std::getenv("CCC_TIMEOUT");
  if (!seconds && env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (*end != '\0') invalid(fmt::format("CCC_TIMEOUT={} is not a number of seconds", env));
    seconds = v;
  }
  const double s = seconds.value_or(kDefaultTimeoutSeconds);
  if (std::isnan(s) || s <= 0)
    invalid(fmt::format("timeout {} s: a timeout must be positive (infinite: wait for ever)", s));
  constexpr double kForever = 365.0 * 24 * 3600;  // a year: for ever, as far as a wait goes
  if (s >= kForever) return ~0ULL;
  return static_cast<uint64_t>(s * 1e9);
}

void Communicator::run(const CollectiveCall& call, Streams streams) {
  Impl& impl = live();
  std::unique_lock lock(impl.mutex);
  translating([&] { impl.run(lock, call, streams); });
}

void Communicator::run_rank(const CollectiveCall& call, int rank, const void* send, void* recv, void* stream,
                            const RankEpilogue& epilogue) {
  Impl& impl = live();
  std::unique_lock lock(impl.mutex);
  translating([&] { impl.run_rank(lock, call, rank, send, recv, stream, epilogue); });
}

void Communicator::all_reduce(Sends send, Recvs recv, uint64_t count, DataType dtype, ReduceOp op,
                              Streams streams) {
  run({Collective::AllReduce, count, dtype, op, -1, send, recv}, streams);
}

void Communicator::all_reduce_residual(Sends send, Sends residual, Recvs recv, uint64_t count, DataType dtype,
                                       ReduceOp op, Streams streams) {
  run({Collective::AllReduce, count, dtype, op, -1, send, recv, Epilogue::Residual, residual}, streams);
}

void Communicator::all_reduce_residual_rmsnorm(Sends send, Sends residual, Sends weight, Recvs recv,
                                               Recvs residual_out, uint64_t count, uint64_t hidden, float eps,
                                               DataType dtype, ReduceOp op, Streams streams) {
  run({Collective::AllReduce, count, dtype, op, -1, send, recv, Epilogue::ResidualRmsNorm, residual, weight,
       residual_out, hidden, eps},
      streams);
}

void Communicator::all_reduce_residual_rmsnorm_fp8(Sends send, Sends residual, Sends weight, Recvs recv,
                                                   Recvs residual_out, Recvs quant_out, uint64_t count,
                                                   uint64_t hidden, float eps, float scale, DataType dtype,
                                                   ReduceOp op, Streams streams) {
  CollectiveCall call{Collective::AllReduce, count, dtype, op, -1, send, recv, Epilogue::ResidualRmsNorm, residual,
                      weight, residual_out, hidden, eps};
  call.quant_scale = scale;
  call.quant_out = quant_out;
  run(call, streams);
}

void Communicator::reduce_scatter(Sends send, Recvs recv, uint64_t recv_count, DataType dtype,
                                  ReduceOp op, Streams streams) {
  run({Collective::ReduceScatter, recv_count, dtype, op, -1, send, recv}, streams);
}

void Communicator::all_gather(Sends send, Recvs recv, uint64_t send_count, DataType dtype,
                              Streams streams) {
  run({Collective::AllGather, send_count, dtype, ReduceOp::Sum, -1, send, recv}, streams);
}

void Communicator::broadcast(Sends send, Recvs recv, uint64_t count, DataType dtype, int root,
                             Streams streams) {
  run({Collective::Broadcast, count, dtype, ReduceOp::Sum, root, send, recv}, streams);
}

void Communicator::reduce(Sends send, Recvs recv, uint64_t count, DataType dtype, ReduceOp op,
                          int root, Streams streams) {
  run({Collective::Reduce, count, dtype, op, root, send, recv}, streams);
}

void Communicator::all_to_all(Sends send, Recvs recv, uint64_t count, DataType dtype, Streams streams) {
  run({Collective::AllToAll, count, dtype, ReduceOp::Sum, -1, send, recv}, streams);
}

// Without the communicator's mutex: a rank waiting here must not keep the others from issuing
// the collective it waits for.
void Communicator::synchronize() {
  Impl& impl = live();
  if (impl.multi_process()) return synchronize_rank(impl.local_rank());
  translating([&] { impl.synchronized(-1, [&] { impl.backend->synchronize(-1); }); });
}

void Communicator::synchronize_rank(int rank) {
  Impl& impl = live();
  if (rank < 0 || rank >= impl.nranks())
    invalid(fmt::format("rank {} is not a rank of this communicator (0..{})", rank, impl.nranks() - 1));
  translating([&] {
    impl.synchronized(rank, [&] { impl.backend->synchronize(rank); });
  });
}

void Communicator::warm_up(const std::vector<CollectiveCall>& shapes, bool in_place, WarmUp mode) {
  Impl& impl = live();
  std::unique_lock lock(impl.mutex);
  translating([&] {
    const std::vector<std::function<void()>> compiles = impl.catalogue->warm_up(shapes, in_place, mode);
    lock.unlock();  // as a call's build (Impl::build_unlocked)
    for (const auto& compile : compiles) compile();
  });
}

KernelChoice Communicator::choice_for(const CollectiveCall& call) const {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  return impl.catalogue->choose(call);
}

Prediction Communicator::predict(const CollectiveCall& call) const {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  if (!impl.topology) return {};
  const int n = impl.nranks();
  const auto bytes = static_cast<int64_t>(std::max(send_bytes(call, n), recv_bytes(call, n)));
  return {impl.catalogue->predicted_seconds(call), nccl_predicted_seconds(call.collective, bytes, n, *impl.topology)};
}

void* Communicator::mem_alloc(uint64_t bytes) {
  Impl& impl = live();
  ArenaHeap* heap = impl.backend->heap();
  if (heap == nullptr)
    throw Error(ErrorKind::InvalidUsage, "mem_alloc: only a multi-process communicator (host_rank, cuda_rank) has an arena");
  if (bytes == 0) invalid("mem_alloc: 0 bytes");
  return heap->allocate(bytes, "mem_alloc");
}

void Communicator::mem_free(void* p) {
  Impl& impl = live();
  ArenaHeap* heap = impl.backend->heap();
  if (heap == nullptr)
    throw Error(ErrorKind::InvalidUsage, "mem_free: only a multi-process communicator (host_rank, cuda_rank) has an arena");
  heap->free(p);
}

// Registration changes what a rank's launches read: no launch of the communicator's starts
// while it does (the lock).
void* Communicator::register_buffer(void* p, uint64_t bytes) {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  void* handle = nullptr;
  translating([&] { handle = impl.registrations->register_buffer(p, bytes); });
  return handle;
}

void Communicator::deregister_buffer(void* handle) {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  translating([&] { impl.registrations->deregister_buffer(handle); });
}

void Communicator::begin_graph_registration() {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  impl.registrations->begin_graph();
}

void* Communicator::end_graph_registration() {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  void* handle = nullptr;
  translating([&] { handle = impl.registrations->end_graph(); });
  return handle;
}

std::string Communicator::async_error(int rank) {
  Impl& impl = live();
  if (rank < 0 || rank >= impl.nranks())
    invalid(fmt::format("rank {} is not a rank of this communicator (0..{})", rank, impl.nranks() - 1));
  std::string failure;
  translating([&] { failure = impl.backend->async_error(rank); });
  return failure;
}

void Communicator::abort_rank(int rank) {
  Impl& impl = live();
  if (rank < 0 || rank >= impl.nranks())
    invalid(fmt::format("rank {} is not a rank of this communicator (0..{})", rank, impl.nranks() - 1));
  translating([&] { impl.backend->abort(rank); });
}

void Communicator::destroy() {
  if (!impl_) live();  // refused after destroy
  forget_if_forked();
  impl_.reset();
}

}  // namespace ccc
