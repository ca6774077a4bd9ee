// libccc-nccl's exported functions: NCCL 2.28's API (the toolkit's nccl.h, and nccl_device.h's
// host functions), each also under its profiling name pnccl*, over ccc and the real NCCL.
// docs/nccl.md has the table of what each one does. A collective ccc can run (a built-in op on a
// communicator ccc joined) goes where the route policy sends it (route.h); everything else goes
// to the real NCCL with the same arguments, the real communicator in place of ours.
#include <fmt/format.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "ccc/ccc.h"
#include "ccc/types.h"
#include "debug_log.h"
#include "route.h"
#include "shim_comm.h"

#define CCC_NCCL_API extern "C" __attribute__((visibility("default")))

using ccc::Collective;
using namespace ccc::nccl;

// ccc's enums take NCCL's values (ccc.h), so a cast translates.
static_assert(static_cast<int>(cccFloat8e5m2) == static_cast<int>(ncclFloat8e5m2) &&
              static_cast<int>(cccNumTypes) == static_cast<int>(ncclNumTypes));
static_assert(static_cast<int>(cccAvg) == static_cast<int>(ncclAvg) &&
              static_cast<int>(cccNumOps) == static_cast<int>(ncclNumOps));
static_assert(static_cast<int>(cccRemoteError) == static_cast<int>(ncclRemoteError));

namespace {

thread_local std::string last_error;

ncclResult_t fail(ncclResult_t result, std::string message) {
  last_error = std::move(message);
  return result;
}

template <class Body>
ncclResult_t guarded(Body&& body) {
  try {
    return body();
  } catch (const ShimError& e) {
    return fail(e.result, e.message);
  } catch (const std::bad_alloc&) {
    return fail(ncclSystemError, "libccc-nccl: out of memory");
  } catch (const std::exception& e) {
    return fail(ncclInternalError, std::string("libccc-nccl: ") + e.what());
  }
}

// A real NCCL function, or a ShimError when this NCCL lacks it.
template <class F>
F require(F function, const char* name) {
  if (function == nullptr)
    throw ShimError{ncclInvalidUsage,
                    fmt::format("libccc-nccl: the NCCL at {} has no {} (older than 2.28?)", real_nccl().path, name)};
  return function;
}
#define REAL(name) require(real_nccl().name, #name)

// A forwarded call's result; a failure leaves NCCL's own message for ncclGetLastError.
ncclResult_t forwarded(ncclResult_t result, ncclComm_t real_comm) {
  if (result != ncclSuccess && result != ncclInProgress) {
    const char* message = real_nccl().ncclGetLastError != nullptr ? real_nccl().ncclGetLastError(real_comm) : nullptr;
    last_error = message != nullptr ? message : "";
  }
  return result;
}

ncclResult_t from_ccc(cccResult_t result, cccComm_t comm) {
  if (result != cccSuccess) last_error = std::string("ccc: ") + cccGetLastError(comm);
  return static_cast<ncclResult_t>(result);
}

// The real NCCL calls its own exported functions through the PLT, so with libccc-nccl first in
// the process's symbol scope (LD_PRELOAD, linked directly, or installed as libnccl.so.2) those
// calls land here with NCCL's own communicators: anything that is not one of ours is NCCL's, and
// goes back to it unchanged.
ncclComm_t real_of(ncclComm_t comm) { return is_ours(comm) ? comm->real : comm; }

cccDataType_t ccc_type(ncclDataType_t t) { return static_cast<cccDataType_t>(t); }
cccRedOp_t ccc_op(ncclRedOp_t op) { return static_cast<cccRedOp_t>(op); }

cccFunc_t ccc_func(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return cccFuncAllReduce;
    case Collective::ReduceScatter:
      return cccFuncReduceScatter;
    case Collective::AllGather:
      return cccFuncAllGather;
    case Collective::Broadcast:
      return cccFuncBroadcast;
    case Collective::Reduce:
      return cccFuncReduce;
    case Collective::AllToAll:
      return cccFuncAllToAll;
  }
  return cccFuncAllReduce;
}

int element_bytes(ncclDataType_t t) {
  static constexpr int kElementBytes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return kElementBytes[t];
}

