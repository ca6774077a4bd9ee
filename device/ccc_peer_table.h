/* Buffers of peers. A launch knows only its own buffers (ccc_abi.h). On entering, thread 0 of
 * each (rank, channel) writes them into the channel's mailbox slot for this launch, then the
 * channel pushes "entered"; a peer reads the slot the first time a pass of its program reads that
 * rank (the slots of a pass's ranks by threads of their own, in parallel), which the sync plan
 * orders after the rank's "entered" (every read of a peer's buffer
 * waits, directly or through other ranks' waits, for the peer to have entered or written it).
 * The slot's call signature must equal the reader's: a rank whose peer called with another
 * kernel or count records CCC_ERR_MISMATCH before it touches any of the peer's data. Where the
 * rank has a registry (several processes), a peer's input and output are translated into this
 * process's mapping of them, and one that no entry covers records CCC_ERR_UNREGISTERED, again
 * before any data is touched (see reach).
 *
 * Buffers. Generated code names a rank's buffers by chunk-space position: in(r), out(r),
 * scratch(r), staging(r) are views whose element i is the vector's element i. A view of a buffer
 * that holds one block only (a reduce_scatter's output, an allgather's input) is shifted by that
 * block's start; the lowering only ever touches such a view inside its block. */
#ifndef CCC_PEER_TABLE_H
#define CCC_PEER_TABLE_H

#include "ccc_progress.h"

namespace ccc {

/* The peer table of a Channel: every rank's buffers as this launch sees them (the mailbox, the
 * registry's translation) and views of them by chunk-space position. */
template <class Cfg>
class PeerTable : public Progress<Cfg> {
 protected:
  typedef Progress<Cfg> Base;
  typedef typename Cfg::T T;
  using Base::base_;
  using Base::channel_;
  using Base::count_;
  using Base::rank_;
  using Base::state_;

  CCC_FN PeerTable(const ccc_launch_args& args, int block)
      : Base(args, block), peers_(block_shared<ccc_buffers, Cfg::ranks>()),
        own_(args.rank >= 0 ? args.own : args.virtual_own[rank_ < Cfg::ranks ? rank_ : 0]),
        epilogue_(!HasResidual<typename Cfg::Op>::value ? ccc_epilogue_args{}
                  : args.rank >= 0                      ? args.epilogue
                                                        : args.virtual_epilogue[rank_ < Cfg::ranks ? rank_ : 0]) {}

  /* An RMSNorm epilogue's last phase, once every channel of this rank has passed its exit waits
   * (meet_own_channels: every write of this rank's output is done, and every peer is done
   * reading it): block b of the rank's B (its channels, then its norm blocks) norms the b-th of
   * B runs of whole rows, wherever the schedule's cuts put them. One row takes one block, so one token's row is one block's work (thousands of
   * elements: a few passes of 512 threads on the GPU). */
  CCC_FN void rmsnorm_own_rows() {
    if constexpr (HasRmsNorm<typename Cfg::Op>::value) {
      const long long hidden = static_cast<long long>(epilogue_.hidden);
      const long long rows = hidden > 0 ? this->count_ / hidden : 0;
      const long long blocks = this->rank_blocks_;  // the channels, then the norm blocks
      const long long first = rows * channel_ / blocks, last = rows * (channel_ + 1) / blocks;
      if (first >= last) return;
      const long long elements = (last - first) * hidden;
      // The simulator's price, as the cost model's (cost_model.cpp, norm_seconds): the bytes the
      // block reads and writes (each row read twice and written once, then residual_out's and
      // the fp8 output's writes), as moves through the block: a move is one read and one write.
      const long long accessed = (epilogue_.residual_out != nullptr ? 4 : 3) * elements * static_cast<long long>(sizeof(T)) +
                                 (epilogue_.quant_out != nullptr ? elements : 0);
      account_move(&rank_, 1, rank_, accessed / 2, 0);
      rmsnorm_rows<T>(static_cast<T*>(own_.output), static_cast<const T*>(epilogue_.weight),
                      static_cast<T*>(epilogue_.residual_out), epilogue_.quant_out, epilogue_.quant_inv_scale,
                      first * hidden, last * hidden, hidden, epilogue_.eps);
    }
  }

  /* Epilogue kernels: the rank's residual at element `i` of the buffer's chunk space (an
   * allreduce's one block); null in the others, which never offset it. */
  CCC_FN const T* residual_at(long long i) const {
    if constexpr (HasResidual<typename Cfg::Op>::value) return static_cast<const T*>(epilogue_.residual) + i;
    else return nullptr;
  }

