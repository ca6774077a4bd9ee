/* The ccc C API, shaped like NCCL's. One communicator handle per rank; the handles made by one
 * cccCommInitAll call form a clique. Each rank's call queues that rank's part of the collective on
 * its stream and returns, as an NCCL call does: the ranks meet inside the kernel. Every rank must
 * issue the same collectives in the same order with the same count, type, op, root and placement;
 * when they differ, every rank gets cccRemoteError from cccCommSynchronize saying what differs
 * (docs/runtime.md: across processes a rank can miss a peer it never synchronises with), and a peer that
 * never calls makes the others fail after the timeout (cccConfig_t.timeoutSeconds, $CCC_TIMEOUT,
 * else 600 s). One thread may drive several ranks in any order; cccGroupStart/cccGroupEnd defer
 * the calls between them to cccGroupEnd, as NCCL's do.
 *
 * Host backend (cccCommInitAllHost): buffers are host memory, streams are ignored and each rank
 * runs on worker threads of its own; cccCommSynchronize(comm) waits for that rank's work and
 * reports its failure. CUDA backend: device memory, asynchronous on each rank's stream;
 * cccCommSynchronize waits for the rank's device and reports a collective that failed.
 *
 * One process per rank (cccGetUniqueId, cccCommInitRank), as NCCL, on either backend
 * (docs/runtime.md, "Multi-process"). */
#ifndef CCC_CCC_H
#define CCC_CCC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cccComm* cccComm_t;

/* Names one multi-process communicator: its bootstrap root's address and a random session tag.
 * Opaque, 128 bytes like ncclUniqueId; copy it to every rank's process as bytes. */
#define CCC_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[CCC_UNIQUE_ID_BYTES];
} cccUniqueId;
typedef struct CUstream_st* cccStream_t; /* the same type as cudaStream_t and CUstream */

/* Every value below equals NCCL's for the same name (cccFloat32 == ncclFloat32, cccMax ==
 * ncclMax, ...; a test checks them against nccl.h), so code moving between the two libraries, or a
 * shim that forwards one to the other, casts instead of translating. */
typedef enum {
  cccSuccess = 0,
  cccUnhandledCudaError = 1,
  cccSystemError = 2,       /* the system failed us: a connection, memory, a file, no CUDA device, a compile */
  cccInternalError = 3,
  cccInvalidArgument = 4,
  cccInvalidUsage = 5,      /* e.g. a communicator used after cccCommDestroy */
  cccRemoteError = 6,       /* a peer timed out or failed during a collective */
  cccNumResults = 8         /* NCCL's ncclInProgress (7) has no counterpart: calls never are */
} cccResult_t;

/* NCCL's values. The FP8 types are OCP's: e4m3 without infinities (448 the largest finite), e5m2
 * with them; sums accumulate in float within a pass and round to nearest even, saturating to the
 * largest finite value, as NCCL's do. */
typedef enum {
  cccInt8 = 0, cccUint8 = 1, cccInt32 = 2, cccUint32 = 3, cccInt64 = 4, cccUint64 = 5,
  cccFloat16 = 6, cccFloat32 = 7, cccFloat64 = 8, cccBfloat16 = 9, cccFloat8e4m3 = 10, cccFloat8e5m2 = 11,
  cccNumTypes = 12
} cccDataType_t;

typedef enum { cccSum = 0, cccProd = 1, cccMax = 2, cccMin = 3, cccAvg = 4, cccNumOps = 5 } cccRedOp_t;

/* Communicator options, in the manner of ncclConfig_t: start from CCC_CONFIG_INITIALIZER and set
 * the fields you need. */
