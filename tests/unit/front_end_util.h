// Helpers for front-end tests: run the front end on text or on a shipped schedule.
#pragma once

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "parser.h"
#include "pipeline.h"

namespace ccc::test {

struct FrontEndResult {
  std::optional<StepProgram> program;
  std::string errors;  // rendered diagnostics
};

inline FrontEndResult compile_text(const std::string& text, int nranks, int root = 0,
                                   const std::string& name = "t.sched") {
  SourceFile file{name, text};
  Diagnostics diags;
  FrontEndResult r;
  r.program = run_front_end(file, {nranks, root}, diags);
  r.errors = diags.render(&file);
  return r;
}

// A schedule as tests name it: a shipped one by name ("ring"), any other by its path in the
// source tree ("tests/lit/run/allpairs_slots.sched"). The name its diagnostics show:
inline std::string schedule_file_name(const std::string& name) {
  return name.find('/') != std::string::npos ? name : "schedules/" + name + ".sched";
}
inline std::string schedule_path(const std::string& name) { return std::string(CCC_SOURCE_DIR) + "/" + schedule_file_name(name); }

// Every schedules/*.sched, by name (no extension), sorted.
inline std::vector<std::string> shipped_schedule_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CCC_SOURCE_DIR) + "/schedules"))
    if (e.path().extension() == ".sched") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline FrontEndResult compile_schedule(const std::string& name, int nranks, int root = 0) {
  Diagnostics diags;
  std::optional<SourceFile> file = read_source(schedule_path(name), diags);
  if (!file) return {std::nullopt, diags.render(nullptr)};
  file->name = schedule_file_name(name);
  FrontEndResult r;
  r.program = run_front_end(*file, {nranks, root}, diags);
  r.errors = diags.render(&*file);
  return r;
}

}  // namespace ccc::test
