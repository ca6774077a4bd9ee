#include "verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "dependencies.h"
#include "describe.h"

namespace ccc {

namespace {

constexpr int kMaxReported = 8;
// Wrong (rank, chunk) pairs whose causes are worked out, to show the kMaxReported that went wrong
// first: each costs a run of its chunk.
constexpr int kMaxExamined = 32;

// ---------------------------------------------------------------------------------------------
// Structure

}  // namespace

bool check_structure(const StepProgram& p, Diagnostics& d) {
  const int N = p.nranks;
  const int64_t C = p.nchunks;
  if (N < 1 || C < 1 || p.nscratch < 0) {
    d.error(p.loc, fmt::format("a step program needs at least one rank and one chunk (N = {}, {} chunks, {} scratch)",
                               N, C, p.nscratch));
    return false;
  }
  if (static_cast<int>(p.ops.size()) != N) {
    d.error(p.loc, "malformed step program: ops has no list per rank");
    return false;
  }
  for (const auto& rank : p.ops)
    if (rank.size() != p.steps.size()) {
      d.error(p.loc, "malformed step program: ranks have different step counts");
      return false;
    }
  if (p.num_ops() > kMaxAnalysedOps) {
    d.error(p.loc, fmt::format("schedule '{}' has {} ops for N = {}; verification and sync planning are limited "
                               "to {} (4 Mi) ops",
                            p.schedule, p.num_ops(), N, kMaxAnalysedOps));
    return false;
  }
  bool ok = true;
  if (blocks(p) > 1 && C % N != 0) {
    d.error(p.loc, fmt::format("{} needs a chunk count that is a multiple of N: {} chunks for {} ranks",
                               collective_name(p.collective), C, N));
    return false;  // chunk positions (remaps) are undefined
  }
  if ((p.collective == Collective::Broadcast || p.collective == Collective::Reduce) &&
      (p.root < 0 || p.root >= N)) {
    d.error(p.loc, fmt::format("{} root {} is not a rank (N = {})", collective_name(p.collective), p.root, N));
    ok = false;
  }
  int reported = 0;
  auto error = [&](SourceLoc loc, std::string msg) {
    ok = false;
    if (reported++ < kMaxReported) d.error(loc, std::move(msg));
  };
  // Destination chunks written in the current step: which op wrote them first, and how.
  const int64_t S = buffer_chunks(p, Buffer::Scratch);
  std::vector<int> seen_step(static_cast<size_t>(C + S), -1);
  std::vector<int> seen_op(static_cast<size_t>(C + S), 0);
  for (int r = 0; r < N; ++r) {
    std::fill(seen_step.begin(), seen_step.end(), -1);
    for (int k = 0; k < p.nsteps(); ++k) {
      const auto& ops = p.ops[r][k];
      for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
        const Op& op = ops[i];
        // Spelled out only for an error: formatting it for every op cost a string per op.
        auto where = [&] { return fmt::format("rank {} {}", r, describe_step(p, k)); };
        if (op.peer < 0 || op.peer >= N) {
          error(op.loc, fmt::format("{} reads from rank {}, which does not exist (N = {})", where(), op.peer, N));
          continue;
        }
        bool in_range = true;
        for (auto [b, range] : {std::pair(op.dst, op.chunks), std::pair(op.src, op.read_chunks())}) {
          const int64_t n = buffer_chunks(p, b);
          if (range.count < 1 || range.begin < 0 || range.end() > n) {
            error(op.loc, fmt::format("{} names {} chunks {}..{}, outside 0..{}", where(), buffer_name(b), range.begin,
                                      range.end() - 1, n - 1));
            in_range = false;
            break;
          }
        }
        if (!in_range) continue;
        if (!remap_allowed(p, op.src, op.read_chunks().begin, op.dst, op.chunks.begin)) {
          error(op.loc, fmt::format("{} moves chunk {} onto chunk {}, another position in a block of {} chunks (their "
                                    "sizes may differ)", where(), op.read_chunks().begin, op.chunks.begin, C / blocks(p)));
          continue;
        }
        if (op.dst == Buffer::Input) {
          error(op.loc, fmt::format("{} writes the input buffer, which is read-only", where()));
          continue;
        }
        const size_t base = op.dst == Buffer::Scratch ? static_cast<size_t>(C) : 0;
        for (int64_t c = op.chunks.begin; c < op.chunks.end(); ++c) {
          if (seen_step[base + c] != k) {
            seen_step[base + c] = k;
            seen_op[base + c] = i;
            continue;
          }
          const Op& other = ops[seen_op[base + c]];
          if (op.kind == OpKind::Copy || other.kind == OpKind::Copy) {
            error(op.loc, fmt::format("{} writes {} with a copy and another op in the same step", where(),
                                      describe_chunks(op.dst, {c, 1})));
            if (reported <= kMaxReported) d.note(other.loc, "the other write: " + describe_op(other, r));
            break;
          }
        }
      }
    }
  }
  if (reported > kMaxReported) d.note({}, fmt::format("{} more such errors", reported - kMaxReported));
  return ok;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Symbolic execution

constexpr int32_t kDefined = -1;
constexpr int32_t kNeverWritten = -2;

// Where an undefined value came from: `reader` read `buffer` chunk `chunk` of rank `owner` before
// anything was written there.
struct UndefOrigin {
  OpRef reader;
  int owner = 0;
  Buffer buffer = Buffer::Output;
  int64_t chunk = 0;
};

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Which ranks must contribute to rank r's final chunk c, or nothing when the chunk is don't-care.
// Transpose (alltoall): exactly the chunk transposed(r, c) of rank chunk_owner(c).
enum class Expect { DontCare, All, Owner, Root, Transpose };
Expect expected(const StepProgram& p, int rank, int64_t chunk) {
  if (!output_holds_result(p, rank, chunk)) return Expect::DontCare;
  switch (p.collective) {
    case Collective::AllGather: return Expect::Owner;
    case Collective::Broadcast: return Expect::Root;
    case Collective::AllToAll: return Expect::Transpose;
    default: return Expect::All;
  }
}

int chunk_owner(const StepProgram& p, int64_t chunk) {
  return static_cast<int>(chunk / (p.nchunks / p.nranks));
}

// Alltoall: rank r's chunk c (block p, position j) is chunk j of block r of rank p's input.
int64_t transposed(const StepProgram& p, int rank, int64_t chunk) {
  const int64_t per = p.nchunks / p.nranks;
  return rank * per + chunk % per;
}

// The contribution (rank, chunk) that a chunk of the result must hold alone, for the collectives
// whose result is one rank's data; nullopt for reductions.
std::optional<std::pair<int, int64_t>> sole_contribution(const StepProgram& p, Expect want, int rank, int64_t chunk) {
  switch (want) {
    case Expect::Owner: return std::pair(chunk_owner(p, chunk), chunk);
    case Expect::Root: return std::pair(p.root, chunk);
    case Expect::Transpose: return std::pair(chunk_owner(p, chunk), transposed(p, rank, chunk));
    default: return std::nullopt;
  }
}

// Chunks of the widest buffer: symbolic execution's window over all of them.
int64_t chunk_space(const StepProgram& p) { return std::max(p.nchunks, p.nscratch); }

// True when some op moves a chunk to another index: chunks then mix, and symbolic execution
// must run over all of them at once instead of one chunk at a time.
bool remaps(const StepProgram& p) {
  for (const auto& rank : p.ops)
    for (const auto& step : rank)
      for (const Op& op : step)
        if (op.shift != 0) return true;
  return false;
}

// Hashed multiset: sum of per-(q, c) keys and the number of contributions.
struct HashValue {
  uint64_t sum = 0;
  uint64_t count = 0;
  int32_t undef = kDefined;
};

struct HashDomain {
  using Value = HashValue;
  const StepProgram& p;
  uint64_t key(int q, int64_t c) const { return mix64(static_cast<uint64_t>(q) * static_cast<uint64_t>(p.nchunks) + c); }
  Value initial(int rank, int64_t c) const { return {key(rank, c), 1, kDefined}; }
  static Value undefined() { return {0, 0, kNeverWritten}; }
  static void add(Value& acc, const Value& v) {
    acc.sum += v.sum;
    acc.count += v.count;
    if (acc.undef == kDefined) acc.undef = v.undef;
  }
  static void wrote(Value&, const OpRef&, OpKind) {}
};

constexpr OpRef kNoOp{};  // step -1

// Exact multiset of one chunk: how many times each contribution (rank, chunk) is in it, and where
// the value came from, so an error can point at the op that went wrong rather than the last one
// to write.
struct ExactValue {
  std::map<std::pair<int, int64_t>, uint64_t> count;
  int32_t undef = kDefined;
  OpRef made = kNoOp;          // the reduce that computed this value (copies pass it on)
  OpRef first_double = kNoOp;  // the earliest reduce in its making that counted a rank twice
};

// The op (of two, either may be none) that runs first.
OpRef earlier(const OpRef& a, const OpRef& b) {
  if (a.step < 0) return b;
  if (b.step < 0) return a;
  return std::tie(b.step, b.rank, b.op) < std::tie(a.step, a.rank, a.op) ? b : a;
}

struct ExactDomain {
  using Value = ExactValue;
  // The value the collective wants in the chunk being run; empty when not tracked (a program
  // that remaps runs every chunk at once).
  std::map<std::pair<int, int64_t>, uint64_t> complete;
  // The fullest value written anywhere that is part of the complete one (no contribution twice,
  // none foreign): its number of contributions, and the last reduce that made such a value and
  // the last copy that passed one on.
  uint64_t fullest = 0;
  OpRef fullest_made = kNoOp;
  OpRef fullest_passed = kNoOp;

