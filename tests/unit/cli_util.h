// Runs the `ccc` command line in-process for tests.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace ccc::test {

struct CliResult {
  int code;
  std::string out, err;
};

inline CliResult run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int code = cli::run(args, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace ccc::test
