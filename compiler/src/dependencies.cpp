#include "dependencies.h"

#include <algorithm>
#include <vector>

namespace ccc {

const char* dep_kind_name(DepKind k) {
  switch (k) {
    case DepKind::Program: return "program";
    case DepKind::RAW: return "RAW";
    case DepKind::WAR: return "WAR";
    case DepKind::WAW: return "WAW";
    case DepKind::Entry: return "entry";
    case DepKind::Exit: return "exit";
  }
  return "?";
}

namespace {

// The op that last (or next) wrote a memory location; step -1 = none. Its DSL line rides along,
// so a dependency on it names its op without a lookup (a cache miss per WAR at large N).
struct Writer {
  int step = -1;
  int op = -1;
  SourceLoc loc;
  bool operator==(const Writer&) const = default;
};

class Analysis {
 public:
  Analysis(const StepProgram& p, bool in_place, const std::function<void(const Dependency&)>& visit)
      : p_(p), in_place_(in_place), visit_(visit),
        stride_(static_cast<size_t>(std::max(p.nchunks, p.nscratch))),
        writers_(static_cast<size_t>(p.nranks) * 3 * stride_) {}

  void forward() {
    for (int k = 0; k < p_.nsteps(); ++k) {
      for (int r = 0; r < p_.nranks; ++r)
        for_each_read(r, k, [&](int i, SourceLoc loc, int owner, Buffer buf, ChunkRange read, bool) {
          runs(owner, buf, read, [&](Writer w, ChunkRange range) {
            if (w.step < 0)
              visit_({{owner, -1, -1}, {r, k, i}, DepKind::Entry, owner, buf, range, {}, loc});
            else
              visit_({{owner, w.step, w.op}, {r, k, i}, DepKind::RAW, owner, buf, range, w.loc, loc});
          });
        });
      // Writes land at the end of the step, after every rank's reads of it.
      for (int r = 0; r < p_.nranks; ++r) {
        const auto& ops = p_.ops[r][k];
        for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
          const Op& op = ops[i];
          runs(r, op.dst, op.chunks, [&](Writer w, ChunkRange range) {
            if (w.step >= 0 && w.step < k)
              visit_({{r, w.step, w.op}, {r, k, i}, DepKind::WAW, r, op.dst, range, w.loc, op.loc});
          });
          assign(r, op.dst, op.chunks, {k, i, op.loc});
        }
      }
    }
  }

  void backward() {
    std::fill(writers_.begin(), writers_.end(), Writer{});
    for (int k = p_.nsteps() - 1; k >= 0; --k) {
      // A step's reads see the state before its writes, so its own writes come next for them.
      for (int r = 0; r < p_.nranks; ++r) {
        const auto& ops = p_.ops[r][k];
        for (int i = static_cast<int>(ops.size()) - 1; i >= 0; --i) assign(r, ops[i].dst, ops[i].chunks, {k, i, ops[i].loc});
      }
      for (int r = 0; r < p_.nranks; ++r)
        for_each_read(r, k, [&](int i, SourceLoc loc, int owner, Buffer buf, ChunkRange read, bool is_dst) {
          runs(owner, buf, read, [&](Writer w, ChunkRange range) {
            if (w.step < 0) {
              visit_({{r, k, i}, {owner, p_.nsteps(), -1}, DepKind::Exit, owner, buf, range, loc, {}});
            } else if (!(is_dst && w.step == k)) {  // a reduce's own update is not a hazard
              visit_({{r, k, i}, {owner, w.step, w.op}, DepKind::WAR, owner, buf, range, loc, w.loc});
            }
          });
        });
    }
  }

 private:
  Buffer memory(Buffer b) const { return in_place_ && b == Buffer::Input ? Buffer::Output : b; }
  size_t index(int owner, Buffer b, int64_t c) const {
    return (static_cast<size_t>(owner) * 3 + static_cast<size_t>(memory(b))) * stride_ + static_cast<size_t>(c);
  }

  // Calls f(op index, op's DSL line, owner, buffer, chunks, is_dst) for every read of step k on
  // rank r: the source (remapped chunks included), and a reduce's destination (its old value).
  template <class F>
  void for_each_read(int r, int k, F&& f) {
    const auto& ops = p_.ops[r][k];
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[i];
      f(i, op.loc, op.peer, op.src, op.read_chunks(), false);
      if (op.kind == OpKind::Reduce) f(i, op.loc, r, op.dst, op.chunks, true);
    }
  }

  // Splits `chunks` into runs with the same recorded writer and calls f(writer, run).
  template <class F>
  void runs(int owner, Buffer b, ChunkRange chunks, F&& f) {
    size_t base = index(owner, b, 0);
    int64_t start = chunks.begin;
    for (int64_t c = chunks.begin + 1; c <= chunks.end(); ++c) {
      if (c == chunks.end() || !(writers_[base + c] == writers_[base + start])) {
        f(writers_[base + start], ChunkRange{start, c - start});
        start = c;
      }
    }
  }

  void assign(int owner, Buffer b, ChunkRange chunks, Writer w) {
    size_t base = index(owner, b, 0);
    for (int64_t c = chunks.begin; c < chunks.end(); ++c) writers_[base + c] = w;
  }

  const StepProgram& p_;
  bool in_place_;
  const std::function<void(const Dependency&)>& visit_;
  size_t stride_;                // chunks per (rank, buffer) slot: the larger of output and scratch
  std::vector<Writer> writers_;  // last writer (forward pass) or next writer (backward pass)
};

}  // namespace

void for_each_dependency(const StepProgram& p, bool in_place,
                         const std::function<void(const Dependency&)>& visit) {
  Analysis a(p, in_place, visit);
  a.forward();
  a.backward();
}

}  // namespace ccc
