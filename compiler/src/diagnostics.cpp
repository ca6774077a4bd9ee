#include "ccc/diagnostics.h"

#include <fmt/format.h>

namespace ccc {

std::string_view SourceFile::line_text(int line) const {
  if (line < 1) return {};
  size_t pos = 0;
  for (int l = 1; l < line; ++l) {
    pos = text.find('\n', pos);
    if (pos == std::string::npos) return {};
    ++pos;
  }
  size_t end = text.find('\n', pos);
  if (end == std::string::npos) end = text.size();
  return std::string_view(text).substr(pos, end - pos);
}

void Diagnostics::error(SourceLoc loc, std::string message) {
  list_.push_back({Severity::Error, loc, std::move(message)});
  ++errors_;
}
void Diagnostics::warning(SourceLoc loc, std::string message) {
  if (werror_) return error(loc, std::move(message) + " [-Werror]");
  list_.push_back({Severity::Warning, loc, std::move(message)});
}
void Diagnostics::note(SourceLoc loc, std::string message) {
  list_.push_back({Severity::Note, loc, std::move(message)});
}

static const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Error: return "error";
    case Severity::Warning: return "warning";
    case Severity::Note: return "note";
  }
  return "error";
}

std::string render_diagnostic(const Diagnostic& d, const SourceFile* file) {
  std::string out;
  std::string name = file ? file->name : std::string("<input>");
  if (d.loc.valid())
    out = fmt::format("{}:{}:{}: {}: {}\n", name, d.loc.line, d.loc.col, severity_name(d.severity), d.message);
  else
    out = fmt::format("{}: {}: {}\n", name, severity_name(d.severity), d.message);
  if (file && d.loc.valid()) {
    std::string_view line = file->line_text(d.loc.line);
    // Keep the echo printable: binary garbage is shown as '?', tabs stay tabs so the caret lines up.
    std::string shown;
    std::string caret;
    for (size_t i = 0; i < line.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(line[i]);
      shown += (c == '\t' || (c >= 0x20 && c < 0x7f)) ? static_cast<char>(c) : '?';
      if (static_cast<int>(i) + 1 < d.loc.col) caret += (c == '\t') ? '\t' : ' ';
    }
    out += shown + "\n" + caret + "^\n";
  }
  return out;
}

std::string Diagnostics::render(const SourceFile* file, bool warnings, size_t first) const {
  std::string out;
  bool shown = true;  // a note follows the fate of the diagnostic it belongs to
  for (size_t i = first; i < list_.size(); ++i) {
    const Diagnostic& d = list_[i];
    if (d.severity != Severity::Note) shown = warnings || d.severity != Severity::Warning;
    if (shown) out += render_diagnostic(d, file);
  }
  return out;
}

}  // namespace ccc