  static Value initial(int rank, int64_t c) { return {{{{rank, c}, 1}}, kDefined}; }
  static Value undefined() { return {{}, kNeverWritten}; }
  static void add(Value& acc, const Value& v) {
    for (const auto& [key, n] : v.count) {
      uint64_t& a = acc.count[key];
      a = n > UINT64_MAX - a ? UINT64_MAX : a + n;
    }
    if (acc.undef == kDefined) acc.undef = v.undef;
    acc.first_double = earlier(acc.first_double, v.first_double);
  }
  // `v` is what op `ref` (of kind `kind`) writes, so far in its step.
  void wrote(Value& v, const OpRef& ref, OpKind kind) {
    if (kind == OpKind::Reduce) {
      v.made = ref;
      if (v.first_double.step < 0 &&
          std::any_of(v.count.begin(), v.count.end(), [](const auto& kv) { return kv.second > 1; }))
        v.first_double = ref;
    }
    if (v.undef != kDefined || complete.empty()) return;
    uint64_t n = 0;
    for (const auto& [key, count] : v.count) {
      const auto want = complete.find(key);
      if (count > (want == complete.end() ? 0 : want->second)) return;
      n += count;
    }
    if (n < fullest) return;
    if (n > fullest) {
      fullest = n;
      fullest_made = fullest_passed = kNoOp;
    }
    (kind == OpKind::Reduce ? fullest_made : fullest_passed) = ref;
  }
};

// The writer of a location's current value; step -1 = none yet.
struct LastWriter {
  int32_t step = -1;
  int32_t op = -1;
};

// Lock-step execution of chunks [lo, hi) of every rank and buffer.
template <class Domain>
class Executor {
 public:
  using Value = typename Domain::Value;