// The larger of a rank's send and receive bytes, as the models count them (NCCL's nBytes).
int64_t call_bytes(Collective c, size_t count, ncclDataType_t t, int nranks) {
  const auto bytes = static_cast<int64_t>(count) * element_bytes(t);
  const bool per_rank = c == Collective::AllGather || c == Collective::ReduceScatter || c == Collective::AllToAll;
  return per_rank ? bytes * nranks : bytes;
}

bool is_integer(ncclDataType_t t) { return t <= ncclUint64; }

// Whether a call on ranks that span nodes can run hierarchically (hierarchical_allreduce): an
// allreduce whose count the node's ranks split evenly, and whose op composes (an integer average
// of averages truncates twice, so NCCL keeps it).
bool hierarchical(const ncclComm& comm, Collective collective, size_t count, ncclDataType_t dtype, ncclRedOp_t op) {
  return collective == Collective::AllReduce && count % comm.local_ranks == 0 && !(op == ncclAvg && is_integer(dtype));
}

// Whether this call goes to ccc. NCCL keeps what ccc cannot run (user-defined reduction ops, a
// communicator ccc did not join, an empty call, across nodes all but hierarchical allreduces) and
// what NCCL itself must reject (a bad type).
bool to_ccc(ncclComm& comm, Collective collective, size_t count, ncclDataType_t dtype, ncclRedOp_t op, int root,
            double* predicted) {
  if (comm.ccc == nullptr || count == 0) return false;
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= ncclNumTypes) return false;
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= ncclNumOps) return false;
  if (comm.nodes > 1 && !hierarchical(comm, collective, count, dtype, op)) return false;
  const Side side = comm.policy.side(collective);
  double ccc_seconds = 0, nccl_seconds = 0;
  if (side == Side::Auto && comm.nodes == 1 &&
      cccCommPredict(comm.ccc, ccc_func(collective), count, ccc_type(dtype), ccc_op(op), root, &ccc_seconds,
                     &nccl_seconds) != cccSuccess)
    ccc_seconds = nccl_seconds = 0;  // no prediction: auto keeps NCCL
  const int64_t bytes = call_bytes(collective, count, dtype, comm.nranks);
  if (side == Side::Auto && comm.nodes > 1) {  // ccc's hierarchy against NCCL's ring (hierarchy_model.h)
    try {
      const ccc::HierarchyRow row = comm.hierarchy->row(bytes, element_bytes(dtype));
      ccc_seconds = row.hierarchical;
      nccl_seconds = row.nccl;
    } catch (const std::invalid_argument&) {  // no schedule fits: no prediction, NCCL keeps it
    }
  }
  const RouteDecision decision = decide(side, bytes, ccc_seconds, nccl_seconds, comm.arena_bytes);
  log_decision(comm.rank, comm.nranks, collective, bytes, decision);
  *predicted = ccc_seconds;
  return decision.to_ccc;
}

// The calling thread's group (ncclGroupStart .. End): its depth, and the calls routed to ccc,
// which run at the outermost end inside one ccc group (so one thread may drive several ranks).
struct DeferredCall {
  ncclComm* comm;
  std::function<cccResult_t(cccComm_t)> call;
  double predicted;
};
thread_local int group_depth = 0;
thread_local std::vector<DeferredCall> group_calls;
// Hierarchical allreduces in the group: each a sequence of ccc and NCCL steps on one stream, run
// in order once the group has ended.
thread_local std::vector<std::function<ncclResult_t()>> after_group;

// On ccc's host backend nothing orders a call behind the stream's earlier work or the caller's
// later work: it finishes before the NCCL call that made it returns.
ncclResult_t finish_if_host(ncclComm& comm) {
  return comm.ccc_host ? from_ccc(cccCommSynchronize(comm.ccc), comm.ccc) : ncclSuccess;
}

ncclResult_t on_ccc(ncclComm& comm, double predicted, std::function<cccResult_t(cccComm_t)> call) {
  if (group_depth > 0) {
    group_calls.push_back({&comm, std::move(call), predicted});
    return ncclSuccess;
  }
  const ncclResult_t r = from_ccc(call(comm.ccc), comm.ccc);
  return r != ncclSuccess ? r : finish_if_host(comm);
}

