#include "lexer.h"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace ccc {
namespace {

constexpr std::array<std::pair<std::string_view, Tok>, 25> kKeywords{{
    {"allreduce", Tok::KwAllreduce}, {"reduce_scatter", Tok::KwReduceScatter},
    {"allgather", Tok::KwAllgather}, {"broadcast", Tok::KwBroadcast}, {"reduce", Tok::KwReduce},
    {"alltoall", Tok::KwAlltoall},
    {"copy", Tok::KwCopy}, {"chunk", Tok::KwChunk}, {"chunks", Tok::KwChunks},
    {"let", Tok::KwLet}, {"requires", Tok::KwRequires}, {"is", Tok::KwIs},
    {"phase", Tok::KwPhase}, {"step", Tok::KwStep}, {"in", Tok::KwIn}, {"for", Tok::KwFor},
    {"where", Tok::KwWhere}, {"if", Tok::KwIf}, {"else", Tok::KwElse}, {"into", Tok::KwInto},
    {"from", Tok::KwFrom}, {"of", Tok::KwOf}, {"input", Tok::KwInput},
    {"output", Tok::KwOutput}, {"scratch", Tok::KwScratch},
}};

// Operators, longest first so that "<<" wins over "<".
constexpr std::array<std::pair<std::string_view, Tok>, 29> kOperators{{
    {"..", Tok::DotDot}, {"<<", Tok::Shl}, {">>", Tok::Shr}, {"==", Tok::Eq}, {"!=", Tok::Ne},
    {"<=", Tok::Le}, {">=", Tok::Ge}, {"&&", Tok::AndAnd}, {"||", Tok::OrOr},
    {"{", Tok::LBrace}, {"}", Tok::RBrace}, {"(", Tok::LParen}, {")", Tok::RParen},
    {",", Tok::Comma}, {"=", Tok::Assign}, {"?", Tok::Question}, {":", Tok::Colon},
    {"+", Tok::Plus}, {"-", Tok::Minus}, {"*", Tok::Star}, {"/", Tok::Slash},
    {"%", Tok::Percent}, {"^", Tok::Caret}, {"&", Tok::Amp}, {"|", Tok::Pipe},
    {"~", Tok::Tilde}, {"<", Tok::Lt}, {">", Tok::Gt}, {"!", Tok::Bang},
}};

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

// Stop lexing after this many errors: binary garbage would otherwise report every byte.
constexpr int kMaxLexErrors = 20;

}  // namespace

const char* token_name(Tok t) {
  switch (t) {
    case Tok::End: return "end of file";
    case Tok::Int: return "integer";
    case Tok::Ident: return "name";
    default: break;
  }
  static_assert(static_cast<size_t>(Tok::Bang) < 64, "token_name's table is too small");
  static const std::array<std::string, 64> names = [] {
    std::array<std::string, 64> n{};
    for (auto [text, tok] : kKeywords) n[static_cast<size_t>(tok)] = fmt::format("'{}'", text);
    for (auto [text, tok] : kOperators) n[static_cast<size_t>(tok)] = fmt::format("'{}'", text);
    return n;
  }();
  return names[static_cast<size_t>(t)].c_str();
}

std::vector<Token> lex(const SourceFile& file, Diagnostics& diags) {
  std::vector<Token> out;
  std::string_view s = file.text;
  int line = 1;
  size_t line_start = 0;
  int errors = 0;
  auto loc_at = [&](size_t pos) { return SourceLoc{line, static_cast<int>(pos - line_start) + 1}; };
  auto report = [&](size_t pos, std::string msg) {
    if (errors < kMaxLexErrors) diags.error(loc_at(pos), std::move(msg));
    ++errors;
  };

  size_t i = 0;
  while (i < s.size() && errors < kMaxLexErrors) {
    char c = s[i];
    if (c == '\n') {
      ++i;
      ++line;
      line_start = i;
      continue;
    }
    if (is_space(c)) {
      ++i;
      continue;
    }
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    size_t start = i;
    if (is_ident_start(c)) {
      while (i < s.size() && (is_ident_start(s[i]) || is_digit(s[i]))) ++i;
      std::string_view word = s.substr(start, i - start);
      Tok kind = Tok::Ident;
      for (auto [text, tok] : kKeywords)
        if (text == word) kind = tok;
      out.push_back({kind, loc_at(start), word, 0});
      continue;
    }
    if (is_digit(c)) {
      int64_t value = 0;
      bool overflow = false;
      while (i < s.size() && is_digit(s[i])) {
        overflow = overflow || __builtin_mul_overflow(value, int64_t{10}, &value) ||
                   __builtin_add_overflow(value, int64_t{s[i] - '0'}, &value);
        ++i;
      }
      std::string_view digits = s.substr(start, i - start);
      if (i < s.size() && is_ident_start(s[i])) {
        while (i < s.size() && (is_ident_start(s[i]) || is_digit(s[i]))) ++i;
        report(start, fmt::format("malformed number '{}'", s.substr(start, i - start)));
        continue;
      }
      if (overflow) {
        report(start, fmt::format("integer literal {} does not fit in 64 bits", digits));
        continue;
      }
      out.push_back({Tok::Int, loc_at(start), digits, value});
      continue;
    }
    bool matched = false;
    for (auto [text, tok] : kOperators) {
      if (s.substr(i, text.size()) == text) {
        out.push_back({tok, loc_at(i), s.substr(i, text.size()), 0});
        i += text.size();
        matched = true;
        break;
      }
    }
    if (matched) continue;
    // One report for a run of unexpected bytes.
    unsigned char byte = static_cast<unsigned char>(c);
    if (byte >= 0x21 && byte < 0x7f)
      report(start, fmt::format("unexpected character '{}'", c));
    else
      report(start, fmt::format("unexpected byte 0x{:02x}", byte));
    while (i < s.size() && !is_space(s[i]) && !is_ident_start(s[i]) && !is_digit(s[i]) && s[i] != '#') ++i;
    if (i == start) ++i;
  }
  if (errors >= kMaxLexErrors) diags.error(loc_at(i < s.size() ? i : s.size()), "too many errors; giving up");
  out.push_back({Tok::End, loc_at(s.size()), {}, 0});
  return out;
}

}  // namespace ccc