  Executor(const StepProgram& p, Domain domain, int64_t lo, int64_t hi)
      : p_(p), dom_(std::move(domain)), lo_(lo), width_(hi - lo) {
    const size_t n = static_cast<size_t>(p.nranks) * 3 * static_cast<size_t>(width_);
    cur_.reserve(n);
    for (int r = 0; r < p.nranks; ++r)
      for (int b = 0; b < 3; ++b)
        for (int64_t c = lo; c < hi; ++c)
          cur_.push_back(b != static_cast<int>(Buffer::Scratch) && c < p.nchunks && input_holds(p, r, c)
                             ? dom_.initial(r, c)
                             : dom_.undefined());
    last_.assign(n, LastWriter{});
    pend_step_.assign(n, -1);
    pend_index_.assign(n, 0);
    pend_op_.assign(n, 0);
  }

  // Runs the steps up to `last` (all by default).
  void run(int last = INT_MAX) {
    for (int k = 0; k < p_.nsteps() && k <= last; ++k) {
      pending_.clear();
      for (int r = 0; r < p_.nranks; ++r) {
        const auto& ops = p_.ops[r][k];
        for (int i = 0; i < static_cast<int>(ops.size()); ++i) execute(ops[i], OpRef{r, k, i});
      }
      for (auto& [loc, v] : pending_) {
        cur_[loc] = std::move(v);
        last_[loc] = {k, pend_op_[loc]};
      }
    }
  }

  const Value& value(int rank, Buffer b, int64_t c) const { return cur_[index(rank, b, c)]; }
  LastWriter last_writer(int rank, Buffer b, int64_t c) const { return last_[index(rank, b, c)]; }
  const std::vector<UndefOrigin>& origins() const { return origins_; }
  const Domain& domain() const { return dom_; }

 private:
  size_t index(int rank, Buffer b, int64_t c) const {
    return (static_cast<size_t>(rank) * 3 + static_cast<size_t>(b)) * static_cast<size_t>(width_) +
           static_cast<size_t>(c - lo_);
  }

  Value read(int owner, Buffer b, int64_t c, const OpRef& reader) {
    Value v = cur_[index(owner, b, c)];
    if (v.undef == kNeverWritten) {
      v.undef = static_cast<int32_t>(origins_.size());
      origins_.push_back({reader, owner, b, c});
    }
    return v;
  }

