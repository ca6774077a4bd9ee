/* Geometry: where a (rank, channel)'s data lies. A collective's `count` elements are cut into
 * the schedule's chunks, each chunk into one slice per channel, each slice into windows of
 * `pipeline` tiles. Every cut falls on a 64-byte multiple and the leftover goes to the last
 * pieces, so the cut depends only on (count, dtype, chunks, channels, tile, pipeline): identical
 * on every rank, which is what lets the waits of the sync plan hold slice by slice. Channel c of
 * a rank only ever touches, and only ever waits for, channel c of its peers. For reduce_scatter
 * and allgather the vector is N blocks of `count` elements (one per rank, as the user's buffers
 * lay them out) and every block is cut alike. */
#ifndef CCC_GEOMETRY_H
#define CCC_GEOMETRY_H

#include "ccc_program.h"

namespace ccc {

/* Which (rank, channel) a block is, and its slices. The base of every layer of a Channel. */
template <class Cfg>
class ChannelGeometry {
 public:
  CCC_FN int rank() const { return rank_; }

 protected:
  /* rank_blocks_: the launch's, kept within [channels, CCC_MAX_CHANNELS] (the meeting's slots);
   * static_cast: Cfg::channels as a value (an lvalue in ?: would odr-use the member, which NVRTC
   * then warns has no definition). */
  CCC_FN ChannelGeometry(const ccc_launch_args& args, int block)
      : count_(static_cast<long long>(args.count)),
        rank_blocks_(args.rank_blocks < static_cast<int>(Cfg::channels) ? static_cast<int>(Cfg::channels)
                     : args.rank_blocks > CCC_MAX_CHANNELS              ? CCC_MAX_CHANNELS
                                                                        : args.rank_blocks) {
    rank_ = args.rank >= 0 ? args.rank : block / rank_blocks_;
    channel_ = args.rank >= 0 ? block : block % rank_blocks_;
    const Range last = piece(Cfg::chunks - 1);
    windows_ = (last.end - last.begin + Cfg::window - 1) / Cfg::window;
  }

  /* Elements every cut falls on a multiple of: 64 bytes' worth. */
  CCC_FN long long unit() const { return Cfg::unit; }

  /* Chunk c, in vector elements. */
  CCC_FN Range chunk_range(int c) const {
    const int per_block = Cfg::chunks / Cfg::blocks;
    const long long block_start = (c / per_block) * count_;
    Range r = split(count_, per_block, c % per_block, unit());
    r.begin += block_start;
    r.end += block_start;
    return r;
  }

  /* This channel's slice of chunk c, in vector elements. */
  CCC_FN Range piece(int c) const {
    const Range chunk = chunk_range(c);
    const Range slice = split(chunk.end - chunk.begin, Cfg::channels, channel_, unit());
    Range r;
    r.begin = chunk.begin + slice.begin;
    r.end = chunk.begin + slice.end;
    return r;
  }

  /* Elements per scratch slot: the largest chunk (a block's last, split's leftovers go there)
   * rounded up to `unit`, so every slot starts on 64 bytes. The runtime sizes scratch alike
   * (EmittedKernel::scratch_bytes). */
  CCC_FN long long slot_stride() const {
    const int per_block = Cfg::chunks / Cfg::blocks;
    const long long largest = count_ - split(count_, per_block, per_block - 1, unit()).begin;
    return (largest + unit() - 1) / unit() * unit();
  }

  /* This channel's part of chunk c in window w, empty when the window is past its end. Shared
   * by every instantiation of run. */
  CCC_NOINLINE Range window_of(long long w, int c) const {
    const Range p = piece(c);
    Range r;
    r.begin = p.begin + w * Cfg::window;
    r.end = r.begin + Cfg::window < p.end ? r.begin + Cfg::window : p.end;
    return r;
  }

  long long count_;
  int rank_blocks_;  // the rank's blocks: its channels, then (an RMSNorm kernel) blocks that only norm
  int rank_ = 0;
  int channel_ = 0;  // the block of the rank: a channel below Cfg::channels, else a norm block
  long long windows_ = 0;  // windows of the longest slice: every slice of the channel runs this many
};

}  // namespace ccc

#endif /* CCC_GEOMETRY_H */
