// `ccc check FILE --ranks N`: is the schedule valid for N ranks (and, for broadcast and reduce,
// every root)?
#include <fmt/format.h>

#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

bool is_rooted(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

int run_check(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  int exit_code = kExitOk;
  std::optional<FrontEndArgs> fe = front_end_args(check_command(), args, err, exit_code);
  if (!fe) return exit_code;
  // A rooted collective is proved for every root unless --root names one: a schedule can be
  // right for root 0 and wrong for another (a chain that assumes the root is rank 0).
  // Proving all N roots costs N checks: by default only while N is small.
  using Roots = FrontEndArgs::Roots;
  const bool every_root = fe->roots == Roots::Every ||
                          (fe->roots == Roots::EveryIfFew && fe->options.nranks <= kEveryRootByDefaultRanks);
  const std::optional<SourceFile> source = read_schedule(check_command(), *fe, err);
  if (!source) return kExitUsage;
  int roots = 1;
  std::optional<StepProgram> program;
  std::optional<PlannedProgram> planned;
  for (int root = 0; root < roots; ++root) {
    if (fe->roots != Roots::Given) fe->options.root = root;
    fe->warnings = root == 0;  // the same schedule text: its warnings once
    program = run_front_end_on(*fe, *source, {}, err);
    if (program) planned = run_analysis_on(*fe, *source, *program, args.has("--in-place"), {}, err);
    // One verdict: what check proves, compile (default options) emits.
    const bool lowers = planned && lowers_on(*fe, *source, *planned, args.has("--in-place"), err);
    if (!program || !planned || !lowers) {
      if (program && roots > 1) err << "note: the errors above are for root " << root << " (roots before it verified; --root " << root
                                     << " checks it alone)\n";
      return kExitScheduleError;
    }
    if (every_root && is_rooted(program->collective)) roots = program->nranks;
  }
  warn_meaningless_options(check_command(), args, program->collective, err);
  const std::string which_roots =
      !is_rooted(program->collective) ? ""
      : roots > 1                     ? fmt::format(" and every root (0 .. {})", roots - 1)
                                      : fmt::format(", root {}", fe->options.root);
  out << fe->path << ": ok: " << program->schedule << " (" << collective_name(program->collective)
      << ") for N = " << program->nranks << params_text(program->params) << which_roots << ": " << program->nsteps()
      << (program->nsteps() == 1 ? " step, " : " steps, ") << program->num_ops() << " ops, verified; "
      << planned->sync.waits_kept << " waits for " << planned->sync.cross_rank_edges << " cross-rank dependencies"
      << (roots > 1 ? " (the last root's figures)" : "") << "\n";
  for (const std::string& note : planned->sync.notes) out << "note: " << note << "\n";
  if (is_rooted(program->collective) && fe->roots == Roots::EveryIfFew && !every_root)
    out << fmt::format("note: root 0 only at N > {}; --root all proves the others too\n", kEveryRootByDefaultRanks);
  return kExitOk;
}

}  // namespace

const Command& check_command() {
  static const Command cmd{"check", "parse, instantiate, verify a schedule for N ranks, plan its syncs and lower it",
                           "ccc check FILE --ranks N [--root R|all] [--define NAME=V,...] [--in-place] [--Werror]", front_end_options(), &run_check};
  return cmd;
}

}  // namespace ccc::cli
