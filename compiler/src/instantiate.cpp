#include "instantiate.h"

#include "parser.h"
#include "suggest.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <variant>

namespace ccc {
namespace {

using ast::BinaryOp;
using ast::Expr;

// Thrown on the first instantiation error: later ranks would only repeat it.
struct EvalError {
  SourceLoc loc;
  std::string message;
  SourceLoc note_loc = {};
  std::string note = {};
  bool limit = false;  // a size or work limit was exceeded
};

// The names a schedule's expressions read, by slot: each `let` constant and `param` (with its
// statement) and each `for` variable, with where it is declared. (A `step` variable's value is
// in every step's label already.)
class Provenance {
 public:
  struct Name {
    std::string name;
    SourceLoc loc;
    const ast::LetStmt* let = nullptr;  // null: a loop variable
    const ast::Loop* loop = nullptr;    // null: a let or param
  };

  explicit Provenance(const ast::Schedule& s) { add(s.body); }

  const Name* of(int slot) const {
    auto it = names_.find(slot);
    return it == names_.end() ? nullptr : &it->second;
  }

 private:
  void add(const ast::Block& block) {
    for (const ast::Stmt& st : block) {
      if (const auto* let = std::get_if<ast::LetStmt>(&st.node); let && !let->is_function)
        names_[let->slot] = {let->name, st.loc, let};
      else if (const auto* phase = std::get_if<ast::PhaseStmt>(&st.node)) add(phase->body);
      else if (const auto* step = std::get_if<ast::StepStmt>(&st.node)) add(step->body);
      else if (const auto* loop = std::get_if<ast::ForStmt>(&st.node)) {
        names_[loop->loop.slot] = {loop->loop.var, loop->loop.var_loc, nullptr, &loop->loop};
        add(loop->body);
      }
      else if (const auto* branch = std::get_if<ast::IfStmt>(&st.node)) {
        add(branch->then_body);
        add(branch->else_body);
      }
    }
  }

  std::map<int, Name> names_;
};

// What makes a step the same step on every rank.
struct StepKey {
  SourceLoc loc;
  int phase = 0;
  bool has_var = false;
  int64_t var = 0;
  friend bool operator==(const StepKey&, const StepKey&) = default;
};

// A limit as messages show it: "16777216 (16 Mi)".
std::string count(int64_t n) {
  constexpr int64_t kMi = int64_t{1} << 20;
  return n % kMi == 0 ? fmt::format("{} ({} Mi)", n, n / kMi) : std::to_string(n);
}

int64_t euclid_div(int64_t a, int64_t b) {
  int64_t q = a / b, m = a % b;
  if (m < 0) q += b > 0 ? -1 : 1;
  return q;
}
int64_t euclid_mod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m < 0) m += b > 0 ? b : -b;
  return m;
}

class Instantiator {
 public:
  Instantiator(const ast::Schedule& s, const InstantiateOptions& o, const SourceFile& f, Diagnostics& d)
      : s_(s), opts_(o), diags_(d) {
    prog_.file = f.name;
  }

  std::optional<StepProgram> run() {
    const int n = opts_.nranks;
    if (!start()) return std::nullopt;
    try {
      if (!s_.rank_uniform_shape) count_all_ranks();
      for (rank_ = 0; rank_ < n; ++rank_) {
        run_rank();
        if (rank_ == 0) check_size_from_rank0();
      }
      // After every rank has run: pushes from later ranks add ops to earlier ones.
      for (rank_ = 0; rank_ < n; ++rank_)
        for (int k = 0; k < prog_.nsteps(); ++k) check_step_writes(k);
    } catch (const EvalError& e) {
      diags_.error(e.loc, e.message);
      if (!e.note.empty()) diags_.note(e.note_loc, e.note);
      return std::nullopt;
    }
    if (diags_.has_errors()) return std::nullopt;
    return std::move(prog_);
  }

  // Runs rank `rank` alone up to its op `op` of step `step` (a push: the sender's, rank
  // op.peer) and returns the notes on where the op's chunk and peer came from (OpProvenance).
  // Rank `rank` defines the steps as rank 0 does in run(): the schedule instantiated before, so
  // every rank walks the same steps.
  std::vector<Diagnostic> explain(int rank, int step, const Op& op, const Provenance& names) {
    explaining_ = {&op, step, &names};
    explaining_->reader = rank;
    for (const int who : {rank, op.peer}) {  // a pull runs on the reader, a push on the sender
      prog_ = {};
      step_keys_.clear();
      if (!start()) return {};
      rank_ = who;
      try {
        run_rank();
      } catch (const Explained&) {
        return std::move(explaining_->notes);
      } catch (const EvalError&) {
      }
    }
    return {};
  }

