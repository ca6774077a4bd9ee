// `ccc run FILE --ranks N --count C [--dtype D] [--op O] [--in-place] [--backend host|sim] [--topo F]
// [--trace F]`: generate the kernel, compile it against the host prelude, run N ranks as threads
// (in virtual time on the topology's GPUs with --backend sim), check every element against a
// reference, print the time and bandwidth. Exit 0 only if every element matched.
#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <stdexcept>

#include "collective_reference.h"
#include "ccc/communicator.h"
#include "cost_model.h"
#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

// The simulated machine's file name: --topo's, else $CCC_TOPO's (the communicator's own fallback).
std::string topology_name(const std::string& topo) {
  const char* env = std::getenv("CCC_TOPO");
  return std::filesystem::path(!topo.empty() || env == nullptr ? topo : env).filename().string();
}

int run_run(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const Command& cmd = run_command();
  int exit_code = kExitOk;
  std::optional<FrontEndArgs> fe = front_end_args(cmd, args, err, exit_code);
  if (!fe) return exit_code;
  const int n = fe->options.nranks;

  CollectiveCall shape;
  const std::optional<std::string> count = args.get("--count");
  if (!count) return usage_error(cmd, "--count C is required", err);
  char* end = nullptr;
  errno = 0;
  shape.count = std::strtoull(count->c_str(), &end, 10);
  if (count->empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>((*count)[0])))
    return usage_error(cmd, fmt::format("--count expects a non-negative integer, not '{}'", *count), err);
  if (errno == ERANGE)
    return usage_error(cmd, fmt::format("--count {} is larger than {}", *count, std::numeric_limits<uint64_t>::max()), err);
  std::string error;
  const std::optional<DataType> dtype =
      named_value("--dtype", args.get("--dtype").value_or("f32"), kAllDataTypes, &data_type_name, error);
  if (!dtype) return usage_error(cmd, error, err);
  shape.dtype = *dtype;
  const std::optional<ReduceOp> op = named_value("--op", args.get("--op").value_or("sum"), kAllReduceOps, &reduce_op_name, error);
  if (!op) return usage_error(cmd, error, err);
  shape.op = *op;
  const std::string backend = args.get("--backend").value_or("host");
  const std::optional<BackendKind> kind = backend_named(backend);
  if (kind != BackendKind::Host && kind != BackendKind::Sim)
    return usage_error(cmd, fmt::format("--backend {}: ccc run runs 'host' or 'sim' (ccc-bench runs CUDA)", backend), err);
  const bool sim = kind == BackendKind::Sim;
  if (args.has("--critical-path") && !sim) return usage_error(cmd, "--critical-path needs --backend sim", err);
  if (args.has("--graph") && !sim) return usage_error(cmd, "--graph needs --backend sim (the host has no CUDA graphs)", err);
  CommOptions options;
  options.sim_graph_replays = args.has("--graph");
  options.topology_file = args.get("--topo").value_or("");
  if (auto c = args.get("--channels")) {
    const std::optional<int> v = parse_int(*c, 1, Communicator::kMaxChannels);
    if (!v) return usage_error(cmd, fmt::format("--channels expects 1 .. {}, not '{}'", Communicator::kMaxChannels, *c), err);
    options.channels = *v;
  }
  if (auto t = args.get("--tile-bytes")) {
    const std::optional<int> v = parse_int(*t, 64, 1 << 30);
    if (!v || *v % 64 != 0) return usage_error(cmd, fmt::format("--tile-bytes expects a multiple of 64, not '{}'", *t), err);
    options.tile_bytes = *v;
  }
  if (auto v = args.get("--protocol")) {
    options.protocol = named_value("--protocol", *v, kAllProtocols, &protocol_name, error);
    if (!options.protocol) return usage_error(cmd, error, err);
  }
  // residual-rmsnorm-fp8: the RMSNorm's kernel, with its output quantised to fp8 too
  // (CollectiveCall::quant_scale), so not an Epilogue of its own.
  const bool fp8_out = args.get("--epilogue") == "residual-rmsnorm-fp8";
  if (auto v = args.get("--epilogue"); v && !fp8_out) {
    const std::optional<Epilogue> e = named_value("--epilogue", *v, kAllEpilogues, &epilogue_name, error);
    if (!e) return usage_error(cmd, error + ", residual-rmsnorm-fp8", err);
    shape.epilogue = *e;
  }
  if (fp8_out) {
    shape.epilogue = Epilogue::ResidualRmsNorm;
    shape.quant_scale = 1.0f;
  }
  if (auto v = args.get("--scale")) {
    char* end = nullptr;
    const float scale = std::strtof(v->c_str(), &end);
    if (end == v->c_str() || *end != '\0') return usage_error(cmd, fmt::format("--scale expects a number, not '{}'", *v), err);
    if (!fp8_out) return usage_error(cmd, "--scale is residual-rmsnorm-fp8's (--epilogue residual-rmsnorm-fp8)", err);
    shape.quant_scale = scale;
  }
  if (auto h = args.get("--hidden")) {
    const std::optional<int> v = parse_int(*h, 1, 1 << 30);
    if (!v) return usage_error(cmd, fmt::format("--hidden expects a row length of 1 .. 2^30 elements, not '{}'", *h), err);
    shape.hidden = static_cast<uint64_t>(*v);
  }
  if (auto e = args.get("--eps")) {
    char* end = nullptr;
    shape.eps = std::strtof(e->c_str(), &end);
    if (end == e->c_str() || *end != '\0') return usage_error(cmd, fmt::format("--eps expects a number, not '{}'", *e), err);
  }
  if (shape.epilogue == Epilogue::ResidualRmsNorm && shape.hidden == 0)
    return usage_error(cmd, fmt::format("--epilogue {} needs --hidden H (the row length)", *args.get("--epilogue")), err);

  options.trace_file = args.get("--trace").value_or("");
  options.defines = fe->options.defines;  // the kernel runs the schedule as checked

  options.schedule = read_schedule(cmd, *fe, err);
  if (!options.schedule) return kExitUsage;
  const std::optional<StepProgram> program = run_front_end_on(*fe, *options.schedule, {}, err);
  if (!program) return kExitScheduleError;
  shape.collective = program->collective;
  warn_meaningless_options(cmd, args, program->collective, err);
  shape.root = program->collective == Collective::Broadcast || program->collective == Collective::Reduce
                   ? fe->options.root : -1;
  const bool in_place = args.has("--in-place");

  try {
    Communicator comm = Communicator::create(*kind, n, options);
    HostCollectiveBuffers buffers(shape, n, in_place);
    using Clock = std::chrono::steady_clock;
    double virtual_seconds = 0;  // sim: the second call's
    auto timed = [&](uint64_t salt) {
      buffers.prepare(salt);
      const double virtual_start = sim ? comm.virtual_seconds() : 0;
      const auto start = Clock::now();
      comm.run(buffers.call());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (sim) virtual_seconds = comm.virtual_seconds() - virtual_start;
      return seconds;
    };
    const double first = timed(1);
    uint64_t wrong = buffers.wrong_elements();
    double second = timed(2);
    wrong += buffers.wrong_elements();
    if (sim) second = virtual_seconds;
    const double bytes = static_cast<double>(std::max(send_bytes(shape, n), recv_bytes(shape, n)));
    const double algbw = bytes / second / 1e9;
    // An RMSNorm's residual_out is checked too, and its fp8 output.
    const uint64_t elements = 2 * n * (recv_bytes(shape, n) / data_type_size(shape.dtype)) *
                              (shape.epilogue == Epilogue::ResidualRmsNorm ? (shape.quant_scale ? 3 : 2) : 1);
    // The op only where the collective reduces, the root only where it has one.
    const bool reduces = shape.collective == Collective::AllReduce ||
                         shape.collective == Collective::ReduceScatter || shape.collective == Collective::Reduce;
    out << fmt::format("{} ({}{}) on {} {} ranks: count {} {}{}{}, {}\n", program->schedule,
                       collective_name(shape.collective), params_text(program->params), n,
                       sim ? "simulated" : "host", shape.count,
                       data_type_name(shape.dtype), reduces ? std::string(" ") + reduce_op_name(shape.op) : "",
                       shape.root >= 0 ? fmt::format(", root {}", shape.root) : "",
                       in_place ? "in place" : "out of place");
    if (shape.epilogue == Epilogue::Residual)
      out << "  epilogue: residual (added where each element completes; docs/epilogue.md)\n";
    if (shape.epilogue == Epilogue::ResidualRmsNorm)
      out << fmt::format("  epilogue: residual-rmsnorm, {} rows of hidden {}, eps {:g}{} (docs/epilogue.md)\n",
                         shape.count / shape.hidden, shape.hidden, shape.eps,
                         shape.quant_scale ? fmt::format(", fp8 e4m3 output at scale {:g}", *shape.quant_scale) : "");
    out << fmt::format("  first call (generate + compile + run): {:.1f} ms\n", first * 1e3);
    if (sim)
      out << fmt::format("  run: {:.2f} us of virtual time on {}{} (a prediction), algbw {:.2f} GB/s, busbw {:.2f} GB/s\n",
                         second * 1e6, topology_name(options.topology_file),
                         options.sim_graph_replays ? " as a CUDA graph replay" : "", algbw, algbw * bus_factor(shape.collective, n));
    else
      out << fmt::format("  run: {:.3f} ms, algbw {:.2f} GB/s, busbw {:.2f} GB/s\n", second * 1e3, algbw,
                         algbw * bus_factor(shape.collective, n));
    out << fmt::format("  check: {} wrong of {} elements (two runs)\n", wrong, elements);
    if (!options.trace_file.empty()) out << fmt::format("  trace: {} (both runs)\n", options.trace_file);
    if (args.has("--critical-path")) out << "  critical path of the second run:\n" << comm.critical_path();
    return wrong == 0 ? kExitOk : kExitScheduleError;
  } catch (const Error& e) {
    err << "ccc run: error: " << e.what() << "\n";
    return kExitScheduleError;
  } catch (const std::bad_alloc&) {
    err << fmt::format("ccc run: error: out of memory for {} ranks' buffers of count {} {} (and the reference's)\n", n,
                       shape.count, data_type_name(shape.dtype));
    return kExitScheduleError;
  } catch (const std::length_error&) {
    err << fmt::format("ccc run: error: {} ranks' buffers of count {} {} are larger than memory can be\n", n,
                       shape.count, data_type_name(shape.dtype));
    return kExitScheduleError;
  }
}