ncclResult_t run_after_group() {
  std::vector<std::function<ncclResult_t()>> calls = std::move(after_group);
  after_group.clear();
  ncclResult_t first = ncclSuccess;
  for (auto& call : calls) {
    const ncclResult_t r = call();
    if (first == ncclSuccess) first = r;
  }
  return first;
}

// An allreduce across nodes, in three steps on the caller's stream: ccc's reduce-scatter within
// the node leaves the rank its block of the node's reduction, in place in recvbuff; NCCL's
// allreduce of that block among the ranks of the same local index on every node (the rail)
// completes it; ccc's all-gather within the node gives every rank every block. Every rank ends
// with the same bits: each block is reduced once, on its rail, and copied.
ncclResult_t hierarchical_allreduce(ncclComm& c, const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream) {
  const size_t block = count / c.local_ranks;
  const auto bytes = static_cast<size_t>(call_bytes(Collective::AllReduce, block, datatype, 1));
  void* mine = static_cast<char*>(recvbuff) + c.local_rank * bytes;
  auto steps = [&c, sendbuff, recvbuff, block, datatype, op, stream, mine] {
    ncclResult_t r =
        from_ccc(cccReduceScatter(sendbuff, mine, block, ccc_type(datatype), ccc_op(op), c.ccc, stream), c.ccc);
    if (r == ncclSuccess) r = finish_if_host(c);
    if (r == ncclSuccess) r = forwarded(REAL(ncclAllReduce)(mine, mine, block, datatype, op, c.rail, stream), c.rail);
    if (r == ncclSuccess) r = from_ccc(cccAllGather(mine, recvbuff, block, ccc_type(datatype), c.ccc, stream), c.ccc);
    return r == ncclSuccess ? finish_if_host(c) : r;
  };
  if (group_depth > 0) {
    after_group.emplace_back(steps);
    return ncclSuccess;
  }
  return steps();
}

// Queues the group's ccc calls at its outermost end; the first failure.
ncclResult_t run_group_calls() {
  std::vector<DeferredCall> calls = std::move(group_calls);
  group_calls.clear();
  if (calls.empty()) return ncclSuccess;
  ncclResult_t first = from_ccc(cccGroupStart(), nullptr);
  for (DeferredCall& c : calls) {
    const ncclResult_t r = from_ccc(c.call(c.comm->ccc), c.comm->ccc);
    if (first == ncclSuccess) first = r;
  }
  const ncclResult_t end = from_ccc(cccGroupEnd(), nullptr);
  if (first == ncclSuccess) first = end;
  for (DeferredCall& c : calls) {
    const ncclResult_t r = finish_if_host(*c.comm);
    if (first == ncclSuccess) first = r;
  }
  return first;
}

// One collective on one rank: on ccc when routed there (`on_ccc_side`), else NCCL's with the
// caller's arguments on NCCL's communicator (`on_nccl_side`).
template <class OnCcc, class OnNccl>
ncclResult_t collective(ncclComm_t comm, Collective c, size_t count, ncclDataType_t dtype, ncclRedOp_t op, int root,
                        OnCcc&& on_ccc_side, OnNccl&& on_nccl_side) {
  return guarded([&] {
    double predicted = 0;
    if (is_ours(comm) && to_ccc(*comm, c, count, dtype, op, root, &predicted))
      return on_ccc(*comm, predicted, std::forward<OnCcc>(on_ccc_side));
    return forwarded(on_nccl_side(real_of(comm)), real_of(comm));
  });
}

// Whether a new communicator can join ccc now. Inside a group NCCL makes it at the group's end,
// and a non-blocking one later still, writing the handle into the caller's pointer then: such a
// communicator stays NCCL's own (every call on it goes to NCCL), and the caller's pointer goes to
// NCCL as it is.
bool joins_now(const ncclConfig_t* config) { return group_depth == 0 && (config == nullptr || config->blocking != 0); }

void log_nccl_only(const char* what) {
  if (ccc::debug_info_on())
    ccc::debug_info(fmt::format("ccc-nccl: {} inside a group, non-blocking, or of NCCL's own: NCCL's alone", what));
}

