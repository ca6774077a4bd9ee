#include "schedule_menu.h"

#include "instantiate.h"
#include "parser.h"
#include "pipeline.h"

namespace ccc {

ScheduleMenu::ScheduleMenu(Collective collective, int nranks, const std::vector<SourceFile>& sources, int root,
                           const std::map<std::string, int64_t>& defines) {
  for (const SourceFile& file : sources) {
    Diagnostics diags;
    std::optional<ast::Schedule> schedule = parse_schedule(file, diags);
    if (schedule && schedule->collective != collective) continue;
    std::optional<StepProgram> program;
    if (schedule) {
      InstantiateOptions options{nranks, root};
      for (const std::string& param : schedule_params(*schedule)) {
        parameters_.insert(param);
        if (auto value = defines.find(param); value != defines.end()) options.defines.insert(*value);
      }
      program = instantiate(*schedule, options, file, diags);
    }
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
