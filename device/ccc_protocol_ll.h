/* Protocol ll (low latency): data and signal travel together. A send stores each 4 bytes of
 * data with a 4-byte flag into one 8-byte line of the reader's receive region, and the reader
 * polls the lines themselves: no wait for a progress push, no peer read. Latency-bound sizes
 * take it, at twice the bytes on the wire. The lowering (compiler/src/lower.cpp, check_ll_plan)
 * decides what is sent where and proves each line is read once per launch. */
#ifndef CCC_PROTOCOL_LL_H
#define CCC_PROTOCOL_LL_H

#include "ccc_peer_table.h"

namespace ccc {

template <class Cfg>
class ProtocolLl : public PeerTable<Cfg> {
 protected:
  typedef PeerTable<Cfg> Base;
  typedef typename Cfg::T T;
  typedef typename Base::View View;
  using Base::base_;
  using Base::channel_;
  using Base::count_;
  using Base::keep_waiting;
  using Base::peers_;
  using Base::rank_;
  using Base::residual_at;
  using Base::view;
  using Base::window_of;

  CCC_FN ProtocolLl(const ccc_launch_args& args, int block) : Base(args, block) {}

  /* Every protocol's one entry (see ProtocolSimple::pass): pass i with the ll_pass of the kind
   * it names; null when a line it waited for never came (the error is recorded). */
  template <class PassList, int S, class Map>
  CCC_NOINLINE const Instr<S>* pass(long long w, const Instr<S>* i, const Map& map) {
    bool ok = false;
    PassList::template visit<typename Cfg::Op>(*i, LlPass<S, Map>{*this, w, *i, map, ok});
    return ok ? i + 1 : nullptr;
  }

 private:
  /* Pass i with the ll_pass of the kind visited. */
  template <int S, class Map>
  struct LlPass {
    ProtocolLl& ch;
    long long w;
    const Instr<S>& i;
    const Map& map;
    bool& ok;
    template <class Kind>
    CCC_FN void operator()(Kind) const {
      ok = ch.template ll_pass<Kind::finish, Kind::sources>(w, i, map);
    }
  };

  /* A receive region holds one 8-byte line per 4 bytes of Cfg::ll_blocks blocks,
   * block by block (each block's lines start afresh, so a line never spans two blocks, whatever
   * `count`), indexed by the chunks of the pass that reads it; the low 4 bytes are data, the high 4 the
   * flag. Rank `rank`'s region `region`, in its receive slots (ccc_buffers::ll): */
  CCC_FN unsigned long long* ll_lines(int rank, int region) const {
    return static_cast<unsigned long long*>(peers_[rank].ll) + region * Cfg::ll_blocks * ll_lines_per_block();
  }
  CCC_FN long long ll_lines_per_block() const { return (count_ * static_cast<long long>(sizeof(T)) + 3) / 4; }
  /* The flag of this launch's lines: (the epoch + 1) << 6 | the channel. Never 0, so zeroed
   * memory is never taken for data. The epoch changes every launch of this channel, and the
   * consumer clears each line it has read (ll_pass), so no line of an earlier launch is left to be
   * taken for this one's, even once the 24-bit epoch has wrapped to its value; a failed launch
   * may leave lines, and the runtime zeroes every receive block before epochs restart. The
   * channel is in the flag because each channel counts its own launches while every ll kernel of
   * the communicator shares the rank's receive slots: a kernel with fewer channels moves channel
   * 0's epoch and not channel 1's, and may cut its slices elsewhere, so without it a line channel
   * 0 wrote could carry the very flag channel 1 waits for later. CCC_MAX_CHANNELS is 64: 6 bits,
   * and 24 + 6 bits fit the 32 of the flag. */
  static_assert(CCC_MAX_CHANNELS <= 64, "the channel takes 6 bits of an ll flag");
  CCC_FN unsigned ll_flag() const {
    return ((static_cast<unsigned>(base_ >> 40) + 1u) << 6) | static_cast<unsigned>(channel_);
  }

  /* Polls one line of this rank's receive region until it carries `flag`, with poll()'s
   * checks for a failed producer, this rank's failure and the timeout; the line's data in
   * `data`. The region is source k (fold order) of pass i; its producer, needed only by the
   * checks every 64 polls, is derived from the table there rather than held in a register
   * through ll_pass's line loop. */
  template <int K, int S, class Map>
  CCC_FN bool ll_wait(const unsigned long long* line, unsigned flag, const Instr<S>& i, int k, const Map& map, unsigned& data) {
    unsigned long long start = 0;
    for (unsigned polls = 0;; ++polls) {
      const unsigned long long v = ll_load(line);
      if (static_cast<unsigned>(v >> 32) == flag) {
        data = static_cast<unsigned>(v);
        return true;
      }
      if (polls % 64 == 63 && !keep_waiting(map.peer(fold_source(i, map.lowest(i, K), k, K).rank), polls, start))
        return false;
      relax();
    }
  }

