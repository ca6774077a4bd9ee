#include "check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>
#include <string>

#include "suggest.h"

namespace ccc {
namespace {

using ast::Expr;

struct BuiltinInfo {
  const char* name;
  ast::Builtin id;
  size_t arity;
};
constexpr BuiltinInfo kBuiltins[] = {
    {"log2", ast::Builtin::Log2, 1}, {"pow2", ast::Builtin::Pow2, 1}, {"min", ast::Builtin::Min, 2},
    {"max", ast::Builtin::Max, 2},   {"abs", ast::Builtin::Abs, 1},
};
const BuiltinInfo* find_builtin(const std::string& name) {
  for (const auto& b : kBuiltins)
    if (name == b.name) return &b;
  return nullptr;
}

// Where a statement sits: each statement kind is allowed in some of these.
enum class Context { Top, Phase, Step };

struct Symbol {
  bool is_function = false;
  int index = -1;  // slot or function index
  SourceLoc loc;   // invalid for r, N, root
  bool is_let = false;
  bool used = false;  // named by an expression: a `let` never named gets a warning
};

class Checker {
 public:
  Checker(ast::Schedule& s, Diagnostics& diags) : s_(s), diags_(diags) {}

  bool run() {
    s_.functions.clear();
    scopes_.emplace_back();
    s_.slot_r = declare_builtin_var("r");
    s_.slot_n = declare_builtin_var("N");
    if (s_.collective == Collective::Broadcast || s_.collective == Collective::Reduce)
      s_.slot_root = declare_builtin_var("root");
    check_block(s_.body, Context::Top);
    pop_scope();
    warn_about_what_is_unused();
    if (!seen_chunks_) diags_.error(s_.loc, "the schedule never says how many chunks it has (add 'chunks EXPR')");
    s_.num_slots = static_cast<int>(rank_dependent_.size());
    return !diags_.has_errors();
  }

 private:
  int new_slot(bool rank_dependent) {
    rank_dependent_.push_back(rank_dependent);
    return static_cast<int>(rank_dependent_.size()) - 1;
  }
  int declare_builtin_var(const char* name) {
    int slot = new_slot(std::string_view(name) == "r");
    scopes_.back()[name] = Symbol{false, slot, {}};
    return slot;
  }

  Symbol* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return &found->second;
    }
    return nullptr;
  }

  // " (did you mean 'X'?)" for an unknown name, X a variable in scope; for the first few unknown
  // names only, so that a hostile schedule of many costs bounded time.
  std::string suggestion(const std::string& unknown) {
    if (suggestions_left_ == 0) return "";
    --suggestions_left_;
    std::vector<std::string> names;
    for (const auto& scope : scopes_)
      for (const auto& [name, sym] : scope)
        if (!sym.is_function) names.push_back(name);
    return did_you_mean(unknown, names);
  }

  // Leaves the innermost scope, remembering each `let` of it that no expression named.
  void pop_scope() {
    for (const auto& [name, sym] : scopes_.back())
      if (sym.is_let && !sym.used) unused_.emplace_back(sym.loc, name);
    scopes_.pop_back();
  }

  // Warnings only for a schedule without errors: next to an error they are noise (a `let`
  // whose use failed to resolve, say).
  void warn_about_what_is_unused() {
    if (diags_.has_errors()) return;
    std::sort(unused_.begin(), unused_.end(), [](const auto& a, const auto& b) {
      return std::pair(a.first.line, a.first.col) < std::pair(b.first.line, b.first.col);
    });
    for (const auto& [loc, name] : unused_) diags_.warning(loc, fmt::format("'{}' is defined but never used", name));
    for (const auto& [loc, first] : duplicate_phases_) {
      diags_.warning(loc, fmt::format("two phases are named '{}': diagnostics and step tables will not tell them apart",
                                      first.second));
      diags_.note(first.first, "the other one");
    }
  }

  // Declares `name` in the innermost scope; names never shadow (a reader should not have to wonder
  // which `c` an op means).
  bool declare(const std::string& name, SourceLoc loc, Symbol sym) {
    if (find_builtin(name)) {
      diags_.error(loc, fmt::format("'{}' is a builtin function and cannot be redefined", name));
      return false;
    }
    if (const Symbol* prev = lookup(name)) {
      if (prev->loc.valid()) {
        diags_.error(loc, fmt::format("'{}' is already defined", name));
        diags_.note(prev->loc, fmt::format("'{}' was defined here", name));
      } else {
        diags_.error(loc, fmt::format("'{}' is predefined and cannot be redefined", name));
      }
      return false;
    }
    sym.loc = loc;
    scopes_.back()[name] = sym;
    return true;
  }

