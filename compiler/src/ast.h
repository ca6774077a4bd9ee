// The schedule DSL's syntax tree, as parsed; check_schedule (check.h) then resolves names into
// slots so that instantiation evaluates without lookups.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ccc/diagnostics.h"
#include "step_program.h"

namespace ccc::ast {

enum class UnaryOp { Neg, Not, BitNot };
enum class BinaryOp { Add, Sub, Mul, Div, Mod, Xor, And, Or, Shl, Shr, Eq, Ne, Lt, Le, Gt, Ge, LogAnd, LogOr };
enum class Builtin { None, Log2, Pow2, Min, Max, Abs };

const char* unary_op_text(UnaryOp op);    // "-", "!", "~"
const char* binary_op_text(BinaryOp op);  // "+", "<<", "&&", ...

struct Expr {
  enum class Kind { Int, Name, Unary, Binary, Ternary, Call, IsPow2 };
  Kind kind = Kind::Int;
  SourceLoc loc;           // the literal, name or operator
  int64_t value = 0;       // Int
  std::string name;        // Name, Call
  UnaryOp unary = UnaryOp::Neg;
  BinaryOp binary = BinaryOp::Add;
  std::vector<Expr> args;  // operands, call arguments, ternary (cond, then, else), IsPow2 (x)
  int height = 1;          // nodes on the longest path down to a leaf (the parser bounds it)

  // Filled in by check_schedule.
  int slot = -1;                     // Name: the variable's slot; Call: index into Schedule::functions
  Builtin builtin = Builtin::None;   // Call of a builtin
};

struct Stmt;
using Block = std::vector<Stmt>;

// `VAR in FIRST .. LAST [where COND]` or `VAR in {E, ...} [where COND]`.
struct Loop {
  std::string var;
  SourceLoc var_loc;
  std::vector<Expr> range;   // {first, last} for a range
  std::vector<Expr> set;     // the elements of a set literal
  bool is_set = false;
  std::optional<Expr> where;
  int slot = -1;             // filled in by check_schedule
};

struct ChunksStmt { Expr count; };
// `scratch K`: the scratch buffer has K chunks (of the output's chunk size) instead of `chunks`.
// `scratch K slots`: K slots, each holding one chunk of any position.
struct ScratchStmt {
  Expr count;
  bool slots = false;
};
struct RequiresStmt { Expr cond; };
// `let NAME = E` (a constant), `let NAME(P, ...) = E` (a function), or `param NAME = E` (a
// constant whose value InstantiateOptions::defines can replace).
struct LetStmt {
  std::string name;
  std::vector<std::string> params;  // empty for a constant
  bool is_function = false;
  bool is_param = false;
  Expr value;
  int slot = -1;                    // constant: its slot; function: index into Schedule::functions
};
struct PhaseStmt { std::string name; Block body; };
struct StepStmt { std::optional<Loop> loop; Block body; };
struct ForStmt { Loop loop; Block body; };
struct IfStmt { Expr cond; Block then_body; Block else_body; };
// `reduce|copy chunk E | chunks E .. E [into BUF] from [BUF of] PEER [as chunk F | as chunks F .. G]`
//  or, pushed: `reduce|copy chunk E | chunks E .. E [from BUF] to [BUF of] PEER [as ...]`, which is
//  PEER's pull of the same chunks from this rank (`src` is then this rank's buffer, `dst` the
//  peer's). `first`/`last` are the chunks read; `as` names the chunks written (default: the same).
struct OpStmt {
  OpKind kind = OpKind::Reduce;
  Expr first;
  std::optional<Expr> last;         // set for a chunk range
  Buffer dst = Buffer::Output;
  Buffer src = Buffer::Output;
  Expr peer;                        // pull: the rank read from; push: the rank written to
  bool push = false;
  std::optional<Expr> as_first;     // set for a remap: the first chunk written
  std::optional<Expr> as_last;      // set for a remapped range (`as chunks F .. G`)
};

struct Stmt {
  SourceLoc loc;  // the statement's keyword
  std::variant<ChunksStmt, ScratchStmt, RequiresStmt, LetStmt, PhaseStmt, StepStmt, ForStmt, IfStmt, OpStmt> node;
};

// A resolved `let` function: calls bind the arguments to the parameter slots, then evaluate body.
struct Function {
  std::vector<int> param_slots;
  Expr body;
};

struct Schedule {
  Collective collective = Collective::AllReduce;
  std::string name;
  SourceLoc loc;
  Block body;

  // Filled in by check_schedule.
  int num_slots = 0;
  int slot_r = -1, slot_n = -1, slot_root = -1;  // slot_root is -1 unless broadcast / reduce
  std::vector<Function> functions;
  // True when no loop bound, `where` or `if` condition depends on r: then every rank executes the
  // same number of ops and loop iterations, so instantiation can size the program from rank 0.
  bool rank_uniform_shape = true;
};

// The tree printed back as DSL text (for --dump-after=parse); comments are dropped.
std::string print_schedule(const Schedule& s);
std::string print_expr(const Expr& e);

}  // namespace ccc::ast
