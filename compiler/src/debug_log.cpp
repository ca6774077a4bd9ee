#include "debug_log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ccc {

bool debug_info_on() {
  static const bool on = [] {
    const char* level = std::getenv("CCC_DEBUG");
    return level != nullptr && std::strcmp(level, "INFO") == 0;
  }();
  return on;
}

void debug_info(const std::string& line) {
  if (debug_info_on()) std::fprintf(stderr, "ccc INFO: %s\n", line.c_str());
}

}  // namespace ccc
