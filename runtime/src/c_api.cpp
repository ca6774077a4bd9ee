// The C API (ccc.h) over ccc::Communicator: one handle per rank; each rank's call queues that
// rank's part with Communicator::run_rank.
#include "ccc/ccc.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "ccc/communicator.h"

namespace {

using ccc::Collective;
using ccc::Error;
using ccc::ErrorKind;

// The ranks made by one cccCommInitAll* call share one Communicator.
struct Clique {
  explicit Clique(ccc::Communicator c) : comm(std::move(c)) {}
  ccc::Communicator comm;
};

}  // namespace

struct cccComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
};

namespace {

std::mutex registry_mutex;  // guards live_handles
std::unordered_set<cccComm*> live_handles;
thread_local std::string last_error;

// The calling thread's open group: its depth and the launches recorded in it.
thread_local int group_depth = 0;
thread_local std::vector<std::function<void()>> group_launches;

cccResult_t fail(cccResult_t result, const std::string& message) {
  last_error = message;
  return result;
}

cccResult_t result_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return cccInvalidArgument;
    case ErrorKind::InvalidUsage: return cccInvalidUsage;
    case ErrorKind::NoDevice: case ErrorKind::Compile: case ErrorKind::System: return cccSystemError;
    case ErrorKind::Cuda: return cccUnhandledCudaError;
    case ErrorKind::Remote: return cccRemoteError;
    case ErrorKind::Internal: return cccInternalError;
  }
  return cccInternalError;
}