 private:
  // What every run starts from: N, root and the parameters checked, the fixed slots set.
  bool start() {
    const int n = opts_.nranks;
    if (n < 1 || n > kMaxRanks) {
      diags_.error(s_.loc, fmt::format("rank count {} is out of range: N must be 1 .. {}", n, kMaxRanks));
      return false;
    }
    bool rooted = s_.slot_root >= 0;
    if (rooted && (opts_.root < 0 || opts_.root >= n)) {
      diags_.error(s_.loc, fmt::format("root {} is out of range for N = {} (0 .. {})", opts_.root, n, n - 1));
      return false;
    }
    prog_.schedule = s_.name;
    prog_.loc = s_.loc;
    prog_.collective = s_.collective;
    prog_.root = rooted ? opts_.root : -1;
    prog_.nranks = n;
    prog_.ops.resize(static_cast<size_t>(n));
    slots_.assign(static_cast<size_t>(s_.num_slots), 0);
    slots_[s_.slot_n] = n;
    if (rooted) slots_[s_.slot_root] = opts_.root;
    return check_defines();
  }

  // The rank that records the steps (and the counts every rank must agree with): rank 0, or the
  // one rank being explained.
  bool defining() const { return rank_ == 0 || explaining_.has_value(); }

  // ---- provenance (explain) ----

  struct Explained {};

  // The op statement `n` at `loc` ran: if it is the op being explained, notes where its values
  // came from and stops the run.
  void explain_op(const ast::OpStmt& n, SourceLoc loc, int64_t first, int64_t to, int64_t peer) {
    Explaining& x = *explaining_;
    const bool pull = !n.push && rank_ == x.reader && peer == x.op->peer;
    const bool push = n.push && rank_ == x.op->peer && peer == x.reader;
    if (step_ != x.step || !(loc == x.op->loc) || !(pull || push) || !x.op->chunks.contains(to) ||
        first - to != x.op->shift)
      return;
    const std::string where = fmt::format("for rank {} at step {} ({})", rank_, step_, prog_.steps[step_].label);
    std::vector<int> seen;
    auto name_values = [&](const Expr& e, auto&& self) -> void {
      if (e.kind == Expr::Kind::Name) {
        const int slot = e.slot;
        if (slot == s_.slot_r || slot == s_.slot_n || slot == s_.slot_root ||
            std::find(seen.begin(), seen.end(), slot) != seen.end())
          return;
        seen.push_back(slot);
        const Provenance::Name* name = x.names->of(slot);
        if (name == nullptr) return;
        const int64_t value = slots_[static_cast<size_t>(slot)];
        if (name->let != nullptr && name->let->is_param)
          x.notes.push_back({Severity::Note, name->loc,
                             fmt::format("parameter '{}' = {} (--define {}=V sets it)", name->name, value, name->name)});
        else if (name->loop != nullptr && !name->loop->is_set)
          x.notes.push_back({Severity::Note, name->loc,
                             fmt::format("'{}' = {} {}, in the loop '{} in {} .. {}' that runs {} .. {}", name->name, value,
                                         where, name->name, ast::print_expr(name->loop->range[0]),
                                         ast::print_expr(name->loop->range[1]), eval(name->loop->range[0]),
                                         eval(name->loop->range[1]))});
        else
          x.notes.push_back({Severity::Note, name->loc, fmt::format("'{}' = {} {}", name->name, value, where)});
        if (name->let != nullptr) self(name->let->value, self);
        return;
      }
      for (const Expr& a : e.args) self(a, self);
    };
    for (const Expr* e : {&n.first, &n.peer}) name_values(*e, name_values);
    for (const std::optional<Expr>* e : {&n.last, &n.as_first, &n.as_last})
      if (e->has_value()) name_values(**e, name_values);
    if (const ast::StepStmt* st = step_stmt_; st != nullptr && st->loop && !st->loop->is_set) {
      const ast::Loop& loop = *st->loop;
      x.notes.push_back({Severity::Note, step_loc_,
                         fmt::format("the op's step loop '{} in {} .. {}' runs {} = {} .. {}", loop.var,
                                     ast::print_expr(loop.range[0]), ast::print_expr(loop.range[1]), loop.var,
                                     eval(loop.range[0]), eval(loop.range[1]))});
    }
    for (const auto& [if_loc, cond, held] : ifs_)
      x.notes.push_back({Severity::Note, if_loc, fmt::format("the op runs under '{}', which {} {}", ast::print_expr(*cond),
                                                             held ? "holds" : "does not hold", where)});
    throw Explained{};
  }

