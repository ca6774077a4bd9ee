// The schedules shipped in schedules/*.sched, embedded in the library and indexed by collective
// and name (the name after the collective keyword: `allreduce ring { ... }` is "ring").
#pragma once

#include <string>
#include <vector>

#include "ccc/diagnostics.h"
#include "step_program.h"

namespace ccc {

struct ShippedSchedule {
  Collective collective = Collective::AllReduce;
  std::string name;
  SourceFile file;
};

// Every shipped schedule that parses, in file-name order (parsed once).
const std::vector<ShippedSchedule>& shipped_schedules();

// The shipped schedule `name` of `collective`; throws Error(InvalidArgument) listing the names
// there are for that collective.
const ShippedSchedule& find_shipped_schedule(Collective collective, const std::string& name);

}  // namespace ccc