  /* Polls group g's lines of every region among the K sources (bit k of `regions`; source k's
   * lines start at at[k]) until all carry `flag`: each sweep loads every line before it looks at
   * any, so the loads are in flight together. poll()'s checks, on the first source still
   * missing, as ll_wait makes them. */
  template <int K, int S, class Map>
  CCC_FN bool ll_wait_all(const void* const* at, const unsigned* regions, int g, unsigned flag, const Instr<S>& i,
                          const Map& map) {
    const int L = ll_group / 4;
    unsigned long long start = 0;
    for (unsigned polls = 0;; ++polls) {
      int missing = K;
      for (int k = K - 1; k >= 0; --k)
        if (regions[k / 32] >> (k % 32) & 1u)
          for (int l = 0; l < L; ++l)
            if (static_cast<unsigned>(ll_load(static_cast<const unsigned long long*>(at[k]) + g * L + l) >> 32) != flag)
              missing = k;
      if (missing == K) return true;
      if (polls % 64 == 63 && !keep_waiting(map.peer(fold_source(i, map.lowest(i, K), missing, K).rank), polls, start))
        return false;
      relax();
    }
  }

  /* A group: the bytes one thread moves at a time, whole lines and whole elements (4 bytes,
   * or one element of 8: two lines). */
  static const int ll_group = sizeof(T) > 4 ? static_cast<int>(sizeof(T)) : 4;
  union LlGroup {
    T e[ll_group / sizeof(T)];
    unsigned line[ll_group / 4];
  };

