// The wrong-schedule corpus: every tests/verify_bad/NAME.sched passes the front end and is then
// rejected by verification or sync planning with exactly tests/verify_bad/NAME.expected.
// Leading comment lines `# ranks: N` (default 4), `# root: R` and `# in-place` set the run; the
// last line, `# bug: line N`, says where the bug is (the line a user must change to fix it).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

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

// The `# bug: line N` marker's N; 0 without one.
int bug_line_of(const std::string& text) {
  const std::string marker = "# bug: line ";
  const size_t at = text.rfind(marker);
  return at == std::string::npos ? 0 : std::stoi(text.substr(at + marker.size()));
}

struct Verdict {
  SourceFile file;
  bool front_end_ok = false;  // the schedule parses and instantiates: its bug is one of meaning
  bool rejected = false;      // and verification or sync planning refuses it
  Diagnostics diags;
};

Verdict check_corpus_schedule(const std::string& name) {
  const std::string rel = "tests/verify_bad/" + name;
  Verdict v;
  v.file = {rel + ".sched", test::read_file(std::string(CCC_SOURCE_DIR) + "/" + rel + ".sched")};
  RunSettings s = settings_of(v.file.text);
  std::optional<StepProgram> program = run_front_end(v.file, {s.ranks, s.root}, v.diags);
  v.front_end_ok = program.has_value();
  if (!program) return v;
  SyncOptions opts;
  opts.in_place = s.in_place;
  v.rejected = !run_analysis(*program, opts, v.diags);
  return v;
}

class WrongSchedule : public ::testing::TestWithParam<std::string> {};

TEST_P(WrongSchedule, IsRejectedWithTheExpectedDiagnostics) {
  Verdict v = check_corpus_schedule(GetParam());
  ASSERT_TRUE(v.front_end_ok) << v.diags.render(&v.file);
  EXPECT_TRUE(v.rejected);
  EXPECT_TRUE(v.diags.has_errors());
  test::expect_matches_golden(v.diags.render(&v.file), "tests/verify_bad/" + GetParam() + ".expected",
                              "Corpus/WrongSchedule.*");
}

INSTANTIATE_TEST_SUITE_P(Corpus, WrongSchedule, ::testing::ValuesIn(corpus()),
                         [](const auto& info) { return info.param; });

TEST(WrongSchedule, CorpusHasAtLeastFortySchedules) { EXPECT_GE(corpus().size(), 40u); }

// How often the first error is where the bug is: the share of the corpus whose first error, or a
// note attached to it, is on the marked line. A user reads the first error first; one that
// blames an innocent line (a phase that faithfully copied a wrong value, the schedule's header
// for a loop one step short) sends them looking in the wrong place. The bar is the share reached
// so far, so that a change that blames worse fails here.
TEST(WrongSchedule, TheFirstErrorPointsAtTheBug) {
  const double kBar = 0.9;  // 40 of 44 when set
  int marked = 0, blamed = 0;
  std::string missed;
  for (const std::string& name : corpus()) {
    Verdict v = check_corpus_schedule(name);
    const int bug = bug_line_of(v.file.text);
    EXPECT_GT(bug, 0) << name << ": no '# bug: line N' marker";
    if (bug == 0) continue;
    ++marked;
    const std::vector<Diagnostic>& all = v.diags.all();
    auto first = std::find_if(all.begin(), all.end(), [](const Diagnostic& d) { return d.severity == Severity::Error; });
    bool hit = false;
    for (auto d = first; d != all.end() && (d == first || d->severity == Severity::Note); ++d) hit = hit || d->loc.line == bug;
    if (hit) ++blamed;
    else missed += fmt::format("  {}: bug on line {}, first error on line {}\n", name, bug, first != all.end() ? first->loc.line : 0);
  }
  const double share = marked == 0 ? 0 : static_cast<double>(blamed) / marked;
  std::cout << fmt::format("[blame] the first error points at the bug in {} of {} schedules ({:.0f} %)\n", blamed, marked,
                           100 * share);
  EXPECT_GE(share, kBar) << "missed:\n" << missed;
}

}  // namespace
