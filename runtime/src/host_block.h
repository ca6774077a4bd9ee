// Host emulation's thread blocks. A block of a host kernel runs its threads as fibers
// (Boost.Context) on the calling host thread, so every path that depends on the thread index,
// every block barrier and every parallel wait of the generated code runs here as it does on a GPU,
// but for timing.
//
// The threads take turns in rounds: each runs until it waits (at a barrier, or in a poll that
// found nothing), then the next runnable one runs, from the highest thread index down to 0.
// Thread 0 is where generated code does its one-thread work (reading a peer's mailbox, filling in
// flags) that the others read after a barrier: running it last makes a missing barrier show, as
// the others read what thread 0 has not yet written (stale values, or the 0xA5 bytes the prelude
// poisons block-shared memory with: ccc_device_host.h, block_shared).
#pragma once

#include "ccc_abi.h"

namespace ccc {

// A host kernel's entry (ccc_abi.h, ccc_host_thread; ccc_device_host.h, CCC_KERNEL).
using HostEntry = void (*)(ccc_launch_args args, int block, const ccc_host_thread* self);

// The most threads a host block runs: CUDA's limit per block (CUDA C++ Programming Guide,
// "Thread Hierarchy").
constexpr unsigned kMaxHostBlockThreads = 1024;

enum class BlockRun {
  Ok,
  // Some threads left the kernel before a block barrier the others reached. The barrier let
  // the others go as if the exited ones had arrived, so the block still ended, and the block's
  // rank recorded CCC_ERR_BARRIER_DIVERGED (unless it had recorded an error before).
  Diverged,
};

// Runs block `block` of `entry`, a kernel of `channels` blocks per rank, with `threads` threads
// (1..kMaxHostBlockThreads) on the calling thread, and returns once every thread has left the
// kernel. Where the memory for that many fiber stacks cannot be had, the block runs with as many
// threads as stacks were found (at least one): generated kernels are correct for any block size.
BlockRun run_host_block(HostEntry entry, const ccc_launch_args& args, int block, int channels, unsigned threads);

}  // namespace ccc