  // ---- errors ----

  // A define that names no parameter is most likely a typo: silently ignoring it would run the
  // schedule with its default. Parameters sit at the top level only (check_schedule).
  bool check_defines() {
    const std::vector<std::string> params = schedule_params(s_);
    bool ok = true;
    for (const auto& [name, value] : opts_.defines) {
      if (std::find(params.begin(), params.end(), name) != params.end()) continue;
      ok = false;
      diags_.error(s_.loc, params.empty()
                               ? fmt::format("'{}' is defined, but schedule '{}' has no parameters", name, s_.name)
                               : fmt::format("'{}' is defined, but schedule '{}' has no such parameter{} (it has: {})",
                                             name, s_.name, did_you_mean(name, params), fmt::join(params, ", ")));
    }
    return ok;
  }

  std::string context() const {
    std::string c = fmt::format("N = {}{}, r = {}", opts_.nranks, params_text(params_), rank_);
    if (step_ >= 0 && step_ < prog_.nsteps())
      c += fmt::format(", step {} ({})", step_, prog_.steps[static_cast<size_t>(step_)].label);
    else if (step_ >= 0)
      c += fmt::format(", step {}", step_);
    return c;
  }
  [[noreturn]] void fail(SourceLoc loc, std::string msg) const {
    throw EvalError{loc, fmt::format("{} ({})", msg, context())};
  }
  [[noreturn]] void limit_exceeded(SourceLoc loc, std::string msg) const {
    throw EvalError{loc, fmt::format("{} ({})", msg, context()), {}, {}, true};
  }

  // A schedule whose shape depends on r cannot be sized from rank 0: run every rank once storing
  // nothing, so that an oversized program is refused before it allocates. Other errors are left
  // to the building pass, which reports them with the step's label.
  void count_all_ranks() {
    counting_ = true;
    try {
      for (rank_ = 0; rank_ < opts_.nranks; ++rank_) run_rank();
    } catch (const EvalError& e) {
      if (e.limit) throw;
    }
    counting_ = false;
    ops_executed_ = iterations_ = evaluations_ = 0;
    call_depth_ = 0;
  }

  // ---- expressions: 64-bit, every overflow an error ----

  [[noreturn]] void overflow(const Expr& e, int64_t a, int64_t b) const {
    fail(e.loc, fmt::format("integer overflow: {} {} {} does not fit in 64 bits", a, ast::binary_op_text(e.binary), b));
  }

  int64_t eval(const Expr& e) {
    // Functions can call functions, so a short text can stand for exponentially many evaluations.
    if (++evaluations_ > opts_.limits.evaluations)
      limit_exceeded(e.loc, fmt::format("too much work: more than {} expression evaluations", count(opts_.limits.evaluations)));
    switch (e.kind) {
      case Expr::Kind::Int: return e.value;
      case Expr::Kind::Name: return slots_[static_cast<size_t>(e.slot)];
      case Expr::Kind::Unary: {
        int64_t v = eval(e.args[0]);
        switch (e.unary) {
          case ast::UnaryOp::Neg:
            if (v == std::numeric_limits<int64_t>::min()) fail(e.loc, fmt::format("integer overflow: -({}) does not fit in 64 bits", v));
            return -v;
          case ast::UnaryOp::Not: return v == 0;
          case ast::UnaryOp::BitNot: return ~v;
        }
        return 0;
      }
      case Expr::Kind::Binary: return eval_binary(e);
      case Expr::Kind::Ternary: return eval(e.args[0]) != 0 ? eval(e.args[1]) : eval(e.args[2]);
      case Expr::Kind::Call: return e.builtin != ast::Builtin::None ? eval_builtin(e) : eval_call(e);
      case Expr::Kind::IsPow2: {
        int64_t v = eval(e.args[0]);
        return v > 0 && (v & (v - 1)) == 0;
      }
    }
    return 0;
  }

