// The bad-input corpus: every tests/bad/NAME.sched must fail with exactly tests/bad/NAME.expected.
// A first-line comment `# ranks: N` (default 4) and `# root: R` set the instantiation.
#include <gtest/gtest.h>

#include <filesystem>

#include "pipeline.h"
#include "golden_util.h"

using namespace ccc;

namespace {

// The value of a `# KEY: N` comment on one of the first two lines, or fallback.
int header_value(const std::string& text, const std::string& key, int fallback) {
  std::string head = text.substr(0, text.find('\n', text.find('\n') + 1));
  size_t at = head.find("# " + key + ": ");
  if (at == std::string::npos) return fallback;
  return std::stoi(head.substr(at + key.size() + 4));
}

std::vector<std::string> bad_inputs() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CCC_SOURCE_DIR) + "/tests/bad"))
    if (e.path().extension() == ".sched") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class BadInput : public ::testing::TestWithParam<std::string> {};

TEST_P(BadInput, FailsWithTheExpectedDiagnostics) {
  const std::string rel = "tests/bad/" + GetParam();
  SourceFile file{rel + ".sched", test::read_file(std::string(CCC_SOURCE_DIR) + "/" + rel + ".sched")};
  Diagnostics diags;
  InstantiateOptions opts{header_value(file.text, "ranks", 4), header_value(file.text, "root", 0)};
  EXPECT_FALSE(run_front_end(file, opts, diags));
  EXPECT_TRUE(diags.has_errors());
  test::expect_matches_golden(diags.render(&file), rel + ".expected", "Corpus/BadInput.*");
}

INSTANTIATE_TEST_SUITE_P(Corpus, BadInput, ::testing::ValuesIn(bad_inputs()),
                         [](const auto& info) { return info.param; });

}  // namespace