// Runs `body`, turning exceptions into a result code and the thread's last error.
template <typename Body>
cccResult_t guarded(Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    return fail(result_of(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(cccSystemError, "out of memory");
  } catch (const std::exception& e) {
    return fail(cccInternalError, e.what());
  }
}

// The clique of a live handle (kept alive for the call), or an error for a handle that is not
// (or no longer) live.
std::shared_ptr<Clique> clique_of(cccComm_t comm, int* rank = nullptr) {
  if (comm == nullptr) throw Error(ErrorKind::InvalidArgument, "null communicator");
  std::lock_guard lock(registry_mutex);
  if (!live_handles.contains(comm))
    throw Error(ErrorKind::InvalidUsage, "communicator used after cccCommDestroy (or never created)");
  if (rank != nullptr) *rank = comm->rank;
  return comm->clique;
}

ccc::CommOptions options_from(const cccConfig_t* config) {
  ccc::CommOptions options;
  if (config == nullptr) return options;
  if (config->size != sizeof(cccConfig_t) || config->magic != CCC_CONFIG_MAGIC || config->version != CCC_CONFIG_VERSION)
    throw Error(ErrorKind::InvalidArgument, "config was not initialised with CCC_CONFIG_INITIALIZER");
  if (config->timeoutSeconds != CCC_CONFIG_DEFAULT_TIMEOUT) options.timeout_seconds = config->timeoutSeconds;
  if (config->algo != nullptr) options.algo = config->algo;
  if (config->traceFile != nullptr) options.trace_file = config->traceFile;
  return options;
}

// The backend a config names: its own, else $CCC_BACKEND, else host.
ccc::BackendKind config_backend(const cccConfig_t* config) {
  std::string backend = config != nullptr && config->backend != nullptr ? config->backend : "";
  if (const char* env = std::getenv("CCC_BACKEND"); backend.empty() && env != nullptr) backend = env;
  if (backend.empty()) return ccc::BackendKind::Host;
  if (std::optional<ccc::BackendKind> kind = ccc::backend_named(backend)) return *kind;
  throw Error(ErrorKind::InvalidArgument, fmt::format("backend \"{}\": expected {}", backend, ccc::backend_names()));
}

ccc::UniqueId unique_id_of(const cccUniqueId& id) {
  static_assert(sizeof id.internal == sizeof(ccc::UniqueId::bytes));
  ccc::UniqueId u;
  std::memcpy(u.bytes.data(), id.internal, sizeof id.internal);
  return u;
}

template <typename Make>
cccResult_t init_all(cccComm_t* comms, int n, Make&& make) {
  return guarded([&] {
    if (comms == nullptr) throw Error(ErrorKind::InvalidArgument, "comms is null");
    if (n < 1) throw Error(ErrorKind::InvalidArgument, fmt::format("need at least one rank, got {}", n));
    auto clique = std::make_shared<Clique>(make());
    std::lock_guard lock(registry_mutex);
    for (int r = 0; r < n; ++r) {
      comms[r] = new cccComm{clique, r};
      live_handles.insert(comms[r]);
    }
    return cccSuccess;
  });
}

// A C caller may pass any int for an enum, but in C++ reading an enum object whose value lies
// outside its enumerators' range is undefined (UBSan's -fsanitize=enum): read the int it holds.
template <typename Enum>
int enum_value(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Indexed by the C enums' values, which are NCCL's (see ccc.h).
constexpr ccc::DataType kCDataTypes[] = {ccc::DataType::I8,  ccc::DataType::U8,  ccc::DataType::I32,
                                         ccc::DataType::U32, ccc::DataType::I64, ccc::DataType::U64,
                                         ccc::DataType::F16, ccc::DataType::F32, ccc::DataType::F64,
                                         ccc::DataType::BF16, ccc::DataType::F8E4M3, ccc::DataType::F8E5M2};
static_assert(std::size(kCDataTypes) == cccNumTypes);
constexpr ccc::ReduceOp kCReduceOps[] = {ccc::ReduceOp::Sum, ccc::ReduceOp::Prod, ccc::ReduceOp::Max,
                                         ccc::ReduceOp::Min, ccc::ReduceOp::Avg};
static_assert(std::size(kCReduceOps) == cccNumOps);

ccc::DataType data_type(const cccDataType_t& dtype) {
  const int t = enum_value(dtype);
  if (t < 0 || t >= static_cast<int>(std::size(kCDataTypes)))
    throw Error(ErrorKind::InvalidArgument, fmt::format("unsupported data type {}", t));
  return kCDataTypes[t];
}

ccc::ReduceOp reduce_op(const cccRedOp_t& reduction) {
  const int op = enum_value(reduction);
  if (op < 0 || op >= cccNumOps) throw Error(ErrorKind::InvalidArgument, fmt::format("unsupported reduction op {}", op));
  return kCReduceOps[op];
}

Collective collective_of(const cccFunc_t& func) {
  switch (enum_value(func)) {
    case cccFuncBroadcast: return Collective::Broadcast;
    case cccFuncReduce: return Collective::Reduce;
    case cccFuncAllGather: return Collective::AllGather;
    case cccFuncReduceScatter: return Collective::ReduceScatter;
    case cccFuncAllReduce: return Collective::AllReduce;
    case cccFuncAllToAll: return Collective::AllToAll;
  }
  throw Error(ErrorKind::InvalidArgument, fmt::format("unknown collective {}", enum_value(func)));
}

// Checks rank handle's part of `call` and queues it, or records it in the thread's open group.
// The shape of a call of `collective` (no buffers): the op only where it reduces, the root only
// where it has one.
ccc::CollectiveCall call_shape(Collective collective, size_t count, const cccDataType_t& datatype, const cccRedOp_t& op,
                               int root) {
  const bool rooted = collective == Collective::Broadcast || collective == Collective::Reduce;
  const bool reduces = collective != Collective::AllGather && collective != Collective::Broadcast &&
                       collective != Collective::AllToAll;
  return {collective, count, data_type(datatype), reduces ? reduce_op(op) : ccc::ReduceOp::Sum, rooted ? root : -1,
          {}, {}};
}

cccResult_t submit(cccComm_t handle, const ccc::CollectiveCall& call, const void* send, void* recv,
                   cccStream_t stream, const ccc::RankEpilogue& epilogue = {}) {
  return guarded([&] {
    int rank = 0;
    std::shared_ptr<Clique> clique = clique_of(handle, &rank);
    ccc::validate_rank_call(call, clique->comm.size(), rank, send, recv, epilogue);
    auto launch = [clique, call, rank, send, recv, stream, epilogue] {
      clique->comm.run_rank(call, rank, send, recv, stream, epilogue);
    };
    if (group_depth > 0)
      group_launches.push_back(std::move(launch));
    else
      launch();
    return cccSuccess;
  });
}

}  // namespace

extern "C" {

cccResult_t cccCommInitAllConfig(cccComm_t* comms, int ndev, const int* devlist, const cccConfig_t* config) {
  return init_all(comms, ndev, [&] {
    std::vector<int> devices(ndev);
    for (int i = 0; i < ndev; ++i) devices[i] = devlist != nullptr ? devlist[i] : i;
    return ccc::Communicator::cuda(devices, options_from(config));
  });
}

cccResult_t cccCommInitAll(cccComm_t* comms, int ndev, const int* devlist) {
  return cccCommInitAllConfig(comms, ndev, devlist, nullptr);
}

cccResult_t cccCommInitAllHostConfig(cccComm_t* comms, int nranks, const cccConfig_t* config) {
  return init_all(comms, nranks, [&] {
    ccc::CommOptions options = options_from(config);  // checks the config first
    return config_backend(config) == ccc::BackendKind::Sim ? ccc::Communicator::sim(nranks, std::move(options))
                                                           : ccc::Communicator::host(nranks, std::move(options));
  });
}

cccResult_t cccCommInitAllHost(cccComm_t* comms, int nranks) {
  return cccCommInitAllHostConfig(comms, nranks, nullptr);
}

cccResult_t cccGetUniqueId(cccUniqueId* uniqueId) {
  return guarded([&] {
    if (uniqueId == nullptr) throw Error(ErrorKind::InvalidArgument, "uniqueId is null");
    const ccc::UniqueId id = ccc::Communicator::unique_id();
    std::memcpy(uniqueId->internal, id.bytes.data(), sizeof uniqueId->internal);
    return cccSuccess;
  });
}

cccResult_t cccCommInitRankConfig(cccComm_t* comm, int nranks, cccUniqueId commId, int rank,
                                  const cccConfig_t* config) {
  return guarded([&] {
    if (comm == nullptr) throw Error(ErrorKind::InvalidArgument, "comm is null");
    ccc::CommOptions options = options_from(config);  // checks the config first
    ccc::RankOptions rank_options;
    if (config != nullptr) rank_options.arena_bytes = config->arenaBytes;
    auto clique = std::make_shared<Clique>(ccc::Communicator::create_rank(
        config_backend(config), unique_id_of(commId), nranks, rank, std::move(options), rank_options));
    std::lock_guard lock(registry_mutex);
    *comm = new cccComm{clique, rank};
    live_handles.insert(*comm);
    return cccSuccess;
  });
}

cccResult_t cccCommInitRank(cccComm_t* comm, int nranks, cccUniqueId commId, int rank) {
  return cccCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

cccResult_t cccCommMemAlloc(cccComm_t comm, void** ptr, size_t size) {
  return guarded([&] {
    if (ptr == nullptr) throw Error(ErrorKind::InvalidArgument, "ptr is null");
    *ptr = clique_of(comm)->comm.mem_alloc(size);
    return cccSuccess;
  });
}

cccResult_t cccCommMemFree(cccComm_t comm, void* ptr) {
  return guarded([&] {
    clique_of(comm)->comm.mem_free(ptr);
    return cccSuccess;
  });
}

cccResult_t cccCommRegister(cccComm_t comm, void* buff, size_t size, void** handle) {
  return guarded([&] {
    if (handle == nullptr) throw Error(ErrorKind::InvalidArgument, "handle is null");
    *handle = clique_of(comm)->comm.register_buffer(buff, size);
    return cccSuccess;
  });
}

cccResult_t cccCommDeregister(cccComm_t comm, void* handle) {
  return guarded([&] {
    clique_of(comm)->comm.deregister_buffer(handle);
    return cccSuccess;
  });
}

cccResult_t cccCommGraphRegisterBegin(cccComm_t comm) {
  return guarded([&] {
    clique_of(comm)->comm.begin_graph_registration();
    return cccSuccess;
  });
}

cccResult_t cccCommGraphRegisterEnd(cccComm_t comm, void** handle) {
  return guarded([&] {
    if (handle == nullptr) throw Error(ErrorKind::InvalidArgument, "handle is null");
    *handle = clique_of(comm)->comm.end_graph_registration();
    return cccSuccess;
  });
}

cccResult_t cccCommGetAsyncError(cccComm_t comm, cccResult_t* asyncError) {
  return guarded([&] {
    if (asyncError == nullptr) throw Error(ErrorKind::InvalidArgument, "asyncError is null");
    int rank = 0;
    const std::string failure = clique_of(comm, &rank)->comm.async_error(rank);
    *asyncError = failure.empty() ? cccSuccess : cccRemoteError;
    if (!failure.empty()) last_error = "collective failed: " + failure;
    return cccSuccess;
  });
}

cccResult_t cccCommAbort(cccComm_t comm) {
  return guarded([&] {
    int rank = 0;
    clique_of(comm, &rank)->comm.abort_rank(rank);
    return cccCommDestroy(comm);
  });
}

cccResult_t cccCommDestroy(cccComm_t comm) {
  return guarded([&] {
    std::shared_ptr<Clique> clique = clique_of(comm);
    {
      std::lock_guard lock(registry_mutex);
      live_handles.erase(comm);
      delete comm;
    }
    clique.reset();  // the clique goes with its last handle (waiting for its ranks' work)
    return cccSuccess;
  });
}

cccResult_t cccCommVirtualTime(const cccComm_t comm, double* seconds) {
  return guarded([&] {
    if (seconds == nullptr) throw Error(ErrorKind::InvalidArgument, "seconds is null");
    *seconds = clique_of(comm)->comm.virtual_seconds();
    return cccSuccess;
  });
}

cccResult_t cccCommCount(const cccComm_t comm, int* count) {
  return guarded([&] {
    if (count == nullptr) throw Error(ErrorKind::InvalidArgument, "count is null");
    *count = clique_of(comm)->comm.size();
    return cccSuccess;
  });
}

cccResult_t cccCommUserRank(const cccComm_t comm, int* rank) {
  return guarded([&] {
    if (rank == nullptr) throw Error(ErrorKind::InvalidArgument, "rank is null");
    clique_of(comm, rank);
    return cccSuccess;
  });
}

cccResult_t cccCommSynchronize(cccComm_t comm) {
  return guarded([&] {
    int rank = 0;
    std::shared_ptr<Clique> clique = clique_of(comm, &rank);
    clique->comm.synchronize_rank(rank);  // without the registry lock: peers keep calling
    return cccSuccess;
  });
}

cccResult_t cccGroupStart(void) {
  ++group_depth;
  return cccSuccess;
}

cccResult_t cccGroupEnd(void) {
  if (group_depth == 0) return fail(cccInvalidUsage, "cccGroupEnd without a matching cccGroupStart");
  if (--group_depth > 0) return cccSuccess;
  std::vector<std::function<void()>> launches = std::move(group_launches);
  group_launches.clear();
  cccResult_t first = cccSuccess;
  std::string first_error;
  for (auto& launch : launches) {
    const cccResult_t r = guarded([&] {
      launch();
      return cccSuccess;
    });
    if (r != cccSuccess && first == cccSuccess) {
      first = r;
      first_error = last_error;
    }
  }
  return first == cccSuccess ? cccSuccess : fail(first, first_error);
}

cccResult_t cccAllReduce(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
                         cccRedOp_t op, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    return submit(comm, {Collective::AllReduce, count, data_type(datatype), reduce_op(op), -1, {}, {}},
                  sendbuff, recvbuff, stream);
  });
}

cccResult_t cccAllReduceResidual(const void* sendbuff, const void* residual, void* recvbuff, size_t count,
                                 cccDataType_t datatype, cccRedOp_t op, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    ccc::CollectiveCall call{Collective::AllReduce, count, data_type(datatype), reduce_op(op), -1, {}, {}};
    call.epilogue = ccc::Epilogue::Residual;
    return submit(comm, call, sendbuff, recvbuff, stream, {residual, nullptr, nullptr});
  });
}