// Wraps `real`, a communicator NCCL has just made, in one of ours (`shell`, made before NCCL's so
// that a bad environment fails first) and joins ccc where it may. On any failure every part made
// so far is aborted, NCCL's included.
ncclResult_t adopt(std::unique_ptr<ncclComm> shell, ncclComm_t real, ncclComm_t* newcomm) {
  shell->real = real;
  try {
    attach_ccc(*shell);
  } catch (...) {
    if (shell->ccc != nullptr) cccCommAbort(shell->ccc);
    if (shell->rail != nullptr) real_nccl().ncclCommAbort(shell->rail);
    real_nccl().ncclCommAbort(real);
    throw;
  }
  register_comm(shell.get());
  *newcomm = shell.release();
  return ncclSuccess;
}

}  // namespace

// ---- Communicators ----

CCC_NCCL_API ncclResult_t ncclGetVersion(int* version) {
  return guarded([&] { return forwarded(REAL(ncclGetVersion)(version), nullptr); });
}

CCC_NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded([&] { return forwarded(REAL(ncclGetUniqueId)(uniqueId), nullptr); });
}

CCC_NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                 ncclConfig_t* config) {
  return guarded([&] {
    if (comm == nullptr) return fail(ncclInvalidArgument, "libccc-nccl: ncclCommInitRankConfig: comm is null");
    if (!joins_now(config)) {
      log_nccl_only("ncclCommInitRank");
      return forwarded(REAL(ncclCommInitRankConfig)(comm, nranks, commId, rank, config), nullptr);
    }
    auto shell = std::make_unique<ncclComm>(make_shim());
    ncclComm_t real = nullptr;
    const ncclResult_t r = REAL(ncclCommInitRankConfig)(&real, nranks, commId, rank, config);
    if (r != ncclSuccess) return forwarded(r, real);
    return adopt(std::move(shell), real, comm);
  });
}

CCC_NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

CCC_NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                   ncclUniqueId* commIds, ncclConfig_t* config) {
  return guarded([&] {
    if (newcomm == nullptr) return fail(ncclInvalidArgument, "libccc-nccl: ncclCommInitRankScalable: newcomm is null");
    if (!joins_now(config)) {
      log_nccl_only("ncclCommInitRankScalable");
      return forwarded(REAL(ncclCommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config), nullptr);
    }
    auto shell = std::make_unique<ncclComm>(make_shim());
    ncclComm_t real = nullptr;
    const ncclResult_t r = REAL(ncclCommInitRankScalable)(&real, nranks, myrank, nId, commIds, config);
    if (r != ncclSuccess) return forwarded(r, real);
    return adopt(std::move(shell), real, newcomm);
  });
}

CCC_NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guarded([&] {
    if (comms == nullptr || ndev < 1)
      return fail(ncclInvalidArgument, fmt::format("libccc-nccl: ncclCommInitAll: {} communicators at {}", ndev,
                                                   static_cast<const void*>(comms)));
    std::vector<std::unique_ptr<ncclComm>> made;
    std::vector<ncclComm*> raw;
    for (int i = 0; i < ndev; ++i) {
      made.push_back(std::make_unique<ncclComm>(make_shim()));
      raw.push_back(made.back().get());
    }
    std::vector<ncclComm_t> real(ndev, nullptr);
    const ncclResult_t r = REAL(ncclCommInitAll)(real.data(), ndev, devlist);
    if (r != ncclSuccess) return forwarded(r, nullptr);
    for (int i = 0; i < ndev; ++i) made[i]->real = real[i];
    attach_ccc_all(raw.data(), ndev, devlist);
    for (int i = 0; i < ndev; ++i) {
      register_comm(raw[i]);
      comms[i] = made[i].release();
    }
    return ncclSuccess;
  });
}

