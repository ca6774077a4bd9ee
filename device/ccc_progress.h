/* Progress: how ranks wait for each other. Each (rank, channel) publishes one 64-bit value:
 *     value = epoch << 40 | (window * steps + step + 1)
 * after finishing `step` of `window` (windows run in order, steps in order within a window), and
 * epoch << 40 on entering a launch. The epoch is the launch number (mod 2^24), taken from the
 * channel's own progress word at entry (which keeps the epoch it last entered), so nothing is
 * reset between launches and a captured graph replays unchanged. Values are compared with
 * serial-number arithmetic (signed difference), so the epoch may wrap: peers are never more
 * than one launch apart.
 *
 * Push the signal, poll locally. A producer writes each value into its slot of the inbox that
 * every consumer has in its own memory (ccc_abi.h), and a wait polls its own inbox: a dependency
 * costs the one-way flight of one store, where polling the producer's memory cost a round trip
 * per poll. Thread q of the block pushes to the q-th receiver, so the stores fly together. Step
 * values go to the rank's consumers only, the ranks whose programs wait on it (the generated
 * kernel lists them: a ring rank has two, so a step costs two stores, not N - 1); "entered" goes
 * to every peer, so every slot is refreshed at every launch and never lags more than one launch
 * behind, which the serial arithmetic on the 24-bit epoch needs (a slot left alone for 2^23
 * launches by a kernel that did not wait on it would read as ahead). The peers' error words stay
 * in their own memory: a wait reads them once per 64 polls only (see poll). */
#ifndef CCC_PROGRESS_H
#define CCC_PROGRESS_H

#include "ccc_geometry.h"

namespace ccc {

/* The progress layer of a Channel: the epoch, pushing progress to consumers, waiting for peers. */
template <class Cfg>
class Progress : public ChannelGeometry<Cfg> {
 protected:
  typedef ChannelGeometry<Cfg> Base;
  using Base::channel_;
  using Base::rank_;

  CCC_FN Progress(const ccc_launch_args& args, int block)
      : Base(args, block), state_(block_rank_state<Cfg::ranks>(args.ranks)), timeout_ns_(args.timeout_ns) {}

  /* Publishes "finished `step` of window w" to the consumers once every thread's writes are
   * done: thread k pushes to the k-th consumer. */
  template <class Map>
  CCC_FN void done(long long w, int step, const Map& map) {
    barrier();
    const unsigned long long value = base_ + static_cast<unsigned long long>(w * Cfg::steps + step + 1);
    CCC_ROLLED
    for (int k = static_cast<int>(thread_index()); k < consumers_[0]; k += static_cast<int>(block_threads()))
      push(map.peer(consumers_[1 + k]), value);
  }

  /* This (rank, channel)'s inbox slot in `peer`'s memory. */
  CCC_FN unsigned long long* inbox_slot(int peer, int from) const {
    return state_[peer].inbox + channel_ * Cfg::ranks + from;
  }

  /* Stores `value` into this channel's slot of `peer`'s inbox. Every thread calls it after a
   * barrier that follows every thread's writes (data, mailbox), and each pushing thread's store
   * carries all of them, not only its own: bar.sync makes each thread's earlier writes precede
   * the pushing thread's release in causality order (PTX ISA, memory consistency model:
   * barrier operations on one barrier synchronize with each other, and base causality order is
   * transitive through them), and a consumer's ld.acquire that reads the release's value
   * synchronizes with it (a release and an acquire pattern on one location, both morally strong:
   * the kernel's scope, CCC_SCOPE, covers both threads:
   * ccc_device_cuda.h). The consumer's bar.sync after its acquire carries the
   * order on to its whole block, so by the causality axiom every read it then makes of this
   * rank's buffers or mailbox sees the writes. A slot has one writer, this (rank, channel), and
   * its pushes are ordered by those barriers (and by launch order across launches), so its
   * values only grow. */
  CCC_FN void push(int peer, unsigned long long value) const { store_release(inbox_slot(peer, rank_), value); }

  /* Polls until `peer`'s progress, as it pushed it into this rank's inbox, reaches `progress`
   * (one thread); a timeout or a failed peer records the error and returns false. Each poll reads
   * local memory; the checks for a failure (the peer's error word, in its memory: a round trip),
   * this rank's error word and the clock run once per 64 polls, so a long wait notices a dead
   * peer within 64 polls while a short one costs no remote read at all. */
  CCC_NOINLINE bool poll(int peer, long long progress) {
    const unsigned long long* counter = inbox_slot(rank_, peer);
    const unsigned long long target = base_ + static_cast<unsigned long long>(progress);
    unsigned long long start = 0;
    for (unsigned polls = 0;; ++polls) {
      if (static_cast<long long>(load_acquire(counter) - target) >= 0) return true;
      if (!keep_waiting(peer, polls, start)) return false;
      relax();
    }
  }