cccResult_t cccAllReduceResidualRmsNorm(const void* sendbuff, const void* residual, const void* weight,
                                        void* recvbuff, void* residualOut, size_t count, size_t hidden, float eps,
                                        cccDataType_t datatype, cccRedOp_t op, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    ccc::CollectiveCall call{Collective::AllReduce, count, data_type(datatype), reduce_op(op), -1, {}, {}};
    call.epilogue = ccc::Epilogue::ResidualRmsNorm;
    call.hidden = hidden;
    call.eps = eps;
    return submit(comm, call, sendbuff, recvbuff, stream, {residual, weight, residualOut});
  });
}

cccResult_t cccAllReduceResidualRmsNormFp8(const void* sendbuff, const void* residual, const void* weight,
                                           void* recvbuff, void* residualOut, void* quantOut, size_t count,
                                           size_t hidden, float eps, float scale, cccDataType_t datatype,
                                           cccRedOp_t op, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    ccc::CollectiveCall call{Collective::AllReduce, count, data_type(datatype), reduce_op(op), -1, {}, {}};
    call.epilogue = ccc::Epilogue::ResidualRmsNorm;
    call.hidden = hidden;
    call.eps = eps;
    call.quant_scale = scale;
    return submit(comm, call, sendbuff, recvbuff, stream, {residual, weight, residualOut, quantOut});
  });
}