CCC_NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                        ncclConfig_t* config) {
  return guarded([&] {
    if (newcomm == nullptr) return fail(ncclInvalidArgument, "libccc-nccl: ncclCommSplit: newcomm is null");
    if (!joins_now(config) || !is_ours(comm)) {
      log_nccl_only("ncclCommSplit");
      return forwarded(REAL(ncclCommSplit)(real_of(comm), color, key, newcomm, config), real_of(comm));
    }
    auto shell = std::make_unique<ncclComm>(make_shim());
    ncclComm_t real = nullptr;
    const ncclResult_t r = REAL(ncclCommSplit)(real_of(comm), color, key, &real, config);
    if (r != ncclSuccess) return forwarded(r, real_of(comm));
    if (real == nullptr) {  // NCCL_SPLIT_NOCOLOR: no child for this rank
      *newcomm = nullptr;
      return ncclSuccess;
    }
    return adopt(std::move(shell), real, newcomm);
  });
}

CCC_NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                         ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guarded([&] {
    if (newcomm == nullptr) return fail(ncclInvalidArgument, "libccc-nccl: ncclCommShrink: newcomm is null");
    if (!joins_now(config) || !is_ours(comm)) {
      log_nccl_only("ncclCommShrink");
      return forwarded(
          REAL(ncclCommShrink)(real_of(comm), excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
          real_of(comm));
    }
    auto shell = std::make_unique<ncclComm>(make_shim());
    ncclComm_t real = nullptr;
    const ncclResult_t r =
        REAL(ncclCommShrink)(real_of(comm), excludeRanksList, excludeRanksCount, &real, config, shrinkFlags);
    if (r != ncclSuccess) return forwarded(r, real_of(comm));
    return adopt(std::move(shell), real, newcomm);
  });
}

CCC_NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded([&] {
    if (!is_ours(comm)) return forwarded(REAL(ncclCommFinalize)(comm), comm);
    ncclComm& c = *comm;
    if (c.ccc != nullptr) {
      const ncclResult_t r = from_ccc(cccCommSynchronize(c.ccc), c.ccc);
      if (r != ncclSuccess) return r;
    }
    const ncclResult_t rail = c.rail != nullptr ? forwarded(REAL(ncclCommFinalize)(c.rail), c.rail) : ncclSuccess;
    const ncclResult_t r = forwarded(REAL(ncclCommFinalize)(c.real), c.real);
    return rail != ncclSuccess && rail != ncclInProgress ? rail : r;
  });
}

CCC_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded([&] {
    if (!is_ours(comm)) return forwarded(REAL(ncclCommDestroy)(comm), comm);
    unregister_comm(comm);
    std::unique_ptr<ncclComm> c(comm);
    const ncclResult_t own = c->ccc != nullptr ? from_ccc(cccCommDestroy(c->ccc), c->ccc) : ncclSuccess;
    if (c->rail != nullptr) REAL(ncclCommDestroy)(c->rail);
    const ncclResult_t r = forwarded(REAL(ncclCommDestroy)(c->real), c->real);
    return own != ncclSuccess ? own : r;
  });
}

// NCCL's parts first: a kernel of NCCL's that waits for ever holds the device, and ccc's abort
// waits for the rank's device to drain.
CCC_NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded([&] {
    if (!is_ours(comm)) return forwarded(REAL(ncclCommAbort)(comm), comm);
    unregister_comm(comm);
    std::unique_ptr<ncclComm> c(comm);
    if (c->rail != nullptr) REAL(ncclCommAbort)(c->rail);
    const ncclResult_t r = forwarded(REAL(ncclCommAbort)(c->real), c->real);
    const ncclResult_t own = c->ccc != nullptr ? from_ccc(cccCommAbort(c->ccc), c->ccc) : ncclSuccess;
    return own != ncclSuccess ? own : r;
  });
}

