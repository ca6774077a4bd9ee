#include "ccc/communicator.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <unistd.h>

#include "bootstrap.h"
#include "ccc_abi.h"  // CCC_MAX_DEVICE_RANKS
#include "content_hash.h"
#include "cuda_arena.h"
#include "cuda_backend.h"
#include "cuda_topology.h"
#include "host_backend.h"
#include "instantiate.h"  // kMaxRanks
#include "kernel_source.h"
#include "shipped_schedules.h"
#include "nvrtc_jit.h"
#include "rank_call_ledger.h"
#include "schedule_menu.h"
#include "select.h"
#include "trace.h"

namespace ccc {

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

uint64_t round_up(uint64_t bytes, uint64_t to) { return (bytes + to - 1) / to * to; }

// Without a topology to model: the collective's bandwidth-optimal schedule, its ring (the first
// shipped one whose name starts with "ring") or for alltoall the direct exchange, else its first
// shipped schedule.
std::string default_schedule(Collective collective) {
  std::string first;
  for (const ShippedSchedule& s : shipped_schedules()) {
    if (s.collective != collective) continue;
    if (s.name.rfind("ring", 0) == 0 || s.name == "alltoall_direct") return s.name;
    if (first.empty()) first = s.name;
  }
  if (first.empty())
    invalid(fmt::format("no shipped schedule implements {}", collective_name(collective)));
  return first;
}

}  // namespace

struct Communicator::Impl {
  struct Loaded {
    EmittedKernel kernel;
    HostKernel host;     // host backend
    int cuda_index = -1;  // cuda backend
  };

  // A kernel ready to launch for one call shape, and the call's signature (ccc_buffers::call).
  struct Prepared {
    const Loaded* loaded = nullptr;
    uint64_t signature = 0;
    uint64_t scratch_bytes = 0;
    uint64_t ll_bytes = 0;  // protocol ll: the receive slots
    bool in_place = false;
  };

  // What selection picked for one call shape.
  struct Choice {
    std::string algo;
    int channels = 0;
    int64_t tile_bytes = 0;
    Protocol protocol = Protocol::Simple;
  };

  CommOptions options;
  uint64_t timeout_ns = 0;
  // The process that made the communicator. A child forked later has a copy of the object but
  // none of its threads, and shares its arena with the parent: the child's calls are refused
  // (live()), and its destroy leaves alone what is the parent's.
  const pid_t owner = ::getpid();
  std::mutex mutex;  // one call at a time (communicator.h)
  // Multi-process (host_rank, cuda_rank): the shared arena, before the backend, which uses it
  // until it goes.
  std::unique_ptr<HostArena> arena;
  std::unique_ptr<CudaArena> cuda_arena;
  std::optional<HostRanks> host;
  std::unique_ptr<CudaRanks> cuda;
  std::optional<Topology> topology;  // none: no cost model, ring unless forced
  std::map<std::pair<Collective, int>, std::unique_ptr<ScheduleMenu>> menus;  // by collective, root
  std::map<std::string, Choice> choices;  // by call shape
  std::map<std::string, Loaded> kernels;  // by schedule and kernel shape
  // The buffers of collectives issued rank by rank that not every rank has issued yet, to refuse
  // overlaps across ranks (rank_call_ledger.h). Made with the communicator, unless multi-process.
  std::optional<RankCallLedger> ledger;
  // One process: the handles register_buffer gave, each the address of a byte of its own (so
  // that no two are equal). Across processes the CUDA registry keeps its own.
  std::map<void*, std::unique_ptr<char>> local_registrations;
  // Between begin_graph_registration and end_graph_registration. CUDA across processes: the
  // buffers collectives issued under capture use in place, for end_graph_registration to
  // register, and the streams that captured them.
  bool graph_registration = false;
  std::set<std::pair<uintptr_t, uint64_t>> captured;
  std::set<void*> capturing_streams;

  // Tracing (docs/tracing.md): each launch gets fresh records, collected once its rank's
  // stream is idle (a synchronize), into `trace`, which goes to `trace_file` at the end.
  struct PendingTrace {
    uint64_t call_index;
    TraceCall call;
    int rank;  // -1: every rank (virtual ranks, one grid)
    int channels;
    std::unique_ptr<ccc_trace_channel[]> records;  // [channels], or [N * channels] for rank -1
    void* device = nullptr;  // cuda: where the kernel writes them, read back when collected
  };
  std::string trace_file;  // empty: not tracing
  std::mutex trace_mutex;  // pending and trace: synchronize runs without `mutex`
  std::vector<PendingTrace> pending;
  TraceLog trace;
  std::vector<uint64_t> traced_calls;  // per rank: its collectives so far (each rank issues the same)
  // Background warm-ups (warm_up): compile into the cache only. Last, so they are joined
  // before anything else of the communicator goes away.
  std::vector<std::jthread> warmers;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() { finish_trace(); }