  /* A rank's buffer seen from the vector: element i lives at base[i - shift]. The blocked
   * layouts shift a buffer that holds one block (a reduce_scatter's output, an allgather's
   * input); a remapped source shifts by its block offset (Ref::block, zero unless the schedule
   * remaps). */
  struct View {
    T* base;
    long long shift;
  };
  /* Ref's buffer and block shift, on rank `rank` (the ref's rank, relabelled by the rank map),
   * for a pass at chunk `chunk` (relabelled too): a slot holds that chunk, its elements from the
   * slot's start. */
  CCC_FN View view(const Ref& ref, int rank, int chunk) const {
    const ccc_buffers& b = peers_[rank];
    const long long block = static_cast<long long>(rank) * count_;
    View v;
    v.shift = -static_cast<long long>(ref.block) * count_;
    if (Cfg::scratch_slots > 0 && ref.buffer == buffer_slot) {
      v.base = static_cast<T*>(b.scratch);
      v.shift = this->chunk_range(chunk).begin - ref.block * this->slot_stride();
    } else if (ref.buffer == buffer_input) {
      v.base = static_cast<T*>(const_cast<void*>(b.input));
      if (Cfg::layout == layout_allgather) v.shift += block;
    } else if (ref.buffer == buffer_output) {
      v.base = static_cast<T*>(b.output);
      if (Cfg::layout == layout_reduce_scatter) v.shift += block;
    } else {
      v.base = static_cast<T*>(b.scratch);
      if (ref.buffer == buffer_staging)
        v.base += Cfg::scratch_slots > 0 ? Cfg::scratch_slots * this->slot_stride() : Cfg::staging_after * count_;
    }
    return v;
  }

  /* This launch's call as its mailbox slot carries it: the runtime's signature (ccc_abi.h) in
   * the low 40 bits, the launch's epoch (base_) in the high 24, so that a reader tells this
   * launch's slot from the one the rank writes two launches later (same parity). Never 0: the
   * signature is odd. */
  static const unsigned long long kSignatureBits = (1ull << 40) - 1;
  CCC_FN unsigned long long stamp() const { return (own_.call & kSignatureBits) | base_; }

  /* Writes this launch's buffers into `slot`, the call as one 8-byte strong store, since
   * same_call may read it while the rank writes the slot again two launches on (the other
   * fields are read only after a wait that orders them: load_peers). */
  CCC_FN void publish(ccc_buffers* slot) const {
    slot->input = own_.input;
    slot->output = own_.output;
    slot->scratch = own_.scratch;
    slot->ll = own_.ll;
    store_relaxed(&slot->call, stamp());
  }

  /* After an exit wait on `peer`: whether the peer runs the same call. A peer whose buffers this
   * launch loaded was checked then (load_peers); one it only waits for (a broadcast root waits
   * for its readers to finish) was checked nowhere, and a peer that called another root, count
   * or collective could reach the awaited step all the same, so both would succeed with
   * different data. The peer's slot holds this launch's stamp, which it wrote before the
   * progress the wait acquired, unless the peer has since finished this launch and the next (the
   * slot is two launches on, its epoch differs): then it ran this launch's call to the end and
   * proves nothing either way. The cost: one 8-byte peer load after the wait, counted by the
   * cost model. False, with CCC_ERR_MISMATCH recorded, when the calls differ. */
  CCC_FN bool same_call(int peer) {
    if (peers_[peer].call != 0) return true;
    const unsigned long long theirs = load_relaxed(&mailbox(peer)->call);
    if ((theirs ^ base_) >> 40 != 0 || theirs == stamp()) return true;
    record_error(state_[rank_].error, CCC_ERR_MISMATCH);
    return false;
  }

  /* Rank p's mailbox slot for this channel and launch (slots alternate by launch parity, so a
   * rank that has moved on to its next launch never overwrites what a slower peer may still be
   * reading). */
  CCC_FN ccc_buffers* mailbox(int p) const {
    return state_[p].mailbox + 2 * channel_ + static_cast<int>((base_ >> 40) & 1);
  }