  /* A pass of an ll kernel, a group per thread at a time: each source is a buffer of this rank
   * (read directly) or a receive region (every line polled until it carries this launch's
   * flag), and the destination is a buffer of this rank or, for a send, a peer's region. Elements
   * past the pass's range in a group's last line (a block's end) are zero in a send and ignored
   * by a read. The barrier first: a send reads what other threads wrote in this step's passes.
   * `map` relabels peers and chunks as pull_chunks does; region numbers are the same on every rank
   * (the compiler numbers them so).
   *
   * Register budget: ptxas gives these kernels 64 registers, and the line loop must fit them
   * (Nvrtc.LlEveryDtypeForAmpereAndHopper fails on any spill here). So the relabelling happens
   * per chunk, outside the line loop: each operand is resolved from the table to one pointer at
   * the chunk's first group (a bit per source says whether it is a region), and the line loop
   * holds those, one destination pointer, the flag and 32-bit counters; the chunk loop reads the
   * table again for each chunk rather than keep the map's first chunk, and a wait derives its
   * producer from the table only when it checks (ll_wait). Holding a view and a line pointer per
   * source for the whole pass spilled 12-148 B under RankMap; per chunk, a data and a line
   * pointer per source, or two destination pointers, or 64-bit counters still spilled 4-8 B
   * (8-source one-shot, f16 and i64). */
  template <bool Finish, int K, int S, class Map>
  CCC_NOINLINE bool ll_pass(long long w, const Instr<S>& i, const Map& map) {
    // The lowering refuses ll kernels whose window would not fit (compiler/src/lower.cpp).
    static_assert(Cfg::window < (1ll << 30), "ll_pass counts a chunk's groups of a window in int");
    typedef typename Num<T>::Acc A;
    const int E = ll_group / sizeof(T), L = ll_group / 4;
    const bool send = i.dst.buffer == buffer_ll;
    if (send) barrier();
    const unsigned flag = ll_flag();
    bool ok = true;
    CCC_ROLLED
    for (int c = i.a; c < i.b && ok; ++c) {
      const int chunk = map.first(i) + (c - i.a);
      const Range r = window_of(w, chunk);
      if (r.begin >= r.end) continue;
      // The chunk's groups, from its first (the block's lines start afresh at each block). Counted
      // in int: a chunk's range lies in one window.
      const long long block = r.begin / count_, block_start = block * count_;
      const long long first = block_start + (r.begin - block_start) / E * E;  // the first group's first element
      const int groups = static_cast<int>((r.end - first + E - 1) / E);
      const int end = static_cast<int>(r.end - first);
      const long long line0 = block * ll_lines_per_block() + (first - block_start) / E * L;
      // Each operand at the first group, relabelled from the table once per chunk.
      void* const to = send ? static_cast<void*>(ll_lines(map.peer(i.dst.rank), i.dst.block) + line0)
                            : static_cast<void*>(ll_data(i.dst, map, chunk, first));  // lines or elements
      const void* at[K];                     // a region's lines or a buffer's elements
      unsigned regions[(K + 31) / 32] = {};  // bit k: source k is a region
      const int lowest = map.lowest(i, K);
      for (int k = 0; k < K; ++k) {
        const Ref& ref = fold_source(i, lowest, k, K);
        const bool region = ref.buffer == buffer_ll;
        if (region) {
          at[k] = ll_lines(rank_, ref.block) + line0;
          regions[k / 32] |= 1u << (k % 32);
        } else {
          at[k] = ll_data(ref, map, chunk, first);
        }
      }
      bool several = false;  // two or more regions among the sources
      if constexpr (K > 2)
        for (int w32 = 0, seen = 0; w32 < (K + 31) / 32; ++w32) {
          several = several || (regions[w32] & (regions[w32] - 1u)) != 0 || (seen != 0 && regions[w32] != 0);
          seen = seen || regions[w32] != 0;
        }
      CCC_ROLLED
      for (int g = static_cast<int>(thread_index()); g < groups && ok; g += static_cast<int>(block_threads())) {
        const int n = end - g * E < E ? end - g * E : E;  // the group's elements in the chunk
        // With several regions (one-shot, two-shot, tree), every region's lines of the group
        // carry the flag before any is read as data: one sweep loads them all, in flight
        // together, rather than each source's poll after the one before it matched. Not for two
        // sources (butterfly, ring: a buffer and a region), where it would cost a spill.
        if constexpr (K > 2)
          if (several) ok = ll_wait_all<K>(at, regions, g, flag, i, map);
        A acc[E] = {};
        for (int k = 0; k < K && ok; ++k) {
          LlGroup in = {};
          if (regions[k / 32] >> (k % 32) & 1u) {
            const unsigned long long* lines = static_cast<const unsigned long long*>(at[k]) + g * L;
            for (int l = 0; l < L && ok; ++l) ok = ll_wait<K>(lines + l, flag, i, k, map, in.line[l]);
          } else {
            const T* data = static_cast<const T*>(at[k]) + g * E;
            for (int e = 0; e < n; ++e) in.e[e] = data[e];
          }
          for (int e = 0; e < n; ++e) acc[e] = k == 0 ? Num<T>::to(in.e[e]) : Cfg::Op::apply(acc[e], Num<T>::to(in.e[e]));
        }
        if (!ok) break;
        LlGroup o;
        for (int l = 0; l < L; ++l) o.line[l] = 0;
        for (int e = 0; e < n; ++e) o.e[e] = finished<T, typename Cfg::Op, Finish>(acc[e], Cfg::ranks, residual_at(first + g * E), e);
        if (send) {
          for (int l = 0; l < L; ++l) ll_store(static_cast<unsigned long long*>(to) + g * L + l, o.line[l], flag);
        } else {
          for (int e = 0; e < n; ++e) static_cast<T*>(to)[g * E + e] = o.e[e];
        }
      }
      // The region lines this thread read, each read once per launch (the lowering proves it),
      // cleared, so that none outlives its launch to meet its flag again when the 24-bit epoch
      // wraps (ll_flag). The producer's next write to a line follows this rank's next entry,
      // which follows these stores (the entry's barrier and release, the producer's acquire
      // before it sends). A loop of its own: inside the line loop it costs registers it lacks.
      if (ok)
        for (int k = 0; k < K; ++k)
          if (regions[k / 32] >> (k % 32) & 1u)
            for (int g = static_cast<int>(thread_index()); g < groups; g += static_cast<int>(block_threads()))
              for (int l = 0; l < L; ++l)
                store_relaxed(static_cast<unsigned long long*>(const_cast<void*>(at[k])) + g * L + l, 0ull);
    }
    return barrier_and(ok);
  }

  /* Where element `at` of ref (one the pass reads or writes there, at chunk `chunk`) lies, on
   * the ref's rank relabelled by `map`. */
  template <class Map>
  CCC_FN T* ll_data(const Ref& ref, const Map& map, int chunk, long long at) const {
    const View v = view(ref, map.peer(ref.rank), chunk);
    return v.base + (at - v.shift);
  }
};

template <class Cfg>
struct ProtocolFor<Cfg, protocol_ll> {
  typedef ProtocolLl<Cfg> type;
};

}  // namespace ccc

#endif /* CCC_PROTOCOL_LL_H */
