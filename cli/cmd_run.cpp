// `ccc run FILE --ranks N --count C [--dtype D] [--op O] [--in-place] [--backend host]`: generate
// the kernel, compile it against the host prelude, run N ranks as threads, check every element
// against a reference, print the time and bandwidth. Exit 0 only if every element matched.
#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "ccc/collective_reference.h"
#include "ccc/communicator.h"
#include "ccc/cost_model.h"
#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

// Every rank's buffers for one collective; in place, send and recv share one allocation.
struct RankBuffers {
  std::vector<std::vector<uint64_t>> storage;  // uint64_t: aligned for every element type
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<std::vector<unsigned char>> inputs;  // each rank's input as filled, for the check
};

RankBuffers make_buffers(const CollectiveCall& shape, int n, bool in_place) {
  const uint64_t in_bytes = send_bytes(shape, n), out_bytes = recv_bytes(shape, n);
  const uint64_t block = shape.count * data_type_size(shape.dtype);
  RankBuffers b;
  for (int r = 0; r < n; ++r) {
    const uint64_t bytes = in_place ? std::max(in_bytes, out_bytes) : in_bytes + out_bytes;
    b.storage.emplace_back(bytes / 8 + 1);
    auto* base = reinterpret_cast<unsigned char*>(b.storage.back().data());
    unsigned char* send = base;
    unsigned char* recv = in_place ? base : base + in_bytes;
    if (in_place && shape.collective == Collective::ReduceScatter) recv = base + r * block;
    if (in_place && shape.collective == Collective::AllGather) send = base + r * block;
    b.send.push_back(send);
    b.recv.push_back(recv);
  }
  return b;
}

// Poisons every output, then writes fresh inputs (in place they overlap: inputs win).
void prepare(RankBuffers& b, const CollectiveCall& shape, int n, uint64_t salt) {
  const uint64_t in_elems = send_bytes(shape, n) / data_type_size(shape.dtype);
  const uint64_t out_elems = recv_bytes(shape, n) / data_type_size(shape.dtype);
  b.inputs.assign(n, {});
  for (int r = 0; r < n; ++r) {
    poison(shape.dtype, out_elems, b.recv[r]);
    fill_input(shape.dtype, r, salt, in_elems, const_cast<void*>(b.send[r]));
    const auto* in = static_cast<const unsigned char*>(b.send[r]);
    b.inputs[r].assign(in, in + send_bytes(shape, n));
  }
}

uint64_t wrong_elements(const RankBuffers& b, const CollectiveCall& shape, int n) {
  std::vector<const void*> inputs;
  for (const auto& in : b.inputs) inputs.push_back(in.data());
  uint64_t wrong = 0;
  for (int r = 0; r < n; ++r) wrong += count_wrong(shape, n, r, inputs, b.recv[r]);
  return wrong;
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
  shape.count = std::strtoull(count->c_str(), &end, 10);
  if (count->empty() || *end != '\0' || (*count)[0] == '-')
    return usage_error(cmd, fmt::format("--count expects a non-negative integer, not '{}'", *count), err);
  const std::string dtype = args.get("--dtype").value_or("f32");
  if (!parse_data_type(dtype)) return usage_error(cmd, fmt::format("unknown --dtype '{}'", dtype), err);
  shape.dtype = *parse_data_type(dtype);
  const std::string op = args.get("--op").value_or("sum");
  if (!parse_reduce_op(op)) return usage_error(cmd, fmt::format("unknown --op '{}'", op), err);
  shape.op = *parse_reduce_op(op);
  const std::string backend = args.get("--backend").value_or("host");
  if (backend != "host")
    return usage_error(cmd, fmt::format("--backend {}: ccc run uses the host backend (ccc-bench runs CUDA)", backend), err);
  CommOptions options;
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

  Diagnostics diags;
  options.schedule = read_source(fe->path, diags);
  if (!options.schedule) {
    for (const Diagnostic& d : diags.all()) err << "ccc: error: " << d.message << "\n";
    return kExitScheduleError;
  }
  const std::optional<StepProgram> program = run_front_end(*options.schedule, fe->options, diags);
  err << diags.render(&*options.schedule);
  if (!program) return kExitScheduleError;
  shape.collective = program->collective;
  shape.root = program->collective == Collective::Broadcast || program->collective == Collective::Reduce
                   ? fe->options.root : -1;
  const bool in_place = args.has("--in-place");

  try {
    Communicator comm = Communicator::host(n, options);
    RankBuffers buffers = make_buffers(shape, n, in_place);
    CollectiveCall call = shape;
    call.send = buffers.send;
    call.recv = buffers.recv;
    using Clock = std::chrono::steady_clock;
    auto timed = [&](uint64_t salt) {
      prepare(buffers, shape, n, salt);
      const auto start = Clock::now();
      comm.run(call);
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    const double first = timed(1);
    uint64_t wrong = wrong_elements(buffers, shape, n);
    const double second = timed(2);
    wrong += wrong_elements(buffers, shape, n);
    const double bytes = static_cast<double>(std::max(send_bytes(shape, n), recv_bytes(shape, n)));
    const double algbw = bytes / second / 1e9;
    const uint64_t elements = 2 * n * (recv_bytes(shape, n) / data_type_size(shape.dtype));
    out << fmt::format("{} ({}) on {} host ranks: count {} {} {}, {}\n", program->schedule,
                       collective_name(shape.collective), n, shape.count, dtype, op,
                       in_place ? "in place" : "out of place");
    out << fmt::format("  first call (generate + compile + run): {:.1f} ms\n", first * 1e3);
    out << fmt::format("  run: {:.3f} ms, algbw {:.2f} GB/s, busbw {:.2f} GB/s\n", second * 1e3, algbw,
                       algbw * bus_factor(shape.collective, n));
    out << fmt::format("  check: {} wrong of {} elements (two runs)\n", wrong, elements);
    return wrong == 0 ? kExitOk : kExitScheduleError;
  } catch (const Error& e) {
    err << "ccc run: error: " << e.what() << "\n";
    return kExitScheduleError;
  }
}

std::vector<OptionSpec> run_options() {
  std::vector<OptionSpec> opts = front_end_options();
  opts.push_back({"--count", "C", "elements per rank buffer (per block for reduce_scatter/allgather)"});
  opts.push_back({"--dtype", "D", "f64 f32 f16 bf16 i64 u64 i32 u32 i8 u8 (default f32)"});
  opts.push_back({"--op", "O", "sum prod min max avg (default sum)"});
  opts.push_back({"--in-place", "", "send and recv share each rank's buffer"});
  opts.push_back({"--backend", "B", "host (the only one ccc run uses)"});
  opts.push_back({"--channels", "C", "thread blocks per rank (default: the code generator's)"});
  opts.push_back({"--tile-bytes", "B", "tile size, a multiple of 64 (default: the code generator's)"});
  return opts;
}

}  // namespace

const Command& run_command() {
  static const Command cmd{"run", "run a schedule on the host backend and check every element",
                           "ccc run FILE --ranks N --count C [--dtype D] [--op O] [--in-place] [--backend host]",
                           run_options(), &run_run};
  return cmd;
}

}  // namespace ccc::cli
