// The code-generation options of `ccc compile`.
#include <fmt/format.h>

#include "kernel_plan.h"
#include "cli.h"
#include "commands.h"

namespace ccc::cli {

std::vector<OptionSpec> codegen_options() {
  std::string dtypes, ops;
  for (DataType t : kAllDataTypes) dtypes += fmt::format("{}{}", dtypes.empty() ? "" : " ", data_type_name(t));
  for (ReduceOp op : kAllReduceOps) ops += fmt::format("{}{}", ops.empty() ? "" : " ", reduce_op_name(op));
  const KernelOptions d;
  return {
      {"--dtype", "T", fmt::format("element type: {} (default {})", dtypes, data_type_name(d.dtype))},
      {"--op", "OP", fmt::format("reduction: {} (default {})", ops, reduce_op_name(d.op))},
      {"--tile-bytes", "B", fmt::format("tile size, a multiple of 64 (default {})", d.tile_bytes)},
      {"--channels", "C", fmt::format("thread blocks per rank (default {})", d.channels)},
      {"--pipeline", "D", fmt::format("tiles per channel between progress updates (default {})", d.pipeline)},
      {"--arch", "ARCH", "GPU architecture for ptx and cubin (default sm_90)"},
      {"--protocol", "P", fmt::format("simple (peer loads) or ll (data and flag pushed in 8-byte lines, at most {} KiB of "
                                      "vector per launch) (default {})", kLlMaxBytes / 1024, protocol_name(d.protocol))},
      {"--epilogue", "E", "allreduce: none, residual (the completing write adds the rank's residual) or "
                          "residual-rmsnorm (then RMSNorm over rows after the exit waits; an fp8 output is a launch "
                          "argument of the same kernel) (default none)"},
  };
}

std::optional<CodegenArgs> codegen_args(const Command& cmd, const ParsedArgs& args, std::ostream& err, int& exit_code) {
  auto fail = [&](const std::string& msg) {
    exit_code = usage_error(cmd, msg, err);
    return std::nullopt;
  };
  CodegenArgs out;
  KernelOptions& k = out.kernel;
  k.in_place = args.has("--in-place");
  std::string error;
  if (std::optional<std::string> v = args.get("--dtype")) {
    std::optional<DataType> t = named_value("--dtype", *v, kAllDataTypes, &data_type_name, error);
    if (!t) return fail(error);
    k.dtype = *t;
  }
  if (std::optional<std::string> v = args.get("--op")) {
    std::optional<ReduceOp> op = named_value("--op", *v, kAllReduceOps, &reduce_op_name, error);
    if (!op) return fail(error);
    k.op = *op;
  }
  if (std::optional<std::string> v = args.get("--protocol")) {
    std::optional<Protocol> p = named_value("--protocol", *v, kAllProtocols, &protocol_name, error);
    if (!p) return fail(error);
    k.protocol = *p;
  }
  if (std::optional<std::string> v = args.get("--epilogue")) {
    std::optional<Epilogue> e = named_value("--epilogue", *v, kAllEpilogues, &epilogue_name, error);
    if (!e) return fail(error);
    k.epilogue = *e;
  }
  struct IntOption {
    const char* name;
    int lo, hi;
  };
  for (IntOption o : {IntOption{"--tile-bytes", 64, 1 << 30}, IntOption{"--channels", 1, 64}, IntOption{"--pipeline", 1, 64}}) {
    std::optional<std::string> v = args.get(o.name);
    if (!v) continue;
    std::optional<int> n = parse_int(*v, o.lo, o.hi);
    if (!n) return fail(fmt::format("{} expects an integer in {} .. {}, not '{}'", o.name, o.lo, o.hi, *v));
    if (std::string(o.name) == "--tile-bytes") k.tile_bytes = *n;
    if (std::string(o.name) == "--channels") k.channels = *n;
    if (std::string(o.name) == "--pipeline") k.pipeline = *n;
  }
  if (k.tile_bytes % 64 != 0) return fail(fmt::format("--tile-bytes must be a multiple of 64, not {}", k.tile_bytes));
  if (std::optional<std::string> v = args.get("--arch")) {
    if (v->rfind("sm_", 0) != 0 || !parse_int(v->substr(3), 50, 1000))
      return fail(fmt::format("--arch expects sm_NN (e.g. sm_80, sm_90), not '{}'", *v));
    out.arch = *v;
  }
  return out;
}

}  // namespace ccc::cli
