/* Channel: one (rank, channel) of a launch, what a generated kernel instantiates (ccc_device.h):
 *
 *     ccc::Channel<Cfg> ch(args, CCC_BLOCK_INDEX);
 *     if (ch.enter(consumers)) ch.run<Passes, program_length>(programs[ch.rank()]);
 *
 * Its layers, each a header and a class on the one below: ChannelGeometry (which slices),
 * Progress (epochs, pushing progress, polling), PeerTable (peers' buffers: mailbox, registry,
 * views), then the kernel's protocol (ProtocolFor<Cfg>: ProtocolSimple or ProtocolLl, one
 * pass() each). Channel itself is the interpreter of the step program, entry and tracing. */
#ifndef CCC_CHANNEL_H
#define CCC_CHANNEL_H

#include "ccc_protocol_simple.h"
#include "ccc_protocol_ll.h"

namespace ccc {

template <class Cfg_>
class Channel : public ProtocolFor<Cfg_>::type {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  static_assert(Cfg_::ranks <= CCC_MAX_DEVICE_RANKS, "more ranks than a block's shared memory holds (ccc_abi.h)");
#endif
  typedef typename ProtocolFor<Cfg_>::type Base;
  using Base::base_;
  using Base::channel_;
  using Base::consumers_;
  using Base::done;
  using Base::load_peers;
  using Base::mailbox;
  using Base::own_;
  using Base::peers_;
  using Base::poll;
  using Base::publish;
  using Base::push;
  using Base::rank_;
  using Base::same_call;
  using Base::state_;
  using Base::windows_;

 public:
  typedef Cfg_ Cfg;

  CCC_FN Channel(const ccc_launch_args& args, int block) : Base(args, block) {
#ifdef CCC_TRACE_ENABLED
    // Norm blocks (past the channels) record nothing: the records are per channel.
    trace_ = args.trace != nullptr && thread_index() == 0 && channel_ < Cfg::channels
                 ? args.trace + (args.rank >= 0 ? channel_ : rank_ * Cfg::channels + channel_)
                 : nullptr;
#endif
  }