cccResult_t cccReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                             cccDataType_t datatype, cccRedOp_t op, cccComm_t comm,
                             cccStream_t stream) {
  return guarded([&] {
    return submit(comm, {Collective::ReduceScatter, recvcount, data_type(datatype), reduce_op(op), -1, {}, {}},
                  sendbuff, recvbuff, stream);
  });
}

cccResult_t cccAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                         cccDataType_t datatype, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    return submit(comm, {Collective::AllGather, sendcount, data_type(datatype), ccc::ReduceOp::Sum, -1, {}, {}},
                  sendbuff, recvbuff, stream);
  });
}

cccResult_t cccBroadcast(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
                         int root, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    return submit(comm, {Collective::Broadcast, count, data_type(datatype), ccc::ReduceOp::Sum, root, {}, {}},
                  sendbuff, recvbuff, stream);
  });
}

cccResult_t cccReduce(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
                      cccRedOp_t op, int root, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    return submit(comm, {Collective::Reduce, count, data_type(datatype), reduce_op(op), root, {}, {}},
                  sendbuff, recvbuff, stream);
  });
}

cccResult_t cccAllToAll(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype, cccComm_t comm,
                        cccStream_t stream) {
  return guarded([&] {
    return submit(comm, {Collective::AllToAll, count, data_type(datatype), ccc::ReduceOp::Sum, -1, {}, {}}, sendbuff,
                  recvbuff, stream);
  });
}