typedef struct cccConfig_t {
  size_t size;           /* sizeof(cccConfig_t), set by the initializer */
  unsigned int magic;    /* CCC_CONFIG_MAGIC, set by the initializer */
  unsigned int version;  /* CCC_CONFIG_VERSION, set by the initializer */
  /* Seconds a rank waits for a peer before the collective fails. CCC_CONFIG_DEFAULT_TIMEOUT:
   * $CCC_TIMEOUT, else 600 (PyTorch's default for NCCL). Infinity (or a year or more): wait for ever. Zero, other negative
   * values and NaN are refused. */
  double timeoutSeconds;
  /* The schedule for every call (a shipped one's name, e.g. "ring"); NULL: $CCC_ALGO, else the
   * cost model's choice. */
  const char* algo;
  /* Write a Chrome trace-event timeline of every collective to this file when the communicators
   * are destroyed (docs/tracing.md); NULL: $CCC_TRACE, else no tracing. */
  const char* traceFile;
  /* The backend, "host", "cuda" or "sim"; NULL: $CCC_BACKEND, else "host".
   * - cccCommInitRank: "host" or "cuda"; on "cuda" the rank's device is the one current in the
   *   calling thread (as NCCL's cudaGetDevice: the current context's device, else device 0).
   * - cccCommInitAllHost*: "sim" runs the simulator (host emulation in virtual time on the GPUs
   *   of $CCC_TOPO, read with cccCommVirtualTime; docs/simulator.md); "host" and "cuda" give
   *   host ranks.
   * - cccCommInitAll* ignores it. */
  const char* backend;
  /* cccCommInitRank: bytes of each rank's heap in the shared arena, which holds its scratch, the
   * staging copies of buffers outside the arena and cccCommMemAlloc's buffers. 0:
   * $CCC_ARENA_BYTES, else 64 MiB (host: pages are only used once touched; cuda: device memory,
   * allocated at once and rounded up to the allocation granularity). Every rank must pass the
   * same. A call that does not fit fails with cccSystemError saying so. */
  size_t arenaBytes;
} cccConfig_t;

#define CCC_CONFIG_MAGIC 0xcc0c0f19u
#define CCC_CONFIG_VERSION 3u
#define CCC_CONFIG_DEFAULT_TIMEOUT (-1.0)
#define CCC_CONFIG_INITIALIZER \
  { sizeof(cccConfig_t), CCC_CONFIG_MAGIC, CCC_CONFIG_VERSION, CCC_CONFIG_DEFAULT_TIMEOUT, NULL, NULL, NULL, 0 }

/* ndev ranks, rank i on CUDA device devlist[i] (devlist NULL: devices 0..ndev-1). */
cccResult_t cccCommInitAll(cccComm_t* comms, int ndev, const int* devlist);
cccResult_t cccCommInitAllConfig(cccComm_t* comms, int ndev, const int* devlist, const cccConfig_t* config);
/* nranks ranks on host threads; simulated when the backend is "sim" (cccConfig_t.backend). */
cccResult_t cccCommInitAllHost(cccComm_t* comms, int nranks);
cccResult_t cccCommInitAllHostConfig(cccComm_t* comms, int nranks, const cccConfig_t* config);
/* One process per rank. cccGetUniqueId starts the bootstrap root on a thread of the calling
 * process (which must live until every rank has joined) and fills *uniqueId; pass it to every
 * rank's process. An id no rank has used 1.5 x the default timeout ($CCC_TIMEOUT, else 600 s)
 * after it was made is released (its thread and sockets; a rank that comes later fails).
 * cccCommInitRank joins as `rank` of `nranks` and returns once every rank has
 * joined and mapped the shared arena; a rank that never joins makes the others fail with
 * cccRemoteError within 1.5 x the timeout, ranks that disagree (nranks, arena size, one rank
 * twice, backends that differ) fail with cccInvalidUsage, an id that is not one
 * cccInvalidArgument. Buffers: any host memory (host backend) or memory of the rank's device
 * (cuda); those outside the arena are copied into it before and out of it after each call (one
 * copy each way; on cuda cuMemcpyAsync on the call's stream, so graph capture works), those from
 * cccCommMemAlloc, and on cuda those registered with cccCommRegister (or captured between
 * cccCommGraphRegisterBegin and End), are used in place. After a failed collective the
 * communicator stays failed (as NCCL's after an asynchronous error): every later
 * cccCommSynchronize reports it; abort or destroy it. */
