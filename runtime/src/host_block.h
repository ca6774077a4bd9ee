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

// A thread block's barrier (__syncthreads_and) for a scheduler of its threads, which may leave
// the kernel before a barrier the others wait at (a ccc bug: on a GPU a hang or undefined
// behaviour; here the others go on, and the block is marked diverged).
class BlockBarrier {
 public:
  explicit BlockBarrier(unsigned threads) : threads_(threads), live_(threads) {}
  // A thread arrives with predicate p. True when it completes the barrier: every thread waiting
  // at it goes on (the caller releases them), and result() is its outcome.
  bool arrive(bool p);
  // A thread has left the kernel. True when that completes the barrier (as arrive).
  bool leave();
  // The last completed barrier's predicate over every thread that arrived: valid for a released
  // thread until it arrives at the next (which cannot complete without it).
  bool result() const { return result_; }
  bool diverged() const { return diverged_; }

 private:
  void complete();
  unsigned threads_;
  unsigned live_;         // threads still in the kernel
  unsigned waiting_ = 0;  // of them, at the barrier
  bool all_ = true;       // the predicate over those arrived so far
  bool result_ = true;
  bool diverged_ = false;
};

// Records CCC_ERR_BARRIER_DIVERGED for block `block`'s rank (unless it recorded an error before).
void record_diverged(const ccc_launch_args& args, int block, int channels);

// Runs block `block` of `entry`, a kernel of `channels` blocks per rank, with `threads` threads
// (1..kMaxHostBlockThreads) on the calling thread, and returns once every thread has left the
// kernel. Where the memory for that many fiber stacks cannot be had, the block runs with as many
// threads as stacks were found (at least one): generated kernels are correct for any block size.
BlockRun run_host_block(HostEntry entry, const ccc_launch_args& args, int block, int channels, unsigned threads);

}  // namespace ccc