  void start_trace() {
    trace_file = options.trace_file;
    if (const char* env = std::getenv("CCC_TRACE"); trace_file.empty() && env != nullptr) trace_file = env;
  }

  // Fresh records for one launch of `p` by `rank` (-1: all ranks), remembered until collected:
  // host memory on the host backend, device memory of the rank's device on cuda.
  ccc_trace_channel* trace_records(const Prepared& p, const CollectiveCall& call, int rank, void* stream) {
    if (trace_file.empty()) return nullptr;
    const int n = nranks(), channels = p.loaded->kernel.channels;
    traced_calls.resize(n);
    PendingTrace t{traced_calls[std::max(rank, 0)], {}, rank, channels,
                   std::make_unique<ccc_trace_channel[]>(static_cast<size_t>(channels) * (rank < 0 ? n : 1))};
    t.call = {collective_name(call.collective), p.loaded->kernel.schedule, data_type_name(call.dtype), reduce_op_name(call.op),
              call.count, std::max(send_bytes(call, n), recv_bytes(call, n)), n, channels, p.loaded->kernel.tile_bytes,
              p.loaded->kernel.pipeline};
    ccc_trace_channel* records = t.records.get();
    if (cuda) {
      t.device = cuda->trace_alloc(std::max(rank, 0), trace_bytes(t), stream);
      records = static_cast<ccc_trace_channel*>(t.device);
    }
    for (int r = 0; r < n; ++r)  // only now: a refused call is not one of the rank's collectives
      if (rank < 0 || r == rank) ++traced_calls[r];
    std::lock_guard lock(trace_mutex);
    pending.push_back(std::move(t));
    return records;
  }

  static uint64_t trace_bytes(const PendingTrace& t) {
    return sizeof(ccc_trace_channel) * static_cast<uint64_t>(t.channels) * (t.rank < 0 ? t.call.nranks : 1);
  }

  // Collects the records of rank `rank`'s launches (-1: every rank's), whose streams are idle.
  void collect_trace(int rank) {
    std::lock_guard lock(trace_mutex);
    std::erase_if(pending, [&](const PendingTrace& t) {
      if (rank >= 0 && t.rank != rank) return false;
      if (t.device != nullptr) cuda->trace_read(std::max(t.rank, 0), t.device, t.records.get(), trace_bytes(t));
      if (t.rank >= 0) {
        trace.add(t.call_index, t.call, t.rank, t.records.get(), t.channels);
      } else {
        for (int r = 0; r < t.call.nranks; ++r)
          trace.add(t.call_index, t.call, r, t.records.get() + static_cast<size_t>(r) * t.channels, t.channels);
      }
      return true;
    });
  }