  /* Makes the buffers of every rank that the passes from *first up to the next wait read known
   * to the block (copy_passes runs them at once), reading the mailbox of each peer this launch
   * has not touched yet: the mailboxes of every pass from
   * *first up to the next wait or publish at once, one round trip for all of them instead of one
   * per pass (a one-shot ll send is a pass per peer). Every peer read is ordered after the
   * peer's "entered" by the sync plan's waits (directly or through a chain of waits), and the
   * mailbox was written before it, so the slot holds this launch's buffers; the passes up to the
   * next wait are ordered by the same waits as *first, so reading their peers' slots now is as
   * safe as when they run. Uniform across the block: peers_ is shared and only changes between
   * barriers. False if a peer's call differs. */
  template <int S, class Map>
  CCC_FN bool load_peers(const Instr<S>* first, const Map& map) {
    // The ranks whose buffers pass i touches: its sources', except receive regions (this rank's
    // own, named by their producer), and a send's destination (protocol ll: the producer waited
    // for that rank's entry before its first send).
    auto touched = [&](const Instr<S>& i, int k) {
      const Ref& ref = k < i.sources ? i.src[k] : i.dst;
      const bool own_region = k < i.sources && ref.buffer == buffer_ll;
      const bool own_dst = k == i.sources && ref.buffer != buffer_ll;
      return own_region || own_dst ? rank_ : map.peer(ref.rank);
    };
    bool missing = false;
    CCC_ROLLED
    for (const Instr<S>* i = first; i->code == instr_pass && !missing; ++i) {
      CCC_ROLLED
      for (int k = 0; k <= i->sources; ++k) missing = missing || peers_[touched(*i, k)].call == 0;
    }
    if (!missing) return true;
    barrier();  // every thread has read the flags before any is filled in
    // Rank p's mailbox (and registry lookup) is read by thread p % block_threads(): the peers'
    // round trips are in flight together, and each entry of peers_ has one writer.
    bool ok = true;
    CCC_ROLLED
    for (int p = static_cast<int>(thread_index()); p < Cfg::ranks && ok; p += static_cast<int>(block_threads())) {
      if (peers_[p].call != 0) continue;
      bool needed = false;
      CCC_ROLLED
      for (const Instr<S>* i = first; i->code == instr_pass && !needed; ++i) {
        CCC_ROLLED
        for (int k = 0; k <= i->sources && !needed; ++k) needed = touched(*i, k) == p;
      }
      if (!needed) continue;
      const ccc_buffers* slot = mailbox(p);
      ccc_buffers b;
      b.input = slot->input;
      b.output = slot->output;
      b.scratch = slot->scratch;
      b.ll = slot->ll;
      b.call = load_relaxed(&slot->call);  // as same_call reads it (publish)
      if (b.call != stamp()) {
        record_error(state_[rank_].error, CCC_ERR_MISMATCH);
        ok = false;
      } else if (!reach(p, b)) {
        record_error(state_[rank_].error, CCC_ERR_UNREGISTERED);
        ok = false;
      } else {
        peers_[p] = b;
      }
    }
    return barrier_and(ok);
  }

  /* Makes peer p's input and output usable here: as they are without a registry (ccc_abi.h) or
   * in the shared arena, else translated through the registry's entry for p that covers them.
   * False when one lies in neither (the peer passed memory this process cannot reach). Scratch
   * and ll are always the runtime's arena memory. */
  CCC_FN bool reach(int p, ccc_buffers& b) const {
    const ccc_registry* registry = state_[rank_].registry;
    if (registry == nullptr) return true;
    unsigned long long address[2] = {reinterpret_cast<unsigned long long>(b.input),
                                     reinterpret_cast<unsigned long long>(b.output)};
    CCC_ROLLED
    for (int a = 0; a < 2; ++a)
      if (!translate(*registry, p, address[a])) return false;
    b.input = reinterpret_cast<const void*>(address[0]);
    b.output = reinterpret_cast<void*>(address[1]);
    return true;
  }
  static CCC_FN bool translate(const ccc_registry& registry, int owner, unsigned long long& address) {
    // Null is never read (a non-root broadcast's input); the unsigned differences test both ends.
    if (address == 0 || address - registry.shared_base < registry.shared_bytes) return true;
    CCC_ROLLED
    for (unsigned e = 0; e < registry.count; ++e) {
      const ccc_registration& r = registry.entries[e];
      if (r.owner == owner && address - r.owner_base < r.bytes) {
        address = r.local_base + (address - r.owner_base);
        return true;
      }
    }
    return false;
  }

  ccc_buffers* peers_;  // [ranks] in block-shared memory: the buffers of each rank this launch reads
  ccc_buffers own_;
  ccc_epilogue_args epilogue_;  // epilogue kernels' operands (ccc_abi.h), else zeros
};

}  // namespace ccc

#endif /* CCC_PEER_TABLE_H */
