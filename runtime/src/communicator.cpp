#include "ccc/communicator.h"

#include <cstdlib>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "ccc/cuda_backend.h"
#include "ccc/cuda_topology.h"
#include "ccc/host_backend.h"
#include "ccc/kernel_source.h"
#include "ccc/shipped_schedules.h"
#include "ccc/nvrtc_jit.h"
#include "ccc/schedule_menu.h"
#include "ccc/select.h"

namespace ccc {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::InvalidArgument, message);
}

// All ranks in place or none: the kernel is specialised for one of the two.
bool call_is_in_place(const CollectiveCall& call, int nranks) {
  int in_place = 0;
  const uint64_t block = call.count * data_type_size(call.dtype);
  for (int r = 0; r < nranks; ++r) {
    const auto send = reinterpret_cast<uintptr_t>(call.send[r]);
    const auto recv = reinterpret_cast<uintptr_t>(call.recv[r]);
    switch (call.collective) {
      case Collective::ReduceScatter: in_place += recv == send + r * block; break;
      case Collective::AllGather: in_place += send == recv + r * block; break;
      default: in_place += send == recv;
    }
  }
  if (in_place != 0 && in_place != nranks)
    invalid(fmt::format("{}: {} of {} ranks are in place; all or none must be",
                        collective_name(call.collective), in_place, nranks));
  return in_place == nranks;
}