  // Runs `wait` (a synchronize of rank `rank`, -1: of all), then collects the rank's trace records,
  // also when the wait throws: the stream is idle by then.
  template <typename Wait>
  void synchronized(int rank, Wait&& wait) {
    try {
      wait();
    } catch (...) {
      if (ledger) ledger->forget();  // the failed collectives' buffers must not refuse later calls
      collect_trace(rank);
      report_mismatches(rank);  // the cause, rather than the timeout or abort it led to
      throw;
    }
    collect_trace(rank);
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

  // Waits for every rank, collects what is pending and writes the file; never throws.
  void finish_trace() {
    if (trace_file.empty()) return;
    try {
      host ? host->synchronize() : cuda->synchronize();
    } catch (const std::exception&) {
      // A failed collective was the caller's to hear about; its channels' records stay partial.
    }
    try {
      collect_trace(-1);
    } catch (const std::exception& e) {
      fmt::print(stderr, "ccc: warning: trace {}: records lost: {}\n", trace_file, e.what());
    }
    if (trace.dropped() > 0)
      fmt::print(stderr, "ccc: warning: trace {}: {} step records did not fit (at most {} per channel and call)\n",
                 trace_file, trace.dropped(), CCC_TRACE_CAPACITY);
    if (std::string error; !trace.write(trace_file, &error)) fmt::print(stderr, "ccc: warning: {}\n", error);
  }

  int nranks() const { return host ? host->nranks() : cuda->nranks(); }
  JitCache& cache() const { return options.cache ? *options.cache : JitCache::process_cache(); }

  // What every constructor starts from: the options, the timeout they give, the trace.
  static std::unique_ptr<Impl> make(CommOptions options) {
    auto impl = std::make_unique<Impl>();
    impl->options = std::move(options);
    impl->timeout_ns = Communicator::timeout_ns(impl->options.timeout_seconds);
    impl->start_trace();
    return impl;
  }

  // The topology file ($CCC_TOPO), then the calibration.
  void load_topology_file() {
    std::string path = options.topology_file;
    if (const char* env = std::getenv("CCC_TOPO"); path.empty() && env != nullptr) path = env;
    if (!path.empty()) {
      std::string errors;
      topology = load_topology(path, errors);
      if (!topology) invalid(fmt::format("cannot use topology file {}:\n{}", path, errors));
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

  const ScheduleMenu& menu_for(Collective collective, int root) {
    std::unique_ptr<ScheduleMenu>& menu = menus[{collective, root}];
    if (!menu) {
      std::vector<SourceFile> files;
      for (const ShippedSchedule& s : shipped_schedules()) files.push_back(s.file);
      menu = std::make_unique<ScheduleMenu>(collective, nranks(), files, std::max(root, 0));
    }
    return *menu;
  }

  static std::string choice_key(const CollectiveCall& call) {
    return fmt::format("{}/{}/{}/{}", collective_name(call.collective), call.count, data_type_name(call.dtype),
                       call.root);
  }

  Choice choose(const CollectiveCall& call) {
    const std::string key = choice_key(call);
    if (auto it = choices.find(key); it != choices.end()) return it->second;
    // On the host a channel is a thread, not an SM: one per rank unless asked (more only add
    // threads that wait for the same two cores).
    const int channels = options.channels > 0 ? options.channels : host ? 1 : 0;
    Choice choice{options.algo, channels, options.tile_bytes, options.protocol.value_or(Protocol::Simple)};
    const int n = nranks();
    const auto bytes = static_cast<int64_t>(std::max(send_bytes(call, n), recv_bytes(call, n)));
    if (choice.protocol == Protocol::Ll && bytes > kLlMaxBytes)
      invalid(fmt::format("{} of {} bytes: protocol ll moves at most {} bytes per call (its receive slots are sized "
                          "for that); use protocol simple",
                          collective_name(call.collective), bytes, kLlMaxBytes));
    if (options.schedule) return choices.emplace(key, choice).first->second;  // the given one
    const char* env = std::getenv("CCC_ALGO");
    if (choice.algo.empty() && env != nullptr) choice.algo = env;
    if (!topology) {
      if (choice.algo.empty()) choice.algo = default_schedule(call.collective);
    } else {
      SelectOptions select;
      select.algo = options.algo;  // select_schedule reads CCC_ALGO itself
      if (channels > 0) select.channels = {channels};
      if (options.tile_bytes > 0) select.tiles = {options.tile_bytes};
      if (options.protocol) select.protocols = {*options.protocol};
      try {
        const ccc::Choice best = select_schedule(call.collective, bytes, static_cast<int>(data_type_size(call.dtype)),
                                                 *topology, menu_for(call.collective, call.root).candidates(), select);
        choice = {best.name(), best.params.channels, best.params.tile_bytes, best.params.protocol};
      } catch (const std::invalid_argument& e) {
        invalid(fmt::format("{}: no schedule fits: {}", collective_name(call.collective), e.what()));
      }
    }
    return choices.emplace(key, choice).first->second;
  }

  KernelShape kernel_shape(const CollectiveCall& call, bool in_place) {
    const Choice choice = choose(call);
    KernelShape shape;
    shape.collective = call.collective;
    shape.nranks = nranks();
    shape.root = call.root;
    shape.dtype = call.dtype;
    shape.op = call.op;
    shape.channels = choice.channels;
    shape.tile_bytes = choice.tile_bytes;
    shape.in_place = in_place;
    shape.protocol = choice.protocol;
    shape.one_device = cuda && cuda->one_device();
    return shape;
  }

  static std::string kernel_key(const Choice& choice, const KernelShape& shape) {
    return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}", choice.algo, collective_name(shape.collective), shape.nranks,
                       shape.root, data_type_name(shape.dtype), reduce_op_name(shape.op), shape.channels,
                       shape.tile_bytes, shape.in_place, protocol_name(shape.protocol), shape.one_device);
  }

  const Loaded& kernel_for(const CollectiveCall& call, bool in_place, std::string* key_out) {
    const Choice choice = choose(call);
    const KernelShape shape = kernel_shape(call, in_place);
    const std::string key = kernel_key(choice, shape);
    *key_out = key;
    if (auto it = kernels.find(key); it != kernels.end()) return it->second;

    Loaded loaded;
    loaded.kernel = generate(call, choice, shape);
    // Tracing is fixed for the communicator's life, so the kernel key need not name it.
    const std::string source = launch_source(loaded.kernel);
    if (host) {
      loaded.host = load_host_kernel(cache(), source, loaded.kernel.kernel_name);
    } else {
      nvrtc_build_cached(cache(), nvrtc_request(loaded.kernel), [&](const std::string& cubin) {
        loaded.cuda_index = cuda->load(cubin, loaded.kernel.kernel_name);
      });
    }
    return kernels.emplace(key, std::move(loaded)).first->second;
  }

  EmittedKernel generate(const CollectiveCall& call, const Choice& choice, const KernelShape& shape) const {
    EmittedKernel kernel = generate_kernel(
        options.schedule ? *options.schedule : find_shipped_schedule(call.collective, choice.algo).file, shape,
        options.defines);
    if (kernel.channels > kMaxChannels)
      invalid(fmt::format("{} channels requested; at most {}", kernel.channels, kMaxChannels));
    return kernel;
  }

  // What is compiled for `kernel`: its source, with the tracing switch on when tracing.
  std::string launch_source(const EmittedKernel& kernel) const {
    return trace_file.empty() ? kernel.source : traced_kernel_source(kernel.source);
  }

  NvrtcRequest nvrtc_request(const EmittedKernel& kernel) const {
    NvrtcRequest req;
    req.source = launch_source(kernel);
    req.name = kernel.kernel_name + ".cu";
    req.arch = cuda->arch();
    return req;
  }

  // The compile kernel_for would do for `kernel`, as a task that needs nothing of this Impl:
  // only the cache and copies of the requests.
  std::function<void()> compile_task(const EmittedKernel& kernel) const {
    JitCache& c = cache();
    if (host)  // loading (dlopen, dropped at once) proves the object, as the call's load would
      return [&c, req = host_kernel_request(launch_source(kernel), kernel.kernel_name)] {
        host_compile_cached(c, req, [](const std::string& image) { SharedObject check(image); });
      };
    return [&c, req = nvrtc_request(kernel)] { nvrtc_build_cached(c, req); };
  }

  void warm_up(const std::vector<CollectiveCall>& shapes, bool in_place, WarmUp mode) {
    std::vector<std::function<void()>> tasks;
    std::set<std::string> keys;
    const int n = nranks();
    for (const CollectiveCall& call : shapes) {
      validate_shape(call, n);
      if (call.count == 0) continue;  // such a call moves nothing and runs no kernel
      const KernelShape shape = kernel_shape(call, in_place);
      const std::string key = kernel_key(choose(call), shape);
      if (kernels.count(key) || !keys.insert(key).second) continue;  // loaded already, or listed
      tasks.push_back(compile_task(generate(call, choose(call), shape)));
    }
    if (tasks.empty()) return;
    if (mode == WarmUp::Wait) {
      for (const auto& task : tasks) task();
      return;
    }
    try {
      warmers.emplace_back([tasks = std::move(tasks)] {
        for (const auto& task : tasks) {
          try {
            task();
          } catch (const std::exception&) {
            // Left to the call that needs this kernel: it compiles it again and reports why.
          }
        }
      });
    } catch (const std::system_error& e) {
      throw Error(ErrorKind::System, fmt::format("cannot start the warm-up thread: {}", e.what()));
    }
  }

  Prepared prepare(const CollectiveCall& call, bool in_place) {
    std::string key;
    Prepared p;
    p.in_place = in_place;
    p.loaded = &kernel_for(call, in_place, &key);
    p.scratch_bytes = p.loaded->kernel.scratch_bytes(call.count);
    p.ll_bytes = p.loaded->kernel.ll_bytes(call.count);
    // Equal on every rank that issues the same collective; never 0 (the prelude's "not loaded").
    p.signature = checksum64(fmt::format("{}/{}", key, call.count)) | 1;
    return p;
  }

  // Copies around a multi-process rank's kernel, in its stream's order: its buffers outside the
  // arena copied in before and out after (peers can read only the arena).
  struct Staging {
    struct Copy {
      void* to = nullptr;
      const void* from = nullptr;
      uint64_t bytes = 0;
    };
    std::optional<Copy> before, after;
  };

  bool multi_process() const { return arena || cuda_arena; }
  // Peers in other processes can read [p, p + bytes) where it is: arena memory, or (cuda) a
  // buffer this rank registered.
  bool peers_read_in_place(const void* p, uint64_t bytes) const {
    return arena ? arena->contains(p, bytes) : cuda_arena->contains(p, bytes) || cuda->registered(p, bytes);
  }
  // The same, or (graph registration, `stream` capturing) the buffer is remembered, to be
  // registered before the graph runs, when CUDA IPC can share it.
  bool peers_will_read_in_place(const void* p, uint64_t bytes, void* stream) {
    if (peers_read_in_place(p, bytes)) return true;
    if (!graph_registration || !cuda_arena || !cuda->capturing(stream) || !cuda->ipc_shareable(p)) return false;
    captured.insert({reinterpret_cast<uintptr_t>(p), bytes});
    capturing_streams.insert(stream);
    return true;
  }
  // The multi-process arena's heap (this rank's), or null.
  ArenaHeap* heap() const { return arena ? &arena->heap() : cuda_arena ? &cuda_arena->heap() : nullptr; }

  // Rank `rank`'s buffers for the kernel, its scratch included. A buffer the rank omitted (NULL
  // where NCCL allows it) gets a stand-in, as if the rank had passed one of its own: in place the
  // other buffer (an in-place kernel reads and writes one), else room after the scratch. The
  // kernel may stage through either buffer, so NULL is never passed on. Across processes, a
  // buffer outside the arena is replaced by room after the scratch too, with `staging` copying
  // it (an in-place pair as one region: the kernel sees the same overlap).
  ccc_buffers own_buffers(const Prepared& p, const CollectiveCall& call, int rank, const void* send, void* recv,
                          void* stream, Staging* staging = nullptr) {
    const int n = nranks();
    const bool omitted = omits_unused_buffer(call, rank, send, recv);
    if (omitted && p.in_place) {
      if (send == nullptr) send = recv;
      else recv = const_cast<void*>(send);  // unused by this rank, so not written as a result
    }
    uint64_t end = p.scratch_bytes;
    auto room = [&end](uint64_t bytes) {
      const uint64_t at = round_up(end, 256);
      end = at + bytes;
      return at;
    };
    const bool stand_in = omitted && !p.in_place;
    const uint64_t stand_in_at = !stand_in ? 0 : room(send == nullptr ? send_bytes(call, n) : recv_bytes(call, n));
    // What to stage: [from, from + bytes) of the user's memory at `at` after the scratch.
    struct Staged {
      const std::byte* from = nullptr;
      uint64_t bytes = 0, at = 0;
    } in, out;
    const auto* s = static_cast<const std::byte*>(send);
    const auto* r = static_cast<const std::byte*>(recv);
    const uint64_t sb = send_bytes(call, n), rb = recv_bytes(call, n);
    if (multi_process()) {
      if (p.in_place) {
        const std::byte* lo = std::min(s, r);
        const uint64_t bytes = static_cast<uint64_t>(std::max(s + sb, r + rb) - lo);
        if (!peers_will_read_in_place(lo, bytes, stream)) in = out = {lo, bytes, room(bytes)};
      } else {
        if (!(stand_in && send == nullptr) && !peers_will_read_in_place(s, sb, stream)) in = {s, sb, room(sb)};
        if (!(stand_in && recv == nullptr) && !peers_will_read_in_place(r, rb, stream)) out = {r, rb, room(rb)};
      }
    }
    void* scratch = host ? host->scratch(rank, end) : cuda->scratch(rank, end, stream);
    std::byte* base = static_cast<std::byte*>(scratch);
    if (stand_in) {
      if (send == nullptr) send = base + stand_in_at;
      else recv = base + stand_in_at;
    }
    // The kernel's pointer for user pointer `u` inside a staged region.
    auto moved = [base](const Staged& st, const std::byte* u) { return base + st.at + (u - st.from); };
    if (in.bytes > 0) {
      staging->before = Staging::Copy{base + in.at, in.from, in.bytes};
      send = moved(in, s);
      if (p.in_place) recv = moved(in, r);
    }
    if (out.bytes > 0) {
      staging->after = Staging::Copy{const_cast<std::byte*>(out.from), base + out.at, out.bytes};
      if (!p.in_place) recv = moved(out, r);
    }
    void* ll = p.ll_bytes == 0 ? nullptr : host ? host->ll_slots(rank, p.ll_bytes) : cuda->ll_slots(rank, p.ll_bytes, stream);
    return {send, recv, scratch, p.signature, ll};
  }

  void launch_rank(const Prepared& p, const CollectiveCall& call, int rank, const void* send, void* recv,
                   void* stream) {
    const EmittedKernel& k = p.loaded->kernel;
    Staging staging;
    const ccc_buffers own = own_buffers(p, call, rank, send, recv, stream, &staging);
    if (host) {
      auto task = [](const std::optional<Staging::Copy>& c) -> std::function<void()> {
        if (!c) return {};
        return [c = *c] { std::memcpy(c.to, c.from, c.bytes); };
      };
      host->launch(rank, p.loaded->host, k.channels, own, call.count, timeout_ns, trace_records(p, call, rank, nullptr),
                   task(staging.before), task(staging.after));
    } else {
      auto copy = [](const std::optional<Staging::Copy>& c) -> std::optional<CudaCopy> {
        if (!c) return std::nullopt;
        return CudaCopy{reinterpret_cast<CUdeviceptr>(c->to), reinterpret_cast<CUdeviceptr>(c->from), c->bytes};
      };
      const std::optional<CudaCopy> before = copy(staging.before), after = copy(staging.after);
      cuda->launch(rank, p.loaded->cuda_index, k.channels, k.block_threads, own, call.count, timeout_ns, stream,
                   trace_records(p, call, rank, stream), before ? &*before : nullptr, after ? &*after : nullptr);
    }
  }

  // Each buffer a rank passed must be memory of its device (NULL ones are validated already).
  void check_cuda_buffers(int rank, const void* send, const void* recv, const CollectiveCall& call) const {
    const int n = nranks();
    if (send != nullptr) cuda->check_buffer(rank, send, send_bytes(call, n), "send");
    if (recv != nullptr) cuda->check_buffer(rank, recv, recv_bytes(call, n), "recv");
  }

  // A multi-process communicator's rank here (-1: every rank is).
  int local_rank() const { return arena ? arena->rank() : cuda_arena ? cuda_arena->rank() : -1; }

  void run(const CollectiveCall& call, Streams streams) {
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
    if (cuda)
      for (int r = 0; r < n; ++r) check_cuda_buffers(r, call.send[r], call.recv[r], call);
    const bool in_place = call_is_in_place(call, n);
    Prepared p = prepare(call, in_place);
    if (cuda && cuda->virtual_ranks()) {
      p = fit_virtual_grid(call, in_place, p);
      std::vector<ccc_buffers> own(n);
      for (int r = 0; r < n; ++r)
        own[r] = own_buffers(p, call, r, call.send[r], call.recv[r], streams.empty() ? nullptr : streams[0]);
      const EmittedKernel& k = p.loaded->kernel;
      void* stream = streams.empty() ? nullptr : streams[0];
      cuda->launch_virtual(p.loaded->cuda_index, k.channels, k.block_threads, own, call.count, timeout_ns, stream,
                           trace_records(p, call, -1, stream));
      return;
    }
    for (int r = 0; r < n; ++r) launch_rank(p, call, r, call.send[r], call.recv[r], streams.empty() ? nullptr : streams[r]);
    if (ledger) ledger->record_all();
    if (host) synchronized(-1, [&] { host->synchronize(); });  // the all-ranks host calls return when done
  }

  // Virtual ranks run as one cooperative grid, every block resident at once. Where the kernel the
  // selection chose has more blocks than the device holds (the driver's occupancy for that
  // kernel: its registers and threads, not a constant), take as many channels as fit, unless the
  // caller fixed them; launch_virtual refuses what cannot fit even with one channel per rank.
  Prepared fit_virtual_grid(const CollectiveCall& call, bool in_place, const Prepared& p) {
    const int n = nranks();
    const EmittedKernel& k = p.loaded->kernel;
    const int64_t fit = cuda->occupancy(p.loaded->cuda_index, k.block_threads).blocks() / n;
    if (options.channels > 0 || k.channels <= fit || fit < 1) return p;
    choose(call);  // the entry this call's shape selected
    choices.at(choice_key(call)).channels = static_cast<int>(std::min<int64_t>(fit, k.channels - 1));
    return prepare(call, in_place);
  }

  void run_rank(const CollectiveCall& call, int rank, const void* send, void* recv, void* stream) {
    const int n = nranks();
    if (rank < 0 || rank >= n)
      invalid(fmt::format("{}: rank {} is not a rank of this communicator (0..{})",
                          collective_name(call.collective), rank, n - 1));
    if (multi_process() && rank != local_rank())
      invalid(fmt::format("{}: rank {} is in another process; this one holds rank {}",
                          collective_name(call.collective), rank, local_rank()));
    validate_rank_call(call, n, rank, send, recv);
    if (call.count == 0) return;
    if (cuda) {
      if (cuda->virtual_ranks())
        throw Error(ErrorKind::InvalidUsage, "virtual ranks launch as one grid: issue the collective for "
                                             "every rank at once, not rank by rank");
      check_cuda_buffers(rank, send, recv, call);
    }
    std::vector<BufferExtent> extents;
    const bool in_place = is_in_place(call, rank, send, recv);
    const CallShape shape{call.collective, call.count, call.dtype, call.op, call.root, in_place};
    if (ledger) {
      extents = ledger->check(call, rank, send, recv);  // before any compile
      if (!ledger->agree(shape, rank).empty()) {
        // Nothing of this rank's runs, and the ranks that queued theirs stop waiting for it
        // (host; on CUDA in one process they wait out the timeout). Every rank that issued the
        // collective, now or later, hears why at its synchronize.
        if (host)
          for (int r = 0; r < n; ++r) host->abort(r);
        ledger->record(rank, {}, shape);
        return;
      }
    }
    const Prepared p = prepare(call, in_place);
    launch_rank(p, call, rank, send, recv, stream);
    if (ledger) ledger->record(rank, extents, shape);
  }
};

// A multi-process rank has no ledger: its peers' buffers live in other address spaces, and no
// collective of this process's would ever be issued by every rank (its entries would pile up).
Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  if (!impl_->multi_process()) impl_->ledger.emplace(impl_->nranks());
}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() { forget_if_forked(); }