  /* Starts this launch: takes the epoch, publishes this launch's buffers in the mailbox and
   * pushes "entered" (step -1) to every peer. `consumers[r]` lists where rank r pushes its step
   * progress: a count, then the ranks (the generated kernel's table; a shared program has rank
   * 0's alone, which `map` relabels, see RankMap). False (and nothing
   * announced) when the rank's error word still holds an earlier failure: the counters are
   * inconsistent until the runtime resets them, and the peers see the error word and fail
   * instead of waiting. */
  template <class Map = Unmapped>
  CCC_FN bool enter(const int* const* consumers, Map = Map()) {
    // Programmatic dependent launch (ccc_device_cuda.h). Up to here the block has read only what
    // no grid writes: the launch arguments and, through them, the ranks' fixed state (copied to
    // shared memory by the constructor; written once before the first launch, ccc_abi.h) and a
    // virtual-rank launch's buffer table (immutable, CudaRanks::launch_all). From here on it
    // reads and writes what the stream's previous grid may still be writing (progress, inbox,
    // mailbox, error words, ll slots, scratch, the user's buffers), so every thread waits first.
    // Every block waits, even one that runs no (rank, channel): then this grid completes only
    // after its predecessor, and whatever waits for this grid's completion (a later launch
    // without PDL, an event, a synchronize) has waited for the predecessor's too.
    wait_for_prior_grids();
    // Then releases the stream's next grid at once, to hide its launch latency behind this one.
    // Safe for this grid's progress: the next grid is scheduled only once every block of this
    // grid has executed the release or exited (PTX ISA, griddepcontrol.launch_dependents), and a
    // block not yet running has done neither, so the next grid's blocks never take the place of
    // a block of this grid that its peers wait for. Issued after the wait, a grid releases its
    // successor only once its own predecessor has completed: at most two grids of a stream are
    // resident at once, this one and a successor parked in its wait, never a growing chain. That
    // parked grid holds SM resources while this one runs; ranks that share a device (processes
    // under MPS) need room for both (docs/runtime.md, "Programmatic dependent launch").
    allow_dependent_launch();
    if (rank_ >= Cfg::ranks || channel_ >= this->rank_blocks_) return false;
    // A norm block (an RMSNorm kernel's blocks past its channels) takes no part in the
    // collective: it only meets the channels once they are done, in run.
    if (channel_ >= Cfg::channels) return HasRmsNorm<typename Cfg::Op>::value;
    consumers_ = consumers[Map::shared ? 0 : rank_];  // a shared list is relabelled in done()
    CCC_ROLLED
    for (int p = static_cast<int>(thread_index()); p < Cfg::ranks; p += static_cast<int>(block_threads())) {
      peers_[p] = own_;
      if (p != rank_) peers_[p].call = 0;  // not loaded yet in this launch
    }
    unsigned long long* mine = state_[rank_].progress + channel_;
    base_ = ((load_acquire(mine) >> 40) + 1) << 40;
    // Every thread has read the old epoch (and filled its peers_ entries) before it changes.
    if (!barrier_and(load_relaxed(state_[rank_].error) == CCC_OK)) return false;
    if (thread_index() == 0) {
      publish(mailbox(rank_));
      store_relaxed(mine, base_);  // read by this channel only, at its next launch
    }
    // The mailbox write precedes every thread's push (see push: the barrier, then a release).
    barrier();
    CCC_ROLLED
    for (int p = static_cast<int>(thread_index()); p < Cfg::ranks; p += static_cast<int>(block_threads()))
      if (p != rank_) push(p, base_);
#ifdef CCC_TRACE_ENABLED
    if (trace_ != nullptr) {
      trace_->enter = step_begin_ = now_ns();
      trace_->exit = 0;
      trace_->count = trace_->dropped = 0;
    }
#endif
    return true;
  }
  /* Runs this rank's step program (a table of Length instructions, end() past its last): its
   * steps once per window, then its exit waits, reading the table from shared memory where it
   * fits (shared_program). False if a wait failed (timeout, failed peer), a peer called with
   * other arguments, or the program names a pass the kernel lacks. */
  template <class PassList, int Length, int S, class Map = Unmapped>
  CCC_NOINLINE bool run(const Instr<S>* table, Map map = Map()) {
    if constexpr (HasRmsNorm<typename Cfg::Op>::value) {
      if (channel_ >= Cfg::channels) return norm_block();
    }
    const Instr<S>* const program = shared_program<Length, SharedBudget<Cfg::ranks>::program>(table);
    for (long long w = 0; w < windows_; ++w) {
      for (const Instr<S>* i = program; i->code != instr_end; ++i) {
        if (i->code == instr_wait) {
          const Instr<S>* end = i + 1;  // the step's waits: every consecutive wait, polled at once
          CCC_ROLLED
          while (end->code == instr_wait) ++end;
          if (!wait_all(i, end, w, map)) return false;
          i = end - 1;
        } else if (i->code == instr_done) {
          done(w, i->a, map);
#ifdef CCC_TRACE_ENABLED
          trace_step(w, i->a);
#endif
        } else if (i->code == instr_pass) {
#ifdef CCC_TRACE_ENABLED
          if (trace_ != nullptr && pass_begin_ == 0) pass_begin_ = now_ns();
#endif
          if (!load_peers(i, map)) return false;
          if (!PassList::template has<typename Cfg::Op>(*i)) {
            if (thread_index() == 0) record_error(state_[rank_].error, CCC_ERR_BAD_PROGRAM);
            return false;
          }
          const Instr<S>* next = this->template pass<PassList>(w, i, map);  // the protocol's
          if (next == nullptr) return false;
          i = next - 1;
        }
      }
    }
    const Instr<S>* end = program;
    CCC_ROLLED
    while (end->code != instr_end) ++end;
    if (!wait_all(program, end, -1, map)) return false;
    if constexpr (HasRmsNorm<typename Cfg::Op>::value) {
      // One block: the exit waits' barrier already ordered it.
      if (this->rank_blocks_ > 1 && !this->meet_own_channels()) return false;
      this->rmsnorm_own_rows();
    }
#ifdef CCC_TRACE_ENABLED
    if (trace_ != nullptr) trace_->exit = now_ns();
#endif
    return true;
  }

