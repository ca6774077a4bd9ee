/* The ccc C API, shaped like NCCL's. One communicator handle per rank; the handles made by one
 * cccCommInitAll call form a clique. Each rank's call queues that rank's part of the collective on
 * its stream and returns, as an NCCL call does: the ranks meet inside the kernel. Every rank must
 * issue the same collectives in the same order with the same count, type, op and root; a rank
 * whose peer passed something else gets cccRemoteError from cccCommSynchronize, and a peer that
 * never calls makes the others fail after the timeout (cccConfig_t.timeoutSeconds, $CCC_TIMEOUT,
 * else 30 s). One thread may drive several ranks in any order; cccGroupStart/cccGroupEnd defer
 * the calls between them to cccGroupEnd, as NCCL's do.
 *
 * Host backend (cccCommInitAllHost): buffers are host memory, streams are ignored and each rank
 * runs on worker threads of its own; cccCommSynchronize(comm) waits for that rank's work and
 * reports its failure. CUDA backend: device memory, asynchronous on each rank's stream;
 * cccCommSynchronize waits for the rank's device and reports a collective that failed. */
#ifndef CCC_CCC_H
#define CCC_CCC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cccComm* cccComm_t;
typedef struct CUstream_st* cccStream_t; /* the same type as cudaStream_t and CUstream */

/* Every value below equals NCCL's for the same name (cccFloat32 == ncclFloat32, cccMax ==
 * ncclMax, ...; a test checks them against nccl.h), so code moving between the two libraries, or a
 * shim that forwards one to the other, casts instead of translating. */
typedef enum {
  cccSuccess = 0,
  cccUnhandledCudaError = 1,
  cccSystemError = 2,       /* no CUDA device, or a kernel failed to compile */
  cccInternalError = 3,
  cccInvalidArgument = 4,
  cccInvalidUsage = 5,      /* e.g. a communicator used after cccCommDestroy */
  cccRemoteError = 6,       /* a peer timed out or failed during a collective */
  cccNumResults = 8         /* NCCL's ncclInProgress (7) has no counterpart: calls never are */
} cccResult_t;

/* NCCL's 10 and 11 (the FP8 types) are not supported: calls with them get cccInvalidArgument. */
typedef enum {
  cccInt8 = 0, cccUint8 = 1, cccInt32 = 2, cccUint32 = 3, cccInt64 = 4, cccUint64 = 5,
  cccFloat16 = 6, cccFloat32 = 7, cccFloat64 = 8, cccBfloat16 = 9, cccNumTypes = 12
} cccDataType_t;

typedef enum { cccSum = 0, cccProd = 1, cccMax = 2, cccMin = 3, cccAvg = 4, cccNumOps = 5 } cccRedOp_t;

/* Communicator options, in the manner of ncclConfig_t: start from CCC_CONFIG_INITIALIZER and set
 * the fields you need. */
typedef struct cccConfig_t {
  size_t size;           /* sizeof(cccConfig_t), set by the initializer */
  unsigned int magic;    /* CCC_CONFIG_MAGIC, set by the initializer */
  unsigned int version;  /* CCC_CONFIG_VERSION, set by the initializer */
  /* Seconds a rank waits for a peer before the collective fails. CCC_CONFIG_DEFAULT_TIMEOUT:
   * $CCC_TIMEOUT, else 30. Infinity (or a year or more): wait for ever. Zero, other negative
   * values and NaN are refused. */
  double timeoutSeconds;
  /* The schedule for every call (a shipped one's name, e.g. "ring"); NULL: $CCC_ALGO, else the
   * cost model's choice. */
  const char* algo;
  /* Write a Chrome trace-event timeline of every collective to this file when the communicators
   * are destroyed (docs/tracing.md); NULL: $CCC_TRACE, else no tracing. */
  const char* traceFile;
} cccConfig_t;

#define CCC_CONFIG_MAGIC 0xcc0c0f19u
#define CCC_CONFIG_VERSION 2u
#define CCC_CONFIG_DEFAULT_TIMEOUT (-1.0)
#define CCC_CONFIG_INITIALIZER \
  { sizeof(cccConfig_t), CCC_CONFIG_MAGIC, CCC_CONFIG_VERSION, CCC_CONFIG_DEFAULT_TIMEOUT, NULL, NULL }

/* ndev ranks, rank i on CUDA device devlist[i] (devlist NULL: devices 0..ndev-1). */
cccResult_t cccCommInitAll(cccComm_t* comms, int ndev, const int* devlist);
cccResult_t cccCommInitAllConfig(cccComm_t* comms, int ndev, const int* devlist, const cccConfig_t* config);
/* nranks ranks on host threads. */
cccResult_t cccCommInitAllHost(cccComm_t* comms, int nranks);
cccResult_t cccCommInitAllHostConfig(cccComm_t* comms, int nranks, const cccConfig_t* config);
/* Destroys one rank's handle; the clique's resources go with its last handle. */
cccResult_t cccCommDestroy(cccComm_t comm);
cccResult_t cccCommCount(const cccComm_t comm, int* count);
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
 * reduce rank that is not the root (docs/runtime.md: such a rank runs out of place). */
cccResult_t cccAllReduce(const void* sendbuff, void* recvbuff, size_t count, cccDataType_t datatype,
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

const char* cccGetErrorString(cccResult_t result);
/* The message of the calling thread's last failed call ("" if none). */
const char* cccGetLastError(cccComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* CCC_CCC_H */