Communicator Communicator::host(int nranks, CommOptions options) {
  check_rank_count(nranks, BackendKind::Host);
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->host.emplace(nranks);
  impl->load_topology_file();
  return Communicator(std::move(impl));
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
  impl->arena = std::make_unique<HostArena>(mapper.keep(), nranks, rank, heap);
  impl->host.emplace(*impl->arena);
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
    impl->cuda_arena = std::make_unique<CudaArena>(id, nranks, rank, device, heap, impl->timeout_ns);
    impl->cuda = std::make_unique<CudaRanks>(*impl->cuda_arena);
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
  impl->cuda = open_cuda(devices, 0);
  impl->topology = detect_cuda_topology(CudaDriver::get(), devices);
  impl->calibrate();
  return Communicator(std::move(impl));
}

Communicator Communicator::cuda_virtual(int device, int nranks, CommOptions options) {
  check_rank_count(nranks, BackendKind::Cuda);
  std::unique_ptr<Impl> impl = Impl::make(std::move(options));
  impl->cuda = open_cuda({device}, nranks);
  impl->load_topology_file();
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
BackendKind Communicator::backend() const { return live().host ? BackendKind::Host : BackendKind::Cuda; }

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
  std::lock_guard lock(impl.mutex);
  translating([&] { impl.run(call, streams); });
}

