/* The device prelude: the only thing a generated kernel includes.
 *
 * Generated kernels are the same text for both targets; they use nothing but what this prelude
 * defines (namespace ccc and the CCC_* macros below), never threadIdx/blockIdx directly.
 *
 *   CUDA (NVRTC or nvcc): ccc_device_cuda.h. One thread block per (rank, channel), CCC block
 *     threads each. Launch: grid = channels (args.rank >= 0) or N * channels (args.rank == -1,
 *     virtual ranks), one ccc_launch_args by value as the only parameter.
 *   Host (any C++20 compiler): ccc_device_host.h. Every thread block is one host thread, whose
 *     threads are fibers. The kernel is exported as
 *         extern "C" void NAME(ccc_launch_args args, int block, const ccc_host_thread* self);
 *     and the host backend runs it once per thread of a block (runtime/src/host_block.h), one
 *     std::thread per block, `block` taking the values the CUDA grid would give blockIdx.x
 *     (channel index, or rank * channels + channel when args.rank == -1). All blocks of a launch
 *     must run concurrently: they wait on each other.
 *
 * Both: every (rank, channel) word in ccc_rank_state::progress, every inbox slot and every
 * error word must be zero before the first launch and then never reset (values carry the launch
 * epoch; see ccc_progress.h). After a launch reports an error the counters are
 * inconsistent: once no launch of any rank is running, zero the progress words, the inboxes and
 * the error words, on every rank, before launching again (a launch whose rank's error word is
 * set returns at once, so its peers fail too).
 *
 * Files, each on the ones before it: ccc_abi.h (the launch ABI), ccc_device_cuda.h or
 * ccc_device_host.h (the target's primitives), ccc_data.h (dtypes, ops, data loops),
 * ccc_program.h (step programs, Config), then a Channel's layers: ccc_geometry.h,
 * ccc_progress.h, ccc_peer_table.h, one header per protocol (ccc_protocol_simple.h,
 * ccc_protocol_ll.h), ccc_channel.h. The CUDA side includes nothing else, so the set can be
 * embedded as strings and handed to NVRTC. */
#ifndef CCC_DEVICE_H
#define CCC_DEVICE_H

#include "ccc_abi.h"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "ccc_device_cuda.h"
#else
#include "ccc_device_host.h"
#endif

#include "ccc_channel.h"

#endif /* CCC_DEVICE_H */