  // Resolves names in `e`; returns whether its value can depend on r.
  bool check_expr(Expr& e) {
    bool dep = false;
    for (Expr& a : e.args) dep = check_expr(a) || dep;
    switch (e.kind) {
      case Expr::Kind::Name: {
        Symbol* sym = lookup(e.name);
        if (!sym) {
          if (e.name == "root")
            diags_.error(e.loc, "'root' is only defined in broadcast and reduce schedules");
          else if (find_builtin(e.name))
            diags_.error(e.loc, fmt::format("'{}' is a function; call it as {}(...)", e.name, e.name));
          else
            diags_.error(e.loc, fmt::format("unknown name '{}'{}", e.name, suggestion(e.name)));
          return false;
        }
        sym->used = true;
        if (sym->is_function) {
          diags_.error(e.loc, fmt::format("'{}' is a function; call it as {}(...)", e.name, e.name));
          return false;
        }
        e.slot = sym->index;
        return rank_dependent_[e.slot];
      }
      case Expr::Kind::Call: {
        size_t arity = 0;
        if (const BuiltinInfo* b = find_builtin(e.name)) {
          e.builtin = b->id;
          arity = b->arity;
        } else if (Symbol* sym = lookup(e.name); sym && sym->is_function) {
          sym->used = true;
          e.slot = sym->index;
          arity = s_.functions[e.slot].param_slots.size();
          dep = dep || function_rank_dependent_[e.slot];
        } else {
          diags_.error(e.loc, sym ? fmt::format("'{}' is not a function", e.name)
                                  : fmt::format("unknown function '{}'", e.name));
          return false;
        }
        if (e.args.size() != arity)
          diags_.error(e.loc, fmt::format("'{}' takes {} argument{}, given {}", e.name, arity,
                                          arity == 1 ? "" : "s", e.args.size()));
        return dep;
      }
      default:
        return dep;
    }
  }

  // A control-flow expression (loop bound, where, if): if it depends on r, ranks differ in shape.
  void check_control_expr(Expr& e) {
    if (check_expr(e)) s_.rank_uniform_shape = false;
  }

  // Checks the loop's range and declares its variable in a new scope (the caller pops it).
  // Returns whether the iterations it runs depend on r (its range, set or where).
  bool check_loop(ast::Loop& loop) {
    bool dep = false;
    for (Expr& e : loop.range) dep = check_expr(e) || dep;
    if (dep) s_.rank_uniform_shape = false;
    for (Expr& e : loop.set) dep = check_expr(e) || dep;
    scopes_.emplace_back();
    loop.slot = new_slot(dep);
    declare(loop.var, loop.var_loc, Symbol{false, loop.slot, {}});
    if (loop.where && check_expr(*loop.where)) {
      s_.rank_uniform_shape = false;
      dep = true;
    }
    return dep;
  }

  void check_let(ast::LetStmt& let, SourceLoc loc) {
    if (!let.is_function) {
      bool dep = check_expr(let.value);
      let.slot = new_slot(dep);
      declare(let.name, loc, Symbol{false, let.slot, {}, true});
      return;
    }
    // A function sees its parameters and the names visible where it is defined; it is not in
    // scope in its own body, so there is no recursion.
    ast::Function fn;
    scopes_.emplace_back();
    for (const std::string& p : let.params) {
      int slot = new_slot(false);
      fn.param_slots.push_back(slot);
      declare(p, loc, Symbol{false, slot, {}});
    }
    bool dep = check_expr(let.value);
    pop_scope();
    fn.body = let.value;
    let.slot = static_cast<int>(s_.functions.size());
    s_.functions.push_back(std::move(fn));
    function_rank_dependent_.push_back(dep);
    declare(let.name, loc, Symbol{true, let.slot, {}, true});
  }

  // A parameter is a schedule-wide constant chosen before the schedule runs, so it sits at the top
  // before any phase and cannot depend on r (every rank must see one value). It is not marked as
  // a `let` for the unused warning: a parameter may exist only to be set from outside.
  void check_param(ast::LetStmt& param, SourceLoc loc, Context ctx) {
    if (ctx != Context::Top) return misplaced(loc, "param", "at the top of the schedule");
    if (phase_loops_ > 0) return misplaced(loc, "param", "at the top of the schedule, not inside a 'for'");
    if (seen_phase_) diags_.error(loc, "'param' must come before the first phase");
    if (check_expr(param.value))
      diags_.error(param.value.loc, fmt::format("the default of parameter '{}' depends on r; a parameter "
                                                "must have one value on every rank", param.name));
    param.slot = new_slot(false);
    declare(param.name, loc, Symbol{false, param.slot, {}});
  }

  void misplaced(SourceLoc loc, const char* what, const char* where) {
    diags_.error(loc, fmt::format("'{}' is only allowed {}", what, where));
  }

  void check_block(ast::Block& block, Context ctx) {
    scopes_.emplace_back();
    for (ast::Stmt& st : block) check_stmt(st, ctx);
    pop_scope();
  }

