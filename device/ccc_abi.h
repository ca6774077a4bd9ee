/* The launch ABI shared by generated kernels (both targets) and the runtime that launches them.
 * Plain C so it reads the same under NVRTC, nvcc and a host C++ compiler.
 *
 * A launch carries only its own rank's buffers, by value. Peers learn them inside the kernel:
 * at entry each (rank, channel) writes its buffers into its mailbox, then pushes "entered" with
 * release stores into its peers' inboxes; a peer reads the mailbox only after its acquire of that
 * inbox slot (directly or through a chain of waits) has shown the launch entered. So a rank
 * can be enqueued the moment it calls, with nothing shared and mutable on the host or device
 * side of the call path, and a captured CUDA graph replays with the buffers it captured. */
#ifndef CCC_ABI_H
#define CCC_ABI_H

#define CCC_ABI_VERSION 13

/* The most channels (thread blocks per rank) a kernel may have: the size of the per-rank
 * progress and mailbox arrays, and of each peer's row of the inbox; also the most blocks a
 * rank's launch may have, its norm blocks included (ccc_launch_args::rank_blocks). */
#define CCC_MAX_CHANNELS 64

/* The words of a rank's ccc_rank_state::progress. */
#define CCC_PROGRESS_WORDS (2 * CCC_MAX_CHANNELS + 1)

/* The threads of a block of every generated kernel on the GPU (its launch bounds). Host
 * emulation may run fewer; a choice that depends on the block's size takes this one, so every
 * backend runs the path the GPU runs. */
#define CCC_BLOCK_THREADS 512

/* The most ranks a kernel compiled for the GPU may have: every block keeps a table of its peers'
 * buffers (a ccc_buffers per rank) in statically declared shared memory, of which a block may
 * declare 48 KiB (CUDA C++ Programming Guide, "Shared Memory"); 1024 x 40 bytes leaves 8 KiB for
 * the rest (ccc_program.h, SharedBudget). Host emulation has no such limit. */
#define CCC_MAX_DEVICE_RANKS 1024

/* One rank's buffers for one launch, valid in every peer's address space (NVLink peer mappings
 * on the GPU, plain pointers in host emulation), or, in several processes, translated by each
 * reader through its ccc_registry. */
typedef struct ccc_buffers {
  const void* input;   /* may be null where the collective never reads it (a non-root broadcast) */
  void* output;
  void* scratch;       /* as many bytes as the kernel plan asks for; may be null if 0 */
  unsigned long long call; /* the call's signature (kernel, count): equal on every rank of one
                              collective, never 0; a peer whose signature differs is an error */
  void* ll;            /* protocol ll: the rank's receive slots, memory only ll kernels write (with
                          8-byte lines of data and flag), zeroed when allocated; null for simple
                          kernels */
} ccc_buffers;

/* Buffers a peer registered (cccCommRegister) as this rank's process maps them. In several
 * processes a peer's cudaMalloc buffer, opened through CUDA IPC, lands at another address here
 * than in its owner, so the pointer the owner writes into its mailbox means nothing to this
 * rank until it is translated: local = local_base + (pointer - owner_base). */
#define CCC_MAX_REGISTRATIONS 256
typedef struct ccc_registration {
  unsigned long long owner_base; /* the allocation's base in the owner's process */
  unsigned long long bytes;
  unsigned long long local_base; /* the same allocation in the reading rank's process */
  int owner;                     /* the owner's rank */
  int reserved;
} ccc_registration;
typedef struct ccc_registry {
  unsigned long long shared_base;  /* [shared_base, shared_base + shared_bytes): memory at one */
  unsigned long long shared_bytes; /* address in every process (the arena): used as it is */
  unsigned int count;              /* entries[0, count) are valid; the runtime writes an entry
                                      before the count that covers it, and removes none while a
                                      launch that may read it is in flight */
  unsigned int reserved;
  ccc_registration entries[CCC_MAX_REGISTRATIONS];
} ccc_registry;

/* Where a rank's peers find its state: fixed for the communicator's life, written once before
 * the first launch and never changed (so every launch, eager or replayed, reads the same), but
 * for the rank's own `registry` pointer, which a registration switches between two tables whose
 * addresses share their high 32 bits (CudaRegistry::device). */
