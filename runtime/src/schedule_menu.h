// The candidates selection chooses from: schedule sources run through the front end, verified
// and sync-planned (out of place) for one collective and rank count, so the cost model prices
// the program that runs (staging steps included) and its waits. Schedules of other collectives
// are left out; ones that do not instantiate, verify or plan for this N (e.g. a butterfly at
// N = 6) are left out with the reason.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ccc/diagnostics.h"
#include "select.h"
#include "sync_plan.h"

namespace ccc {

class ScheduleMenu {
 public:
  // `defines`: parameter values (`param NAME`), each given to the schedules that declare it.
  ScheduleMenu(Collective collective, int nranks, const std::vector<SourceFile>& sources, int root = 0,
               const std::map<std::string, int64_t>& defines = {});
  ScheduleMenu(const ScheduleMenu&) = delete;  // candidates point into programs_
  ScheduleMenu& operator=(const ScheduleMenu&) = delete;

  const std::vector<CandidateSchedule>& candidates() const { return candidates_; }
  // One line per schedule left out for this N: "butterfly.sched: N = 6 is not a power of two".
  const std::vector<std::string>& skipped() const { return skipped_; }
  // The parameters the collective's schedules declare, each schedule's whether or not it is a
  // candidate: what `defines` may name.
  const std::set<std::string>& parameters() const { return parameters_; }

 private:
  std::deque<PlannedProgram> programs_;  // a deque: growing it does not move what candidates_ point at
  std::vector<CandidateSchedule> candidates_;
  std::vector<std::string> skipped_;
  std::set<std::string> parameters_;
};

}  // namespace ccc
