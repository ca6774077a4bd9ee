#include "host_block.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "fibers.h"

namespace ccc {
namespace {

// The block runs of the calling host thread, counted: each run's id (ccc_host_thread::launch),
// from 1. block_shared() keeps its arrays and the id it last saw per host thread too, so ids need
// only differ within one (and no counter is shared between the workers of a launch).
thread_local unsigned long long block_runs = 0;

// One block run's threads and their turns.
class Block {
 public:
  Block(HostEntry entry, const ccc_launch_args& args, int block, std::unique_ptr<Fibers> fibers)
      : entry_(entry), args_(args), block_(block), threads_(static_cast<unsigned>(fibers->size())),
        fibers_(std::move(fibers)), barrier_(threads_), state_(threads_, State::Runnable) {
    const unsigned long long launch = ++block_runs;
    for (unsigned i = 0; i < threads_; ++i)
      self_.push_back({i, threads_, launch, this, &Block::barrier_and, &Block::relax, nullptr});
  }

  BlockRun run() {
    for (unsigned i = 0; i < threads_; ++i) fibers_->start(i, [this, i] { entry_(args_, block_, &self_[i]); });
    for (unsigned finished = 0; finished < threads_;) {
      relaxed_ = false;
      for (unsigned i = threads_; i-- > 0;) {
        if (state_[i] != State::Runnable || fibers_->resume(i)) continue;
        state_[i] = State::Finished;
        ++finished;
        if (barrier_.leave()) release();  // the others wait at a barrier no one else will reach
      }
      if (relaxed_) std::this_thread::yield();  // every runnable thread is polling
    }
    return barrier_.diverged() ? BlockRun::Diverged : BlockRun::Ok;
  }

 private:
  enum class State : unsigned char { Runnable, AtBarrier, Finished };

  static int barrier_and(const ccc_host_thread* self, int p) {
    Block& b = *static_cast<Block*>(self->block);
    if (b.barrier_.arrive(p != 0))
      b.release();
    else
      b.state_[self->index] = State::AtBarrier;
    // The last to arrive waits its turn too: the threads after a barrier then start in the usual
    // order (thread 0 last), not with whoever happened to arrive last.
    b.fibers_->suspend(self->index);
    // The barrier still holds this one's outcome: the next cannot complete before this thread,
    // now runnable, arrives at it.
    return b.barrier_.result();
  }

  static void relax(const ccc_host_thread* self) {
    Block& b = *static_cast<Block*>(self->block);
    b.relaxed_ = true;
    b.fibers_->suspend(self->index);
  }

  void release() {
    for (State& s : state_)
      if (s == State::AtBarrier) s = State::Runnable;
  }

  HostEntry entry_;
  const ccc_launch_args& args_;
  int block_;
  unsigned threads_;
  std::unique_ptr<Fibers> fibers_;  // one per thread
  BlockBarrier barrier_;
  std::vector<ccc_host_thread> self_;
  std::vector<State> state_;
  bool relaxed_ = false;  // a thread polled in vain this round
};

// One thread: no fibers, no turns.
int single_barrier_and(const ccc_host_thread*, int p) { return p; }
void single_relax(const ccc_host_thread*) { std::this_thread::yield(); }

}  // namespace

BlockRun run_host_block(HostEntry entry, const ccc_launch_args& args, int block, int channels, unsigned threads) {
  threads = std::clamp(threads, 1u, kMaxHostBlockThreads);
  std::unique_ptr<Fibers> fibers;
  if (threads > 1) fibers = std::make_unique<Fibers>(threads);
  if (fibers == nullptr || fibers->size() <= 1) {
    const ccc_host_thread self{0, 1, ++block_runs, nullptr, &single_barrier_and, &single_relax, nullptr};
    entry(args, block, &self);
    return BlockRun::Ok;
  }
  Block b(entry, args, block, std::move(fibers));
  if (b.run() == BlockRun::Ok) return BlockRun::Ok;
  record_diverged(args, block, channels);
  return BlockRun::Diverged;
}

void record_diverged(const ccc_launch_args& args, int block, int channels) {
  // The block's rank keeps its first error, as the prelude's record_error does.
  const int rank = args.rank >= 0 ? args.rank : block / channels;
  unsigned expected = CCC_OK;
  std::atomic_ref<unsigned>(*args.ranks[rank].error).compare_exchange_strong(expected, CCC_ERR_BARRIER_DIVERGED);
}

bool BlockBarrier::arrive(bool p) {
  all_ = all_ && p;
  if (++waiting_ < live_) return false;
  diverged_ = diverged_ || live_ < threads_;  // some left instead of arriving
  complete();
  return true;
}

bool BlockBarrier::leave() {
  --live_;
  if (waiting_ == 0 || waiting_ < live_) return false;
  diverged_ = true;
  complete();
  return true;
}

void BlockBarrier::complete() {
  result_ = all_;
  waiting_ = 0;
  all_ = true;
}

}  // namespace ccc
