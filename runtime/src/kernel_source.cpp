#include "kernel_source.h"

#include <algorithm>

#include <fmt/format.h>

#include "pipeline.h"

namespace ccc {

EmittedKernel generate_kernel(const SourceFile& schedule, const KernelShape& shape,
                              const std::map<std::string, int64_t>& defines) {
  CodegenOptions options;
  options.instantiate.nranks = shape.nranks;
  options.instantiate.root = std::max(shape.root, 0);
  options.instantiate.defines = defines;
  options.collective = shape.collective;
  KernelOptions& kernel = options.kernel;
  kernel.dtype = shape.dtype;
  kernel.op = shape.op;
  kernel.in_place = shape.in_place;
  kernel.protocol = shape.protocol;
  kernel.one_device = shape.one_device;
  kernel.epilogue = shape.epilogue;
  if (shape.channels > 0) kernel.channels = shape.channels;
  if (shape.tile_bytes > 0) kernel.tile_bytes = shape.tile_bytes;

  Diagnostics diags;
  std::optional<CodegenResult> result = run_codegen(schedule, options, diags);
  if (result) return std::move(*result->kernel);
  // The headline names the first error itself (a caller may show one line only); every
  // diagnostic follows, with its source line.
  const auto& all = diags.all();
  const auto first = std::find_if(all.begin(), all.end(), [](const Diagnostic& d) { return d.severity == Severity::Error; });
  throw Error(ErrorKind::InvalidArgument,
              fmt::format("{}: cannot generate a kernel for N = {}: {}\n{}", schedule.name, shape.nranks,
                          first == all.end() ? "the schedule has errors" : first->message, diags.render(&schedule)));
}

}  // namespace ccc
