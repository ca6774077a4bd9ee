/* Protocol simple: a pass reads its sources in place, a peer's buffers over the fabric, once the
 * sync plan's waits say they hold the data; the signal is the progress protocol's push
 * (ccc_progress.h). Bandwidth-bound sizes take it: each element crosses once, in 16-byte
 * vectors. */
#ifndef CCC_PROTOCOL_SIMPLE_H
#define CCC_PROTOCOL_SIMPLE_H

#include "ccc_peer_table.h"

namespace ccc {

template <class Cfg>
class ProtocolSimple : public PeerTable<Cfg> {
 protected:
  typedef PeerTable<Cfg> Base;
  typedef typename Cfg::T T;
  typedef typename Base::View View;
  using Base::rank_;
  using Base::residual_at;
  using Base::view;
  using Base::window_of;

  CCC_FN ProtocolSimple(const ccc_launch_args& args, int block) : Base(args, block) {}

  /* Every protocol's one entry: runs the pass at `i` over this channel's slice of window w, with
   * the data code of the kind (PassList) it names, which Channel::run has checked the kernel
   * has, and returns the instruction after the last pass it ran, or null when one failed (the
   * error recorded). Here a copy takes the copies after it along (copy_passes), and nothing
   * fails. */
  template <class PassList, int S, class Map>
  CCC_FN const Instr<S>* pass(long long w, const Instr<S>* i, const Map& map) {
    if (is_copy(*i)) return copy_passes<PassList>(w, i, map);
    pull_chunks<PassList>(w, *i, map);
    return i + 1;
  }