  int64_t eval_binary(const Expr& e) {
    if (e.binary == BinaryOp::LogAnd) return eval(e.args[0]) != 0 && eval(e.args[1]) != 0;
    if (e.binary == BinaryOp::LogOr) return eval(e.args[0]) != 0 || eval(e.args[1]) != 0;
    int64_t a = eval(e.args[0]), b = eval(e.args[1]), r = 0;
    switch (e.binary) {
      case BinaryOp::Add:
        if (__builtin_add_overflow(a, b, &r)) overflow(e, a, b);
        return r;
      case BinaryOp::Sub:
        if (__builtin_sub_overflow(a, b, &r)) overflow(e, a, b);
        return r;
      case BinaryOp::Mul:
        if (__builtin_mul_overflow(a, b, &r)) overflow(e, a, b);
        return r;
      case BinaryOp::Div:
      case BinaryOp::Mod:
        if (b == 0) fail(e.loc, fmt::format("{} by zero: {} {} 0", e.binary == BinaryOp::Div ? "division" : "modulo", a, ast::binary_op_text(e.binary)));
        if (b == -1 && a == std::numeric_limits<int64_t>::min()) overflow(e, a, b);
        return e.binary == BinaryOp::Div ? euclid_div(a, b) : euclid_mod(a, b);
      case BinaryOp::Xor: return a ^ b;
      case BinaryOp::And: return a & b;
      case BinaryOp::Or: return a | b;
      case BinaryOp::Shl:
      case BinaryOp::Shr: return eval_shift(e, a, b);
      case BinaryOp::Eq: return a == b;
      case BinaryOp::Ne: return a != b;
      case BinaryOp::Lt: return a < b;
      case BinaryOp::Le: return a <= b;
      case BinaryOp::Gt: return a > b;
      case BinaryOp::Ge: return a >= b;
      case BinaryOp::LogAnd:
      case BinaryOp::LogOr: break;
    }
    return 0;
  }

  int64_t eval_shift(const Expr& e, int64_t a, int64_t b) const {
    if (b < 0 || b > 63) fail(e.loc, fmt::format("shift count {} is out of range 0 .. 63", b));
    if (e.binary == BinaryOp::Shr) return a >> b;
    // a << b == a * 2^b, and must fit.
    int64_t r = static_cast<int64_t>(static_cast<uint64_t>(a) << b);
    if ((r >> b) != a) overflow(e, a, b);
    return r;
  }

  int64_t eval_builtin(const Expr& e) {
    int64_t a = eval(e.args[0]);
    switch (e.builtin) {
      case ast::Builtin::Log2:
        if (a <= 0) fail(e.loc, fmt::format("log2 of {}: the argument must be positive", a));
        return 63 - std::countl_zero(static_cast<uint64_t>(a));
      case ast::Builtin::Pow2:
        if (a < 0 || a > 62) fail(e.loc, fmt::format("pow2({}) is out of range: the argument must be 0 .. 62", a));
        return int64_t{1} << a;
      case ast::Builtin::Min: return std::min(a, eval(e.args[1]));
      case ast::Builtin::Max: return std::max(a, eval(e.args[1]));
      case ast::Builtin::Abs:
        if (a == std::numeric_limits<int64_t>::min()) fail(e.loc, fmt::format("integer overflow: abs({}) does not fit in 64 bits", a));
        return a < 0 ? -a : a;
      case ast::Builtin::None: break;
    }
    return 0;
  }

  int64_t eval_call(const Expr& e) {
    const ast::Function& fn = s_.functions[static_cast<size_t>(e.slot)];
    // Evaluate every argument before binding any: an argument may call the same function.
    int64_t args[16];
    std::vector<int64_t> many;
    int64_t* vals = args;
    if (e.args.size() > std::size(args)) {
      many.resize(e.args.size());
      vals = many.data();
    }
    for (size_t i = 0; i < e.args.size(); ++i) vals[i] = eval(e.args[i]);
    for (size_t i = 0; i < e.args.size(); ++i) slots_[static_cast<size_t>(fn.param_slots[i])] = vals[i];
    if (call_depth_ >= kMaxNesting)
      fail(e.loc, fmt::format("function calls nest more than {} deep", kMaxNesting));
    ++call_depth_;
    int64_t result = eval(fn.body);
    --call_depth_;
    return result;
  }

  // ---- statements ----

  void run_rank() {
    slots_[s_.slot_r] = rank_;
    step_ = -1;
    phase_ = -1;
    in_phase_ = false;
    phase_suffix_.clear();
    next_step_ = 0;
    params_.clear();
    if (counting_) return run_block(s_.body);
    if (rank_ > 0) prog_.ops[static_cast<size_t>(rank_)].resize(static_cast<size_t>(prog_.nsteps()));
    run_block(s_.body);
    if (rank_ == 0) prog_.params = params_;
    if (rank_ > 0 && next_step_ != prog_.nsteps())
      fail(s_.loc, fmt::format("the sequence of steps depends on r: rank 0 has {} steps, rank {} has {}",
                               prog_.nsteps(), rank_, next_step_));
  }

