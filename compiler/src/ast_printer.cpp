// Prints the syntax tree back as DSL text (--dump-after=parse). Parenthesises only where the
// precedence needs it, so the output reads like the input.
#include <fmt/format.h>

#include "ast.h"

namespace ccc::ast {
namespace {

// Binding strength, as the parser's levels (docs/dsl.md): higher binds tighter.
int precedence(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Ternary: return 0;
    case Expr::Kind::IsPow2: return 3;
    case Expr::Kind::Binary:
      switch (e.binary) {
        case BinaryOp::LogOr: return 1;
        case BinaryOp::LogAnd: return 2;
        case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt:
        case BinaryOp::Ge: return 3;
        case BinaryOp::Or: return 4;
        case BinaryOp::Xor: return 5;
        case BinaryOp::And: return 6;
        case BinaryOp::Shl: case BinaryOp::Shr: return 7;
        case BinaryOp::Add: case BinaryOp::Sub: return 8;
        case BinaryOp::Mul: case BinaryOp::Div: case BinaryOp::Mod: return 9;
      }
      return 0;
    default: return 10;
  }
}

std::string operand(const Expr& e, int min_prec) {
  std::string s = print_expr(e);
  return precedence(e) < min_prec ? "(" + s + ")" : s;
}

std::string buffer_prefix(Buffer b, const char* word) {
  return b == Buffer::Output ? std::string() : fmt::format(" {} {}", word, buffer_name(b));
}

class Printer {
 public:
  std::string out;

  void block(const Block& b, int indent) {
    out += "{\n";
    for (const Stmt& st : b) {
      out.append(static_cast<size_t>(indent + 2), ' ');
      std::visit([&](const auto& node) { stmt(node, indent + 2); }, st.node);
      out += "\n";
    }
    out.append(static_cast<size_t>(indent), ' ');
    out += "}";
  }

  void loop(const Loop& l) {
    out += l.var + " in ";
    if (l.is_set) {
      out += "{";
      for (size_t i = 0; i < l.set.size(); ++i) out += (i ? ", " : "") + print_expr(l.set[i]);
      out += "}";
    } else {
      out += print_expr(l.range[0]) + " .. " + print_expr(l.range[1]);
    }
    if (l.where) out += " where " + print_expr(*l.where);
    out += " ";
  }

  void stmt(const ChunksStmt& n, int) { out += "chunks " + print_expr(n.count); }
  void stmt(const ScratchStmt& n, int) { out += "scratch " + print_expr(n.count) + (n.slots ? " slots" : ""); }
  void stmt(const RequiresStmt& n, int) { out += "requires " + print_expr(n.cond); }
  void stmt(const LetStmt& n, int) {
    out += (n.is_param ? "param " : "let ") + n.name;
    if (n.is_function) out += "(" + fmt::format("{}", fmt::join(n.params, ", ")) + ")";
    out += " = " + print_expr(n.value);
  }
  void stmt(const PhaseStmt& n, int indent) {
    out += "phase " + n.name + " ";
    block(n.body, indent);
  }
  void stmt(const StepStmt& n, int indent) {
    out += "step ";
    if (n.loop) loop(*n.loop);
    block(n.body, indent);
  }
  void stmt(const ForStmt& n, int indent) {
    out += "for ";
    loop(n.loop);
    block(n.body, indent);
  }
  void stmt(const IfStmt& n, int indent) {
    out += "if " + print_expr(n.cond) + " ";
    block(n.then_body, indent);
    if (n.else_body.empty()) return;
    out += " else ";
    block(n.else_body, indent);
  }
  void stmt(const OpStmt& n, int) {
    out += op_kind_name(n.kind);
    if (n.last)
      out += " chunks " + print_expr(n.first) + " .. " + print_expr(*n.last);
    else
      out += " chunk " + print_expr(n.first);
    if (n.push) {
      if (n.src != Buffer::Output) out += fmt::format(" from {}", buffer_name(n.src));
      out += " to ";
      if (n.dst != Buffer::Output) out += fmt::format("{} of ", buffer_name(n.dst));
    } else {
      out += buffer_prefix(n.dst, "into");
      out += " from ";
      if (n.src != Buffer::Output) out += fmt::format("{} of ", buffer_name(n.src));
    }
    out += print_expr(n.peer);
    if (n.as_last)
      out += " as chunks " + print_expr(*n.as_first) + " .. " + print_expr(*n.as_last);
    else if (n.as_first)
      out += " as chunk " + print_expr(*n.as_first);
  }
};

}  // namespace

const char* unary_op_text(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "-";
    case UnaryOp::Not: return "!";
    case UnaryOp::BitNot: return "~";
  }
  return "?";
}

const char* binary_op_text(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return "/";
    case BinaryOp::Mod: return "%";
    case BinaryOp::Xor: return "^";
    case BinaryOp::And: return "&";
    case BinaryOp::Or: return "|";
    case BinaryOp::Shl: return "<<";
    case BinaryOp::Shr: return ">>";
    case BinaryOp::Eq: return "==";
    case BinaryOp::Ne: return "!=";
    case BinaryOp::Lt: return "<";
    case BinaryOp::Le: return "<=";
    case BinaryOp::Gt: return ">";
    case BinaryOp::Ge: return ">=";
    case BinaryOp::LogAnd: return "&&";
    case BinaryOp::LogOr: return "||";
  }
  return "?";
}

std::string print_expr(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Int: return std::to_string(e.value);
    case Expr::Kind::Name: return e.name;
    case Expr::Kind::Unary: return unary_op_text(e.unary) + operand(e.args[0], 10);
    case Expr::Kind::Binary: {
      int p = precedence(e);
      // Comparisons do not chain, so both sides of one need parentheses at equal precedence.
      int left_min = p == 3 ? p + 1 : p;
      return fmt::format("{} {} {}", operand(e.args[0], left_min), binary_op_text(e.binary), operand(e.args[1], p + 1));
    }
    case Expr::Kind::Ternary:
      return fmt::format("{} ? {} : {}", operand(e.args[0], 1), print_expr(e.args[1]), print_expr(e.args[2]));
    case Expr::Kind::Call: {
      std::string s = e.name + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + print_expr(e.args[i]);
      return s + ")";
    }
    case Expr::Kind::IsPow2: return operand(e.args[0], 4) + " is pow2";
  }
  return "?";
}

std::string print_schedule(const Schedule& s) {
  Printer p;
  p.out = fmt::format("{} {} ", collective_name(s.collective), s.name);
  p.block(s.body, 0);
  p.out += "\n";
  return p.out;
}

}  // namespace ccc::ast
