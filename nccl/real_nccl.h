// The real NCCL, which libccc-nccl forwards to: libnccl.so.2 opened with dlopen, so that
// libccc-nccl can itself be installed as libnccl.so.2, and so that it finds the copy a Python
// wheel brings. docs/nccl.md, "Which NCCL".
//
// Where it looks, in order:
//   1. $CCC_NCCL_LIB (a path; an error if it cannot be opened);
//   2. the nvidia-nccl wheel, nvidia/nccl/lib/libnccl.so.2 in the site-packages of $VIRTUAL_ENV
//      and of every library already loaded from a site-packages directory (PyTorch's);
//   3. libnccl.so.2 on the library path ($LD_LIBRARY_PATH, ld.so.cache), skipping libccc-nccl
//      itself when it was installed under that name.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <string>

namespace ccc::nccl {

// Every function of nccl.h: forwarded under its own name, looked up by it.
#define CCC_NCCL_FUNCTIONS(X)                                                                              \
  X(ncclMemAlloc) X(ncclMemFree) X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig)             \
  X(ncclCommInitRank) X(ncclCommInitAll) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort)            \
  X(ncclCommRevoke) X(ncclCommSplit) X(ncclCommShrink) X(ncclCommInitRankScalable) X(ncclGetErrorString)    \
  X(ncclGetLastError) X(ncclResetDebugInit) X(ncclCommGetAsyncError) X(ncclCommCount) X(ncclCommCuDevice)   \
  X(ncclCommUserRank) X(ncclCommRegister) X(ncclCommDeregister) X(ncclCommWindowRegister)                   \
  X(ncclCommWindowDeregister) X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy) X(ncclReduce) X(ncclBcast)    \
  X(ncclBroadcast) X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclAlltoAll) X(ncclGather)     \
  X(ncclScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd) X(ncclGroupSimulateEnd)          \
  X(ncclDevCommCreate) X(ncclDevCommDestroy) X(ncclLsaBarrierCreateRequirement)                             \
  X(ncclGinBarrierCreateRequirement) X(ncclLLA2ACalcSlots) X(ncclLLA2ACreateRequirement)

// nccl_device.h's host functions whose names C++ overloads with inline device ones: their host
// signature, spelled out.
using TeamOfComm = ncclTeam_t (*)(ncclComm_t);
using TeamRankOfComm = int (*)(ncclComm_t, ncclTeam_t, int);
#define CCC_NCCL_TEAM_FUNCTIONS(X) \
  X(ncclTeamWorld, TeamOfComm) X(ncclTeamLsa, TeamOfComm) X(ncclTeamRail, TeamOfComm)                \
  X(ncclTeamRankToWorld, TeamRankOfComm) \
  X(ncclTeamRankToLsa, TeamRankOfComm)

struct RealNccl {
  // The process's real NCCL, opened on first use; null when none was found (why_missing()).
  static const RealNccl* get();
  static const std::string& why_missing();

  std::string path;  // the file opened
  // A function this NCCL lacks (an older release) is null.
#define CCC_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  CCC_NCCL_FUNCTIONS(CCC_NCCL_MEMBER)
#undef CCC_NCCL_MEMBER
#define CCC_NCCL_TEAM_MEMBER(name, type) type name = nullptr;
  CCC_NCCL_TEAM_FUNCTIONS(CCC_NCCL_TEAM_MEMBER)
#undef CCC_NCCL_TEAM_MEMBER
};

}  // namespace ccc::nccl