  void run_block(const ast::Block& block) {
    for (const ast::Stmt& st : block) std::visit([&](const auto& node) { run(node, st.loc); }, st.node);
  }

  // A count statement (`chunks E`, `scratch K`): 1 .. kMaxChunks, one value on every rank.
  // Rank 0 sets `into`; the others must agree with it. True on rank 0.
  bool run_count(const Expr& e, SourceLoc loc, const char* what, int64_t& into) {
    const int64_t v = eval(e);
    if (v < 1 || v > kMaxChunks)
      fail(loc, fmt::format("{} = {} is out of range: it must be 1 .. {}", what, v, count(kMaxChunks)));
    if (defining()) {
      into = v;
      return true;
    }
    if (v != into) fail(loc, fmt::format("'{}' depends on r: it is {} on rank 0 but {} on rank {}", what, into, v, rank_));
    return false;
  }

  void run(const ast::ChunksStmt& n, SourceLoc loc) {
    if (run_count(n.count, loc, "chunks", prog_.nchunks) && blocks(prog_) > 1 && prog_.nchunks % opts_.nranks != 0)
      fail(loc, fmt::format("{} needs chunks to be a multiple of N (every rank owns chunks/N of them), "
                            "but chunks = {}", collective_name(s_.collective), prog_.nchunks));
  }

  void run(const ast::ScratchStmt& n, SourceLoc loc) {
    run_count(n.count, loc, "scratch", prog_.nscratch);
    prog_.scratch_slots = n.slots;
  }

  void run(const ast::RequiresStmt& n, SourceLoc loc) {
    if (eval(n.cond) == 0) {
      const std::string where = rank_ == 0 ? fmt::format("N = {}{}", opts_.nranks, params_text(params_)) : context();
      throw EvalError{loc, fmt::format("requirement '{}' does not hold for {}", ast::print_expr(n.cond), where)};
    }
  }

  void run(const ast::LetStmt& n, SourceLoc) {
    if (n.is_function) return;
    auto defined = n.is_param ? opts_.defines.find(n.name) : opts_.defines.end();
    const int64_t value = defined != opts_.defines.end() ? defined->second : eval(n.value);
    slots_[static_cast<size_t>(n.slot)] = value;
    if (n.is_param) params_.emplace_back(n.name, value);
  }

  void run(const ast::PhaseStmt& n, SourceLoc loc) {
    ++phase_;
    if (defining() && !counting_) prog_.phases.push_back({n.name + phase_suffix_, loc});
    in_phase_ = true;
    run_block(n.body);
    in_phase_ = false;
  }

  void run(const ast::StepStmt& n, SourceLoc loc) {
    if (!n.loop) return run_step(n, loc, false, 0);
    for_each(*n.loop, [&](int64_t v) { run_step(n, loc, true, v); });
  }

  void run_step(const ast::StepStmt& n, SourceLoc loc, bool has_var, int64_t var) {
    if (next_step_ >= kMaxSteps)
      limit_exceeded(loc, fmt::format("too many steps: the schedule has more than {}", count(kMaxSteps)));
    if (!counting_) enter_step(n, StepKey{loc, phase_, has_var, var});
    step_ = next_step_++;
    if (explaining_) {
      step_stmt_ = &n;
      step_loc_ = loc;
    }
    run_block(n.body);
    step_ = -1;
  }

  // Rank 0 defines the steps; every other rank must walk the same ones.
  void enter_step(const ast::StepStmt& n, const StepKey& key) {
    if (defining()) {
      std::string label = prog_.phases[static_cast<size_t>(phase_)].name;
      if (key.has_var) label += fmt::format(" {}={}", n.loop->var, key.var);
      prog_.steps.push_back({phase_, std::move(label), key.loc, false, prog_.nsteps()});
      step_keys_.push_back(key);
      prog_.ops[0].emplace_back();
    } else if (next_step_ >= prog_.nsteps() || !(step_keys_[static_cast<size_t>(next_step_)] == key)) {
      fail(key.loc, fmt::format("the sequence of steps depends on r: rank {} disagrees with rank 0 at step {}",
                                rank_, next_step_));
    }
  }

  void run(const ast::ForStmt& n, SourceLoc) {
    if (in_phase_) return for_each(n.loop, [&](int64_t) { run_block(n.body); });
    // Around phases: each iteration's phases are named with the variable's value ("rs d=1").
    const size_t outer = phase_suffix_.size();
    for_each(n.loop, [&](int64_t v) {
      phase_suffix_.resize(outer);
      phase_suffix_ += fmt::format(" {}={}", n.loop.var, v);
      run_block(n.body);
    });
    phase_suffix_.resize(outer);
  }

