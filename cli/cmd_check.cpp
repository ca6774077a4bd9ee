// `ccc check FILE --ranks N`: is the schedule valid for N ranks?
#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

int run_check(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  int exit_code = kExitOk;
  std::optional<FrontEndArgs> fe = front_end_args(check_command(), args, err, exit_code);
  if (!fe) return exit_code;
  std::optional<StepProgram> program = run_front_end_on(*fe, {}, err);
  if (!program) return kExitScheduleError;
  std::optional<PlannedProgram> planned = run_analysis_on(*fe, *program, args.has("--in-place"), {}, err);
  if (!planned) return kExitScheduleError;
  out << fe->path << ": ok: " << program->schedule << " (" << collective_name(program->collective)
      << ") for N = " << program->nranks << ": " << program->nsteps() << (program->nsteps() == 1 ? " step, " : " steps, ")
      << program->num_ops() << " ops, verified; " << planned->sync.waits_kept << " waits for "
      << planned->sync.cross_rank_edges << " cross-rank dependencies\n";
  for (const std::string& note : planned->sync.notes) out << "note: " << note << "\n";
  return kExitOk;
}

}  // namespace

const Command& check_command() {
  static const Command cmd{"check", "parse, instantiate, verify a schedule for N ranks and plan its syncs",
                           "ccc check FILE --ranks N [--root R] [--in-place]", front_end_options(), &run_check};
  return cmd;
}

}  // namespace ccc::cli