void Communicator::run_rank(const CollectiveCall& call, int rank, const void* send, void* recv, void* stream) {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  translating([&] { impl.run_rank(call, rank, send, recv, stream); });
}

void Communicator::all_reduce(Sends send, Recvs recv, uint64_t count, DataType dtype, ReduceOp op,
                              Streams streams) {
  run({Collective::AllReduce, count, dtype, op, -1, send, recv}, streams);
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
  translating([&] { impl.synchronized(-1, [&] { impl.host ? impl.host->synchronize() : impl.cuda->synchronize(); }); });
}

void Communicator::synchronize_rank(int rank) {
  Impl& impl = live();
  if (rank < 0 || rank >= impl.nranks())
    invalid(fmt::format("rank {} is not a rank of this communicator (0..{})", rank, impl.nranks() - 1));
  translating([&] {
    impl.synchronized(rank, [&] { impl.host ? impl.host->synchronize(rank) : impl.cuda->synchronize(rank); });
  });
}

void Communicator::warm_up(const std::vector<CollectiveCall>& shapes, bool in_place, WarmUp mode) {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  translating([&] { impl.warm_up(shapes, in_place, mode); });
}

std::string Communicator::algorithm_for(const CollectiveCall& call) const {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  return impl.choose(call).algo;
}

