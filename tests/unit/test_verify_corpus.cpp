// The wrong-schedule corpus: every tests/verify_bad/NAME.sched passes the front end and is then
// rejected by verification or sync planning with exactly tests/verify_bad/NAME.expected.
// Leading comment lines `# ranks: N` (default 4), `# root: R` and `# in-place` set the run.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "pipeline.h"
#include "golden_util.h"

using namespace ccc;

namespace {

struct RunSettings {
  int ranks = 4;
  int root = 0;
  bool in_place = false;
};

RunSettings settings_of(const std::string& text) {
  RunSettings s;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line) && line.rfind('#', 0) == 0;) {
    if (line.rfind("# ranks: ", 0) == 0) s.ranks = std::stoi(line.substr(9));
    if (line.rfind("# root: ", 0) == 0) s.root = std::stoi(line.substr(8));
    if (line == "# in-place") s.in_place = true;
  }
  return s;
}

std::vector<std::string> corpus() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CCC_SOURCE_DIR) + "/tests/verify_bad"))
    if (e.path().extension() == ".sched") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class WrongSchedule : public ::testing::TestWithParam<std::string> {};

TEST_P(WrongSchedule, IsRejectedWithTheExpectedDiagnostics) {
  const std::string rel = "tests/verify_bad/" + GetParam();
  SourceFile file{rel + ".sched", test::read_file(std::string(CCC_SOURCE_DIR) + "/" + rel + ".sched")};
  RunSettings s = settings_of(file.text);
  Diagnostics diags;
  std::optional<StepProgram> program = run_front_end(file, {s.ranks, s.root}, diags);
  ASSERT_TRUE(program) << diags.render(&file);
  SyncOptions opts;
  opts.in_place = s.in_place;
  EXPECT_FALSE(run_analysis(*program, opts, diags));
  EXPECT_TRUE(diags.has_errors());
  test::expect_matches_golden(diags.render(&file), rel + ".expected", "Corpus/WrongSchedule.*");
}

INSTANTIATE_TEST_SUITE_P(Corpus, WrongSchedule, ::testing::ValuesIn(corpus()),
                         [](const auto& info) { return info.param; });

TEST(WrongSchedule, CorpusHasAtLeastThirtySchedules) { EXPECT_GE(corpus().size(), 30u); }

}  // namespace
