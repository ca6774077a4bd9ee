/* The ccc C API, shaped like NCCL's. One communicator handle per rank; the handles made by one
 * cccCommInitAll call form a clique. A collective runs once every rank of the clique has called
 * it (in rank order or not, from one thread): earlier calls return cccSuccess after recording
 * their buffers, the last one launches, as inside ncclGroupStart/ncclGroupEnd. Every rank must
 * pass the same count, type, op and root.
 *
 * Host backend (cccCommInitAllHost): buffers are host memory, streams are ignored and the last
 * call returns when the collective is done. CUDA backend: device memory, asynchronous on each
 * rank's stream; cccCommSynchronize reports a collective that failed. */
#ifndef CCC_CCC_H
#define CCC_CCC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cccComm* cccComm_t;
typedef struct CUstream_st* cccStream_t; /* the same type as cudaStream_t and CUstream */

typedef enum {
  cccSuccess = 0,
  cccUnhandledCudaError = 1,
  cccSystemError = 2,       /* no CUDA device, or a kernel failed to compile */
  cccInternalError = 3,
  cccInvalidArgument = 4,
  cccInvalidUsage = 5,      /* e.g. a communicator used after cccCommDestroy */
  cccRemoteError = 6,       /* a peer timed out or failed during a collective */
  cccNumResults = 7
} cccResult_t;

typedef enum {
  cccFloat64 = 0, cccFloat32 = 1, cccFloat16 = 2, cccBfloat16 = 3, cccInt64 = 4, cccUint64 = 5,
  cccInt32 = 6, cccUint32 = 7, cccInt8 = 8, cccUint8 = 9, cccNumTypes = 10
} cccDataType_t;

typedef enum { cccSum = 0, cccProd = 1, cccMin = 2, cccMax = 3, cccAvg = 4, cccNumOps = 5 } cccRedOp_t;

/* ndev ranks, rank i on CUDA device devlist[i] (devlist NULL: devices 0..ndev-1). */
cccResult_t cccCommInitAll(cccComm_t* comms, int ndev, const int* devlist);
/* nranks ranks on host threads. */
cccResult_t cccCommInitAllHost(cccComm_t* comms, int nranks);
/* Destroys one rank's handle; the clique's resources go with its last handle. */
cccResult_t cccCommDestroy(cccComm_t comm);
cccResult_t cccCommCount(const cccComm_t comm, int* count);
cccResult_t cccCommUserRank(const cccComm_t comm, int* rank);
/* Waits for the clique's outstanding collectives (CUDA backend). */
cccResult_t cccCommSynchronize(cccComm_t comm);

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

const char* cccGetErrorString(cccResult_t result);
/* The message of the calling thread's last failed call ("" if none). */
const char* cccGetLastError(cccComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* CCC_CCC_H */
