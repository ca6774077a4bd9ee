// Source locations and diagnostics shared by every pass.
//
// Every error the compiler reports about a schedule reads
//   FILE:LINE:COL: error: MESSAGE
//   <the source line>
//        ^
// optionally followed by `note:` lines in the same format.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ccc {

// 1-based line and column; line == 0 means "no location".
struct SourceLoc {
  int line = 0;
  int col = 0;
  bool valid() const { return line > 0; }
  friend bool operator==(const SourceLoc&, const SourceLoc&) = default;
};

// A schedule's text and the name it is reported under.
struct SourceFile {
  std::string name;  // as given on the command line, e.g. "schedules/ring.sched"
  std::string text;
  std::string_view line_text(int line) const;  // without the newline; empty if out of range
};

enum class Severity { Error, Warning, Note };

struct Diagnostic {
  Severity severity = Severity::Error;
  SourceLoc loc;
  std::string message;
};

// Collects diagnostics in order; a note attaches to the diagnostic before it.
class Diagnostics {
 public:
  void error(SourceLoc loc, std::string message);
  // A warning, or an error marked [-Werror] once warnings_are_errors() is set.
  void warning(SourceLoc loc, std::string message);
  void note(SourceLoc loc, std::string message);

  // `--Werror`: later warnings become errors (and so stop the pipeline like any error).
  void warnings_are_errors(bool on) { werror_ = on; }

  bool has_errors() const { return errors_ > 0; }
  int error_count() const { return errors_; }
  const std::vector<Diagnostic>& all() const { return list_; }

  // Renders every diagnostic as `file:line:col: severity: message` plus the source line and a
  // caret. `file` may be null (then no source line is shown). `warnings` false leaves warnings
  // (and their notes) out. `first` skips the diagnostics before it (those already shown).
  std::string render(const SourceFile* file, bool warnings = true, size_t first = 0) const;

 private:
  std::vector<Diagnostic> list_;
  int errors_ = 0;
  bool werror_ = false;
};

// Renders one diagnostic (see Diagnostics::render).
std::string render_diagnostic(const Diagnostic& d, const SourceFile* file);

}  // namespace ccc