cccResult_t cccGetUniqueId(cccUniqueId* uniqueId);
cccResult_t cccCommInitRank(cccComm_t* comm, int nranks, cccUniqueId commId, int rank);
cccResult_t cccCommInitRankConfig(cccComm_t* comm, int nranks, cccUniqueId commId, int rank,
                                  const cccConfig_t* config);
/* Memory in the arena of multi-process communicator `comm` (host memory, or device memory of the
 * rank's device on cuda), which peers read in place (no staging copy). Unlike ncclMemAlloc it
 * takes the communicator: each communicator has its own arena, and the memory serves that
 * communicator only. 256-byte aligned; free it with cccCommMemFree before the communicator goes
 * (its arena goes with it). cccInvalidUsage for a communicator of one process. */
cccResult_t cccCommMemAlloc(cccComm_t comm, void** ptr, size_t size);
cccResult_t cccCommMemFree(cccComm_t comm, void* ptr);
/* Registers a buffer the user already has, as ncclCommRegister, and fills *handle for
 * cccCommDeregister.
 * - CUDA across processes (cccCommInitRank, backend "cuda"): collective, like
 *   ncclCommWindowRegister. Every rank calls it, in the same order, with a buffer of its own
 *   (cudaMalloc memory of its device, or arena memory); the peers open it through CUDA IPC, and
 *   the rank's collectives then use it in place instead of staging it.
 * - cccCommDeregister is collective too: every rank passes the handle of the same
 *   cccCommRegister call. It waits for the rank's device, and returns once every peer has closed
 *   the buffer: only then may the buffer be freed.
 * - Neither may run while a stream of the device captures a graph (cccInvalidUsage).
 * - A failure on one rank fails the call on every rank (cccInvalidUsage there, naming it), with
 *   nothing registered; a rank that never calls fails the others with cccRemoteError within
 *   1.5 x the timeout.
 * - One process (cccCommInitAll*): succeeds with nothing to do. Host backend across processes:
 *   cccInvalidUsage (malloc memory cannot be shared; use cccCommMemAlloc).
 * cccInvalidArgument: a null buffer or handle, size 0, an unknown handle, and (CUDA across
 * processes) memory that is not the rank's device's. */
cccResult_t cccCommRegister(cccComm_t comm, void* buff, size_t size, void** handle);
cccResult_t cccCommDeregister(cccComm_t comm, void* handle);
/* Registration for CUDA graphs, as vLLM's custom allreduce registers graph buffers: captured
 * collectives read the user's buffers in place instead of staging them, and the buffers are
 * registered once the captures have ended. CUDA across processes:
 * - Begin (this rank only, no exchange) starts the mode. A collective the rank issues while its
 *   stream captures a graph then uses an unregistered buffer in place when CUDA IPC can share it
 *   (cudaMalloc memory; anything else is still staged), and remembers it.
 * - End is collective, like cccCommRegister, and called once no stream of the device captures.
 *   It registers every rank's remembered buffers as one registration, fills *handle for
 *   cccCommDeregister, and ends the mode, also when it fails (nothing is registered then, on
 *   any rank, and the graphs captured in the mode must be captured again).
 * - Replay those graphs only after End has returned on every rank (before, their kernels fail:
 *   cccRemoteError from cccCommSynchronize), and keep their buffers until the registration is
 *   deregistered. A graph launched while End, Register or Deregister runs sees the
 *   registrations as they were before the call or after it, never a mix.
 * cccInvalidUsage: Begin inside the mode (no nesting), End outside it, End while a stream that
 * captured in the mode still captures (checked before anything would invalidate that capture),
 * and the host backend across processes. One process: both succeed with nothing to exchange. */
cccResult_t cccCommGraphRegisterBegin(cccComm_t comm);
cccResult_t cccCommGraphRegisterEnd(cccComm_t comm, void** handle);
/* Destroys one rank's handle; the clique's resources go with its last handle. In a child forked
 * after the handle was made, every other call is cccInvalidUsage, and this one only forgets the
 * handle: the communicator is the parent's. */