void* Communicator::mem_alloc(uint64_t bytes) {
  Impl& impl = live();
  if (impl.heap() == nullptr)
    throw Error(ErrorKind::InvalidUsage, "mem_alloc: only a multi-process communicator (host_rank, cuda_rank) has an arena");
  if (bytes == 0) invalid("mem_alloc: 0 bytes");
  return impl.heap()->allocate(bytes, "mem_alloc");
}

void Communicator::mem_free(void* p) {
  Impl& impl = live();
  if (impl.heap() == nullptr)
    throw Error(ErrorKind::InvalidUsage, "mem_free: only a multi-process communicator (host_rank, cuda_rank) has an arena");
  impl.heap()->free(p);
}

void* Communicator::register_buffer(void* p, uint64_t bytes) {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);  // no launch of this rank's starts while its registry changes
  if (impl.arena)
    throw Error(ErrorKind::InvalidUsage,
                "register: the host backend across processes cannot share memory from malloc with another process; "
                "allocate the buffer with cccCommMemAlloc (used in place), or pass it unregistered (staged through "
                "the arena)");
  if (impl.cuda_arena) {
    void* handle = nullptr;
    translating([&] { handle = impl.cuda->register_buffer(p, bytes); });
    return handle;
  }
  if (p == nullptr) invalid("register: buff is null");
  if (bytes == 0) invalid("register: size is 0");
  auto byte = std::make_unique<char>();
  void* handle = byte.get();
  impl.local_registrations.emplace(handle, std::move(byte));
  return handle;
}