  // A remapping program runs over every chunk at once (remaps()), so c + shift is in the window.
  void execute(const Op& op, const OpRef& ref) {
    const int64_t begin = std::max(op.chunks.begin, lo_);
    const int64_t end = std::min(op.chunks.end(), lo_ + width_);
    for (int64_t c = begin; c < end; ++c) {
      Value src = read(op.peer, op.src, c + op.shift, ref);
      const size_t dst = index(ref.rank, op.dst, c);
      if (pend_step_[dst] == ref.step) {  // a further reduce into the same chunk this step
        Value& v = pending_[pend_index_[dst]].second;
        Domain::add(v, src);
        dom_.wrote(v, ref, op.kind);
        continue;
      }
      pend_step_[dst] = ref.step;
      pend_index_[dst] = pending_.size();
      pend_op_[dst] = ref.op;
      if (op.kind == OpKind::Copy) {
        pending_.emplace_back(dst, std::move(src));
      } else {
        Value v = read(ref.rank, op.dst, c, ref);
        Domain::add(v, src);
        pending_.emplace_back(dst, std::move(v));
      }
      dom_.wrote(pending_.back().second, ref, op.kind);
    }
  }

  const StepProgram& p_;
  Domain dom_;
  int64_t lo_;
  int64_t width_;
  std::vector<Value> cur_;
  std::vector<LastWriter> last_;
  std::vector<int32_t> pend_step_;
  std::vector<size_t> pend_index_;
  std::vector<int32_t> pend_op_;
  std::vector<std::pair<size_t, Value>> pending_;
  std::vector<UndefOrigin> origins_;
};

// ---------------------------------------------------------------------------------------------
// Diagnostics for a wrong final chunk

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  const size_t shown = std::min<size_t>(ranks.size(), 6);
  for (size_t i = 0; i < shown; ++i) out += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  if (ranks.size() > shown) out += fmt::format(" and {} more", ranks.size() - shown);
  return out;
}

std::string contributions(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? fmt::format("the contribution of rank {}", ranks[0])
                           : fmt::format("the contributions of ranks {}", rank_list(ranks));
}

