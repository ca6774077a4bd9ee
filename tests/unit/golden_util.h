// Compare text against a file under the source tree; CCC_UPDATE_GOLDEN=1 rewrites the file.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ccc::test {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `rel` is relative to the source root, e.g. "tests/golden/steps/ring.n4.txt".
inline void expect_matches_golden(const std::string& actual, const std::string& rel, const std::string& test_filter) {
  std::filesystem::path path = std::filesystem::path(CCC_SOURCE_DIR) / rel;
  const char* update = std::getenv("CCC_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << rel << " is missing; create it with:\n  CCC_UPDATE_GOLDEN=1 "
                                              << CCC_BINARY_DIR << "/tests/ccc_tests --gtest_filter='" << test_filter << "'";
  EXPECT_EQ(actual, read_file(path)) << rel << " differs; if the new text is right, refresh it with:\n"
                                     << "  CCC_UPDATE_GOLDEN=1 " << CCC_BINARY_DIR << "/tests/ccc_tests --gtest_filter='"
                                     << test_filter << "'";
}

}  // namespace ccc::test