cccResult_t cccCommPredict(cccComm_t comm, cccFunc_t func, size_t count, cccDataType_t datatype, cccRedOp_t op,
                           int root, double* cccSeconds, double* ncclSeconds) {
  return guarded([&] {
    std::shared_ptr<Clique> clique = clique_of(comm);
    const ccc::Prediction p = clique->comm.predict(call_shape(collective_of(func), count, datatype, op, root));
    if (cccSeconds != nullptr) *cccSeconds = p.ccc_seconds;
    if (ncclSeconds != nullptr) *ncclSeconds = p.nccl_seconds;
    return cccSuccess;
  });
}

cccResult_t cccCommWarmUp(cccComm_t comm, cccFunc_t func, const size_t* counts, int ncounts, cccDataType_t datatype,
                          cccRedOp_t op, int root, int inPlace, int blocking) {
  return guarded([&] {
    std::shared_ptr<Clique> clique = clique_of(comm);
    const Collective collective = collective_of(func);
    if (ncounts < 0 || (ncounts > 0 && counts == nullptr))
      throw Error(ErrorKind::InvalidArgument, fmt::format("cccCommWarmUp: {} counts at {}", ncounts,
                                                          static_cast<const void*>(counts)));
    std::vector<ccc::CollectiveCall> shapes;
    for (int i = 0; i < ncounts; ++i) shapes.push_back(call_shape(collective, counts[i], datatype, op, root));
    clique->comm.warm_up(shapes, inPlace != 0,
                         blocking != 0 ? ccc::Communicator::WarmUp::Wait : ccc::Communicator::WarmUp::Background);
    return cccSuccess;
  });
}

const char* cccGetErrorString(cccResult_t result) {
  switch (enum_value(result)) {
    case cccSuccess: return "no error";
    case cccUnhandledCudaError: return "unhandled cuda error";
    case cccSystemError:
      return "unhandled system error (a connection, memory, a file, the device or a kernel compile failed; "
             "cccGetLastError says which)";
    case cccInternalError: return "internal error";
    case cccInvalidArgument: return "invalid argument";
    case cccInvalidUsage: return "invalid usage";
    case cccRemoteError: return "a peer rank timed out or failed during a collective";
    case cccNumResults: break;
  }
  return "unknown result code";
}

const char* cccGetLastError(cccComm_t) { return last_error.c_str(); }

}  // extern "C"
