#include "shim_comm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "cuda_driver.h"
#include "debug_log.h"
#include "shipped_schedules.h"

namespace ccc::nccl {
namespace {

constexpr uint64_t kDefaultArenaBytes = uint64_t{64} << 20;  // cccConfig_t's default

// Rank `rank`'s node: $CCC_NCCL_RANKS_PER_NODE=K puts one machine's processes on several
// "nodes" (rank / K) for tests; else $CCC_NODE_ID; else the host name and the boot id.
std::string node_name(int rank) {
  if (const char* per_node = std::getenv("CCC_NCCL_RANKS_PER_NODE"); per_node != nullptr && std::atoi(per_node) > 0)
    return fmt::format("simulated node {}", rank / std::atoi(per_node));
  if (const char* forced = std::getenv("CCC_NODE_ID"); forced != nullptr && *forced != '\0') return forced;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return fmt::format("{}/{}", host, boot);
}

uint64_t arena_bytes_from_environment() {
  const char* env = std::getenv("CCC_ARENA_BYTES");
  if (env == nullptr || *env == '\0') return kDefaultArenaBytes;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(env, &end, 10);
  if (*end != '\0' || bytes == 0)
    throw ShimError{ncclInvalidArgument, fmt::format("CCC_ARENA_BYTES=\"{}\" is not a positive byte count", env)};
  return bytes;
}

}  // namespace

void copy_text(char (&to)[128], const std::string& text) {
  std::memset(to, 0, sizeof to);
  // A longer name is told apart by its hash.
  const std::string fitted =
      text.size() < sizeof to ? text : fmt::format("{:.100}#{:016x}", text, std::hash<std::string>{}(text));
  std::memcpy(to, fitted.data(), std::min(fitted.size(), sizeof to - 1));
}

NodePlace node_place(const std::vector<RankCard>& cards, int rank) {
  const RankCard& mine = cards.at(rank);
  for (size_t r = 0; r < cards.size(); ++r) {
    if (std::strcmp(cards[r].policy, mine.policy) != 0 || cards[r].arena_bytes != mine.arena_bytes)
      throw ShimError{ncclInvalidUsage,
                      fmt::format("libccc-nccl: ranks {} and {} route differently (CCC_NCCL_ROUTE, CCC_ARENA_BYTES): "
                                  "\"{}\" with {} arena bytes against \"{}\" with {}; set the same on every rank",
                                  rank, r, mine.policy, mine.arena_bytes, cards[r].policy, cards[r].arena_bytes)};
  }
  std::vector<std::string> nodes;  // in order of their first rank
  std::vector<int> ranks_on;       // per node
  NodePlace place;
  for (size_t r = 0; r < cards.size(); ++r) {
    const auto at = std::find(nodes.begin(), nodes.end(), cards[r].node);
    const auto node = static_cast<int>(at - nodes.begin());
    if (at == nodes.end()) nodes.emplace_back(cards[r].node), ranks_on.push_back(0);
    if (static_cast<int>(r) == rank) place.node = node, place.local_rank = ranks_on[node];
    if (std::strcmp(cards[r].node, mine.node) == 0 && ranks_on[node] == 0) place.leader = static_cast<int>(r);
    ++ranks_on[node];
  }
  place.nodes = static_cast<int>(nodes.size());
  place.local_ranks = ranks_on[place.node];
  place.even = std::all_of(ranks_on.begin(), ranks_on.end(), [&](int n) { return n == ranks_on[0]; });
  return place;
}

namespace {

// Every rank's `bytes` bytes of `mine` in rank order, all-gathered by the real NCCL through device
// memory on a stream of its own, in the calling thread's current context (the one the rank's
// NCCL communicator was made in).
std::vector<char> all_gather(const RealNccl& real, const ncclComm& comm, const void* mine, size_t bytes) {
  const CudaDriver& cu = CudaDriver::get();
  CUdeviceptr buffer = 0;
  CUstream stream = nullptr;
  std::vector<char> out(bytes * comm.nranks);
  auto release = [&] {
    if (stream != nullptr) cu.cuStreamDestroy(stream);
    if (buffer != 0) cu.cuMemFree(buffer);
  };
  try {
    cu.check(cu.cuMemAlloc(&buffer, bytes * (comm.nranks + 1)), "cuMemAlloc");
    cu.check(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    cu.check(cu.cuMemcpyHtoD(buffer, mine, bytes), "cuMemcpyHtoD");
    const ncclResult_t r =
        real.ncclAllGather(reinterpret_cast<const void*>(buffer), reinterpret_cast<void*>(buffer + bytes), bytes,
                           ncclUint8, comm.real, stream);
    if (r != ncclSuccess)
      throw ShimError{r, fmt::format("libccc-nccl's all-gather of the ranks' settings through NCCL failed: {}",
                                     real.ncclGetLastError(comm.real))};
    cu.check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
    cu.check(cu.cuMemcpyDtoH(out.data(), buffer + bytes, out.size()), "cuMemcpyDtoH");
  } catch (const CudaError& e) {
    release();
    throw ShimError{ncclUnhandledCudaError,
                    fmt::format("libccc-nccl's all-gather of the ranks' settings: {}", e.what())};
  } catch (...) {
    release();
    throw;
  }
  release();
  return out;
}

// The same, for one trivially copyable value per rank.
template <class T>
std::vector<T> all_gather(const RealNccl& real, const ncclComm& comm, const T& mine) {
  const std::vector<char> bytes = all_gather(real, comm, &mine, sizeof mine);
  std::vector<T> values(comm.nranks);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

cccConfig_t ccc_config(const ncclComm& comm) {
  cccConfig_t config = CCC_CONFIG_INITIALIZER;
  const char* backend = std::getenv("CCC_BACKEND");
  config.backend = backend != nullptr && *backend != '\0' ? backend : "cuda";
  config.arenaBytes = comm.arena_bytes;
  return config;
}

// What every rank must share for every call to route alike: the policy, and what ccc's
// predictions read (the backend, the topology file, the calibration).
std::string routing_settings(const ncclComm& comm) {
  auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value != nullptr ? value : "");
  };
  return fmt::format("{};backend={};topo={};calibration={}", comm.policy.canonical(), env("CCC_BACKEND"),
                     env("CCC_TOPO"), env("CCC_CALIBRATION"));
}

void log_info(const std::string& line) {
  if (debug_info_on()) debug_info("ccc-nccl " + line);
}

std::vector<SourceFile> shipped_sources() {
  std::vector<SourceFile> sources;
  for (const ShippedSchedule& s : shipped_schedules()) sources.push_back(s.file);
  return sources;
}

// The model for `auto` across nodes, when $CCC_TOPO describes nodes like these (as many, each
// with as many GPUs as the node's ranks); else null (logged): NCCL keeps every call.
std::shared_ptr<HierarchyPredictor> hierarchy_predictor(const NodePlace& place) {
  const char* path = std::getenv("CCC_TOPO");
  std::string errors;
  std::optional<Topology> topology;
  if (path != nullptr && *path != '\0') topology = load_topology(path, errors);
  if (!topology || topology->network.nodes != place.nodes || topology->ngpus() != place.local_ranks) {
    log_info(fmt::format("the ranks span {} nodes of {}, which {}: across nodes every collective goes to NCCL",
                         place.nodes, place.local_ranks,
                         path == nullptr ? "no $CCC_TOPO describes" : fmt::format("$CCC_TOPO={} does not describe", path)));
    return nullptr;
  }
  return std::make_shared<HierarchyPredictor>(std::move(*topology));
}

// Makes the primary context of `device` current for its life, and the caller's again after.
class DeviceContext {
 public:
  explicit DeviceContext(int device) : cu_(CudaDriver::get()), guard_(cu_) {
    cu_.check(cu_.cuDeviceGet(&device_, device), "cuDeviceGet");
    cu_.check(cu_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    cu_.check(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  }
  ~DeviceContext() { cu_.cuDevicePrimaryCtxRelease(device_); }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

 private:
  const CudaDriver& cu_;
  CudaContextGuard guard_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};


void warn(const std::string& line) { fmt::print(stderr, "ccc-nccl WARN {}\n", line); }

}  // namespace

HierarchyPredictor::HierarchyPredictor(Topology topology)
    : topology_(std::move(topology)),
      reduce_scatter_(Collective::ReduceScatter, topology_.ngpus(), shipped_sources()),
      all_gather_(Collective::AllGather, topology_.ngpus(), shipped_sources()) {}

HierarchyRow HierarchyPredictor::row(int64_t bytes, int elem_size) {
  std::lock_guard lock(mutex_);
  const auto key = std::make_pair(bytes, elem_size);
  if (auto it = rows_.find(key); it != rows_.end()) return it->second;
  return rows_[key] = hierarchy_row(bytes, elem_size, topology_, reduce_scatter_.candidates(), all_gather_.candidates());
}

const RealNccl& real_nccl() {
  const RealNccl* real = RealNccl::get();
  if (real == nullptr) throw ShimError{ncclSystemError, "libccc-nccl: " + RealNccl::why_missing()};
  return *real;
}

namespace {
std::shared_mutex registry_mutex;
std::unordered_set<const ncclComm*> registry;
}  // namespace

void register_comm(ncclComm* comm) {
  std::unique_lock lock(registry_mutex);
  registry.insert(comm);
}

void unregister_comm(ncclComm* comm) {
  std::unique_lock lock(registry_mutex);
  registry.erase(comm);
}

bool is_ours(const ncclComm* comm) {
  std::shared_lock lock(registry_mutex);
  return registry.contains(comm);
}

ncclComm make_shim() {
  ncclComm comm;
  try {
    comm.policy = RoutePolicy::from_environment();
  } catch (const std::invalid_argument& e) {
    throw ShimError{ncclInvalidArgument, e.what()};
  }
  comm.arena_bytes = arena_bytes_from_environment();
  const char* backend = std::getenv("CCC_BACKEND");
  comm.ccc_host = backend != nullptr && std::string_view(backend) == "host";
  return comm;
}

void attach_ccc(ncclComm& comm) {
  const RealNccl& real = real_nccl();
  int device = 0;
  if (real.ncclCommCount(comm.real, &comm.nranks) != ncclSuccess ||
      real.ncclCommUserRank(comm.real, &comm.rank) != ncclSuccess ||
      real.ncclCommCuDevice(comm.real, &device) != ncclSuccess)
    throw ShimError{ncclInternalError, fmt::format("libccc-nccl: NCCL's new communicator does not answer: {}",
                                                   real.ncclGetLastError(comm.real))};
  // The exchange's buffers and ccc's ranks on the communicator's device, whichever is current.
  std::optional<DeviceContext> on_device;
  try {
    on_device.emplace(device);
  } catch (const CudaError& e) {
    throw ShimError{ncclUnhandledCudaError, fmt::format("libccc-nccl: device {}: {}", device, e.what())};
  }
  RankCard card{};
  copy_text(card.node, node_name(comm.rank));
  copy_text(card.policy, routing_settings(comm));
  card.arena_bytes = comm.arena_bytes;
  const NodePlace place = node_place(all_gather(real, comm, card), comm.rank);
  if (!comm.policy.uses_ccc()) return;
  if (!place.even) {
    log_info(
        fmt::format("rank {}: the nodes hold different numbers of ranks: every collective goes to NCCL", comm.rank));
    return;
  }
  // Across nodes only allreduces use ccc: named by the policy, or by `auto` where $CCC_TOPO
  // describes these nodes, so that the model can choose. Otherwise no ccc communicator and no rail.
  if (place.nodes > 1) {
    const Side side = comm.policy.side(Collective::AllReduce);
    if (side == Side::Auto) comm.hierarchy = hierarchy_predictor(place);
    if (side == Side::Nccl || (side == Side::Auto && comm.hierarchy == nullptr)) return;
  }
  if (place.nodes > 1) {
    ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
    blocking.blocking = 1;  // not the parent's: the hierarchy's steps wait for it
    const ncclResult_t r = real.ncclCommSplit(comm.real, place.local_rank, place.node, &comm.rail, &blocking);
    if (r != ncclSuccess)
      throw ShimError{r, fmt::format("libccc-nccl: splitting the ranks of local index {} across the nodes: {}",
                                     place.local_rank, real.ncclGetLastError(comm.real))};
  }

  // Each node's first rank names its ccc communicator; the node's ranks join it.
  cccUniqueId id{};
  int32_t ok = 1;
  std::string why;
  if (comm.rank == place.leader && cccGetUniqueId(&id) != cccSuccess) ok = 0, why = cccGetLastError(nullptr);
  id = all_gather(real, comm, id)[place.leader];
  const cccConfig_t config = ccc_config(comm);
  if (ok != 0 && cccCommInitRankConfig(&comm.ccc, place.local_ranks, id, place.local_rank, &config) != cccSuccess)
    ok = 0, why = cccGetLastError(nullptr), comm.ccc = nullptr;
  // Every rank routes alike, or a call would wait on a peer that went the other way.
  const std::vector<int32_t> oks = all_gather(real, comm, ok);
  if (std::find(oks.begin(), oks.end(), 0) != oks.end()) {
    if (comm.ccc != nullptr) cccCommDestroy(comm.ccc);
    if (comm.rail != nullptr) real.ncclCommDestroy(comm.rail);
    comm.ccc = nullptr;
    comm.rail = nullptr;
    warn(fmt::format("rank {}: ccc's communicator could not be made{}{}: every collective goes to NCCL", comm.rank,
                     why.empty() ? " on another rank" : ": ", why));
    return;
  }
  comm.nodes = place.nodes;
  comm.local_rank = place.local_rank;
  comm.local_ranks = place.local_ranks;
  log_info(fmt::format("rank {} of {}: ccc joined on backend {} as rank {} of {} on node {} of {}, routes {}",
                       comm.rank, comm.nranks, config.backend, place.local_rank, place.local_ranks, place.node,
                       place.nodes, comm.policy.canonical()));
}

void attach_ccc_all(ncclComm* const* comms, int ndev, const int* devlist) {
  for (int i = 0; i < ndev; ++i) {
    comms[i]->rank = i;
    comms[i]->nranks = ndev;
  }
  ncclComm& first = *comms[0];
  if (!first.policy.uses_ccc()) return;
  std::vector<cccComm_t> ccc(ndev, nullptr);
  const cccConfig_t config = ccc_config(first);
  const cccResult_t r = first.ccc_host ? cccCommInitAllHostConfig(ccc.data(), ndev, &config)
                                       : cccCommInitAllConfig(ccc.data(), ndev, devlist, &config);
  if (r != cccSuccess) {
    warn(fmt::format("ccc's communicators could not be made: {}: every collective goes to NCCL",
                     cccGetLastError(nullptr)));
    return;
  }
  for (int i = 0; i < ndev; ++i) comms[i]->ccc = ccc[i];
  log_info(fmt::format("{} ranks in one process: ccc joined on backend {}, routes {}", ndev, config.backend,
                       first.policy.canonical()));
}

}  // namespace ccc::nccl
