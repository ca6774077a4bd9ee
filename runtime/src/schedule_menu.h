// The candidates selection chooses from: schedule sources run through the front end, verified
// and sync-planned (out of place) for one collective and rank count, so the cost model prices
// the program that runs (staging steps included) and its waits. Schedules of other collectives
// are left out; ones that do not instantiate, verify or plan for this N (e.g. a butterfly at
// N = 6) are left out with the reason.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "ccc/diagnostics.h"
#include "select.h"
#include "sync_plan.h"

namespace ccc {

class ScheduleMenu {
 public:
  ScheduleMenu(Collective collective, int nranks, const std::vector<SourceFile>& sources, int root = 0);
  ScheduleMenu(const ScheduleMenu&) = delete;  // candidates point into programs_
  ScheduleMenu& operator=(const ScheduleMenu&) = delete;

  const std::vector<CandidateSchedule>& candidates() const { return candidates_; }
  // One line per schedule left out for this N: "butterfly.sched: N = 6 is not a power of two".
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  std::deque<PlannedProgram> programs_;  // a deque: growing it does not move what candidates_ point at
  std::vector<CandidateSchedule> candidates_;
  std::vector<std::string> skipped_;
};

}  // namespace ccc