  void run(const ast::IfStmt& n, SourceLoc loc) {
    const bool held = eval(n.cond) != 0;
    if (!explaining_) return run_block(held ? n.then_body : n.else_body);
    ifs_.push_back({loc, &n.cond, held});
    run_block(held ? n.then_body : n.else_body);
    ifs_.pop_back();
  }

  void run(const ast::OpStmt& n, SourceLoc loc) {
    if (++ops_executed_ > opts_.limits.ops)
      limit_exceeded(loc, fmt::format("too many ops: the schedule executes more than {} ops", count(opts_.limits.ops)));
    if (counting_) return;
    int64_t first = eval(n.first);
    int64_t last = n.last ? eval(*n.last) : first;
    int64_t peer = eval(n.peer);
    check_chunk_range(first, last, n.first, n.last, n.src);
    // A remap names the chunks written; by default they are the chunks read.
    int64_t to = n.as_first ? eval(*n.as_first) : first;
    if (n.as_last) {
      const int64_t to_last = eval(*n.as_last);
      check_chunk_range(to, to_last, *n.as_first, n.as_last, n.dst);
      if (to_last - to != last - first)
        fail(n.as_first->loc, fmt::format("the op reads {} chunks ({} .. {}) but writes {} ({} .. {}); a remap moves "
                                          "as many chunks as it reads", last - first + 1, first, last,
                                          to_last - to + 1, to, to_last));
    } else {
      check_chunk_range(to, to, n.as_first ? *n.as_first : n.first, std::nullopt, n.dst);
    }
    // A slot holds a chunk of any position (the lowering checks that what a slot holds is read
    // back at its position).
    if (!remap_allowed(prog_, n.src, first, n.dst, to)) {
      const int64_t per_block = prog_.nchunks / blocks(prog_), position = chunk_position(prog_, first);
      // Scratch is cut as the blocks are (step_program.h): slot k of a chunk is scratch chunk
      // k * per_block + its position, which is what MSCCL-style per-peer slots need.
      const std::string scratch_hint =
          n.src == Buffer::Scratch || n.dst == Buffer::Scratch
              ? fmt::format("; scratch is cut as the blocks are (scratch chunk k is at position k % {0}): declare "
                            "'scratch {3} slots' for slots that each hold a chunk of any position, or use slot j * {0} "
                            "+ {2} for chunk {1} with 'scratch SLOTS * {0}'",
                            per_block, first, position, buffer_chunks(prog_, Buffer::Scratch))
              : "";
      fail(n.as_first->loc,
           fmt::format("cannot remap chunk {} onto chunk {}: the buffers are {} block{} of {} chunks, and a chunk moves "
                       "only to the same position in a block, where chunks have the same size (chunk {} is at "
                       "position {}, chunk {} at {}){}", first, to, blocks(prog_), blocks(prog_) == 1 ? "" : "s",
                       per_block, first, position, to, chunk_position(prog_, to), scratch_hint));
    }
    if (peer < 0 || peer >= opts_.nranks)
      fail(n.peer.loc, fmt::format("peer {} is out of range: ranks are 0 .. {}", peer, opts_.nranks - 1));
    if (explaining_) return explain_op(n, loc, first, to, peer);
    if (peer == rank_ && n.src == n.dst && first == to)
      fail(loc, n.push ? fmt::format("{} to itself: rank {} would read and write its own {} (a local op must write "
                                     "another buffer, e.g. 'to scratch of r')", op_kind_name(n.kind), rank_,
                                     buffer_name(n.dst))
                       : fmt::format("{} from itself: rank {} would read and write its own {} (a local op must read "
                                     "another buffer, e.g. 'from input of r')", op_kind_name(n.kind), rank_,
                                     buffer_name(n.dst)));
    // A push is the peer's pull from this rank: the step program has only pulls.
    const int reader = n.push ? static_cast<int>(peer) : rank_;
    Op op{n.kind, {to, last - first + 1}, n.push ? rank_ : static_cast<int>(peer), n.src, n.dst, loc, first - to};
    if (peer == rank_ && n.src == n.dst && op.chunks.overlaps(op.read_chunks()))
      fail(loc, fmt::format("{} reads chunks {} .. {} of rank {}'s own {} and writes the overlapping chunks {} .. {}; "
                            "a local remap must move chunks to where none is read", op_kind_name(n.kind), first, last,
                            rank_, buffer_name(n.dst), to, to + last - first));
    auto& steps = prog_.ops[static_cast<size_t>(reader)];
    if (steps.size() <= static_cast<size_t>(step_)) steps.resize(static_cast<size_t>(step_) + 1);  // a rank not run yet
    auto& ops = steps[static_cast<size_t>(step_)];
    // Consecutive single-chunk ops from one statement (a `for` over chunks) merge into a range.
    if (!ops.empty()) {
      Op& prev = ops.back();
      if (prev.kind == op.kind && prev.peer == op.peer && prev.src == op.src && prev.dst == op.dst &&
          prev.loc == op.loc && prev.shift == op.shift && prev.chunks.end() == op.chunks.begin) {
        prev.chunks.count += op.chunks.count;
        return;
      }
    }
    ops.push_back(op);
  }

