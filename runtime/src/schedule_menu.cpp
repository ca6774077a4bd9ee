#include "schedule_menu.h"

#include "instantiate.h"
#include "parser.h"
#include "pipeline.h"

namespace ccc {

ScheduleMenu::ScheduleMenu(Collective collective, int nranks, const std::vector<SourceFile>& sources, int root) {
  for (const SourceFile& file : sources) {
    Diagnostics diags;
    std::optional<ast::Schedule> schedule = parse_schedule(file, diags);
    if (schedule && schedule->collective != collective) continue;
    std::optional<StepProgram> program;
    if (schedule) program = instantiate(*schedule, InstantiateOptions{nranks, root}, file, diags);
    std::optional<PlannedProgram> planned;
    if (program) planned = run_analysis(std::move(*program), SyncOptions{}, diags);
    if (!planned) {
      skipped_.push_back(file.name + ": " + (diags.all().empty() ? "not usable" : diags.all().front().message));
      continue;
    }
    programs_.push_back(std::move(*planned));
    const PlannedProgram& p = programs_.back();
    candidates_.push_back({p.program.schedule, &p.program, &p.sync});
  }
}

}  // namespace ccc
