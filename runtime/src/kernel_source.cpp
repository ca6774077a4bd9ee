#include "ccc/kernel_source.h"

#include <algorithm>

#include <fmt/format.h>

#include "ccc/lower.h"
#include "ccc/pipeline.h"

namespace ccc {

EmittedKernel generate_kernel(const SourceFile& schedule, const KernelShape& shape,
                              const std::map<std::string, int64_t>& defines) {
  Diagnostics diags;
  // The headline names the first error itself (a caller may show one line only); every
  // diagnostic follows, with its source line.
  auto rejected = [&](const std::string& stage) {
    const auto& all = diags.all();
    const auto first = std::find_if(all.begin(), all.end(), [](const Diagnostic& d) { return d.severity == Severity::Error; });
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("{}: cannot generate a kernel for N = {}: {}\n{}", schedule.name, shape.nranks,
                             first == all.end() ? stage : first->message, diags.render(&schedule)));
  };
  InstantiateOptions instantiate;
  instantiate.nranks = shape.nranks;
  instantiate.root = std::max(shape.root, 0);
  instantiate.defines = defines;
  std::optional<StepProgram> program = run_front_end(schedule, instantiate, diags);
  if (!program) throw rejected("the schedule has errors");
  if (program->collective != shape.collective)
    throw rejected(fmt::format("it implements {}, not {}", collective_name(program->collective),
                               collective_name(shape.collective)));
  SyncOptions sync;
  sync.in_place = shape.in_place;
  std::optional<PlannedProgram> planned = run_analysis(std::move(*program), sync, diags);
  if (!planned) throw rejected("verification or sync planning failed");

  KernelOptions options;
  options.dtype = shape.dtype;
  options.op = shape.op;
  options.in_place = shape.in_place;
  options.protocol = shape.protocol;
  options.one_device = shape.one_device;
  if (shape.channels > 0) options.channels = shape.channels;
  if (shape.tile_bytes > 0) options.tile_bytes = shape.tile_bytes;
  try {
    return emit_cuda(lower(*planned, options), &schedule);
  } catch (const LowerError& e) {
    if (e.loc.valid()) diags.error(e.loc, e.what());
    throw rejected(e.what());
  }
}

}  // namespace ccc