  // first .. last must be a non-empty range of buffer b's chunks.
  void check_chunk_range(int64_t first, int64_t last, const Expr& first_expr, const std::optional<Expr>& last_expr,
                         Buffer b) const {
    if (last < first) fail(first_expr.loc, fmt::format("empty chunk range {} .. {}", first, last));
    const int64_t nchunks = buffer_chunks(prog_, b);
    // Scratch declared with `scratch K` has its own count; say so, since it differs from `chunks`.
    const std::string what = b == Buffer::Scratch && prog_.nscratch > 0 ? "scratch has" : "the schedule has";
    for (int64_t c : {first, last})
      if (c < 0 || c >= nchunks)
        fail(c == first ? first_expr.loc : last_expr->loc,
             fmt::format("chunk {} is out of range: {} {} chunk{} (0 .. {})", c, what, nchunks, nchunks == 1 ? "" : "s",
                         nchunks - 1));
  }

  template <class F>
  void for_each(const ast::Loop& loop, F&& body) {
    auto iterate = [&](int64_t v) {
      if (++iterations_ > opts_.limits.loop_iterations)
        limit_exceeded(loop.var_loc, fmt::format("too much work: the loops run more than {} iterations in all",
                                                 count(opts_.limits.loop_iterations)));
      slots_[static_cast<size_t>(loop.slot)] = v;
      if (!loop.where || eval(*loop.where) != 0) body(v);
    };
    if (loop.is_set) {
      for (const Expr& e : loop.set) iterate(eval(e));
      return;
    }
    int64_t first = eval(loop.range[0]), last = eval(loop.range[1]);
    if (last < first) return;
    uint64_t trips = static_cast<uint64_t>(last) - static_cast<uint64_t>(first) + 1;
    if (trips == 0 || trips > static_cast<uint64_t>(opts_.limits.loop_iterations))
      limit_exceeded(loop.var_loc, fmt::format("loop over {} .. {} is too long: the limit is {} iterations", first, last,
                                               count(opts_.limits.loop_iterations)));
    for (int64_t v = first;; ++v) {
      iterate(v);
      if (v == last) break;
    }
  }

  // Rank 0 tells the program's step count and, when every rank has rank 0's shape, its size: refuse
  // an oversized program now, before the other ranks allocate anything.
  void check_size_from_rank0() const {
    if (counting_) return;
    int64_t n = opts_.nranks;
    auto too_large = [&](std::string why) {
      throw EvalError{s_.loc, fmt::format("schedule '{}' is too large for N = {}: {}", s_.name, n, why)};
    };
    const WorkLimits& lim = opts_.limits;
    if (s_.rank_uniform_shape && ops_executed_ * n > lim.ops)
      too_large(fmt::format("it would execute {} ops ({} per rank); the limit is {}", ops_executed_ * n, ops_executed_,
                            count(lim.ops)));
    if (s_.rank_uniform_shape && iterations_ * n > lim.loop_iterations)
      too_large(fmt::format("its loops would run {} iterations; the limit is {}", iterations_ * n,
                            count(lim.loop_iterations)));
    if (s_.rank_uniform_shape && evaluations_ * n > lim.evaluations)
      too_large(fmt::format("it would take {} expression evaluations; the limit is {}", evaluations_ * n,
                            count(lim.evaluations)));
    if (prog_.nsteps() * n > kMaxRankSteps)
      too_large(fmt::format("{} steps x {} ranks exceed the limit of {} rank-steps", prog_.nsteps(), n,
                            count(kMaxRankSteps)));
  }