cccResult_t cccCommDestroy(cccComm_t comm);
/* Marks the rank failed, so that its peers stop waiting for it and fail at once instead of
 * after the timeout (host backend, and CUDA across processes; CUDA in one process: only the
 * destroy happens), then destroys the handle as cccCommDestroy does (waiting for the rank's own
 * work, which then fails within the timeout). */
cccResult_t cccCommAbort(cccComm_t comm);
/* *asyncError: cccRemoteError if the rank's collectives have failed so far, else cccSuccess;
 * does not wait (cccGetLastError says why). Host backend, and cuda across processes (read on a
 * stream of its own, not behind the rank's kernels); cccInvalidUsage for cuda in one process. */
cccResult_t cccCommGetAsyncError(cccComm_t comm, cccResult_t* asyncError);
cccResult_t cccCommCount(const cccComm_t comm, int* count);
/* Backend "sim": *seconds, the virtual time since the clique was made at which the work queued
 * so far ends on its GPUs (after cccCommSynchronize: every call's); the difference of two
 * readings times what was queued between them. cccInvalidUsage on other backends. */
cccResult_t cccCommVirtualTime(const cccComm_t comm, double* seconds);
cccResult_t cccCommUserRank(const cccComm_t comm, int* rank);
/* Waits for this rank's outstanding collectives; cccRemoteError if one of them failed (a peer
 * timed out, failed, or called with other arguments). */
cccResult_t cccCommSynchronize(cccComm_t comm);

/* Between cccGroupStart and the matching cccGroupEnd, the calling thread's collectives are
 * checked and recorded, then queued in order at the outermost cccGroupEnd, which returns the
 * first failure (every recorded call is still queued, so the peers do not wait for nothing).
 * Groups nest. */
cccResult_t cccGroupStart(void);
cccResult_t cccGroupEnd(void);

/* As in NCCL, sendbuff may be NULL on a broadcast rank that is not the root, and recvbuff on a
 * reduce rank that is not the root (docs/runtime.md: such a rank runs out of place). A recv buffer
 * must not overlap any buffer another rank passes to the same collective: the rank whose call
 * completes such an overlap gets cccInvalidArgument, queues nothing, and may call again. */
cccResult_t cccAllReduce(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
                         cccRedOp_t op, cccComm_t comm, cccStream_t stream);
/* The fused allreduce + residual add (docs/epilogue.md): recvbuff = allreduce(sendbuff) +
 * residual, the residual (count elements of datatype, this rank's; tensor parallelism keeps the
 * same on every rank) added inside the collective's kernel, once per element, where the schedule
 * completes that element, so no kernel runs after it. residual is only read, by this rank only,
 * and must not overlap any rank's recvbuff (cccInvalidArgument); it may be sendbuff. The
 * pattern FlashInfer and TensorRT-LLM call allreduce_fusion with a residual, before the norm. */
cccResult_t cccAllReduceResidual(const void* sendbuff, const void* residual, void* recvbuff, size_t count,
                                 cccDataType_t datatype, cccRedOp_t op, cccComm_t comm, cccStream_t stream);
/* The same, then RMSNorm in the same kernel (docs/epilogue.md): with s = allreduce(sendbuff) +
 * residual, recvbuff = s / sqrt(mean(s^2) + eps) * weight over each row of `hidden` elements
 * (count = rows x hidden), and residualOut (NULL: not written) = s, the next layer's residual.
 * weight holds `hidden` elements. cccFloat32, cccFloat16 or cccBfloat16 only. residualOut is
 * written by this rank only and must overlap none of the call's other buffers. FlashInfer's and
 * TensorRT-LLM's allreduce_fusion pattern "residual + RMSNorm". */
cccResult_t cccAllReduceResidualRmsNorm(const void* sendbuff, const void* residual, const void* weight,
                                        void* recvbuff, void* residualOut, size_t count, size_t hidden, float eps,
                                        cccDataType_t datatype, cccRedOp_t op, cccComm_t comm, cccStream_t stream);
