/* The launch ABI shared by generated kernels (both targets) and the runtime that launches them.
 * Plain C so it reads the same under NVRTC, nvcc and a host C++ compiler. */
#ifndef CCC_ABI_H
#define CCC_ABI_H

#define CCC_ABI_VERSION 1

/* One rank's buffers, as seen from the launching rank (peer pointers are valid in its address
 * space: NVLink peer mappings on the GPU, plain pointers in host emulation). */
typedef struct ccc_rank_buffers {
  const void* input;
  void* output;
  void* scratch;                 /* as many bytes as the kernel plan asks for; may be null if 0 */
  unsigned long long* progress;  /* [channels] this rank's progress counters, read by peers */
} ccc_rank_buffers;

/* The single kernel argument. Counts are in elements of the kernel's dtype:
 *   allreduce, broadcast, reduce:  input and output hold `count` elements;
 *   reduce_scatter:                input holds N * count, output holds `count` (the rank's block);
 *   allgather:                     input holds `count`, output holds N * count.
 * Chunk boundaries fall on 64-byte multiples; for reduce_scatter/allgather they are cut within
 * each rank's block of `count` elements. */
typedef struct ccc_launch_args {
  const ccc_rank_buffers* ranks;  /* [N] every rank's buffers */
  unsigned long long count;
  int rank;                       /* this launch's rank; -1: all N ranks in one grid, block b runs
                                     rank b / channels, channel b % channels (virtual ranks) */
  unsigned long long* epoch;      /* [N] per-rank launch counter in device memory; each launch
                                     advances its own rank's entry (never a per-launch argument,
                                     so a captured graph can be replayed) */
  unsigned int* error;            /* [N] per-rank error word: CCC_OK or a CCC_ERR_* code */
  unsigned long long timeout_ns;  /* a wait longer than this records CCC_ERR_TIMEOUT and returns */
} ccc_launch_args;

enum {
  CCC_OK = 0,
  CCC_ERR_TIMEOUT = 1,     /* a peer did not make progress in time (dead or not launched) */
  CCC_ERR_PEER_FAILED = 2, /* a peer recorded an error; this rank stopped waiting for it */
  CCC_ERR_BAD_PROGRAM = 3  /* a step program names a data pass its kernel was not built with */
};

#endif /* CCC_ABI_H */
