#include "ccc/schedule_menu.h"

#include "ccc/instantiate.h"
#include "ccc/parser.h"

namespace ccc {

ScheduleMenu::ScheduleMenu(Collective collective, int nranks, const std::vector<SourceFile>& sources, int root) {
  for (const SourceFile& file : sources) {
    Diagnostics diags;
    std::optional<ast::Schedule> schedule = parse_schedule(file, diags);
    if (schedule && schedule->collective != collective) continue;
    std::optional<StepProgram> program;
    if (schedule) program = instantiate(*schedule, InstantiateOptions{nranks, root}, file, diags);
    if (!program) {
      skipped_.push_back(file.name + ": " + (diags.all().empty() ? "not usable" : diags.all().front().message));
      continue;
    }
    programs_.push_back(std::move(*program));
    candidates_.push_back({programs_.back().schedule, &programs_.back(), nullptr});
  }
}

}  // namespace ccc