// Without a topology to model: the collective's ring schedule (the first shipped one whose name
// starts with "ring"), else its first shipped schedule.
std::string default_schedule(Collective collective) {
  std::string first;
  for (const ShippedSchedule& s : shipped_schedules()) {
    if (s.collective != collective) continue;
    if (s.name.rfind("ring", 0) == 0) return s.name;
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

  // What selection picked for one call shape.
  struct Choice {
    std::string algo;
    int channels = 0;
    int64_t tile_bytes = 0;
  };

  CommOptions options;
  std::optional<HostRanks> host;
  std::unique_ptr<CudaRanks> cuda;
  std::optional<Topology> topology;  // none: no cost model, ring unless forced
  std::map<std::pair<Collective, int>, std::unique_ptr<ScheduleMenu>> menus;  // by collective, root
  std::map<std::string, Choice> choices;  // by call shape
  std::map<std::string, Loaded> kernels;  // by schedule and kernel shape

  int nranks() const { return host ? host->nranks() : cuda->nranks(); }
  JitCache& cache() const { return options.cache ? *options.cache : JitCache::process_cache(); }

  void load_topology_file() {
    std::string path = options.topology_file;
    if (const char* env = std::getenv("CCC_TOPO"); path.empty() && env != nullptr) path = env;
    if (path.empty()) return;
    std::string errors;
    topology = load_topology(path, errors);
    if (!topology) invalid(fmt::format("cannot use topology file {}:\n{}", path, errors));
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

  Choice choose(const CollectiveCall& call) {
    const std::string key = fmt::format("{}/{}/{}/{}", collective_name(call.collective), call.count,
                                        data_type_name(call.dtype), call.root);
    if (auto it = choices.find(key); it != choices.end()) return it->second;
    Choice choice{options.algo, options.channels, options.tile_bytes};
    if (options.schedule) return choices.emplace(key, choice).first->second;  // the given one
    const char* env = std::getenv("CCC_ALGO");
    if (choice.algo.empty() && env != nullptr) choice.algo = env;
    if (!topology) {
      if (choice.algo.empty()) choice.algo = default_schedule(call.collective);
    } else {
      SelectOptions select;
      select.algo = options.algo;  // select_schedule reads CCC_ALGO itself
      if (options.channels > 0) select.channels = {options.channels};
      if (options.tile_bytes > 0) select.tiles = {options.tile_bytes};
      const int n = nranks();
      const auto bytes = static_cast<int64_t>(std::max(send_bytes(call, n), recv_bytes(call, n)));
      try {
        const ccc::Choice best = select_schedule(call.collective, bytes, static_cast<int>(data_type_size(call.dtype)),
                                                 *topology, menu_for(call.collective, call.root).candidates(), select);
        choice = {best.name(), best.params.channels, best.params.tile_bytes};
      } catch (const std::invalid_argument& e) {
        invalid(fmt::format("{}: no schedule fits: {}", collective_name(call.collective), e.what()));
      }
    }
    return choices.emplace(key, choice).first->second;
  }

  const Loaded& kernel_for(const CollectiveCall& call, bool in_place) {
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
    const std::string key =
        fmt::format("{}/{}/{}/{}/{}/{}/{}/{}/{}", choice.algo, collective_name(shape.collective),
                    shape.nranks, shape.root, data_type_name(shape.dtype),
                    reduce_op_name(shape.op), shape.channels, shape.tile_bytes, in_place);
    if (auto it = kernels.find(key); it != kernels.end()) return it->second;

    Loaded loaded;
    loaded.kernel = generate_kernel(
        options.schedule ? *options.schedule : find_shipped_schedule(call.collective, choice.algo).file, shape);
    if (loaded.kernel.channels > kMaxChannels)
      invalid(fmt::format("{} channels requested; at most {}", loaded.kernel.channels, kMaxChannels));
    if (host) {
      loaded.host = load_host_kernel(cache(), loaded.kernel.source, loaded.kernel.kernel_name);
    } else {
      NvrtcRequest req;
      req.source = loaded.kernel.source;
      req.name = loaded.kernel.kernel_name + ".cu";
      req.arch = cuda->arch();
      loaded.cuda_index = cuda->load(*nvrtc_build_cached(cache(), req), loaded.kernel.kernel_name);
    }
    return kernels.emplace(key, std::move(loaded)).first->second;
  }

  void run(const CollectiveCall& call, Streams streams) {
    const int n = nranks();
    validate_call(call, n);
    if (!streams.empty() && streams.size() != static_cast<size_t>(n))
      invalid(fmt::format("{}: expected {} streams (one per rank), got {}",
                          collective_name(call.collective), n, streams.size()));
    if (call.count == 0) return;
    if (cuda) {
      for (int r = 0; r < n; ++r) {
        cuda->check_buffer(r, call.send[r], "send");
        cuda->check_buffer(r, call.recv[r], "recv");
      }
    }
    const bool in_place = call_is_in_place(call, n);
    const Loaded& k = kernel_for(call, in_place);
    const uint64_t scratch = k.kernel.scratch_bytes(call.count);
    const auto timeout_ns = static_cast<uint64_t>(options.timeout_seconds * 1e9);
    if (host)
      host->launch(k.host, k.kernel.channels, call.send, call.recv, call.count, scratch, timeout_ns);
    else
      cuda->launch(k.cuda_index, k.kernel.channels, k.kernel.block_threads, call.send, call.recv,
                   call.count, scratch, timeout_ns, streams);
  }
};

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

Communicator Communicator::host(int nranks, CommOptions options) {
  if (nranks < 1) invalid(fmt::format("a communicator needs at least one rank, got {}", nranks));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->host.emplace(nranks, kMaxChannels);
  impl->load_topology_file();
  return Communicator(std::move(impl));
}

namespace {

std::unique_ptr<CudaRanks> open_cuda(std::vector<int> devices, int virtual_ranks) {
  try {
    return std::make_unique<CudaRanks>(std::move(devices), virtual_ranks, Communicator::kMaxChannels);
  } catch (const NoCudaDevice& e) {
    throw Error(ErrorKind::NoDevice, e.what());
  } catch (const CudaError& e) {
    throw Error(ErrorKind::Cuda, e.what());
  }
}

}  // namespace

Communicator Communicator::cuda(std::vector<int> devices, CommOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->cuda = open_cuda(devices, 0);
  impl->topology = detect_cuda_topology(CudaDriver::get(), devices);
  return Communicator(std::move(impl));
}

Communicator Communicator::cuda_virtual(int device, int nranks, CommOptions options) {
  if (nranks < 1) invalid(fmt::format("a communicator needs at least one rank, got {}", nranks));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->cuda = open_cuda({device}, nranks);
  impl->load_topology_file();
  return Communicator(std::move(impl));
}

Communicator::Impl& Communicator::live() const {
  if (!impl_) throw Error(ErrorKind::InvalidUsage, "communicator used after destroy");
  return *impl_;
}

int Communicator::size() const { return live().nranks(); }
BackendKind Communicator::backend() const { return live().host ? BackendKind::Host : BackendKind::Cuda; }

void Communicator::run(const CollectiveCall& call, Streams streams) {
  Impl& impl = live();
  try {
    impl.run(call, streams);
  } catch (const CudaError& e) {
    throw Error(ErrorKind::Cuda, e.what());
  } catch (const JitError& e) {
    throw Error(ErrorKind::Compile, e.what());
  }
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

void Communicator::synchronize() {
  Impl& impl = live();
  if (!impl.cuda) return;  // host calls complete before they return
  try {
    impl.cuda->synchronize();
  } catch (const CudaError& e) {
    throw Error(ErrorKind::Cuda, e.what());
  }
}

std::string Communicator::algorithm_for(const CollectiveCall& call) const {
  return live().choose(call).algo;
}

void Communicator::destroy() {
  live();
  impl_.reset();
}

}  // namespace ccc