void Communicator::deregister_buffer(void* handle) {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  if (impl.arena)
    throw Error(ErrorKind::InvalidUsage, "deregister: the host backend across processes registers no buffers");
  if (impl.cuda_arena) return translating([&] { impl.cuda->deregister_buffer(handle); });
  if (impl.local_registrations.erase(handle) == 0)
    invalid(fmt::format("deregister: {} is not a handle cccCommRegister gave on this communicator (or it was "
                        "deregistered already)", handle));
}

namespace {

// The host backend across processes (`arena`: its shared memory) has no graphs and shares no user memory.
void refuse_graph_registration_on_host_ranks(const HostArena* arena) {
  if (arena != nullptr)
    throw Error(ErrorKind::InvalidUsage, "graph registration: the host backend across processes has no graphs to "
                                         "capture, and registers no buffers");
}

}  // namespace

void Communicator::begin_graph_registration() {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  refuse_graph_registration_on_host_ranks(impl.arena.get());
  if (impl.graph_registration)
    throw Error(ErrorKind::InvalidUsage, "cccCommGraphRegisterBegin: this rank is between Begin and End already "
                                         "(they do not nest)");
  impl.graph_registration = true;
}

void* Communicator::end_graph_registration() {
  Impl& impl = live();
  std::lock_guard lock(impl.mutex);
  refuse_graph_registration_on_host_ranks(impl.arena.get());
  // The mode ends whatever happens: after a failure the graphs captured in it cannot be
  // replayed (their buffers are not registered), and keeping the buffers would fail every
  // later End the same way if one of them is gone.
  const bool begun = std::exchange(impl.graph_registration, false);
  std::vector<CudaRegistry::Buffer> buffers;
  for (const auto& [base, bytes] : impl.captured) buffers.push_back({base, bytes});
  const std::set<void*> streams = std::move(impl.capturing_streams);
  impl.captured.clear();
  impl.capturing_streams.clear();
  auto precondition = [&] {
    if (!begun)
      throw Error(ErrorKind::InvalidUsage, "cccCommGraphRegisterEnd: no cccCommGraphRegisterBegin on this rank "
                                           "before it");
    // Checked before the registration synchronises the device, which would invalidate the
    // capture (CUDA Programming Guide, stream capture, "Invalidation").
    for (void* s : streams)
      if (impl.cuda->capturing(s))
        throw Error(ErrorKind::InvalidUsage, fmt::format("cccCommGraphRegisterEnd: stream {} still captures a "
                                                         "graph; end its capture first", s));
  };
  if (!impl.cuda_arena) {  // one process: every buffer is reachable already
    precondition();
    auto byte = std::make_unique<char>();
    void* handle = byte.get();
    impl.local_registrations.emplace(handle, std::move(byte));
    return handle;
  }
  void* handle = nullptr;
  translating([&] { handle = impl.cuda->register_buffers(buffers, "cccCommGraphRegisterEnd", precondition); });
  return handle;
}

std::string Communicator::async_error(int rank) {
  Impl& impl = live();
  if (rank < 0 || rank >= impl.nranks())
    invalid(fmt::format("rank {} is not a rank of this communicator (0..{})", rank, impl.nranks() - 1));
  if (impl.host) return impl.host->async_error(rank);
  std::string failure;
  translating([&] { failure = impl.cuda->async_error(rank); });
  return failure;
}

void Communicator::abort_rank(int rank) {
  Impl& impl = live();
  if (rank < 0 || rank >= impl.nranks())
    invalid(fmt::format("rank {} is not a rank of this communicator (0..{})", rank, impl.nranks() - 1));
  if (impl.host) impl.host->abort(rank);
  else translating([&] { impl.cuda->abort(rank); });
}

void Communicator::destroy() {
  if (!impl_) live();  // refused after destroy
  forget_if_forked();
  impl_.reset();
}

}  // namespace ccc