typedef struct ccc_rank_state {
  unsigned long long* progress; /* [CCC_PROGRESS_WORDS], read and written only by the rank
                                   itself: [0, CCC_MAX_CHANNELS) the epoch each channel last
                                   entered (its next launch's epoch), then where its channels
                                   meet (Progress::meet_own_channels): arrive[CCC_MAX_CHANNELS]
                                   and the generation */
  ccc_buffers* mailbox;         /* [CCC_MAX_CHANNELS][2] its buffers, per channel, by launch parity */
  unsigned int* error;          /* its error word: CCC_OK or a CCC_ERR_* code, written only by it */
  unsigned long long* inbox;    /* [CCC_MAX_CHANNELS][N] in the rank's own memory: slot
                                   [c * N + p] holds the progress rank p's channel c pushed here,
                                   written only by p, polled by this rank's waits */
  const ccc_registry* registry; /* read only by the rank itself: how it reaches its peers'
                                   input and output. Null where every peer's pointers are valid
                                   as they are (one process; the host backend's shared heap).
                                   A launch reads the table it finds at entry: a registration
                                   never rewrites the table a launch in flight may read */
} ccc_rank_state;

/* Tracing (docs/tracing.md). A kernel built with CCC_TRACE_ENABLED defined writes, per (rank,
 * channel) of a launch, when it entered and left and, per step of each window, when the step began
 * waiting, when its first data pass began and when it published the step. Timestamps are
 * nanoseconds of the kernel's own clock (%globaltimer on the GPU, a steady clock on the host).
 * Thread 0 of the block writes them; records past CCC_TRACE_CAPACITY are counted, not kept. A
 * kernel built without CCC_TRACE_ENABLED carries no tracing code and never reads
 * ccc_launch_args::trace. */
#define CCC_TRACE_CAPACITY 256
typedef struct ccc_trace_step {
  unsigned long long begin; /* the step's waits began (the previous step was published) */
  unsigned long long pass;  /* its waits were over: its first data pass began */
  unsigned long long end;   /* it was published (done) */
  int window;
  int step;
} ccc_trace_step;
typedef struct ccc_trace_channel {
  unsigned long long enter; /* the launch entered (0: it never did) */
  unsigned long long exit;  /* it left after its exit waits (0: it failed before) */
  unsigned int count;       /* records in steps[] */
  unsigned int dropped;     /* records past the capacity, not kept */
  ccc_trace_step steps[CCC_TRACE_CAPACITY];
} ccc_trace_channel;

/* A fused epilogue's operands, each rank's own (docs/epilogue.md). Read (and residual_out
 * written) by the rank itself only, so any memory its own device reaches will do. Kernels without
 * an epilogue never read them. */
typedef struct ccc_epilogue_args {
  const void* residual;     /* [count] added by the write that completes each element */
  const void* weight;       /* RMSNorm: [hidden], each row's elements scaled by it */
  void* residual_out;       /* RMSNorm: [count] gets the pre-norm sum (the next residual), or null */
  unsigned char* quant_out; /* RMSNorm: [count] f8e4m3 gets each output element times quant_inv_scale
                               (rounded to nearest even, saturating at 448), or null */
  unsigned long long hidden; /* RMSNorm: the row length; count is rows x hidden */
  float eps;                /* RMSNorm: added to the mean square */
  float quant_inv_scale;    /* RMSNorm with quant_out: 1 / the per-tensor scale, in float */
} ccc_epilogue_args;

/* The single kernel argument. Counts are in elements of the kernel's dtype:
 *   allreduce, broadcast, reduce:  input and output hold `count` elements;
 *   reduce_scatter:                input holds N * count, output holds `count` (the rank's block);
 *   allgather:                     input holds `count`, output holds N * count.
 * Chunk boundaries fall on 64-byte multiples; for reduce_scatter/allgather they are cut within
 * each rank's block of `count` elements. */
typedef struct ccc_launch_args {
  const ccc_rank_state* ranks;   /* [N] every rank's fixed state */
  ccc_buffers own;               /* this launch's buffers (rank >= 0) */
  const ccc_buffers* virtual_own;/* [N] each virtual rank's buffers (rank == -1), else null */
  unsigned long long count;
  int rank;                      /* this launch's rank; -1: all N ranks in one grid, block b runs
                                    rank b / rank_blocks, block b % rank_blocks (virtual ranks) */
  unsigned long long timeout_ns; /* a wait longer than this records CCC_ERR_TIMEOUT and returns;
                                    ~0ull waits for ever */
  ccc_trace_channel* trace;      /* per channel (norm blocks record nothing): [channels], or
                                    [N * channels] for virtual ranks, rank * channels + channel;
                                    read only by traced kernels, which also accept null */
  ccc_epilogue_args epilogue;                /* epilogue kernels (rank >= 0): the rank's operands */
  const ccc_epilogue_args* virtual_epilogue; /* [N] each virtual rank's (rank == -1), else null */
  int rank_blocks;               /* blocks per rank, at most CCC_MAX_CHANNELS: the kernel's
                                    channels, and in an RMSNorm kernel more blocks that only norm
                                    rows once the channels meet (Progress::meet_own_channels);
                                    block b of a rank is channel b below the channels. 0: the
                                    channels. Virtual ranks: block b runs rank b / rank_blocks */
} ccc_launch_args;