  /* The rank's blocks meet (an RMSNorm epilogue's rows cross the channels' slices; its norm
   * blocks, past the channels, wait here from their start): returns once every block of this
   * rank (rank_blocks_, channels first) has called it in this launch, every write each made before
   * the call visible to every thread of this block; false (error recorded) on a timeout or a
   * failure. A generation barrier in the rank's own memory, past its channels' epochs
   * (ccc_abi.h, ccc_rank_state::progress): arrive[c], one writer each, and the generation,
   * written by channel 0 only. Every thread reads the generation g before the block's barrier
   * and thread 0 stores arrive[c] = g + 1 after it, so g cannot move before this channel has
   * read it: channel 0 publishes g + 1 only once every arrive[c] holds g + 1. Monotonic and never
   * reset between launches (a graph replays unchanged; an error reset zeroes it all), and exact
   * comparisons, so an arrive[c] left by an older launch, or by a kernel with more channels,
   * never counts. Ordering: each channel's writes, bar.sync, thread 0's st.release of arrive[c];
   * channel 0's ld.acquire of it, bar.sync, its st.release of the generation; this channel's
   * ld.acquire of that, bar.sync: a chain of release/acquire patterns joined by CTA barriers,
   * so causality order carries every channel's writes to every thread here (PTX ISA, memory
   * consistency model, as in push). Channel 0 waits for its siblings, so a rank's blocks must be
   * co-resident: a cooperative virtual-rank launch guarantees it, and a rank's own grid of at
   * most 64 blocks is checked against the occupancy the driver reports (CudaRanks::launch). A
   * sibling that failed records the error, which the waits see (keep_waiting). */
  CCC_NOINLINE bool meet_own_channels() {
    unsigned long long* const arrive = state_[rank_].progress + CCC_MAX_CHANNELS;
    unsigned long long* const generation = arrive + CCC_MAX_CHANNELS;
    // Relaxed: the generation is fixed for this launch by the stream order (or griddepcontrol.wait)
    // until this channel arrives.
    const unsigned long long g = load_relaxed(generation);
    barrier();
    if (thread_index() == 0) store_release(arrive + channel_, g + 1);
    bool ok = true;
    unsigned long long start = 0;
    if (channel_ == 0) {
      CCC_ROLLED
      for (int c = static_cast<int>(thread_index()); ok && c < this->rank_blocks_; c += static_cast<int>(block_threads()))
        for (unsigned polls = 0; ok && load_acquire(arrive + c) != g + 1; ++polls) {
          ok = keep_waiting(rank_, polls, start);
          relax();
        }
      ok = barrier_and(ok);
      if (ok && thread_index() == 0) store_release(generation, g + 1);
    } else {
      // A norm block waits from its start, through the whole collective: not by the clock (a long
      // call is no failure), but for the error a failed or timed-out channel records.
      const bool timed = channel_ < Cfg::channels;
      if (thread_index() == 0)
        for (unsigned polls = 0; ok && load_acquire(generation) == g; ++polls) {
          ok = keep_waiting(rank_, polls, start, timed);
          relax();
        }
      ok = barrier_and(ok);
    }
    return ok;
  }

  /* The checks of a wait on `peer` that has polled `polls` times, every 64 polls: the peer's
   * error word (in its memory: a round trip), this rank's and, if `timed`, the clock (`start`:
   * when the first check ran). False, with the error recorded, when the wait must give up. */
  CCC_FN bool keep_waiting(int peer, unsigned polls, unsigned long long& start, bool timed = true) {
    if (polls % 64 != 63) return true;
    unsigned* mine = state_[rank_].error;
    if (load_relaxed(state_[peer].error) != 0) {
      record_error(mine, CCC_ERR_PEER_FAILED);
      return false;
    }
    if (load_relaxed(mine) != 0) return false;  // another channel or thread of this rank gave up
    if (!timed) return true;
    const unsigned long long now = now_ns();
    if (start == 0) start = now;
    if (now - start > timeout_ns_) {
      record_error(mine, CCC_ERR_TIMEOUT);
      return false;
    }
    return true;
  }

  const ccc_rank_state* state_;  // [ranks] every rank's fixed state (block_rank_state)
  unsigned long long timeout_ns_;
  const int* consumers_ = nullptr;  // where this rank pushes step progress: count, then ranks
  unsigned long long base_ = 0;     // this launch's epoch << 40
};

}  // namespace ccc

#endif /* CCC_PROGRESS_H */