/* The same, and the normalised output quantised to fp8 as well (docs/epilogue.md): quantOut
 * (count bytes of cccFloat8e4m3, this rank's; not NULL) = e4m3(recvbuff * (1 / scale)), the
 * reciprocal taken in float, rounded to nearest even and saturating at +-448, written in the
 * same pass as recvbuff. scale is the per-tensor dequantisation scale (finite, positive; every
 * rank passes the same). quantOut must overlap none of the call's other buffers. FlashInfer's
 * and TensorRT-LLM's pattern "residual + RMSNorm + fp8 quant" with the norm's output kept. */
cccResult_t cccAllReduceResidualRmsNormFp8(const void* sendbuff, const void* residual, const void* weight,
                                           void* recvbuff, void* residualOut, void* quantOut, size_t count,
                                           size_t hidden, float eps, float scale, cccDataType_t datatype,
                                           cccRedOp_t op, cccComm_t comm, cccStream_t stream);
cccResult_t cccReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                             cccDataType_t datatype, cccRedOp_t op, cccComm_t comm,
                             cccStream_t stream);
cccResult_t cccAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                         cccDataType_t datatype, cccComm_t comm, cccStream_t stream);
cccResult_t cccBroadcast(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
                         int root, cccComm_t comm, cccStream_t stream);
cccResult_t cccReduce(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
                      cccRedOp_t op, int root, cccComm_t comm, cccStream_t stream);
/* sendbuff and recvbuff hold nranks blocks of `count` elements (count per peer, as MPI_Alltoall's
 * sendcount and NCCL's ncclAlltoAll): block p of recvbuff is block `rank` of rank p's sendbuff.
 * In place (sendbuff == recvbuff) is refused with cccInvalidArgument. */
cccResult_t cccAllToAll(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype, cccComm_t comm,
                        cccStream_t stream);

/* The collectives, by NCCL's internal ncclFunc_t values where NCCL has one (nccl.h has no such
 * enum); for cccCommWarmUp. */
typedef enum {
  cccFuncBroadcast = 0, cccFuncReduce = 1, cccFuncAllGather = 2, cccFuncReduceScatter = 3,
  cccFuncAllReduce = 4, cccFuncAllToAll = 8
} cccFunc_t;

/* Compiles ahead the kernels that calls of one shape will run, one per distinct kernel over the
 * `ncounts` counts (each as the collective's own count argument), so that the first such call
 * does not pay NVRTC or the host compiler (about 0.3 s per kernel cold; the disk cache then makes
 * later processes start warm). `root` is for broadcast and reduce (else ignored); `inPlace`
 * non-zero: calls whose sendbuff equals recvbuff. `blocking` 0: returns at once and compiles on
 * a thread of the communicator's; a call whose kernel is still compiling waits for that compile,
 * and a compile that fails is reported by the call that needs it. Non-zero: compiles before
 * returning, cccSystemError if one fails. The ranks of one cccCommInitAll* call share their
 * kernels, so one call on any of their handles serves all; with cccCommInitRank each process
 * warms its own. */
cccResult_t cccCommWarmUp(cccComm_t comm, cccFunc_t func, const size_t* counts, int ncounts, cccDataType_t datatype,
                          cccRedOp_t op, int root, int inPlace, int blocking);

/* What the models predict for one call of this shape (count, datatype, op and root as the
 * collective takes them; no buffers), on the communicator's topology (docs/runtime.md,
 * "Topology"): *cccSeconds for the kernel ccc would run, by ccc's cost model, and *ncclSeconds for
 * NCCL's ring by NCCL's own published tuning model on the same GPUs (docs/nccl.md), the baseline
 * libccc-nccl routes by. Predictions, not measurements. Both 0 without a topology (host backend
 * without $CCC_TOPO). Either pointer may be NULL. */
cccResult_t cccCommPredict(cccComm_t comm, cccFunc_t func, size_t count, cccDataType_t datatype, cccRedOp_t op,
                           int root, double* cccSeconds, double* ncclSeconds);

const char* cccGetErrorString(cccResult_t result);
/* The message of the calling thread's last failed call ("" if none). */
const char* cccGetLastError(cccComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* CCC_CCC_H */