  // Within one step a destination chunk takes any number of reduces or exactly one copy.
  void check_step_writes(int k) {
    const auto& ops = prog_.ops[static_cast<size_t>(rank_)][static_cast<size_t>(k)];
    if (ops.size() < 2) return;
    std::vector<size_t> order(ops.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (ops[a].dst != ops[b].dst) return ops[a].dst < ops[b].dst;
      return ops[a].chunks.begin < ops[b].chunks.begin;
    });
    // Sweep in chunk order, remembering the op reaching furthest and the copy reaching furthest.
    const Op* far_any = nullptr;
    const Op* far_copy = nullptr;
    for (size_t i : order) {
      const Op& op = ops[i];
      if (far_any && far_any->dst != op.dst) far_any = far_copy = nullptr;
      const Op* clash = nullptr;
      if (far_copy && op.chunks.begin < far_copy->chunks.end()) clash = far_copy;
      else if (op.kind == OpKind::Copy && far_any && op.chunks.begin < far_any->chunks.end()) clash = far_any;
      if (clash) {
        step_ = k;
        throw EvalError{op.loc,
                        fmt::format("{} chunk {} of rank {} is written by a copy and by another op in the same "
                                    "step; a destination takes several reduces or exactly one copy ({})",
                                    buffer_name(op.dst), op.chunks.begin, rank_, context()),
                        clash->loc, "the other write"};
      }
      if (!far_any || op.chunks.end() > far_any->chunks.end()) far_any = &op;
      if (op.kind == OpKind::Copy && (!far_copy || op.chunks.end() > far_copy->chunks.end())) far_copy = &op;
    }
  }

  const ast::Schedule& s_;
  InstantiateOptions opts_;
  Diagnostics& diags_;
  StepProgram prog_;
  std::vector<int64_t> slots_;
  std::vector<StepKey> step_keys_;
  std::vector<std::pair<std::string, int64_t>> params_;  // this rank's parameters so far, in order
  int rank_ = 0;
  int step_ = -1;       // the step being filled, -1 outside steps
  int next_step_ = 0;   // steps this rank has entered so far
  int phase_ = -1;
  bool in_phase_ = false;    // inside a phase (a `for` there makes ops or steps, not phases)
  std::string phase_suffix_;  // " d=1" per `for` around the phase being run
  int64_t ops_executed_ = 0;
  int64_t iterations_ = 0;
  int64_t evaluations_ = 0;
  int call_depth_ = 0;
  bool counting_ = false;  // see count_all_ranks
  // While explaining an op (explain): which, and what has been found.
  struct Explaining {
    const Op* op;
    int step;
    const Provenance* names;
    int reader = 0;  // the rank whose program holds the op
    std::vector<Diagnostic> notes = {};
  };
  std::optional<Explaining> explaining_;
  struct EnclosingIf {
    SourceLoc loc;
    const Expr* cond;
    bool held;
  };
  std::vector<EnclosingIf> ifs_;  // while explaining: the `if`s around the statement being run
  const ast::StepStmt* step_stmt_ = nullptr;  // while explaining: the step being run
  SourceLoc step_loc_;
};

}  // namespace

// Parameters sit at the top level only (check_schedule).
std::vector<std::string> schedule_params(const ast::Schedule& schedule) {
  std::vector<std::string> params;
  for (const ast::Stmt& st : schedule.body)
    if (const auto* let = std::get_if<ast::LetStmt>(&st.node); let && let->is_param) params.push_back(let->name);
  return params;
}

namespace {

// OpProvenance of a program instantiate made: the schedule (a copy, as the program outlives the
// caller's tree) and the options, to run one rank again.
class ScheduleProvenance : public OpProvenance {
 public:
  ScheduleProvenance(const ast::Schedule& s, const InstantiateOptions& o, std::string file)
      : schedule_(s), options_(o), file_{std::move(file), {}}, names_(schedule_) {}

  void explain(int rank, int step, const Op& op, Diagnostics& diags) const override {
    Diagnostics ignored;  // the schedule instantiated before: a failure here explains nothing
    for (const Diagnostic& d : Instantiator(schedule_, options_, file_, ignored).explain(rank, step, op, names_))
      diags.note(d.loc, d.message);
  }

 private:
  ast::Schedule schedule_;
  InstantiateOptions options_;
  SourceFile file_;
  Provenance names_;
};

}  // namespace

std::optional<StepProgram> instantiate(const ast::Schedule& schedule, const InstantiateOptions& options,
                                       const SourceFile& file, Diagnostics& diags) {
  std::optional<StepProgram> program = Instantiator(schedule, options, file, diags).run();
  if (program) program->provenance = std::make_shared<ScheduleProvenance>(schedule, options, file.name);
  return program;
}

}  // namespace ccc