 private:
  /* Protocol simple: every source is a buffer, a peer's read in place. One body for every kind:
   * the views and the chunk loop do not depend on it, only each chunk's fold (combine, compiled
   * once per kind) does, so a kernel compiles this once rather than once per kind (NVRTC time;
   * the per-chunk cost is a few compares and the sources' pointers through local memory). Out
   * of line, and the chunk loop kept rolled: NVRTC time. */
  template <class PassList, int S, class Map>
  CCC_NOINLINE void pull_chunks(long long w, const Instr<S>& i, const Map& map) {
    const int sources = i.sources;
    const int to = map.peer(i.dst.rank);
    const int first = map.first(i);
    const View dst = view(i.dst, to, first);
    View src[S];
    int from[S + 1];  // the ranks whose buffers the sources are, then the residual's (simulator)
    const int lowest = map.lowest(i, sources);  // the fold begins at this source
    CCC_ROLLED
    for (int k = 0; k < sources; ++k) {
      const Ref& ref = fold_source(i, lowest, k, sources);
      from[k] = map.peer(ref.rank);
      src[k] = view(ref, from[k], first);
    }
    // The completing write of an epilogue kernel reads the rank's residual too (finished).
    const int read_residual = HasResidual<typename Cfg::Op>::value && i.finish != 0 ? 1 : 0;
    from[sources] = rank_;
    CCC_ROLLED
    for (int c = first; c < first + (i.b - i.a); ++c) {
      const Range r = window_of(w, c);
      if (r.begin >= r.end) continue;
      const T* at[S];
      CCC_ROLLED
      for (int k = 0; k < sources; ++k) at[k] = src[k].base + (r.begin - src[k].shift);
      account_move(from, sources + read_residual, to, (r.end - r.begin) * static_cast<long long>(sizeof(T)), 0);
      PassList::template visit<typename Cfg::Op>(
          i, Fold{dst.base + (r.begin - dst.shift), at, r.end - r.begin, residual_at(r.begin)});
    }
  }
  /* A pass that copies one source, the op's finish aside. */
  template <int S>
  static CCC_FN bool is_copy(const Instr<S>& i) {
    return i.sources == 1 && !(i.finish != 0 && Cfg::Op::finishes);
  }
  /* Protocol simple: the copies of a step from `first` up to its next other instruction, their
   * chunks in batches of up to 4 copied together (copy_together); returns the instruction after
   * the last. A step's passes never read what another of them writes (the compiler checks it:
   * lower.cpp, check_no_self_hazard), so they may run in any order and at once. */
  template <class PassList, int S, class Map>
  CCC_NOINLINE const Instr<S>* copy_passes(long long w, const Instr<S>* first, const Map& map) {
    const int G = 4;  // 8 made ptxas spill in combine and ll_pass too (Nvrtc tests)
    T* dst[G];
    const T* src[G];
    long long n[G];
    int from[G];
    int kn = 0;
    const Instr<S>* i = first;
    CCC_ROLLED
    for (; i->code == instr_pass && is_copy(*i) && PassList::template has<typename Cfg::Op>(*i); ++i) {
      const int c0 = map.first(*i);
      const View d = view(i->dst, map.peer(i->dst.rank), c0);
      const int f = map.peer(i->src[0].rank);
      const View s = view(i->src[0], f, c0);
      CCC_ROLLED
      for (int c = c0; c < c0 + (i->b - i->a); ++c) {
        const Range r = window_of(w, c);
        if (r.begin >= r.end) continue;
        dst[kn] = d.base + (r.begin - d.shift);
        src[kn] = s.base + (r.begin - s.shift);
        n[kn] = r.end - r.begin;
        from[kn] = f;
        if (++kn == G) {
          copy_batch<G>(dst, src, n, from, kn);
          kn = 0;
        }
      }
    }
    if (kn > 0) copy_batch<G>(dst, src, n, from, kn);
    return i;
  }
  /* kn chunk copies into this rank: together when that takes a thread no more round trips
   * than copying them one at a time (combine keeps 8 vectors of one copy in flight, so a large
   * copy goes faster alone). The decision depends on sizes only, so it is uniform over the
   * block, and counts the GPU's block (CCC_BLOCK_THREADS), so host emulation and the simulator,
   * which may run fewer threads, take the GPU's path. */
  template <int G>
  CCC_FN void copy_batch(T* const* dst, const T* const* src, const long long* n, const int* from, int kn) {
    const long long round = CCC_BLOCK_THREADS * (16 / static_cast<long long>(sizeof(T)));  // elements per GPU round
    long long together = 0, apart = 0, most = 0;
    CCC_ROLLED
    for (int k = 0; k < kn; ++k) {
      const long long rounds = (n[k] + round - 1) / round;
      if (rounds > together) together = rounds;
      apart += (rounds + 7) / 8;
      if (n[k] > most) most = n[k];
    }
    if (kn > 1 && together <= apart) {
      account_move(from, kn, rank_, most * static_cast<long long>(sizeof(T)), 1);
      copy_together<T, G>(dst, src, n, kn);
      return;
    }
    CCC_ROLLED
    for (int k = 0; k < kn; ++k) {
      account_move(from + k, 1, rank_, n[k] * static_cast<long long>(sizeof(T)), 0);
      combine<T, typename Cfg::Op, 1, false, Cfg::ranks>(dst[k], sources_of<1>(src + k), n[k], nullptr);
    }
  }
  /* The fold of one chunk with the data loop of the kind visited (Passes::visit); `residual`:
   * the epilogue's at the chunk's first element (null without one). */
  struct Fold {
    T* dst;
    const T* const* src;
    long long n;
    const T* residual;
    template <class Kind>
    CCC_FN void operator()(Kind) const {
      combine<T, typename Cfg::Op, Kind::sources, Kind::finish, Cfg::ranks>(dst, sources_of<Kind::sources>(src), n,
                                                                           residual);
    }
  };
};

template <class Cfg>
struct ProtocolFor<Cfg, protocol_simple> {
  typedef ProtocolSimple<Cfg> type;
};

}  // namespace ccc

#endif /* CCC_PROTOCOL_SIMPLE_H */