/* Host emulation only (ccc_device_host.h): one emulated GPU thread of a thread block. The host
 * backend runs a block's `count` threads as fibers on one host thread (runtime/src/host_block.h)
 * and hands each its own record; the prelude's thread_index(), barrier() and relax() read it. A
 * host kernel is exported as
 *     extern "C" void NAME(ccc_launch_args args, int block, const ccc_host_thread* self); */
struct ccc_host_thread;

/* Host emulation with virtual time only (the simulator: runtime/src/sim_engine.h). The prelude's
 * primitives report to it, and it answers loads of synchronisation words as the calling thread's
 * virtual clock sees memory, so a wait ends when the awaited value became visible in virtual
 * time. Any call may switch fibers. */
typedef struct ccc_sim_hooks {
  /* a strong load (acquire or relaxed) of the word of `bytes` (4 or 8) at p */
  unsigned long long (*load)(const struct ccc_host_thread* self, const void* p, int bytes);
  /* a strong store; `release`: visible only once the thread's earlier stores are */
  void (*store)(const struct ccc_host_thread* self, void* p, unsigned long long v, int bytes, int release);
  /* keeps the first error: stores `code` into the word at p where it holds CCC_OK */
  void (*record_error)(const struct ccc_host_thread* self, unsigned* p, unsigned code);
  /* a data pass over `bytes` of each operand (the block's, of which this thread moves its
   * share): read from ranks src[0, nsrc), written to rank dst; folded into `bytes`, or with
   * `gather`, copies of `bytes` from each source at once (nsrc * bytes written) */
  void (*move)(const struct ccc_host_thread* self, const int* src, int nsrc, int dst, long long bytes, int gather);
  /* the thread's virtual clock, in ns */
  unsigned long long (*now)(const struct ccc_host_thread* self);
  /* the block's shared array `key` of `bytes`, filled with 0xA5 at its first use in the block run */
  void* (*shared)(const struct ccc_host_thread* self, const void* key, unsigned long long bytes);
  /* 0: timing only: the data loops (combine, copy_together) return at once; the interpreter's
   * windows, steps and chunks, every wait, poll and barrier, and protocol ll's lines still run,
   * and each data pass is still priced */
  int move_data;
} ccc_sim_hooks;

typedef struct ccc_host_thread {
  unsigned int index;        /* threadIdx.x */
  unsigned int count;        /* blockDim.x */
  unsigned long long launch; /* unique per block run: block-shared arrays are poisoned on the
                                first use in each run, as shared memory starts undefined */
  void* block;               /* the runtime's scheduler of the block */
  /* __syncthreads_and: waits for every thread of the block, returns whether `p` held in all */
  int (*barrier_and)(const struct ccc_host_thread* self, int p);
  /* a poll that found nothing: lets the block's other threads, then other host threads, run */
  void (*relax)(const struct ccc_host_thread* self);
  const ccc_sim_hooks* sim;  /* the simulator's hooks, or null (plain host emulation) */
} ccc_host_thread;

enum {
  CCC_OK = 0,
  CCC_ERR_TIMEOUT = 1,     /* a peer did not make progress in time (dead or not launched) */
  CCC_ERR_PEER_FAILED = 2, /* a peer recorded an error; this rank stopped waiting for it */
  CCC_ERR_BAD_PROGRAM = 3, /* a step program names a data pass its kernel was not built with */
  CCC_ERR_MISMATCH = 4,    /* a peer called with another collective, count, type, op or root */
  CCC_ERR_ABORTED = 5,     /* the runtime aborted the rank (cccCommAbort); kernels never record it */
  CCC_ERR_UNREGISTERED = 6, /* a peer's input or output lies neither in the shared arena nor in a
                               buffer registered with this rank (cccCommRegister) */
  CCC_ERR_BARRIER_DIVERGED = 7 /* host emulation: some threads of a block left the kernel while
                                  others waited at a block barrier (a ccc bug; on a GPU a hang
                                  or undefined behaviour) */
};

#endif /* CCC_ABI_H */