 private:
  /* A norm block's launch: it meets the rank's channels once they have passed their exit waits
   * (every write of the rank's output done, every peer done reading it), then norms its share
   * of the rows, as each channel does. Its blocks idle until then: the price of norming at the
   * rate of every block of the rank rather than of its channels alone. */
  CCC_NOINLINE bool norm_block() {
    if (!this->meet_own_channels()) return false;
    this->rmsnorm_own_rows();
    return true;
  }

  /* Waits for every wait instruction in [begin, end): the step waits of window w (w >= 0), or
   * the exit waits (w < 0). The k-th wait is polled by thread k % block_threads(), so the waits
   * for several peers' pushes overlap instead of adding up; then one barrier. Correct because an
   * acquire that reads a peer's release, followed by bar.sync, orders the peer's writes before
   * every thread of the block's later reads (PTX memory model: causality order is transitive through the
   * CTA barrier) — the pattern NCCL's primitives use with one polling thread per peer.
   * An entry wait ("the peer has entered", step -1) holds for the whole launch once it held,
   * so only window 0 polls it. False on every thread if any poll failed. Out of line: the step
   * waits and the exit waits share one copy (NVRTC time). */
  template <int S, class Map>
  CCC_NOINLINE bool wait_all(const Instr<S>* begin, const Instr<S>* end, long long w, const Map& map) {
    const InstrCode code = w < 0 ? instr_wait_exit : instr_wait;
    bool ok = true;
    unsigned k = 0;  // the wait's index modulo the block's threads
    CCC_ROLLED
    for (const Instr<S>* i = begin; i != end && ok; ++i) {
      if (i->code != code) continue;
      const bool mine = k == thread_index();
      if (++k == block_threads()) k = 0;
      if (!mine) continue;
      if (w < 0) {
        const int peer = map.peer(i->a);
        ok = poll(peer, windows_ == 0 ? 0 : (windows_ - 1) * Cfg::steps + i->b + 1) && same_call(peer);
      } else if (i->b >= 0 || w == 0) {
        ok = poll(map.peer(i->a), i->b < 0 ? 0 : w * Cfg::steps + i->b + 1);
      }
    }
    return barrier_and(ok);
  }

#ifdef CCC_TRACE_ENABLED
  /* Records step `step` of window w, just published: its waits ran from step_begin_ until its
   * first pass (none: until now), its passes from there until now. The next step begins now. */
  CCC_FN void trace_step(long long w, int step) {
    if (trace_ == nullptr) return;
    const unsigned long long now = now_ns();
    if (trace_->count < CCC_TRACE_CAPACITY) {
      ccc_trace_step& s = trace_->steps[trace_->count++];
      s.begin = step_begin_;
      s.pass = pass_begin_ != 0 ? pass_begin_ : now;
      s.end = now;
      s.window = static_cast<int>(w);
      s.step = step;
    } else {
      ++trace_->dropped;
    }
    step_begin_ = now;
    pass_begin_ = 0;
  }
#endif

#ifdef CCC_TRACE_ENABLED
  ccc_trace_channel* trace_ = nullptr;  // this block's record, on thread 0 only
  unsigned long long step_begin_ = 0;
  unsigned long long pass_begin_ = 0;   // 0: the current step has not begun a pass
#endif
};

}  // namespace ccc

#endif /* CCC_CHANNEL_H */
