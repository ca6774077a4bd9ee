// The `ccc` command line as a function, so tests run it without a process.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace ccc::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitScheduleError = 1;  // the schedule (or its file) is bad
inline constexpr int kExitUsage = 2;          // the command line is bad

// args excludes the program name. Normal output goes to out, diagnostics and dumps to err.
int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ccc::cli
