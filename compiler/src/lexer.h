// Lexer for the schedule DSL: source text -> tokens. Newlines are insignificant (every statement
// starts with a keyword); `#` starts a comment that runs to the end of the line.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ccc/diagnostics.h"

namespace ccc {

enum class Tok {
  End, Int, Ident,
  // keywords (reserved: they cannot name a variable)
  KwAllreduce, KwReduceScatter, KwAllgather, KwBroadcast, KwReduce, KwAlltoall, KwCopy, KwChunk, KwChunks,
  KwLet, KwRequires, KwIs, KwPhase, KwStep, KwIn, KwFor, KwWhere, KwIf, KwElse, KwInto, KwFrom,
  KwOf, KwInput, KwOutput, KwScratch,
  // punctuation and operators
  LBrace, RBrace, LParen, RParen, Comma, Assign, DotDot, Question, Colon,
  Plus, Minus, Star, Slash, Percent, Caret, Amp, Pipe, Tilde, Shl, Shr,
  Eq, Ne, Lt, Le, Gt, Ge, AndAnd, OrOr, Bang,
};

// How a token kind reads in messages: "'{'", "integer", "'reduce'", "end of file".
const char* token_name(Tok t);

struct Token {
  Tok kind = Tok::End;
  SourceLoc loc;
  std::string_view text;  // points into the SourceFile's text
  int64_t value = 0;      // Tok::Int
};

// Source files larger than this are refused (the front end is meant for hand-written schedules).
inline constexpr size_t kMaxSourceBytes = 1 << 20;

// Tokens of `file`, always ending with Tok::End. Bad characters and oversized integer literals are
// reported and skipped, so parsing can continue and report more.
std::vector<Token> lex(const SourceFile& file, Diagnostics& diags);

}  // namespace ccc
