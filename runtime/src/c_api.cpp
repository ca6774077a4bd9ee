// The C API (ccc.h) over ccc::Communicator: one handle per rank, a collective launched when the
// last rank of the clique has called it.
#include "ccc/ccc.h"

#include <cstring>
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

// The ranks made by one cccCommInitAll* call and the collective they are assembling.
struct Clique {
  explicit Clique(ccc::Communicator c)
      : comm(std::move(c)), send(comm.size()), recv(comm.size()), streams(comm.size()),
        arrived(comm.size(), false) {}
  ccc::Communicator comm;
  ccc::CollectiveCall pending;  // send/recv spans unset until launch
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<void*> streams;
  std::vector<bool> arrived;
  int arrivals = 0;

  void clear_pending() {
    arrivals = 0;
    std::fill(arrived.begin(), arrived.end(), false);
  }
};

}  // namespace

struct cccComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
};

namespace {

std::mutex registry_mutex;  // guards live_handles and every clique's pending call
std::unordered_set<cccComm*> live_handles;
thread_local std::string last_error;

cccResult_t fail(cccResult_t result, const std::string& message) {
  last_error = message;
  return result;
}

cccResult_t result_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return cccInvalidArgument;
    case ErrorKind::InvalidUsage: return cccInvalidUsage;
    case ErrorKind::NoDevice: case ErrorKind::Compile: return cccSystemError;
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

// The handle's clique rank, or an error for a handle that is not (or no longer) live.
cccComm& live(cccComm_t comm) {
  if (comm == nullptr) throw Error(ErrorKind::InvalidArgument, "null communicator");
  if (!live_handles.contains(comm))
    throw Error(ErrorKind::InvalidUsage, "communicator used after cccCommDestroy (or never created)");
  return *comm;
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

ccc::DataType data_type(const cccDataType_t& dtype) {
  const int t = enum_value(dtype);
  if (t < 0 || t >= cccNumTypes) throw Error(ErrorKind::InvalidArgument, fmt::format("unsupported data type {}", t));
  return ccc::kAllDataTypes[t];
}

ccc::ReduceOp reduce_op(const cccRedOp_t& reduction) {
  const int op = enum_value(reduction);
  if (op < 0 || op >= cccNumOps) throw Error(ErrorKind::InvalidArgument, fmt::format("unsupported reduction op {}", op));
  return ccc::kAllReduceOps[op];
}

bool same_shape(const ccc::CollectiveCall& a, const ccc::CollectiveCall& b) {
  return a.collective == b.collective && a.count == b.count && a.dtype == b.dtype &&
         a.op == b.op && a.root == b.root;
}

// Records rank comm's part of `call`; the last rank to arrive runs the collective.
cccResult_t submit(cccComm_t handle, ccc::CollectiveCall call, const void* send, void* recv,
                   cccStream_t stream) {
  return guarded([&] {
    std::lock_guard lock(registry_mutex);
    cccComm& comm = live(handle);
    Clique& c = *comm.clique;
    if (c.arrivals > 0 && !same_shape(c.pending, call)) {
      c.clear_pending();
      throw Error(ErrorKind::InvalidArgument,
                  fmt::format("rank {} called {} with other arguments than the ranks before it; "
                              "the pending collective was dropped",
                              comm.rank, collective_name(call.collective)));
    }
    if (c.arrived[comm.rank])
      throw Error(ErrorKind::InvalidUsage,
                  fmt::format("rank {} called {} twice before every rank called it once", comm.rank,
                              collective_name(call.collective)));
    c.pending = call;
    c.send[comm.rank] = send;
    c.recv[comm.rank] = recv;
    c.streams[comm.rank] = stream;
    c.arrived[comm.rank] = true;
    if (++c.arrivals < c.comm.size()) return cccSuccess;
    c.clear_pending();
    call.send = c.send;
    call.recv = c.recv;
    const bool host = c.comm.backend() == ccc::BackendKind::Host;
    c.comm.run(call, host ? ccc::Communicator::Streams{} : ccc::Communicator::Streams{c.streams});
    return cccSuccess;
  });
}

}  // namespace

extern "C" {

cccResult_t cccCommInitAll(cccComm_t* comms, int ndev, const int* devlist) {
  return init_all(comms, ndev, [&] {
    std::vector<int> devices(ndev);
    for (int i = 0; i < ndev; ++i) devices[i] = devlist != nullptr ? devlist[i] : i;
    return ccc::Communicator::cuda(devices);
  });
}

cccResult_t cccCommInitAllHost(cccComm_t* comms, int nranks) {
  return init_all(comms, nranks, [&] { return ccc::Communicator::host(nranks); });
}

cccResult_t cccCommDestroy(cccComm_t comm) {
  return guarded([&] {
    std::lock_guard lock(registry_mutex);
    live(comm);
    live_handles.erase(comm);
    delete comm;  // the clique goes with its last handle
    return cccSuccess;
  });
}

cccResult_t cccCommCount(const cccComm_t comm, int* count) {
  return guarded([&] {
    std::lock_guard lock(registry_mutex);
    if (count == nullptr) throw Error(ErrorKind::InvalidArgument, "count is null");
    *count = live(comm).clique->comm.size();
    return cccSuccess;
  });
}

cccResult_t cccCommUserRank(const cccComm_t comm, int* rank) {
  return guarded([&] {
    std::lock_guard lock(registry_mutex);
    if (rank == nullptr) throw Error(ErrorKind::InvalidArgument, "rank is null");
    *rank = live(comm).rank;
    return cccSuccess;
  });
}

cccResult_t cccCommSynchronize(cccComm_t comm) {
  return guarded([&] {
    std::lock_guard lock(registry_mutex);
    live(comm).clique->comm.synchronize();
    return cccSuccess;
  });
}

cccResult_t cccAllReduce(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
                         cccRedOp_t op, cccComm_t comm, cccStream_t stream) {
  return guarded([&] {
    return submit(comm, {Collective::AllReduce, count, data_type(datatype), reduce_op(op), -1, {}, {}},
                  sendbuff, recvbuff, stream);
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

const char* cccGetErrorString(cccResult_t result) {
  switch (enum_value(result)) {
    case cccSuccess: return "no error";
    case cccUnhandledCudaError: return "unhandled cuda error";
    case cccSystemError: return "unhandled system error (no CUDA device, or a kernel failed to compile)";
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