  void check_stmt(ast::Stmt& st, Context ctx) {
    std::visit([&](auto& node) { check_node(node, st.loc, ctx); }, st.node);
  }

  void check_node(ast::ChunksStmt& n, SourceLoc loc, Context ctx) {
    if (ctx != Context::Top) return misplaced(loc, "chunks", "at the top of the schedule");
    if (phase_loops_ > 0) return misplaced(loc, "chunks", "at the top of the schedule, not inside a 'for'");
    if (seen_chunks_) diags_.error(loc, "'chunks' is given more than once");
    if (seen_phase_) diags_.error(loc, "'chunks' must come before the first phase");
    seen_chunks_ = true;
    check_expr(n.count);
  }
  void check_node(ast::ScratchStmt& n, SourceLoc loc, Context ctx) {
    if (ctx != Context::Top) return misplaced(loc, "scratch", "at the top of the schedule");
    if (seen_scratch_) diags_.error(loc, "'scratch' is given more than once");
    if (seen_phase_) diags_.error(loc, "'scratch' must come before the first phase");
    seen_scratch_ = true;
    check_expr(n.count);
  }
  void check_node(ast::RequiresStmt& n, SourceLoc loc, Context ctx) {
    if (ctx != Context::Top) return misplaced(loc, "requires", "at the top of the schedule");
    check_expr(n.cond);
  }
  void check_node(ast::LetStmt& n, SourceLoc loc, Context ctx) {
    if (n.is_param) return check_param(n, loc, ctx);
    check_let(n, loc);
  }
  void check_node(ast::PhaseStmt& n, SourceLoc loc, Context ctx) {
    if (ctx != Context::Top) return misplaced(loc, "phase", "at the top of the schedule");
    seen_phase_ = true;
    if (auto [it, fresh] = phase_names_.emplace(n.name, loc); !fresh)
      duplicate_phases_.emplace_back(loc, std::pair(it->second, n.name));
    check_block(n.body, Context::Phase);
  }
  void check_node(ast::StepStmt& n, SourceLoc loc, Context ctx) {
    if (ctx != Context::Phase)
      return misplaced(loc, "step", ctx == Context::Step ? "in a phase, not inside another step" : "inside a phase");
    if (n.loop) check_loop(*n.loop);
    check_block(n.body, Context::Step);
    if (n.loop) pop_scope();
  }
  void check_node(ast::ForStmt& n, SourceLoc loc, Context ctx) {
    if (ctx == Context::Phase)
      return misplaced(loc, "for", "inside a step, or around phases (in a phase, 'step VAR in A .. B' makes a "
                                   "sequence of steps)");
    const bool dep = check_loop(n.loop);
    if (ctx == Context::Top) {
      // A `for` around phases repeats them (each iteration's phases are named with the loop
      // variable's value); every rank must run the same phases, so the loop cannot depend on r.
      if (dep)
        diags_.error(n.loop.var_loc, fmt::format("the iterations of 'for {}' around phases depend on r; every "
                                                 "rank must run the same phases", n.loop.var));
      ++phase_loops_;
      check_block(n.body, Context::Top);
      --phase_loops_;
    } else {
      check_block(n.body, Context::Step);
    }
    pop_scope();
  }
  void check_node(ast::IfStmt& n, SourceLoc loc, Context ctx) {
    if (ctx == Context::Top) return misplaced(loc, "if", "inside a phase or a step");
    check_control_expr(n.cond);
    check_block(n.then_body, ctx);
    check_block(n.else_body, ctx);
  }
  void check_node(ast::OpStmt& n, SourceLoc loc, Context ctx) {
    if (ctx != Context::Step) return misplaced(loc, op_kind_name(n.kind), "inside a step");
    check_expr(n.first);
    if (n.last) check_expr(*n.last);
    check_expr(n.peer);
    if (n.as_first) check_expr(*n.as_first);
    if (n.as_last) check_expr(*n.as_last);
  }

  ast::Schedule& s_;
  Diagnostics& diags_;
  std::vector<std::map<std::string, Symbol>> scopes_;
  int suggestions_left_ = 16;
  std::vector<bool> rank_dependent_;           // per slot
  std::vector<bool> function_rank_dependent_;  // per function: its body reads r
  bool seen_chunks_ = false;
  bool seen_scratch_ = false;
  bool seen_phase_ = false;
  int phase_loops_ = 0;  // `for`s around phases the statement is in
  std::map<std::string, SourceLoc> phase_names_;
  std::vector<std::pair<SourceLoc, std::string>> unused_;  // `let`s no expression named
  std::vector<std::pair<SourceLoc, std::pair<SourceLoc, std::string>>> duplicate_phases_;  // (it, (first, name))
};

}  // namespace

bool check_schedule(ast::Schedule& s, Diagnostics& diags) { return Checker(s, diags).run(); }

}  // namespace ccc
