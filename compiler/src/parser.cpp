#include "parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "check.h"
#include "lexer.h"

namespace ccc {
namespace {

using ast::BinaryOp;
using ast::Expr;
using ast::Stmt;

constexpr int kMaxParseErrors = 20;

// Thrown to abandon the statement being parsed; the block loop resynchronises.
struct SyntaxError {};
// Thrown to abandon the whole file (too deep, unterminated, too many errors).
struct GiveUp {};

class Parser {
 public:
  Parser(const std::vector<Token>& toks, Diagnostics& diags) : toks_(toks), diags_(diags) {}

  std::optional<ast::Schedule> parse_file() {
    try {
      return parse_schedule_body();
    } catch (const GiveUp&) {
      return std::nullopt;
    } catch (const SyntaxError&) {
      return std::nullopt;
    }
  }

 private:
  // The tokens end with Tok::End, which advance() never moves past.
  const Token& peek() const { return toks_[pos_]; }
  bool at(Tok k) const { return peek().kind == k; }
  const Token& advance() {
    const Token& t = peek();
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool accept(Tok k) {
    if (!at(k)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    if (t.kind == Tok::Ident || t.kind == Tok::Int) return fmt::format("'{}'", t.text);
    return token_name(t.kind);
  }

  void error(SourceLoc loc, std::string msg) {
    diags_.error(loc, std::move(msg));
    if (diags_.error_count() >= kMaxParseErrors) {
      diags_.error(loc, "too many errors; giving up");
      throw GiveUp{};
    }
  }
  [[noreturn]] void fail(SourceLoc loc, std::string msg) {
    error(loc, std::move(msg));
    throw SyntaxError{};
  }
  const Token& expect(Tok k, std::string_view context) {
    if (!at(k)) fail(peek().loc, fmt::format("expected {} {}, found {}", token_name(k), context, describe(peek())));
    return advance();
  }
  // A keyword where a name belongs (`let step = ...`) is reported once, then taken as the name,
  // and later uses of it as a value are accepted quietly: one clear message instead of a cascade.
  std::string expect_ident(std::string_view what) {
    if (is_keyword(peek().kind)) {
      error(peek().loc, fmt::format("'{}' is a keyword and cannot name a variable; choose another name",
                                    peek().text));
      misused_keywords_.insert(peek().kind);
      return std::string(advance().text);
    }
    if (!at(Tok::Ident)) fail(peek().loc, fmt::format("expected {}, found {}", what, describe(peek())));
    return std::string(advance().text);
  }
  static bool is_keyword(Tok k) { return k > Tok::Ident && k <= Tok::KwScratch; }

  // A phase name may be any word, keywords included (`phase reduce_scatter`).
  std::string expect_name(std::string_view what) {
    std::string_view text = peek().text;
    bool word = !text.empty() && (std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_');
    if (!word) fail(peek().loc, fmt::format("expected {}, found {}", what, describe(peek())));
    return std::string(advance().text);
  }

  // ---- schedule and blocks ----

  std::optional<ast::Schedule> parse_schedule_body() {
    ast::Schedule s;
    const Token& head = peek();
    switch (head.kind) {
      case Tok::KwAllreduce: s.collective = Collective::AllReduce; break;
      case Tok::KwReduceScatter: s.collective = Collective::ReduceScatter; break;
      case Tok::KwAllgather: s.collective = Collective::AllGather; break;
      case Tok::KwBroadcast: s.collective = Collective::Broadcast; break;
      case Tok::KwReduce: s.collective = Collective::Reduce; break;
      case Tok::KwAlltoall: s.collective = Collective::AllToAll; break;
      case Tok::End:
        error({1, 1}, "empty schedule: expected a collective header such as 'allreduce NAME {'");
        return std::nullopt;
      default:
        error(head.loc, fmt::format("expected a collective (allreduce, reduce_scatter, allgather, "
                                    "broadcast, reduce or alltoall), found {}", describe(head)));
        return std::nullopt;
    }
    s.loc = advance().loc;
    s.name = expect_ident("the schedule's name");
    s.body = parse_braced_block("after the schedule's name");
    if (!at(Tok::End))
      error(peek().loc, fmt::format("unexpected {} after the schedule's closing '}}' (one schedule per file)",
                                    describe(peek())));
    if (diags_.has_errors()) return std::nullopt;
    return s;
  }

  ast::Block parse_braced_block(std::string_view context) {
    const Token& open = expect(Tok::LBrace, context);
    DepthGuard guard(*this, block_depth_, open.loc, "blocks");
    ast::Block body;
    while (!at(Tok::RBrace)) {
      if (at(Tok::End)) {
        error(open.loc, "unterminated block: this '{' has no matching '}'");
        throw GiveUp{};
      }
      size_t stmt_start = pos_;
      try {
        body.push_back(parse_stmt());
      } catch (const SyntaxError&) {
        synchronize(stmt_start);
      }
    }
    advance();
    return body;
  }

  static bool starts_stmt(Tok k) {
    switch (k) {
      case Tok::KwChunks: case Tok::KwRequires: case Tok::KwLet: case Tok::KwPhase:
      case Tok::KwStep: case Tok::KwFor: case Tok::KwIf: case Tok::KwReduce: case Tok::KwCopy:
        return true;
      default:
        return false;
    }
  }

  // Skips to the next statement of the current block (or its closing brace) after the one that
  // began at stmt_start.
  void synchronize(size_t stmt_start) {
    int nest = 0;
    while (!at(Tok::End)) {
      Tok k = peek().kind;
      if (nest == 0 && pos_ > stmt_start && starts_stmt(k)) return;
      if (k == Tok::LBrace) ++nest;
      if (k == Tok::RBrace) {
        if (nest == 0) return;
        --nest;
      }
      advance();
    }
  }

  Stmt parse_stmt() {
    const Token& kw = peek();
    Stmt st{kw.loc, ast::ChunksStmt{}};
    switch (kw.kind) {
      case Tok::KwChunks:
        advance();
        st.node = ast::ChunksStmt{parse_expr()};
        return st;
      case Tok::KwScratch: {
        advance();
        ast::ScratchStmt scratch{parse_expr()};
        if (at_word("slots")) {
          advance();
          scratch.slots = true;
        }
        st.node = std::move(scratch);
        return st;
      }
      case Tok::KwRequires:
        advance();
        st.node = ast::RequiresStmt{parse_expr()};
        return st;
      case Tok::KwLet: st.node = parse_let(); return st;
      case Tok::KwPhase: {
        advance();
        ast::PhaseStmt ph;
        ph.name = expect_name("a phase name");
        ph.body = parse_braced_block("after the phase name");
        st.node = std::move(ph);
        return st;
      }
      case Tok::KwStep: {
        advance();
        ast::StepStmt step;
        if (at(Tok::Ident)) step.loop = parse_loop_header();
        step.body = parse_braced_block(step.loop ? "after the step range" : "after 'step'");
        st.node = std::move(step);
        return st;
      }
      case Tok::KwFor: {
        advance();
        ast::ForStmt f;
        f.loop = parse_loop_header();
        f.body = parse_braced_block("after the loop range");
        st.node = std::move(f);
        return st;
      }
      case Tok::KwIf: st.node = parse_if(); return st;
      case Tok::KwReduce:
      case Tok::KwCopy: st.node = parse_op(); return st;
      default:
        // `param` is a contextual word, not a keyword, so that schedules naming a variable `param`
        // keep working: a name cannot begin a statement, so `param NAME` is unambiguous.
        if (at_word("param") && next_is(Tok::Ident)) {
          st.node = parse_param();
          return st;
        }
        fail(kw.loc, fmt::format("expected a statement (chunks, scratch, requires, param, let, phase, step, for, "
                                 "if, reduce or copy), found {}", describe(kw)));
    }
  }

  ast::LetStmt parse_let() {
    advance();
    ast::LetStmt let;
    let.name = expect_ident("a name after 'let'");
    if (accept(Tok::LParen)) {
      let.is_function = true;
      if (!at(Tok::RParen)) {
        do let.params.push_back(expect_ident("a parameter name"));
        while (accept(Tok::Comma));
      }
      expect(Tok::RParen, "after the parameters");
    }
    expect(Tok::Assign, fmt::format("after 'let {}'", let.name));
    let.value = parse_expr();
    return let;
  }

  ast::LetStmt parse_param() {
    advance();
    ast::LetStmt param;
    param.is_param = true;
    param.name = expect_ident("a name after 'param'");
    expect(Tok::Assign, fmt::format("after 'param {}' (a parameter is a constant: 'param {} = EXPR')",
                                    param.name, param.name));
    param.value = parse_expr();
    return param;
  }

  ast::Loop parse_loop_header() {
    ast::Loop loop;
    loop.var_loc = peek().loc;
    loop.var = expect_ident("a loop variable");
    expect(Tok::KwIn, "after the loop variable");
    if (at(Tok::LBrace)) {
      advance();
      loop.is_set = true;
      do loop.set.push_back(parse_expr());
      while (accept(Tok::Comma));
      expect(Tok::RBrace, "to close the set");
    } else {
      loop.range.push_back(parse_expr());
      expect(Tok::DotDot, "in the range (ranges read FIRST .. LAST)");
      loop.range.push_back(parse_expr());
    }
    if (accept(Tok::KwWhere)) loop.where = parse_expr();
    return loop;
  }

  ast::IfStmt parse_if() {
    advance();
    ast::IfStmt node;
    node.cond = parse_expr();
    node.then_body = parse_braced_block("after the condition");
    if (at(Tok::KwElse)) {
      advance();
      if (at(Tok::KwIf)) {
        SourceLoc loc = peek().loc;
        DepthGuard guard(*this, block_depth_, loc, "blocks");
        node.else_body.push_back(Stmt{loc, parse_if()});
      } else {
        node.else_body = parse_braced_block("after 'else'");
      }
    }
    return node;
  }

  Buffer parse_buffer() {
    switch (peek().kind) {
      case Tok::KwInput: advance(); return Buffer::Input;
      case Tok::KwOutput: advance(); return Buffer::Output;
      case Tok::KwScratch: advance(); return Buffer::Scratch;
      default:
        fail(peek().loc, fmt::format("expected a buffer (input, output or scratch), found {}", describe(peek())));
    }
  }

  ast::OpStmt parse_op() {
    ast::OpStmt op;
    op.kind = advance().kind == Tok::KwReduce ? OpKind::Reduce : OpKind::Copy;
    if (accept(Tok::KwChunk)) {
      op.first = parse_expr();
    } else if (accept(Tok::KwChunks)) {
      op.first = parse_expr();
      expect(Tok::DotDot, "in the chunk range (ranges read FIRST .. LAST)");
      op.last = parse_expr();
    } else {
      fail(peek().loc, fmt::format("expected 'chunk' or 'chunks' after '{}', found {}", op_kind_name(op.kind),
                                   describe(peek())));
    }
    // Pull: [into BUF] from [BUF of] PEER. Push: [from BUF] to [BUF of] PEER. `to` is a word,
    // not a keyword, so it can still name a variable.
    const bool into = at(Tok::KwInto);
    if (into) {
      advance();
      op.dst = parse_written_buffer("into");
    }
    if (!into && at_word("to")) return parse_push(std::move(op));
    if (!into && !at(Tok::KwFrom))
      fail(peek().loc, fmt::format("expected 'from' (pull: from PEER) or 'to' (push: to PEER), found {}", describe(peek())));
    expect(Tok::KwFrom, "before the peer");
    if (at_buffer()) {
      const Buffer b = parse_buffer();
      if (!into && at_word("to")) {
        op.src = b;
        return parse_push(std::move(op));
      }
      op.src = b;
      expect(Tok::KwOf, into ? "after the source buffer" : "after the source buffer (or 'to PEER' to push from it)");
    }
    op.peer = parse_expr();
    parse_remap(op);
    return op;
  }

  // [as chunk F | as chunks F .. G]: the chunks written, when they differ from the chunks read.
  // `as` is a word, not a keyword (like `to`); the form must match the op's (`chunk` or `chunks`).
  // The wrong form is reported and then parsed as written, so the rest of the op does not
  // cascade into further errors.
  void parse_remap(ast::OpStmt& op) {
    if (!at_word("as")) return;
    advance();
    const bool range = at(Tok::KwChunks);
    if (!range && !at(Tok::KwChunk))
      fail(peek().loc, fmt::format("expected 'chunk' or 'chunks' after 'as', found {}", describe(peek())));
    if (range != op.last.has_value())
      error(peek().loc, op.last ? "expected 'chunks' after 'as': the op moves a range ('as chunks F .. G')"
                                : "expected 'chunk' after 'as': the op moves one chunk ('as chunk F')");
    advance();
    op.as_first = parse_expr();
    if (!range) return;
    expect(Tok::DotDot, "in the chunk range (ranges read FIRST .. LAST)");
    op.as_last = parse_expr();
  }

  // After `to`: [BUF of] PEER, the rank whose BUF (default output) the op writes.
  ast::OpStmt parse_push(ast::OpStmt op) {
    advance();  // to
    op.push = true;
    if (at_buffer()) {
      op.dst = parse_written_buffer("to");
      expect(Tok::KwOf, "after the destination buffer");
    }
    op.peer = parse_expr();
    parse_remap(op);
    return op;
  }

  bool at_word(std::string_view w) const { return at(Tok::Ident) && peek().text == w; }
  bool next_is(Tok k) const { return pos_ + 1 < toks_.size() && toks_[pos_ + 1].kind == k; }
  bool at_buffer() const { return at(Tok::KwInput) || at(Tok::KwOutput) || at(Tok::KwScratch); }
  Buffer parse_written_buffer(const char* how) {
    SourceLoc buf_loc = peek().loc;
    Buffer b = parse_buffer();
    if (b == Buffer::Input)
      error(buf_loc, fmt::format("cannot write {} input: a rank's input is read-only", how));
    return b;
  }

  // ---- expressions (precedence as in Rust: bitwise above comparisons) ----

  // Bounds recursion: deeper input is refused before it can overflow the stack.
  struct DepthGuard {
    int& depth;
    DepthGuard(Parser& p, int& counter, SourceLoc loc, std::string_view what) : depth(counter) {
      if (++depth > kMaxNesting) {
        p.error(loc, fmt::format("{} nest more than {} deep", what, kMaxNesting));
        throw GiveUp{};
      }
    }
    ~DepthGuard() { --depth; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  Expr make(Expr::Kind kind, SourceLoc loc, std::vector<Expr> args) {
    Expr e;
    e.kind = kind;
    e.loc = loc;
    int h = 0;
    for (const Expr& a : args) h = std::max(h, a.height);
    e.height = h + 1;
    e.args = std::move(args);
    if (e.height > kMaxNesting) {
      error(loc, fmt::format("expressions nest more than {} deep", kMaxNesting));
      throw GiveUp{};
    }
    return e;
  }
  Expr make_binary(BinaryOp op, SourceLoc loc, Expr lhs, Expr rhs) {
    std::vector<Expr> args;
    args.push_back(std::move(lhs));
    args.push_back(std::move(rhs));
    Expr e = make(Expr::Kind::Binary, loc, std::move(args));
    e.binary = op;
    return e;
  }

  Expr parse_expr() {
    DepthGuard guard(*this, expr_depth_, peek().loc, "expressions");
    Expr cond = parse_binary(0);
    if (!at(Tok::Question)) return cond;
    SourceLoc loc = advance().loc;
    Expr then_e = parse_expr();
    expect(Tok::Colon, "in the conditional expression");
    Expr else_e = parse_expr();
    std::vector<Expr> args;
    args.push_back(std::move(cond));
    args.push_back(std::move(then_e));
    args.push_back(std::move(else_e));
    return make(Expr::Kind::Ternary, loc, std::move(args));
  }

  struct Level {
    std::vector<std::pair<Tok, BinaryOp>> ops;
    bool chains;  // comparisons do not chain: `a < b < c` is an error
  };
  static const std::vector<Level>& levels() {
    static const std::vector<Level> l = {
        {{{Tok::OrOr, BinaryOp::LogOr}}, true},
        {{{Tok::AndAnd, BinaryOp::LogAnd}}, true},
        {{{Tok::Eq, BinaryOp::Eq}, {Tok::Ne, BinaryOp::Ne}, {Tok::Lt, BinaryOp::Lt}, {Tok::Le, BinaryOp::Le},
          {Tok::Gt, BinaryOp::Gt}, {Tok::Ge, BinaryOp::Ge}}, false},
        {{{Tok::Pipe, BinaryOp::Or}}, true},
        {{{Tok::Caret, BinaryOp::Xor}}, true},
        {{{Tok::Amp, BinaryOp::And}}, true},
        {{{Tok::Shl, BinaryOp::Shl}, {Tok::Shr, BinaryOp::Shr}}, true},
        {{{Tok::Plus, BinaryOp::Add}, {Tok::Minus, BinaryOp::Sub}}, true},
        {{{Tok::Star, BinaryOp::Mul}, {Tok::Slash, BinaryOp::Div}, {Tok::Percent, BinaryOp::Mod}}, true},
    };
    return l;
  }
  static constexpr size_t kComparisonLevel = 2;

  std::optional<BinaryOp> match_op(const Level& level) const {
    for (auto [tok, op] : level.ops)
      if (at(tok)) return op;
    return std::nullopt;
  }

  Expr parse_binary(size_t level) {
    if (level == levels().size()) return parse_unary();
    Expr lhs = parse_binary(level + 1);
    if (level == kComparisonLevel && at(Tok::KwIs)) return parse_is(std::move(lhs));
    bool first = true;
    while (auto op = match_op(levels()[level])) {
      if (!first && !levels()[level].chains)
        fail(peek().loc, "comparisons cannot be chained; combine them with '&&'");
      SourceLoc loc = advance().loc;
      Expr rhs = parse_binary(level + 1);
      lhs = make_binary(*op, loc, std::move(lhs), std::move(rhs));
      first = false;
    }
    return lhs;
  }

  Expr parse_is(Expr lhs) {
    SourceLoc loc = advance().loc;
    if (!at(Tok::Ident) || peek().text != "pow2")
      fail(peek().loc, fmt::format("expected 'pow2' after 'is', found {}", describe(peek())));
    advance();
    std::vector<Expr> args;
    args.push_back(std::move(lhs));
    return make(Expr::Kind::IsPow2, loc, std::move(args));
  }

  Expr parse_unary() {
    ast::UnaryOp op;
    switch (peek().kind) {
      case Tok::Minus: op = ast::UnaryOp::Neg; break;
      case Tok::Bang: op = ast::UnaryOp::Not; break;
      case Tok::Tilde: op = ast::UnaryOp::BitNot; break;
      default: return parse_primary();
    }
    SourceLoc loc = advance().loc;
    DepthGuard guard(*this, expr_depth_, loc, "expressions");
    std::vector<Expr> args;
    args.push_back(parse_unary());
    Expr e = make(Expr::Kind::Unary, loc, std::move(args));
    e.unary = op;
    return e;
  }

  Expr parse_primary() {
    const Token& t = peek();
    if (t.kind == Tok::Int) {
      advance();
      Expr e = make(Expr::Kind::Int, t.loc, {});
      e.value = t.value;
      return e;
    }
    if (t.kind == Tok::LParen) {
      advance();
      Expr e = parse_expr();
      expect(Tok::RParen, "to close the parenthesis");
      return e;
    }
    if (t.kind == Tok::Ident || misused_keywords_.contains(t.kind)) {
      advance();
      if (!at(Tok::LParen)) {
        Expr e = make(Expr::Kind::Name, t.loc, {});
        e.name = std::string(t.text);
        return e;
      }
      advance();
      std::vector<Expr> args;
      if (!at(Tok::RParen)) {
        do args.push_back(parse_expr());
        while (accept(Tok::Comma));
      }
      expect(Tok::RParen, "to close the argument list");
      Expr e = make(Expr::Kind::Call, t.loc, std::move(args));
      e.name = std::string(t.text);
      return e;
    }
    fail(t.loc, fmt::format("expected an expression, found {}", describe(t)));
  }

  const std::vector<Token>& toks_;
  Diagnostics& diags_;
  size_t pos_ = 0;
  int block_depth_ = 0;
  int expr_depth_ = 0;
  std::set<Tok> misused_keywords_;  // keywords already reported as names (expect_ident)
};

}  // namespace

std::optional<ast::Schedule> parse_schedule(const SourceFile& file, Diagnostics& diags) {
  if (file.text.size() > kMaxSourceBytes) {
    diags.error({}, fmt::format("schedule file is {} bytes; the limit is {} (1 MiB)", file.text.size(),
                                kMaxSourceBytes));
    return std::nullopt;
  }
  std::vector<Token> toks = lex(file, diags);
  if (diags.has_errors()) return std::nullopt;
  std::optional<ast::Schedule> s = Parser(toks, diags).parse_file();
  if (!s || !check_schedule(*s, diags)) return std::nullopt;
  return s;
}

}  // namespace ccc