CCC_NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guarded([&] { return forwarded(REAL(ncclCommRevoke)(real_of(comm), revokeFlags), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded([&] {
    if (!is_ours(comm)) return forwarded(REAL(ncclCommGetAsyncError)(comm, asyncError), comm);
    ncclComm& c = *comm;
    if (asyncError == nullptr)
      return fail(ncclInvalidArgument, "libccc-nccl: ncclCommGetAsyncError: asyncError is null");
    ncclResult_t r = forwarded(REAL(ncclCommGetAsyncError)(c.real, asyncError), c.real);
    if (r == ncclSuccess && *asyncError == ncclSuccess && c.rail != nullptr)
      r = forwarded(REAL(ncclCommGetAsyncError)(c.rail, asyncError), c.rail);
    if (r != ncclSuccess || *asyncError != ncclSuccess || c.ccc == nullptr) return r;
    // ccc's collectives fail on their own; ccc cannot tell for CUDA ranks in one process
    // (cccInvalidUsage), whose failures cccCommSynchronize reports instead.
    cccResult_t own = cccSuccess;
    if (cccCommGetAsyncError(c.ccc, &own) == cccSuccess && own != cccSuccess) {
      *asyncError = static_cast<ncclResult_t>(own);
      last_error = std::string("ccc: ") + cccGetLastError(c.ccc);
    }
    return ncclSuccess;
  });
}

CCC_NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return guarded([&] { return forwarded(REAL(ncclCommCount)(real_of(comm), count), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guarded([&] { return forwarded(REAL(ncclCommCuDevice)(real_of(comm), device), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guarded([&] { return forwarded(REAL(ncclCommUserRank)(real_of(comm), rank), real_of(comm)); });
}

// ---- Memory and registration: NCCL's (ccc stages or registers buffers its own way) ----

CCC_NCCL_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded([&] { return forwarded(REAL(ncclMemAlloc)(ptr, size), nullptr); });
}

CCC_NCCL_API ncclResult_t ncclMemFree(void* ptr) {
  return guarded([&] { return forwarded(REAL(ncclMemFree)(ptr), nullptr); });
}

CCC_NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded([&] { return forwarded(REAL(ncclCommRegister)(real_of(comm), buff, size, handle), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded([&] { return forwarded(REAL(ncclCommDeregister)(real_of(comm), handle), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                 int winFlags) {
  return guarded(
      [&] { return forwarded(REAL(ncclCommWindowRegister)(real_of(comm), buff, size, win, winFlags), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guarded([&] { return forwarded(REAL(ncclCommWindowDeregister)(real_of(comm), win), real_of(comm)); });
}

// ---- Reduction ops: NCCL's; a call with one goes to NCCL ----

CCC_NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                   ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded([&] {
    return forwarded(REAL(ncclRedOpCreatePreMulSum)(op, scalar, datatype, residence, real_of(comm)), real_of(comm));
  });
}

CCC_NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded([&] { return forwarded(REAL(ncclRedOpDestroy)(op, real_of(comm)), real_of(comm)); });
}

// ---- Errors ----

CCC_NCCL_API const char* ncclGetErrorString(ncclResult_t result) {
  const RealNccl* real = RealNccl::get();
  if (real != nullptr && real->ncclGetErrorString != nullptr) return real->ncclGetErrorString(result);
  return result == ncclInProgress ? "NCCL operation in progress" : cccGetErrorString(static_cast<cccResult_t>(result));
}

CCC_NCCL_API const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

CCC_NCCL_API void ncclResetDebugInit() {
  const RealNccl* real = RealNccl::get();
  if (real != nullptr && real->ncclResetDebugInit != nullptr) real->ncclResetDebugInit();
}

// ---- Collectives: ccc or NCCL ----

CCC_NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guarded([&] {
    double predicted = 0;
    if (is_ours(comm) && to_ccc(*comm, Collective::AllReduce, count, datatype, op, -1, &predicted)) {
      if (comm->nodes > 1) return hierarchical_allreduce(*comm, sendbuff, recvbuff, count, datatype, op, stream);
      return on_ccc(*comm, predicted, [=](cccComm_t cc) {
        return cccAllReduce(sendbuff, recvbuff, count, ccc_type(datatype), ccc_op(op), cc, stream);
      });
    }
    return forwarded(REAL(ncclAllReduce)(sendbuff, recvbuff, count, datatype, op, real_of(comm), stream),
                     real_of(comm));
  });
}

CCC_NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream) {
  return collective(
      comm, Collective::ReduceScatter, recvcount, datatype, op, -1,
      [=](cccComm_t cc) {
        return cccReduceScatter(sendbuff, recvbuff, recvcount, ccc_type(datatype), ccc_op(op), cc, stream);
      },
      [&](ncclComm_t real) {
        return REAL(ncclReduceScatter)(sendbuff, recvbuff, recvcount, datatype, op, real, stream);
      });
}

CCC_NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                        ncclComm_t comm, cudaStream_t stream) {
  return collective(
      comm, Collective::AllGather, sendcount, datatype, ncclSum, -1,
      [=](cccComm_t cc) { return cccAllGather(sendbuff, recvbuff, sendcount, ccc_type(datatype), cc, stream); },
      [&](ncclComm_t real) { return REAL(ncclAllGather)(sendbuff, recvbuff, sendcount, datatype, real, stream); });
}

CCC_NCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(
      comm, Collective::Broadcast, count, datatype, ncclSum, root,
      [=](cccComm_t cc) { return cccBroadcast(sendbuff, recvbuff, count, ccc_type(datatype), root, cc, stream); },
      [&](ncclComm_t real) { return REAL(ncclBroadcast)(sendbuff, recvbuff, count, datatype, root, real, stream); });
}

CCC_NCCL_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

CCC_NCCL_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                     ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(
      comm, Collective::Reduce, count, datatype, op, root,
      [=](cccComm_t cc) {
        return cccReduce(sendbuff, recvbuff, count, ccc_type(datatype), ccc_op(op), root, cc, stream);
      },
      [&](ncclComm_t real) { return REAL(ncclReduce)(sendbuff, recvbuff, count, datatype, op, root, real, stream); });
}

CCC_NCCL_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclComm_t comm, cudaStream_t stream) {
  // Routed by the policy alone, never by this rank's placement, so every rank goes one way; ccc
  // refuses an in-place all-to-all (ncclInvalidArgument).
  return collective(
      comm, Collective::AllToAll, count, datatype, ncclSum, -1,
      [=](cccComm_t cc) { return cccAllToAll(sendbuff, recvbuff, count, ccc_type(datatype), cc, stream); },
      [&](ncclComm_t real) { return REAL(ncclAlltoAll)(sendbuff, recvbuff, count, datatype, real, stream); });
}

// ---- NCCL's alone: gather, scatter, point-to-point ----

CCC_NCCL_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm, cudaStream_t stream) {
  return guarded([&] {
    return forwarded(REAL(ncclGather)(sendbuff, recvbuff, count, datatype, root, real_of(comm), stream), real_of(comm));
  });
}

CCC_NCCL_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      int root, ncclComm_t comm, cudaStream_t stream) {
  return guarded([&] {
    return forwarded(REAL(ncclScatter)(sendbuff, recvbuff, count, datatype, root, real_of(comm), stream),
                     real_of(comm));
  });
}

CCC_NCCL_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  return guarded(
      [&] { return forwarded(REAL(ncclSend)(sendbuff, count, datatype, peer, real_of(comm), stream), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                   cudaStream_t stream) {
  return guarded(
      [&] { return forwarded(REAL(ncclRecv)(recvbuff, count, datatype, peer, real_of(comm), stream), real_of(comm)); });
}

// ---- Groups: NCCL's, with the calls routed to ccc held to the outermost end ----

CCC_NCCL_API ncclResult_t ncclGroupStart() {
  return guarded([&] {
    const ncclResult_t r = forwarded(REAL(ncclGroupStart)(), nullptr);
    if (r == ncclSuccess) ++group_depth;
    return r;
  });
}

CCC_NCCL_API ncclResult_t ncclGroupEnd() {
  return guarded([&] {
    if (group_depth > 0 && --group_depth == 0) {
      const ncclResult_t own = run_group_calls();
      const ncclResult_t r = forwarded(REAL(ncclGroupEnd)(), nullptr);
      const ncclResult_t after = run_after_group();
      return own != ncclSuccess ? own : r != ncclSuccess ? r : after;
    }
    return forwarded(REAL(ncclGroupEnd)(), nullptr);  // nested, or without a start: NCCL's to judge
  });
}

// Ends the group without running it, as NCCL's does: the calls routed to ccc are dropped, and
// their predicted time joins NCCL's estimate.
CCC_NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded([&] {
    double ccc_seconds = 0;
    if (group_depth > 0 && --group_depth == 0) {
      for (const DeferredCall& c : group_calls) ccc_seconds += c.predicted;
      group_calls.clear();
      after_group.clear();  // hierarchical allreduces: no model of them yet, so no estimate
    }
    const ncclResult_t r = forwarded(REAL(ncclGroupSimulateEnd)(simInfo), nullptr);
    // NCCL_UNDEF_FLOAT (-1): NCCL had nothing to estimate.
    if (r == ncclSuccess && simInfo != nullptr && ccc_seconds > 0)
      simInfo->estimatedTime = std::max(simInfo->estimatedTime, 0.0f) + static_cast<float>(ccc_seconds * 1e6);
    return r;
  });
}

// ---- nccl_device.h's host functions: NCCL's device API, on the real communicator ----

CCC_NCCL_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
                                            ncclDevComm_t* outDevComm) {
  return guarded([&] { return forwarded(REAL(ncclDevCommCreate)(real_of(comm), reqs, outDevComm), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const* devComm) {
  return guarded([&] { return forwarded(REAL(ncclDevCommDestroy)(real_of(comm), devComm), real_of(comm)); });
}

CCC_NCCL_API ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                                          ncclLsaBarrierHandle_t* outHandle,
                                                          ncclDevResourceRequirements_t* outReq) {
  return guarded(
      [&] { return forwarded(REAL(ncclLsaBarrierCreateRequirement)(team, nBarriers, outHandle, outReq), nullptr); });
}

CCC_NCCL_API ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                                          ncclGinBarrierHandle_t* outHandle,
                                                          ncclDevResourceRequirements_t* outReq) {
  return guarded([&] {
    return forwarded(REAL(ncclGinBarrierCreateRequirement)(real_of(comm), team, nBarriers, outHandle, outReq),
                     real_of(comm));
  });
}

CCC_NCCL_API ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                                     ncclDevResourceRequirements_t* outReq) {
  return guarded(
      [&] { return forwarded(REAL(ncclLLA2ACreateRequirement)(nBlocks, nSlots, outHandle, outReq), nullptr); });
}

// The functions below return a value, not a result: without a real NCCL (or the function) they
// return a zero team or -1, with ncclGetLastError saying why.
namespace {
template <class T, class Body>
T or_value(T fallback, Body&& body) {
  T out = fallback;
  guarded([&] {
    out = body();
    return ncclSuccess;
  });
  return out;
}
}  // namespace

CCC_NCCL_API int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  return or_value(-1, [&] { return REAL(ncclLLA2ACalcSlots)(maxElts, maxEltSize); });
}

CCC_NCCL_API ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  return or_value(ncclTeam_t{}, [&] { return REAL(ncclTeamWorld)(real_of(comm)); });
}

CCC_NCCL_API ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  return or_value(ncclTeam_t{}, [&] { return REAL(ncclTeamLsa)(real_of(comm)); });
}

CCC_NCCL_API ncclTeam_t ncclTeamRail(ncclComm_t comm) {
  return or_value(ncclTeam_t{}, [&] { return REAL(ncclTeamRail)(real_of(comm)); });
}

CCC_NCCL_API int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  return or_value(-1, [&] { return REAL(ncclTeamRankToWorld)(real_of(comm), team, rank); });
}

CCC_NCCL_API int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  return or_value(-1, [&] { return REAL(ncclTeamRankToLsa)(real_of(comm), team, rank); });
}

// ---- The profiling names (pncclX), which NCCL exports beside every ncclX ----

#define CCC_NCCL_PROFILING_ALIAS(name) CCC_NCCL_API decltype(name) p##name __attribute__((alias(#name)));
CCC_NCCL_FUNCTIONS(CCC_NCCL_PROFILING_ALIAS)
#undef CCC_NCCL_PROFILING_ALIAS
#define CCC_NCCL_TEAM_PROFILING_ALIAS(name, type) \
  CCC_NCCL_API std::remove_pointer_t<type> p##name __attribute__((alias(#name)));
CCC_NCCL_TEAM_FUNCTIONS(CCC_NCCL_TEAM_PROFILING_ALIAS)
#undef CCC_NCCL_TEAM_PROFILING_ALIAS