std::vector<OptionSpec> run_options() {
  std::vector<OptionSpec> opts = front_end_options();
  opts.push_back({"--count", "C", "elements per rank buffer (per block for reduce_scatter/allgather)"});
  opts.push_back({"--dtype", "D", "f64 f32 f16 bf16 i64 u64 i32 u32 i8 u8 f8e4m3 f8e5m2 (default f32)"});
  opts.push_back({"--op", "O", "sum prod min max avg (default sum)"});
  opts.push_back({"--backend", "B", "host, or sim: virtual time on --topo's GPUs (docs/simulator.md)"});
  opts.push_back({"--topo", "F", "topology file of the simulated GPUs (default $CCC_TOPO)"});
  opts.push_back({"--critical-path", "", "sim: print the second run's critical path"});
  opts.push_back({"--graph", "", "sim: price each launch as a CUDA graph's replay (the topology's graph_launch)"});
  opts.push_back({"--channels", "C", "thread blocks per rank (default: the code generator's)"});
  opts.push_back({"--tile-bytes", "B", "tile size, a multiple of 64 (default: the code generator's)"});
  opts.push_back({"--protocol", "P", "simple or ll (default: simple; ll moves at most 256 KiB per call)"});
  opts.push_back({"--epilogue", "E", "allreduce: none, residual (out = allreduce + residual, fused), residual-rmsnorm "
                                     "(then RMSNorm over rows of --hidden; weight and residual_out checked too), or "
                                     "residual-rmsnorm-fp8 (and the output quantised to fp8 e4m3, checked too)"});
  opts.push_back({"--hidden", "H", "residual-rmsnorm: the row length (count is rows x H)"});
  opts.push_back({"--eps", "E", "residual-rmsnorm: added to each row's mean square (default 1e-6)"});
  opts.push_back({"--scale", "S", "residual-rmsnorm-fp8: the per-tensor scale, fp8 out = e4m3(out / S) (default 1)"});
  opts.push_back({"--trace", "F", "write a Chrome trace-event timeline of the runs to F (docs/tracing.md)"});
  return opts;
}

}  // namespace

const Command& run_command() {
  static const Command cmd{"run", "run a schedule on the host backend, or simulated, and check every element",
                           "ccc run FILE --ranks N --count C [--root R] [--define NAME=V,...] [--in-place] [--Werror] [--dtype D]\n"
                           "       [--op O] [--channels C] [--tile-bytes B] [--protocol P] [--backend host|sim] [--topo F]\n"
                           "       [--critical-path] [--graph] [--epilogue E] [--hidden H] [--eps E] [--scale S] [--trace F]",
                           run_options(), &run_run};
  return cmd;
}

}  // namespace ccc::cli