// What is wrong with an exact final value, e.g. "missing the contribution of rank 1". A
// contribution names its rank, and its chunk where that is not the chunk checked (a remap moved
// it: "holding rank 2's chunk 5, which belongs elsewhere").
std::string what_is_wrong(const StepProgram& p, Expect want, int rank, int64_t chunk, const ExactValue& v) {
  std::vector<int> missing, doubled;
  std::vector<std::pair<int, int64_t>> foreign;
  const auto sole = sole_contribution(p, want, rank, chunk);
  auto count = [&](std::pair<int, int64_t> key) {
    auto it = v.count.find(key);
    return it == v.count.end() ? uint64_t{0} : it->second;
  };
  for (int q = 0; q < p.nranks; ++q) {
    const std::pair<int, int64_t> key = sole ? *sole : std::pair(q, chunk);
    if (key.first != q) continue;
    uint64_t n = count(key);
    if (n == 0) missing.push_back(q);
    if (n > 1) doubled.push_back(q);
  }
  for (const auto& [key, n] : v.count)
    if (n > 0 && (sole ? key != *sole : key.second != chunk)) foreign.push_back(key);
  std::vector<std::string> parts;
  if (!missing.empty()) {
    parts.push_back("missing " + contributions(missing));
    // Where data moves between chunks (alltoall), say which chunk of the rank is missing.
    if (sole && (want == Expect::Transpose || sole->second != chunk)) parts.back() += fmt::format("'s chunk {}", sole->second);
  }
  if (doubled.size() == 1)
    parts.push_back(fmt::format("holding the contribution of rank {} {} times", doubled[0],
                                count(sole ? *sole : std::pair(doubled[0], chunk))));
  else if (!doubled.empty())
    parts.push_back("holding " + contributions(doubled) + " more than once");
  for (size_t i = 0; i < foreign.size() && i < 4; ++i)
    parts.push_back(fmt::format("holding rank {}'s chunk {}, which belongs elsewhere", foreign[i].first, foreign[i].second));
  if (foreign.size() > 4) parts.push_back(fmt::format("and {} more contributions that belong elsewhere", foreign.size() - 4));
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

// A read in the same step as the write it needed: `reader` reads `buffer` chunk `chunk` of rank
// `owner` at step `reader.step`, and `writer` (an op of `owner`) writes it in that same step.
// Lock-step reads see the value from before the step, so the reader gets the old value.
struct EarlyRead {
  OpRef reader;
  OpRef writer;
  Buffer buffer = Buffer::Output;
  int64_t chunk = 0;
};

// Follows the value a rank ends with in one chunk back through the ops that made it, and
// returns the earliest read among them that happens in the very step its source is written.
// Only the program's structure is walked (which op last wrote a location before a step), each
// (rank, buffer, step) once, and at most kMaxVisited of them: bounded on any program.
class EarlyReadSearch {
 public:
  explicit EarlyReadSearch(const StepProgram& p) : p_(p) {}

  // A location (rank, buffer, chunk): remaps make a value's history cross chunks.
  using Loc = std::tuple<int, Buffer, int64_t>;

  std::optional<EarlyRead> from(int rank, Buffer buffer, int64_t chunk) {
    std::optional<EarlyRead> earliest;
    std::vector<std::pair<Loc, int>> todo{{{rank, buffer, chunk}, p_.nsteps()}};
    std::set<std::pair<Loc, int>> seen;
    while (!todo.empty() && seen.size() < kMaxVisited) {
      auto [at, time] = todo.back();
      todo.pop_back();
      if (!seen.insert({at, time}).second) continue;
      const auto [r, b, c] = at;
      // The ops of the last step before `time` that wrote (r, b, c): several reduces may share it.
      const std::vector<OpRef>& w = writes(at);
      auto end = std::lower_bound(w.begin(), w.end(), time, [](const OpRef& o, int t) { return o.step < t; });
      if (end == w.begin()) continue;  // never written before: the rank's input, or undefined
      const int step = std::prev(end)->step;
      for (auto it = std::prev(end); it->step == step; --it) {
        const Op& op = p_.ops[r][step][it->op];
        const Loc source{op.peer, op.src, c + op.shift};
        if (std::optional<OpRef> writer = writer_in(source, step); writer && op.peer != r) {
          if (!earliest || step < earliest->reader.step) earliest = EarlyRead{*it, *writer, op.src, c + op.shift};
        }
        todo.emplace_back(source, step);
        if (op.kind == OpKind::Reduce) todo.emplace_back(at, step);
        if (it == w.begin()) break;
      }
    }
    return earliest;
  }

 private:
  static constexpr size_t kMaxVisited = size_t{1} << 20;

  // The ops writing a location, by step; found once per location by a scan of its rank's ops.
  const std::vector<OpRef>& writes(const Loc& at) {
    auto [it, fresh] = writes_.try_emplace(at);
    if (!fresh) return it->second;
    const auto [r, b, c] = at;
    for (int k = 0; k < p_.nsteps(); ++k)
      for (int i = 0; i < static_cast<int>(p_.ops[r][k].size()); ++i) {
        const Op& op = p_.ops[r][k][i];
        if (op.dst == b && op.chunks.begin <= c && c < op.chunks.end()) it->second.push_back({r, k, i});
      }
    return it->second;
  }

  // The op that writes `at` at `step`, if any.
  std::optional<OpRef> writer_in(const Loc& at, int step) {
    const std::vector<OpRef>& w = writes(at);
    auto it = std::lower_bound(w.begin(), w.end(), step, [](const OpRef& o, int t) { return o.step < t; });
    if (it == w.end() || it->step != step) return std::nullopt;
    return *it;
  }

  const StepProgram& p_;
  std::map<Loc, std::vector<OpRef>> writes_;
};

class PostconditionCheck {
  // Chunk c run exactly: every rank's final value, and where the complete value was last left.
  struct ExactChunk {
    std::vector<ExactValue> final;  // per rank
    uint64_t complete = 0;          // contributions in the complete value
    uint64_t fullest = 0;           // see ExactDomain
    OpRef fullest_made, fullest_passed;
  };

 public:
  PostconditionCheck(const StepProgram& p, const Executor<HashDomain>& run, Diagnostics& d)
      : p_(p), run_(run), out_(d), keys_{p} {
    all_sum_.assign(p.nchunks, 0);
    for (int q = 0; q < p.nranks; ++q)
      for (int64_t c = 0; c < p.nchunks; ++c) all_sum_[c] += keys_.key(q, c);
  }

  // Reports the wrong (rank, chunk) pairs that went wrong first: of the first kMaxExamined,
  // ordered by the step of the op each error points at (a value a later phase faithfully copied
  // on is wrong there too, but was made wrong earlier), the first kMaxReported. The first one
  // shown also says where its op got its values (explain).
  bool check() {
    int64_t wrong = 0;
    std::vector<Finding> findings;
    for (int r = 0; r < p_.nranks; ++r)
      for (int64_t c = 0; c < p_.nchunks; ++c) {
        Expect want = expected(p_, r, c);
        if (want == Expect::DontCare || holds(want, r, c)) continue;
        if (wrong++ >= kMaxExamined) continue;
        Finding& f = findings.emplace_back();
        finding_ = &f;
        d_ = &f.diags;
        report(want, r, c);
      }
    std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) { return a.order < b.order; });
    for (size_t i = 0; i < findings.size() && i < static_cast<size_t>(kMaxReported); ++i) {
      for (const Diagnostic& d : findings[i].diags.all())
        (d.severity == Severity::Error ? out_.error(d.loc, d.message) : out_.note(d.loc, d.message));
      if (i == 0 && findings[i].cause.step >= 0 && p_.provenance)
        p_.provenance->explain(findings[i].cause.rank, findings[i].cause.step, op_at(findings[i].cause), out_);
    }
    if (wrong > kMaxReported)
      out_.note({}, fmt::format("{} more (rank, chunk) pairs are wrong; the {} shown are those that went wrong first",
                                wrong - kMaxReported, kMaxReported));
    return wrong == 0;
  }

 private:
  bool holds(Expect want, int r, int64_t c) const {
    const HashValue& v = run_.value(r, Buffer::Output, c);
    if (v.undef != kDefined) return false;
    switch (want) {
      case Expect::All: return v.count == static_cast<uint64_t>(p_.nranks) && v.sum == all_sum_[c];
      case Expect::Owner:
      case Expect::Root:
      case Expect::Transpose: {
        const auto [q, qc] = *sole_contribution(p_, want, r, c);
        return v.count == 1 && v.sum == keys_.key(q, qc);
      }
      case Expect::DontCare: return true;
    }
    return true;
  }

  void report(Expect want, int r, int64_t c) {
    const HashValue& v = run_.value(r, Buffer::Output, c);
    LastWriter w = run_.last_writer(r, Buffer::Output, c);
    const Op* writer = w.step >= 0 ? &p_.ops[r][w.step][w.op] : nullptr;
    SourceLoc at = writer ? writer->loc : p_.loc;  // no op wrote it: the schedule as a whole is wrong
    std::string head = fmt::format("rank {} ends with chunk {}", r, c);
    if (v.undef != kNeverWritten) {
      if (std::optional<EarlyRead> early = EarlyReadSearch(p_).from(r, Buffer::Output, c);
          early && (v.undef != kDefined || later_read_supplies(*early, want, r, c))) {
        report_early_read(*early, head + " " + (v.undef == kDefined ? what_is_wrong(p_, want, r, c, exact(c, want).final[r])
                                                                    : "undefined"));
        note_writer(r, w, writer);
        explain(early->reader);
        return;
      }
    }
    if (v.undef == kNeverWritten) {
      d_->error(at, head + " undefined: nothing ever writes it");
      note_writes_elsewhere(r, c);
      return;
    }
    if (v.undef != kDefined) {
      const UndefOrigin& o = run_.origins()[v.undef];
      d_->error(at, fmt::format("{} undefined: it is computed from {} of rank {}, which rank {} reads at {} before "
                               "anything is written there",
                               head, describe_chunks(o.buffer, {o.chunk, 1}), o.owner, o.reader.rank,
                               describe_step(p_, o.reader.step)));
      note_writer(r, w, writer);
      const Op& reader = p_.ops[o.reader.rank][o.reader.step][o.reader.op];
      d_->note(reader.loc, fmt::format("the undefined read: rank {}: {}", o.reader.rank, describe_op(reader, o.reader.rank)));
      explain(o.reader);
      return;
    }
    const ExactChunk& x = exact(c, want);
    const std::string wrong = head + " " + what_is_wrong(p_, want, r, c, x.final[r]);
    std::optional<Blame> b = blame(x, r, c, w);
    d_->error(b ? op_at(b->op).loc : at, b ? wrong + "; " + b->why : wrong);
    note_writer(r, w, writer);
    if (b) explain(b->op, b->undelivered);
    else if (writer) explain({r, w.step, w.op});
    else note_writes_elsewhere(r, c);  // it still holds the rank's input
  }

  // Whether the read `e` found, made a step later, would bring a contribution that rank r's
  // chunk c misses: only then is reading too early the cause (a recursive doubling one step short
  // reads its partner's old value by design; what it misses, no later read of that value has).
  bool later_read_supplies(const EarlyRead& e, Expect want, int r, int64_t c) {
    const ExactValue& final = exact(c, want).final[r];
    std::vector<std::pair<int, int64_t>> missing;
    for (int q = 0; q < p_.nranks; ++q) {
      const auto sole = sole_contribution(p_, want, r, c);
      const std::pair<int, int64_t> key = sole ? *sole : std::pair(q, c);
      if ((!sole || key.first == q) && !final.count.contains(key)) missing.push_back(key);
    }
    if (missing.empty()) return true;  // wrong otherwise (a contribution twice, a foreign one)
    const bool narrow = !remaps(p_) && e.chunk < p_.nchunks;
    Executor<ExactDomain> run(p_, ExactDomain{}, narrow ? e.chunk : 0, narrow ? e.chunk + 1 : chunk_space(p_));
    run.run(e.reader.step);
    const ExactValue& written = run.value(e.writer.rank, e.buffer, e.chunk);
    return std::any_of(missing.begin(), missing.end(), [&](const auto& key) { return written.count.contains(key); });
  }

  // Output chunk c of rank r is never written (undefined, or still the rank's input): the writes
  // that may have been meant for it. One of the rank's own into another buffer at that chunk (a
  // reduce into scratch instead of the output), else the last op that writes that chunk on
  // another rank (a loop that stops short of this rank; its step loop and conditions are then
  // explained).
  void note_writes_elsewhere(int r, int64_t c) {
    std::optional<OpRef> elsewhere;
    for (int k = 0; k < p_.nsteps(); ++k)
      for (int i = 0; i < static_cast<int>(p_.ops[r][k].size()); ++i)
        if (const Op& op = p_.ops[r][k][i]; op.dst != Buffer::Output && op.chunks.contains(c)) {
          d_->note(op.loc, fmt::format("rank {} writes chunk {} of its {} instead, at {}: {}", r, c, buffer_name(op.dst),
                                       describe_step(p_, k), describe_op(op, r)));
          return explain({r, k, i});
        }
    for (int q = 0; q < p_.nranks; ++q)
      for (int k = 0; k < p_.nsteps(); ++k)
        for (int i = 0; q != r && i < static_cast<int>(p_.ops[q][k].size()); ++i)
          if (const Op& op = p_.ops[q][k][i]; op.dst == Buffer::Output && op.chunks.contains(c) &&
                                              (!elsewhere || k > elsewhere->step))
            elsewhere = OpRef{q, k, i};
    if (!elsewhere) return;
    const Op& op = op_at(*elsewhere);
    d_->note(op.loc, fmt::format("other ranks' output chunk {} is written by ops such as rank {}'s at {}: {}", c,
                                 elsewhere->rank, describe_step(p_, elsewhere->step), describe_op(op, elsewhere->rank)));
    explain(*elsewhere, true);
  }

  // Where rank r's wrong final chunk c went wrong, when that is not its last write (which the
  // note names): the first reduce that counted a contribution twice; else, for a value that
  // misses contributions, the last op that left the complete chunk somewhere (it did not reach
  // this rank) or, if the complete chunk never exists, the last reduce that made the fullest
  // part of it (the reduction fell short there); else the reduce that computed the value this
  // rank ends with (later ops only copied it). A bug early in a multi-phase schedule is reported there, not on a later phase
  // that faithfully moved the wrong value.
  struct Blame {
    OpRef op;
    std::string why;
    bool undelivered = false;  // op left a right value that never reached the rank (see explain)
  };
  std::optional<Blame> blame(const ExactChunk& x, int r, int64_t c, LastWriter w) const {
    const ExactValue& v = x.final[r];
    const OpRef last{r, w.step, w.op};
    auto at = [&](const OpRef& o) {
      return fmt::format("{} by rank {}: {}", describe_step(p_, o.step), o.rank, describe_op(op_at(o), o.rank));
    };
    if (v.first_double.step >= 0) {
      if (v.first_double == last) return std::nullopt;
      return Blame{v.first_double, fmt::format("it first counts a contribution twice at {}", at(v.first_double))};
    }
    const bool copied_input = v.made.step < 0 && w.step >= 0 && op_at(last).kind == OpKind::Copy;
    if (x.fullest == x.complete && !copied_input) {
      // The complete value existed: where it was last passed on (or made) is where the schedule
      // stopped bringing it to this rank. (A rank that ends with a copy of some rank's input
      // was given the wrong value by that copy: the last writer stays the error.)
      const bool passed = x.fullest_passed.step >= 0;
      if (const OpRef o = passed ? x.fullest_passed : x.fullest_made; o.step >= 0)
        return Blame{o, fmt::format("the complete chunk {} was last {} at {}, and rank {} does not end with it", c,
                                    passed ? "passed on" : "made", at(o), r), true};
    }
    if (x.fullest < x.complete && x.fullest_made.step >= 0 && !(x.fullest_made == last))
      return Blame{x.fullest_made, fmt::format("no rank ever holds the complete chunk {}: the fullest value ({} of {} "
                                               "contributions) was last made at {}", c, x.fullest, x.complete,
                                               at(x.fullest_made))};
    if (v.made.step >= 0 && !(v.made == last))
      return Blame{v.made, fmt::format("the value it ends with was computed at {}, and only copied after", at(v.made))};
    return std::nullopt;
  }

  const Op& op_at(const OpRef& o) const { return p_.ops[o.rank][o.step][o.op]; }

  // The op the finding's error points at, whose `let`s, `param`s, loop variables and `if`s the
  // first error shown explains (OpProvenance: a wrong value is mostly computed there, not at the
  // op); and where the value went wrong, which orders the findings: at that op's step, or, for
  // a right value that was not delivered (`undelivered`), at some later step no op marks, so
  // after the findings where an op made something wrong.
  void explain(const OpRef& o, bool undelivered = false) {
    finding_->cause = o;
    finding_->order = undelivered ? p_.nsteps() : o.step;
  }

  // The read that came too early is the bug: the error points there.
  void report_early_read(const EarlyRead& e, const std::string& head) {
    const Op& reader = p_.ops[e.reader.rank][e.reader.step][e.reader.op];
    const Op& writer = p_.ops[e.writer.rank][e.writer.step][e.writer.op];
    d_->error(reader.loc, fmt::format("{}: rank {} reads {} of rank {} at {}, which rank {} writes in that same step; "
                                     "lock-step reads see the old value",
                                     head, e.reader.rank, describe_chunks(e.buffer, {e.chunk, 1}), e.writer.rank,
                                     describe_step(p_, e.reader.step), e.writer.rank));
    d_->note(writer.loc, fmt::format("the write it needed: rank {}: {} (a read in a later step sees it)", e.writer.rank,
                                    describe_op(writer, e.writer.rank)));
  }

  void note_writer(int r, LastWriter w, const Op* writer) {
    if (!writer) {
      d_->note({}, fmt::format("no op writes it: it still holds rank {}'s input", r));
      return;
    }
    d_->note(p_.steps[w.step].loc,
            fmt::format("last written at {} by rank {}: {}", describe_step(p_, w.step), r, describe_op(*writer, r)));
  }

  // Chunk c run exactly: every rank's final value and, for a program that keeps chunks in
  // place, where the complete value was last left. A program that remaps runs every chunk at
  // once, and once, without that.
  const ExactChunk& exact(int64_t c, Expect want) {
    auto it = exact_.find(c);
    if (it == exact_.end()) {
      const bool all = remaps(p_);
      ExactDomain domain;
      if (!all && want == Expect::All)
        for (int q = 0; q < p_.nranks; ++q) domain.complete[{q, c}] = 1;
      if (!all && (want == Expect::Owner || want == Expect::Root))  // the same on every rank
        domain.complete[*sole_contribution(p_, want, 0, c)] = 1;
      uint64_t complete = 0;
      for (const auto& kv : domain.complete) complete += kv.second;
      Executor<ExactDomain> run(p_, std::move(domain), all ? 0 : c, all ? chunk_space(p_) : c + 1);
      run.run();
      const ExactDomain& d = run.domain();
      for (int64_t chunk = all ? 0 : c; chunk < (all ? p_.nchunks : c + 1); ++chunk) {
        ExactChunk x{{}, complete, d.fullest, d.fullest_made, d.fullest_passed};
        for (int q = 0; q < p_.nranks; ++q) x.final.push_back(run.value(q, Buffer::Output, chunk));
        exact_.emplace(chunk, std::move(x));
      }
      it = exact_.find(c);
    }
    return it->second;
  }

  const StepProgram& p_;
  const Executor<HashDomain>& run_;
  // What report() found for one wrong (rank, chunk): its diagnostics, and the op they blame
  // (step -1: none, such as a chunk nothing writes).
  struct Finding {
    Diagnostics diags;
    OpRef cause = kNoOp;
    int order = INT_MAX;  // where it went wrong (explain); none known: last
  };
  Diagnostics& out_;
  Diagnostics* d_ = nullptr;  // where report() writes: the finding being made
  Finding* finding_ = nullptr;
  HashDomain keys_;
  std::vector<uint64_t> all_sum_;
  std::map<int64_t, ExactChunk> exact_;
};

}  // namespace

bool verify(const StepProgram& p, Diagnostics& diags) {
  if (!check_structure(p, diags)) return false;
  Executor<HashDomain> run(p, HashDomain{p}, 0, chunk_space(p));
  run.run();
  return PostconditionCheck(p, run, diags).check();
}

}  // namespace ccc
