#include "pipeline.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "graph.h"
#include "lint.h"
#include "lexer.h"
#include "lower.h"
#include "parser.h"
#include "rewrites.h"
#include "print_steps.h"
#include "verify.h"

namespace ccc {
namespace {

constexpr std::array<std::pair<Pass, const char*>, 7> kPassNames{{
    {Pass::Parse, "parse"}, {Pass::Instantiate, "instantiate"}, {Pass::Graph, "graph"},
    {Pass::Verify, "verify"}, {Pass::Sync, "sync"}, {Pass::Lower, "lower"}, {Pass::Emit, "emit"},
}};

}  // namespace

const char* pass_name(Pass p) {
  for (auto [pass, name] : kPassNames)
    if (pass == p) return name;
  return "?";
}

std::optional<Pass> pass_from_name(std::string_view name) {
  for (auto [pass, pass_text] : kPassNames)
    if (name == pass_text) return pass;
  return std::nullopt;
}

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (auto [pass, name] : kPassNames) names.emplace_back(name);
  return names;
}

std::optional<SourceFile> read_source(const std::string& path, Diagnostics& diags) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error({}, fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
    return std::nullopt;
  }
  SourceFile file{path, {}};
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    file.text.append(buf, static_cast<size_t>(in.gcount()));
    if (file.text.size() > kMaxSourceBytes) {
      diags.error({}, fmt::format("'{}' is larger than {} bytes (1 MiB), the limit for a schedule", path, kMaxSourceBytes));
      return std::nullopt;
    }
  }
  if (in.bad()) {
    diags.error({}, fmt::format("cannot read '{}'", path));
    return std::nullopt;
  }
  return file;
}

std::optional<StepProgram> run_front_end(const SourceFile& file, const InstantiateOptions& options,
                                         Diagnostics& diags, const DumpHook& dump) {
  std::optional<ast::Schedule> schedule = parse_schedule(file, diags);
  if (!schedule) return std::nullopt;
  dump(Pass::Parse, [&] { return ast::print_schedule(*schedule); });

  std::optional<StepProgram> program = instantiate(*schedule, options, file, diags);
  if (!program) return std::nullopt;
  dump(Pass::Instantiate, [&] { return print_steps(*program); });
  return program;
}

std::optional<PlannedProgram> run_analysis(StepProgram program, const SyncOptions& options,
                                           Diagnostics& diags, const DumpHook& dump) {
  dump(Pass::Graph, [&] {
    const StepProgram resolved = resolve_first_reads(program);  // what verify and sync analyse
    return print_graph(resolved, build_graph(resolved, options.in_place));
  });
  // The runtime refuses it (every rank would overwrite blocks of its send buffer a peer has yet
  // to read, unless the schedule stages them all), so check and compile do too: one verdict.
  if (options.in_place && program.collective == Collective::AllToAll) {
    diags.error(program.loc, "in-place alltoall (send == recv) is not supported; use separate send and recv buffers "
                             "(the runtime refuses it too)");
    return std::nullopt;
  }
  lint(program, diags);
  if (diags.has_errors()) return std::nullopt;  // --Werror
  if (!verify(program, diags)) return std::nullopt;
  dump(Pass::Verify, [&] { return fmt::format("verified: {} ({}) for N = {}\n", program.schedule,
                                              collective_name(program.collective), program.nranks); });
  std::optional<PlannedProgram> planned = plan_syncs(std::move(program), options, diags);
  if (!planned) return std::nullopt;
  dump(Pass::Sync, [&] { return print_syncs(*planned); });
  return planned;
}

std::optional<CodegenResult> run_codegen(const SourceFile& source, const CodegenOptions& options,
                                         Diagnostics& diags, const DumpHook& dump) {
  auto stage_done = [&] {
    if (dump.stage_done) dump.stage_done(diags);
  };
  CodegenResult result;
  result.program = run_front_end(source, options.instantiate, diags, dump);
  if (result.program && options.collective && result.program->collective != *options.collective)
    diags.error({}, fmt::format("schedule '{}' implements {}, not {}", result.program->schedule,
                                collective_name(result.program->collective), collective_name(*options.collective)));
  stage_done();
  if (diags.has_errors()) return std::nullopt;
  if (options.last < Pass::Verify) return result;

  SyncOptions sync = options.sync;
  sync.in_place = options.kernel.in_place;
  result.planned = run_analysis(options.keep_program ? *result.program : std::move(*result.program), sync, diags, dump);
  if (!options.keep_program) result.program.reset();
  stage_done();
  if (!result.planned) return std::nullopt;
  if (options.last < Pass::Lower) return result;

  // Lowering checks what the kernel can run and stops at the first thing it cannot: that one
  // error, with its location, is its report.
  result.plan = lower_releasing(*result.planned, options.kernel, diags);
  stage_done();
  if (!result.plan) return std::nullopt;
  dump(Pass::Lower, [&] { return print_kernel_plan(*result.plan); });
  if (options.last < Pass::Emit) return result;

  result.kernel = emit_cuda(*result.plan, &source);
  dump(Pass::Emit, [&] { return result.kernel->source; });
  return result;
}

}  // namespace ccc
