// ccc-bench: collective bandwidth shaped like nccl-tests' all_reduce_perf, on the host or CUDA
// backend or the simulator (--backend sim --topo F: virtual times on the topology's GPUs), and (--jit) the JIT cache: cold compile against disk and memory hits. `ccc-bench -h`
// lists the options (the table in parse() below); nccl-tests' spellings work (-b/--minbytes,
// -d float|half|bfloat16|...|all, -o sum|...|all, -G/--cudagraph, -c/--check, --opt=value).
//
// Sizes take K, M and G suffixes. size is the bytes of a rank's largest buffer (N blocks for
// reduce_scatter's send, allgather's recv and both of alltoall's), count the per-rank ABI count;
// algbw = size / time and busbw = algbw times nccl-tests' factor (allreduce 2(N-1)/N,
// reduce_scatter, allgather and alltoall (N-1)/N, broadcast and reduce 1). Alltoall runs out of
// place only. On one CUDA device (virtual ranks) the calls are timed with
// CUDA events on the ranks' stream; with -G N, as in nccl-tests, `iters` calls are captured in a
// CUDA graph that is launched N times, and `time` is the replayed time (the eager time follows
// in its own column); on the simulator -G prices each launch as a graph's kernel node
// (CommOptions::sim_graph_replays). --baseline times a device-to-device copy (memcpy on the host) of the
// bytes the collective must at least move through memory: every input read once, every output
// written once, on the device that holds the ranks (virtual ranks share one HBM). A copy moves
// those bytes as fast as the memory allows, so `ratio` (copy time / collective time) is at most
// about 1: how close the schedule comes to the memory bound. `maxulp` is a float reduction's
// largest error against float64 on random inputs, in ulps (max_ulp_error; docs/runtime.md).
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench_buffers.h"
#include "collective_reference.h"
#include "ccc/communicator.h"
#include "cost_model.h"
#include "cuda_driver.h"
#include "host_compile.h"
#include "kernel_source.h"
#include "nvrtc_jit.h"
#include "shipped_schedules.h"
#include "topology.h"

namespace ccc::bench {
namespace {

struct Config {
  uint64_t min_bytes = 8, max_bytes = 32 << 20;
  double factor = 2;
  uint64_t step_bytes = 0;  // -i: sizes grow by this many bytes instead of by the factor
  std::vector<DataType> dtypes = {DataType::F32};
  std::vector<ReduceOp> ops = {ReduceOp::Sum};
  int iters = 20, warmup = 5;
  int check = 1;         // checked runs per size and placement (nccl-tests' -c)
  int graph_replays = 0;  // -G: launches of a graph of `iters` captured calls
  std::string backend = "host";
  int ranks = 0;  // 0: 4 host ranks, or one per listed CUDA device
  std::vector<int> devices;
  Collective collective = Collective::AllReduce;
  Epilogue epilogue = Epilogue::None;  // --epilogue: allreduce's fused residual add (and RMSNorm)
  uint64_t hidden = 0;                 // --hidden: the RMSNorm's row length
  float eps = 1e-6f;
  std::optional<float> quant_scale;    // residual-rmsnorm-fp8: the fp8 output's scale
  int root = 0;
  CommOptions comm;
  bool baseline = false;
  bool critical_path = false;  // sim: print each size's
  bool jit = false;
  bool probe = false;
  std::string calibrate;  // --calibrate FILE: measure this GPU's constants and write them there
  std::string arch = "sm_90";
  std::vector<std::string> nvrtc_options;  // --jit: extra NVRTC options, e.g. -Xptxas -O1
};

[[noreturn]] void usage(const std::string& message) {
  fmt::print(stderr, "ccc-bench: error: {}\n(ccc-bench -h lists the options)\n", message);
  std::exit(2);
}

uint64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string suffix = end;
  const double scale = suffix.empty() ? 1 : suffix == "K" ? 1 << 10 : suffix == "M" ? 1 << 20 : suffix == "G" ? 1 << 30 : 0;
  if (end == text.c_str() || scale == 0 || !(v >= 0) || v * scale > 1e18) usage(fmt::format("bad size '{}'", text));
  return static_cast<uint64_t>(v * scale);
}

double parse_number(const std::string& text, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') usage(fmt::format("bad {} '{}'", what, text));
  return v;
}

int parse_int_arg(const std::string& text, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 0 || v > (1 << 30)) usage(fmt::format("bad {} '{}'", what, text));
  return static_cast<int>(v);
}

// nccl-tests' type names first (what -d prints), then aliases and ccc's own (f32, ...).
struct TypeName {
  const char* name;
  DataType type;
};
constexpr TypeName kTypeNames[] = {
    {"double", DataType::F64}, {"float", DataType::F32},  {"half", DataType::F16},   {"bfloat16", DataType::BF16},
    {"int64", DataType::I64},  {"uint64", DataType::U64}, {"int32", DataType::I32},  {"uint32", DataType::U32},
    {"int8", DataType::I8},    {"uint8", DataType::U8},   {"int", DataType::I32},    {"char", DataType::I8},
    {"float64", DataType::F64}, {"float32", DataType::F32}, {"float16", DataType::F16}};

const char* nccl_type_name(DataType t) {
  for (const TypeName& n : kTypeNames)
    if (n.type == t) return n.name;
  return data_type_name(t);
}

std::vector<DataType> parse_types(const std::string& name) {
  if (name == "all") return {std::begin(kAllDataTypes), std::end(kAllDataTypes)};
  if (auto t = parse_data_type(name)) return {*t};
  for (const TypeName& n : kTypeNames)
    if (name == n.name) return {n.type};
  usage(fmt::format("unknown type '{}' (float, half, bfloat16, double, int8, uint8, int32, uint32, int64, "
                    "uint64, f8e4m3, f8e5m2, or all)", name));
}

std::vector<ReduceOp> parse_ops(const std::string& name) {
  if (name == "all") return {std::begin(kAllReduceOps), std::end(kAllReduceOps)};
  if (auto op = parse_reduce_op(name)) return {*op};
  usage(fmt::format("unknown op '{}' (sum, prod, min, max, avg, or all)", name));
}

Collective parse_collective(const std::string& name) {
  for (Collective c : kAllCollectives)
    if (name == collective_name(c)) return c;
  usage(fmt::format("unknown collective '{}'", name));
}

std::vector<int> parse_devices(const std::string& list) {
  std::vector<int> devices;
  for (size_t pos = 0; pos <= list.size();) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    devices.push_back(parse_int_arg(list.substr(pos, comma - pos), "device"));
    pos = comma + 1;
  }
  return devices;
}

// One option: nccl-tests' short and long spellings where it has them, its value (empty: a flag)
// and what it sets. -h prints this table.
struct Option {
  const char* short_name;  // "" when there is none
  const char* long_name;
  const char* value;
  const char* help;
  std::function<void(Config&, const std::string&)> set;
};

const std::vector<Option>& options() {
  static const std::vector<Option> table = {
      {"-b", "--minbytes", "SIZE", "smallest size (default 8)", [](Config& c, const std::string& v) { c.min_bytes = parse_size(v); }},
      {"-e", "--maxbytes", "SIZE", "largest size (default 32M)", [](Config& c, const std::string& v) { c.max_bytes = parse_size(v); }},
      {"-f", "--stepfactor", "F", "multiply the size by F (default 2)",
       [](Config& c, const std::string& v) { c.factor = std::strtod(v.c_str(), nullptr); c.step_bytes = 0; }},
      {"-i", "--stepbytes", "SIZE", "add SIZE to the size instead",
       [](Config& c, const std::string& v) {
         c.step_bytes = parse_size(v);
         if (c.step_bytes == 0) usage("-i needs at least 1 byte");
       }},
      {"-n", "--iters", "N", "timed calls per size (default 20)",
       [](Config& c, const std::string& v) { c.iters = std::max(1, parse_int_arg(v, "iteration count")); }},
      {"-w", "--warmup_iters", "N", "untimed calls first (default 5)",
       [](Config& c, const std::string& v) { c.warmup = parse_int_arg(v, "warmup count"); }},
      {"-c", "--check", "N", "checked calls per size and placement, and (float reductions) one on random inputs for maxulp, 0: none (default 1)",
       [](Config& c, const std::string& v) { c.check = parse_int_arg(v, "check count"); }},
      {"-d", "--datatype", "TYPE", "float, half, bfloat16, double, int8, uint8, int32, uint32, int64, uint64, f8e4m3, f8e5m2, all",
       [](Config& c, const std::string& v) { c.dtypes = parse_types(v); }},
      {"-o", "--op", "OP", "sum, prod, min, max, avg, all", [](Config& c, const std::string& v) { c.ops = parse_ops(v); }},
      {"-r", "--root", "R", "root of broadcast and reduce", [](Config& c, const std::string& v) { c.root = parse_int_arg(v, "root"); }},
      {"-G", "--cudagraph", "N", "also time a CUDA graph of the calls, launched N times (sim: priced as replays)",
       [](Config& c, const std::string& v) { c.graph_replays = parse_int_arg(v, "graph launch count"); }},
      {"-T", "--timeout", "S", "seconds a rank waits for its peers (default $CCC_TIMEOUT, else 30)",
       [](Config& c, const std::string& v) { c.comm.timeout_seconds = std::strtod(v.c_str(), nullptr); }},
      {"", "--backend", "host|cuda|sim", "where the ranks run (default host; sim: virtual time on --topo's GPUs)",
       [](Config& c, const std::string& v) {
         if (!backend_named(v)) usage(fmt::format("--backend is {}", backend_names()));
         c.backend = v;
       }},
      {"", "--critical-path", "", "sim: after each size, the critical path of its last timed call (docs/simulator.md)",
       [](Config& c, const std::string&) { c.critical_path = true; }},
      {"", "--timing-only", "", "sim: move no data (the same virtual times; sizes beyond this machine's memory; implies -c 0)",
       [](Config& c, const std::string&) { c.comm.sim_timing_only = true; }},
      {"", "--topo", "F", "topology file: the cost model's machine, and the simulator's (default $CCC_TOPO)",
       [](Config& c, const std::string& v) { c.comm.topology_file = v; }},
      {"", "--ranks", "N", "ranks (default 4 on the host, 8 simulated, 8 virtual ranks on one device)",
       [](Config& c, const std::string& v) { c.ranks = parse_int_arg(v, "rank count"); }},
      {"", "--devices", "0,1,..", "CUDA devices, one rank each (one: virtual ranks on it)",
       [](Config& c, const std::string& v) { c.devices = parse_devices(v); }},
      {"", "--algo", "NAME", "schedule (default: the cost model's choice per size)",
       [](Config& c, const std::string& v) { c.comm.algo = v; }},
      {"", "--collective", "C", "allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall",
       [](Config& c, const std::string& v) { c.collective = parse_collective(v); }},
      {"", "--epilogue", "E",
       "allreduce: none, residual (recv = allreduce + residual, fused; docs/epilogue.md), residual-rmsnorm "
       "(then RMSNorm over rows of --hidden, the pre-norm sums written out too), or residual-rmsnorm-fp8 (and "
       "the output quantised to fp8 e4m3 at --scale); each size rounded down to whole rows",
       [](Config& c, const std::string& v) {
         const bool fp8 = v == "residual-rmsnorm-fp8";
         const std::optional<Epilogue> e = fp8 ? Epilogue::ResidualRmsNorm : parse_epilogue(v);
         if (!e)
           usage(fmt::format("--epilogue is none, residual, residual-rmsnorm or residual-rmsnorm-fp8, not '{}'", v));
         c.epilogue = *e;
         if (fp8 && !c.quant_scale) c.quant_scale = 1.0f;
       }},
      {"", "--hidden", "H", "residual-rmsnorm: the row length in elements",
       [](Config& c, const std::string& v) { c.hidden = static_cast<uint64_t>(parse_int_arg(v, "row length")); }},
      {"", "--eps", "E", "residual-rmsnorm: added to each row's mean square (default 1e-6)",
       [](Config& c, const std::string& v) { c.eps = static_cast<float>(parse_number(v, "eps")); }},
      {"", "--scale", "S", "residual-rmsnorm-fp8: the per-tensor scale, fp8 out = e4m3(out / S) (default 1)",
       [](Config& c, const std::string& v) { c.quant_scale = static_cast<float>(parse_number(v, "scale")); }},
      {"", "--channels", "C", "channels per rank", [](Config& c, const std::string& v) { c.comm.channels = parse_int_arg(v, "channel count"); }},
      {"", "--block-threads", "T", "host and sim: threads per block, as fibers (default $CCC_HOST_BLOCK_THREADS, else 1; sim: N, 8 to 32)",
       [](Config& c, const std::string& v) { c.comm.host_block_threads = parse_int_arg(v, "thread count"); }},
      {"", "--tile-bytes", "B", "tile size", [](Config& c, const std::string& v) { c.comm.tile_bytes = static_cast<int64_t>(parse_size(v)); }},
      {"", "--protocol", "P", "simple or ll (default: the cost model's choice per size; ll takes at most 256 KiB)",
       [](Config& c, const std::string& v) {
         c.comm.protocol = parse_protocol(v);
         if (!c.comm.protocol) usage("--protocol is simple or ll");
       }},
      {"", "--trace", "F", "write a Chrome trace-event timeline of every call to F (docs/tracing.md)",
       [](Config& c, const std::string& v) { c.comm.trace_file = v; }},
      {"", "--baseline", "", "add a copy of the bytes the collective must move, and the ratio",
       [](Config& c, const std::string&) { c.baseline = true; }},
      {"", "--probe", "", "print the CUDA device in one line, or why there is none (exit 1)",
       [](Config& c, const std::string&) { c.probe = true; }},
      {"", "--calibrate", "F", "measure this GPU's launch, graph replay, memory and channel rates into the "
       "calibration file F (docs/cost_model.md, \"Calibration\")",
       [](Config& c, const std::string& v) { c.calibrate = v; }},
      {"", "--jit", "", "time one kernel's cold compile, disk hit and memory hit",
       [](Config& c, const std::string&) { c.jit = true; }},
      {"", "--arch", "sm_XX", "--jit: the NVRTC target (default sm_90)", [](Config& c, const std::string& v) { c.arch = v; }},
      {"", "--nvrtc-option", "OPT", "--jit: one more NVRTC option (repeatable)",
       [](Config& c, const std::string& v) { c.nvrtc_options.push_back(v); }},
  };
  return table;
}

void print_help() {
  fmt::print("usage: ccc-bench [options]      (collective bandwidth, nccl-tests' columns)\n"
             "       ccc-bench --jit [options] (JIT cache timings)\n"
             "       ccc-bench --probe\n"
             "       ccc-bench --calibrate F [--devices D]\n");
  for (const Option& o : options()) {
    const std::string names = std::string(o.short_name) + (*o.short_name ? ", " : "    ") + o.long_name + " " + o.value;
    fmt::print("  {:<34} {}\n", names, o.help);
  }
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    }
    std::optional<std::string> inline_value;  // --opt=value
    if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a.resize(eq);
    }
    const auto it = std::find_if(options().begin(), options().end(),
                                 [&](const Option& o) { return a == o.short_name || a == o.long_name; });
    if (it == options().end()) usage(fmt::format("unknown argument '{}'", a));
    std::string value;
    if (*it->value != '\0') {
      if (inline_value) {
        value = *inline_value;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        usage(a + " needs a value");
      }
    } else if (inline_value) {
      usage(a + " takes no value");
    }
    it->set(c, value);
  }
  if (c.step_bytes == 0 && !(c.factor > 1)) usage("-f must be greater than 1");
  if (c.step_bytes == 0 && c.min_bytes == 0) usage("-b 0 with -f: the sizes would never grow; start at 1 byte or more");
  if (c.min_bytes > c.max_bytes) usage("-b is larger than -e");
  if (c.graph_replays > 0 && c.backend == "host") usage("-G (CUDA graphs) needs --backend cuda or sim");
  if (c.critical_path && c.backend != "sim") usage("--critical-path needs --backend sim");
  if (c.epilogue != Epilogue::None && c.collective != Collective::AllReduce)
    usage(fmt::format("--epilogue {}: only allreduce has one", epilogue_name(c.epilogue)));
  if (c.epilogue == Epilogue::ResidualRmsNorm && c.hidden == 0) usage("--epilogue residual-rmsnorm needs --hidden H");
  if (c.epilogue != Epilogue::ResidualRmsNorm && c.hidden != 0) usage("--hidden is residual-rmsnorm's");
  if (c.quant_scale && c.epilogue != Epilogue::ResidualRmsNorm) usage("--scale is residual-rmsnorm-fp8's");
  if (c.comm.sim_timing_only && c.backend != "sim") usage("--timing-only needs --backend sim");
  if (c.comm.sim_timing_only) c.check = 0;  // the outputs are never written
  if (c.baseline && c.backend == "sim") usage("--baseline times a copy on this machine, which says nothing of the simulated GPUs");
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The sizes from -b to -e, by -f or -i; a usage error past 10000 of them (-i 1 up to 1G would
// not end in a lifetime).
std::vector<uint64_t> sizes(const Config& cfg) {
  const size_t limit = 10000;
  std::vector<uint64_t> out;
  for (double size = static_cast<double>(cfg.min_bytes); size <= static_cast<double>(cfg.max_bytes);
       size = cfg.step_bytes != 0 ? size + static_cast<double>(cfg.step_bytes) : size * cfg.factor) {
    if (out.size() == limit) usage(fmt::format("more than {} sizes from -b to -e: take a larger -f or -i", limit));
    out.push_back(static_cast<uint64_t>(size));
  }
  return out;
}

// --- collective bandwidth ---

struct Placement {
  std::vector<const void*> send;
  std::vector<void*> recv;
};

// Per rank two regions of `region` bytes; in place, the collective's layout within the first.
Placement place(const std::vector<void*>& a, const std::vector<void*>& b, const CollectiveCall& shape,
                int n, bool in_place) {
  Placement p;
  const uint64_t block = shape.count * data_type_size(shape.dtype);
  for (int r = 0; r < n; ++r) {
    auto* base = static_cast<unsigned char*>(a[r]);
    const void* send = base;
    void* recv = in_place ? base : b[r];
    if (in_place && shape.collective == Collective::ReduceScatter) recv = base + r * block;
    if (in_place && shape.collective == Collective::AllGather) send = base + r * block;
    p.send.push_back(send);
    p.recv.push_back(recv);
  }
  return p;
}

// The bytes `call` must at least move through memory: every input read once (a broadcast's
// only the root's), every output written once (a reduce's only the root's).
uint64_t min_memory_bytes(const CollectiveCall& call, int n) {
  const uint64_t inputs = call.collective == Collective::Broadcast ? 1 : n;
  const uint64_t outputs = call.collective == Collective::Reduce ? 1 : n;
  return inputs * send_bytes(call, n) + outputs * recv_bytes(call, n);
}

// The ranks, their memory and streams, and the two regions per rank the sizes are placed in.
struct Bench {
  explicit Bench(const Config& c) : cfg(c) {}
  const Config& cfg;
  int n = 0;
  std::unique_ptr<RankMemory> mem;
  std::optional<Communicator> comm;
  std::optional<Communicator> graph_comm;  // sim with -G: the same ranks, launches priced as graph replays
  std::vector<void*> streams;  // one per rank on CUDA, none on the host
  std::vector<void*> region_a, region_b;
  std::vector<const void*> residual;  // --epilogue: each rank's residual (region_bytes)
  std::vector<unsigned char> residual_host;  // the values the last fresh-input run gave them
  std::vector<const void*> weight;           // residual-rmsnorm: each rank's (hidden elements)
  std::vector<unsigned char> weight_host;
  std::vector<void*> residual_out, quant_out;  // its pre-norm sums (region_bytes), its fp8 output
  uint64_t region_bytes = 0;
  int devices = 1;  // memories the ranks are spread over

  void issue(const CollectiveCall& call) { comm->run(call, streams); }
  void wait() { comm->synchronize(); }
  double time_eager(const CollectiveCall& call) {
    if (cfg.backend == "sim") return virtual_time(*comm, call);
    return mem->time_calls([&] { issue(call); }, [&] { wait(); }, cfg.iters);
  }
  double time_graph(const CollectiveCall& call) {
    if (cfg.backend == "sim") return virtual_time(*graph_comm, call);  // a graph's replays are alike
    return mem->time_graph([&] { issue(call); }, cfg.iters, cfg.graph_replays);
  }
  // The simulator: the calls' virtual time on `c`, queued back to back as on a stream.
  double virtual_time(Communicator& c, const CollectiveCall& call) {
    const double start = c.virtual_seconds();
    for (int i = 0; i < cfg.iters; ++i) c.run(call, streams);
    c.synchronize();
    return (c.virtual_seconds() - start) / cfg.iters;
  }
  // Seconds per copy of `bytes` spread over the regions of the ranks that share device 0.
  double time_copy(uint64_t bytes) {
    const int ranks_here = devices == 1 ? n : 1;
    auto copy = [&] {
      uint64_t left = bytes;
      for (int r = 0; left > 0; r = (r + 1) % ranks_here) {
        const uint64_t chunk = std::min(left, region_bytes);
        mem->copy(r, region_b[r], region_a[r], chunk);
        left -= chunk;
      }
    };
    for (int i = 0; i < cfg.warmup; ++i) copy();
    return mem->time_calls(copy, [&] { mem->synchronize(0); }, cfg.iters);
  }
};

// One run on fresh inputs (`fill(dtype, rank, elems, dst)`), outputs poisoned;
// `look(rank, inputs, output)` sees each rank's output.
template <class Fill, class Look>
void run_on_fresh_inputs(Bench& b, const CollectiveCall& call, Fill fill, Look look) {
  const int n = b.n;
  const uint64_t in_bytes = send_bytes(call, n), out_bytes = recv_bytes(call, n);
  const uint64_t elem = data_type_size(call.dtype);
  std::vector<std::vector<unsigned char>> inputs(n, std::vector<unsigned char>(in_bytes));
  std::vector<unsigned char> host(out_bytes);
  if (call.epilogue != Epilogue::None) {  // a residual of its own (as a rank n's input), the same on every rank
    fill(call.dtype, n, out_bytes / elem, host.data());
    for (int r = 0; r < n; ++r) b.mem->upload(r, const_cast<void*>(call.residual[r]), host.data(), out_bytes);
    b.residual_host = host;
  }
  if (call.epilogue == Epilogue::ResidualRmsNorm) {  // a weight of its own (as a rank n + 1's input)
    b.weight_host.resize(call.hidden * elem);
    fill(call.dtype, n + 1, call.hidden, b.weight_host.data());
    for (int r = 0; r < n; ++r) {
      b.mem->upload(r, const_cast<void*>(call.weight[r]), b.weight_host.data(), b.weight_host.size());
      poison(call.dtype, out_bytes / elem, host.data());
      b.mem->upload(r, call.residual_out[r], host.data(), out_bytes);
      if (call.quant_scale) {
        poison(DataType::F8E4M3, call.count, host.data());
        b.mem->upload(r, call.quant_out[r], host.data(), call.count);
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    poison(call.dtype, out_bytes / elem, host.data());
    b.mem->upload(r, const_cast<void*>(static_cast<const void*>(call.recv[r])), host.data(), out_bytes);
    fill(call.dtype, r, in_bytes / elem, inputs[r].data());
    b.mem->upload(r, const_cast<void*>(call.send[r]), inputs[r].data(), in_bytes);
  }
  b.issue(call);
  b.wait();
  std::vector<const void*> input_ptrs;
  for (const auto& in : inputs) input_ptrs.push_back(in.data());
  for (int r = 0; r < n; ++r) {
    b.mem->download(r, host.data(), call.recv[r], out_bytes);
    look(r, input_ptrs, host.data());
  }
}

// One checked run (`salt` varies the inputs): the elements that differ from the reference.
uint64_t checked_run(Bench& b, const CollectiveCall& call, uint64_t salt) {
  uint64_t wrong = 0;
  run_on_fresh_inputs(
      b, call, [&](DataType t, int r, uint64_t elems, void* dst) { fill_input(t, r, salt, elems, dst); },
      [&](int r, const std::vector<const void*>& in, const void* out) {
        RankEpilogue e;
        std::vector<unsigned char> residual_out, quant_out;
        if (call.epilogue != Epilogue::None) e.residual = b.residual_host.data();
        if (call.epilogue == Epilogue::ResidualRmsNorm) {
          e.weight = b.weight_host.data();
          residual_out.resize(recv_bytes(call, b.n));
          b.mem->download(r, residual_out.data(), call.residual_out[r], residual_out.size());
          e.residual_out = residual_out.data();
        }
        if (call.quant_scale) {
          quant_out.resize(call.count);
          b.mem->download(r, quant_out.data(), call.quant_out[r], quant_out.size());
          e.quant_out = quant_out.data();
        }
        wrong += count_wrong(call, b.n, r, in, out, e);
      });
  return wrong;
}

// Whether a call's result rounds (floats reduced), so that its error against float64 means
// something; the rest are exact or wrong (#wrong).
bool rounds(const CollectiveCall& call) {
  return data_type_is_float(call.dtype) &&
         (call.collective == Collective::AllReduce ||
                                            call.collective == Collective::Reduce ||
                                            call.collective == Collective::ReduceScatter);
}

// One run on random inputs of many magnitudes: the largest error of any rank's output against
// the exact result, in ulps of the type (max_ulp_error; 0.5 is one correct rounding).
double accuracy_run(Bench& b, const CollectiveCall& call) {
  double worst = 0;
  run_on_fresh_inputs(
      b, call, [](DataType t, int r, uint64_t elems, void* dst) { fill_random(t, r, 1, elems, dst); },
      [&](int r, const std::vector<const void*>& in, const void* out) {
        const RankEpilogue e{call.epilogue != Epilogue::None ? b.residual_host.data() : nullptr,
                             call.epilogue == Epilogue::ResidualRmsNorm ? b.weight_host.data() : nullptr};
        worst = std::max(worst, max_ulp_error(call, b.n, r, in, out, e));
      });
  return worst;
}

void open_ranks(Bench& b) {
  const Config& cfg = b.cfg;
  b.n = cfg.ranks;
  if (cfg.backend == "host" || cfg.backend == "sim") {
    if (b.n == 0) b.n = cfg.backend == "sim" ? 8 : 4;
    b.mem = host_memory(!cfg.comm.sim_timing_only);
    b.comm.emplace(Communicator::create(*backend_named(cfg.backend), b.n, cfg.comm));
    if (cfg.backend == "sim" && cfg.graph_replays > 0) {
      CommOptions graph = cfg.comm;
      graph.sim_graph_replays = true;
      b.graph_comm.emplace(Communicator::sim(b.n, graph));
    }
    return;
  }
  if (cfg.devices.size() > 1) {
    b.n = static_cast<int>(cfg.devices.size());
    b.devices = b.n;
    b.mem = cuda_memory(cfg.devices);
    b.comm.emplace(Communicator::cuda(cfg.devices, cfg.comm));
  } else {  // virtual ranks on one device
    const int device = cfg.devices.empty() ? 0 : cfg.devices[0];
    if (b.n == 0) b.n = 8;
    b.mem = cuda_memory({device});
    b.comm.emplace(Communicator::cuda_virtual(device, b.n, cfg.comm));
  }
  for (int r = 0; r < b.n; ++r) b.streams.push_back(b.mem->stream(r));
}

// What the footer summarises: every row's busbw, and the smallest and largest rows.
struct Totals {
  uint64_t wrong = 0;
  double worst_ulp = -1;  // the largest error against float64 (< 0: none measured), and where
  std::string worst_ulp_at;
  double busbw_sum = 0;
  int busbw_count = 0;
  std::string smallest, largest;
};

std::string placement_columns(const char* time_unit) {
  return fmt::format("{:>9} {:>7} {:>7} {:>6}", time_unit, "(GB/s)", "(GB/s)", "");
}

void print_header(const Bench& b) {
  const Config& cfg = b.cfg;
  const std::string epilogue =
      cfg.epilogue == Epilogue::None ? ""
      : cfg.epilogue == Epilogue::Residual
          ? " + residual (fused)"
          : fmt::format(" + residual + RMSNorm (fused; rows of {}, the pre-norm sums written out{})", cfg.hidden,
                        cfg.quant_scale ? fmt::format(", fp8 e4m3 output at scale {:g}", *cfg.quant_scale) : "");
  fmt::print("# ccc-bench: {}{} on {} {} ranks{}, schedule {}, {} calls{}\n#\n", collective_name(cfg.collective), epilogue, b.n,
             cfg.backend,
             cfg.backend == "sim" ? fmt::format(" ({}, virtual time: a prediction, docs/simulator.md)",
                                                 std::filesystem::path(cfg.comm.topology_file).filename().string())
                                  : "", cfg.comm.algo.empty() ? "chosen per size" : cfg.comm.algo, cfg.iters,
             cfg.graph_replays == 0      ? ""
             : cfg.backend == "sim" ? " and as replays of a CUDA graph (each launch priced at graph_launch)"
                                    : fmt::format(" captured in a CUDA graph launched {} times", cfg.graph_replays));
  const std::string names = fmt::format("{:>9} {:>7} {:>7} {:>6}", "time", "algbw", "busbw", "#wrong");
  const std::string extra = std::string(" maxulp") + (cfg.graph_replays > 0 ? "     eager" : "") + (cfg.baseline ? "      copy  ratio" : "");
  const std::string units = std::string(" (f64)") + (cfg.graph_replays > 0 ? "      (us)" : "") + (cfg.baseline ? "      (us)" : "");
  fmt::print("# {:>10} {:>12} {:>8} {:>6} {:>5}   {:<33}   {:<33}\n", "", "", "", "", "", "out-of-place", "in-place");
  fmt::print("# {:>10} {:>12} {:>8} {:>6} {:>5}   {}   {}   {:<10}{}\n", "size", "count", "type", "redop", "root", names,
             names, "algo", extra);
  fmt::print("# {:>10} {:>12} {:>8} {:>6} {:>5}   {}   {}   {:<10}{}\n", "(B)", "(elements)", "", "", "",
             placement_columns("(us)"), placement_columns("(us)"), "", units);
}

// One row: both placements checked and timed, then the schedule, the eager time (-G) and the
// copy baseline.
void run_size(Bench& b, CollectiveCall call, Totals& totals) {
  const Config& cfg = b.cfg;
  const uint64_t bytes = std::max(send_bytes(call, b.n), recv_bytes(call, b.n));
  std::string row = fmt::format("  {:>10} {:>12} {:>8} {:>6} {:>5}", bytes, call.count, nccl_type_name(call.dtype),
                                reduce_op_name(call.op), call.root);
  double out_of_place = 0, eager_out_of_place = 0, ulp = -1;
  std::string path;  // --critical-path: the last out-of-place call's
  for (bool in_place : {false, true}) {
    if (in_place && call.collective == Collective::AllToAll) {  // refused: alltoall runs out of place only
      row += fmt::format("   {:>9} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    const Placement p = place(b.region_a, b.region_b, call, b.n, in_place);
    call.send = p.send;
    call.recv = p.recv;
    uint64_t wrong = 0;
    for (int i = 0; i < cfg.check; ++i) wrong += checked_run(b, call, i + 1);
    totals.wrong += wrong;
    if (cfg.check > 0 && rounds(call)) ulp = std::max(ulp, accuracy_run(b, call));
    for (int i = 0; i < cfg.warmup; ++i) b.issue(call);
    b.wait();
    const double eager = b.time_eager(call);
    const double t = cfg.graph_replays > 0 ? b.time_graph(call) : eager;
    b.wait();
    if (!in_place) {
      out_of_place = t;
      eager_out_of_place = eager;
      if (cfg.critical_path) path = b.comm->critical_path();
    }
    const double algbw = static_cast<double>(bytes) / t / 1e9, busbw = algbw * bus_factor(call.collective, b.n);
    totals.busbw_sum += busbw;
    ++totals.busbw_count;
    row += fmt::format("   {:>9.2f} {:>7.2f} {:>7.2f} {:>6}", t * 1e6, algbw, busbw, cfg.check > 0 ? std::to_string(wrong) : "N/A");
  }
  row += fmt::format("   {:<10}", b.comm->choice_for(call).algorithm);
  row += ulp < 0 ? fmt::format(" {:>6}", cfg.check > 0 ? "-" : "N/A") : fmt::format(" {:>6.2f}", ulp);
  if (ulp > totals.worst_ulp) {
    totals.worst_ulp = ulp;
    totals.worst_ulp_at = fmt::format("{} {}, {} B, {}", nccl_type_name(call.dtype), reduce_op_name(call.op), bytes,
                                      b.comm->choice_for(call).algorithm);
  }
  if (cfg.graph_replays > 0) row += fmt::format(" {:>9.2f}", eager_out_of_place * 1e6);
  const std::string latency = fmt::format("{} B: {:.2f} us{}", bytes, out_of_place * 1e6,
                                          cfg.graph_replays > 0 ? fmt::format(" replayed, {:.2f} us eager", eager_out_of_place * 1e6) : "");
  std::string bandwidth = fmt::format("{} B: busbw {:.2f} GB/s", bytes,
                                      static_cast<double>(bytes) / out_of_place / 1e9 * bus_factor(call.collective, b.n));
  if (cfg.baseline) {
    const double copy = b.time_copy(min_memory_bytes(call, b.n) / b.devices / 2);
    row += fmt::format(" {:>9.2f} {:>6.3f}", copy * 1e6, copy / out_of_place);
    bandwidth += fmt::format(", {:.3f} of a copy of the bytes it must move (best about 1)", copy / out_of_place);
  }
  if (totals.smallest.empty()) totals.smallest = latency;
  totals.largest = bandwidth;
  fmt::print("{}\n", row);
  if (!path.empty()) {
    fmt::print("#   critical path of the last out-of-place call ({} B):\n", bytes);
    for (size_t at = 0; at < path.size();) {
      const size_t end = path.find('\n', at);
      fmt::print("#   {}\n", path.substr(at, end - at));
      at = end == std::string::npos ? path.size() : end + 1;
    }
  }
  std::fflush(stdout);
}

int run_bandwidth(const Config& cfg) {
  const std::vector<uint64_t> size_list = sizes(cfg);
  Bench b(cfg);
  open_ranks(b);
  const bool blocks = cfg.collective == Collective::ReduceScatter || cfg.collective == Collective::AllGather ||
                      cfg.collective == Collective::AllToAll;
  const uint64_t unit_max = 8 * (blocks ? b.n : 1);  // one element of the widest type, per block
  b.region_bytes = cfg.max_bytes + unit_max;
  for (int r = 0; r < b.n; ++r) {
    b.region_a.push_back(b.mem->alloc(r, b.region_bytes));
    b.region_b.push_back(b.mem->alloc(r, b.region_bytes));
    if (cfg.epilogue != Epilogue::None) b.residual.push_back(b.mem->alloc(r, b.region_bytes));
    if (cfg.epilogue == Epilogue::ResidualRmsNorm) {
      b.weight.push_back(b.mem->alloc(r, cfg.hidden * 8));
      b.residual_out.push_back(b.mem->alloc(r, b.region_bytes));
    }
    if (cfg.quant_scale) b.quant_out.push_back(b.mem->alloc(r, b.region_bytes));
  }
  print_header(b);
  const bool rooted = cfg.collective == Collective::Broadcast || cfg.collective == Collective::Reduce;
  const bool reduces = cfg.collective != Collective::Broadcast && cfg.collective != Collective::AllGather &&
                       cfg.collective != Collective::AllToAll;
  const std::vector<ReduceOp> ops = reduces ? cfg.ops : std::vector<ReduceOp>{cfg.ops.front()};
  Totals totals;
  for (DataType dtype : cfg.dtypes) {
    for (ReduceOp op : ops) {
      for (uint64_t size : size_list) {
        CollectiveCall call;
        call.collective = cfg.collective;
        call.dtype = dtype;
        call.op = op;
        call.root = rooted ? cfg.root : -1;
        call.count = size / (data_type_size(dtype) * (blocks ? b.n : 1));
        call.epilogue = cfg.epilogue;
        if (cfg.epilogue != Epilogue::None) call.residual = b.residual;
        if (cfg.epilogue == Epilogue::ResidualRmsNorm) {  // whole rows
          call.count -= call.count % cfg.hidden;
          call.weight = b.weight;
          call.residual_out = b.residual_out;
          call.hidden = cfg.hidden;
          call.eps = cfg.eps;
          call.quant_scale = cfg.quant_scale;
          call.quant_out = b.quant_out;
        }
        if (call.count > 0) run_size(b, call, totals);
      }
    }
  }
  // The footer lines nccl-tests prints (cluster job checks grep them), then ccc's summary.
  fmt::print("# Out of bounds values : {} {}\n", totals.wrong, totals.wrong == 0 ? "OK" : "FAILED");
  fmt::print("# Avg bus bandwidth    : {:g} \n",
             totals.busbw_count > 0 ? totals.busbw_sum / totals.busbw_count : 0.0);
  if (!totals.smallest.empty()) fmt::print("# Latency at {}\n# Bandwidth at {}\n", totals.smallest, totals.largest);
  if (totals.worst_ulp >= 0)
    fmt::print("# Largest error against float64: {:.2f} ulp ({}; 0.5 is one correct rounding)\n", totals.worst_ulp,
               totals.worst_ulp_at);
  fmt::print("#\n");
  return totals.wrong == 0 ? 0 : 1;
}

int run_probe() {
  try {
    fmt::print("{}\n", describe_cuda_devices());
    return 0;
  } catch (const CudaError& e) {
    fmt::print("{}\n", e.what());
    return 1;
  }
}

// --- JIT cache timings ---

// --calibrate: the constants of one GPU the cost model uses (topology.h, Calibration), measured
// with one rank on the first of --devices (default 0), and written where --calibrate says:
//   launch        an in-place 8-byte allreduce, eager, back to back on the stream: the launch
//                 and the kernel's prologue, which is what the model's per-call term stands for;
//   graph_launch  the same calls captured in a CUDA graph and replayed;
//   memory        a device-to-device copy of 256 MiB: bytes read plus bytes written per second;
//   channel       an out-of-place 64 MiB allreduce of one rank on one channel (the kernel copies
//                 its input): bytes per second one thread block moves. Local memory, so an upper
//                 bound for a channel reading a peer over the fabric.
// The fabric (latency and bandwidth between GPUs) and the reduce rate are left out: they need
// two GPUs and a model of the whole schedule respectively, so the topology keeps its figures.
int run_calibrate(Config cfg) {
  cfg.backend = "cuda";
  cfg.ranks = 1;
  cfg.devices.resize(std::min<size_t>(cfg.devices.size(), 1));
  cfg.comm.channels = 1;
  cfg.iters = 100;
  cfg.warmup = 10;
  const uint64_t large = 256ull << 20, channel_bytes = 64ull << 20;
  Bench b(cfg);
  open_ranks(b);
  b.region_bytes = large;
  b.region_a.push_back(b.mem->alloc(0, large));
  b.region_b.push_back(b.mem->alloc(0, large));
  CollectiveCall call;
  call.collective = Collective::AllReduce;
  call.dtype = DataType::F32;
  call.op = ReduceOp::Sum;
  call.count = 2;
  const Placement tiny = place(b.region_a, b.region_b, call, 1, /*in_place=*/true);
  call.send = tiny.send;
  call.recv = tiny.recv;
  for (int i = 0; i < cfg.warmup; ++i) b.issue(call);  // the first call compiles the kernel
  b.wait();
  Calibration cal;
  cal.device = describe_cuda_devices();
  cal.launch = b.time_eager(call);
  cal.graph_launch = b.mem->time_graph([&] { b.issue(call); }, 20, 20);
  b.wait();
  cal.memory_bandwidth = 2.0 * static_cast<double>(large) / b.time_copy(large);
  call.count = channel_bytes / sizeof(float);
  const Placement wide = place(b.region_a, b.region_b, call, 1, /*in_place=*/false);
  call.send = wide.send;
  call.recv = wide.recv;
  b.issue(call);
  b.wait();
  cfg.iters = 10;
  cal.channel_bandwidth = static_cast<double>(channel_bytes) / b.time_eager(call);
  b.wait();
  const std::string text = "# ccc-bench --calibrate: one rank, one channel (tools/ccc_bench.cpp, run_calibrate)\n" +
                           format_calibration(cal);
  std::ofstream out(cfg.calibrate);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write the calibration file '{}'", cfg.calibrate));
  fmt::print("{}", text);
  return 0;
}

struct JitTimes {
  double cold = 0, disk = 0, memory = 0;  // seconds
};

// Times `compile` through a fresh cache directory: a miss, a disk hit from a new cache on the
// same directory, and a memory hit (medians of several hits).
template <typename Compile>
JitTimes time_jit(Compile&& compile) {
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);  // TMPDIR missing or a file
  if (ec) throw std::runtime_error(fmt::format("cannot use the temporary directory (TMPDIR): {}", ec.message()));
  std::string pattern = (tmp / "ccc-bench-jit-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error(fmt::format("cannot create a temporary directory in {}: {}", tmp.string(), std::strerror(errno)));
  const std::filesystem::path dir = pattern;
  auto timed = [&](JitCache& cache) {
    const auto start = std::chrono::steady_clock::now();
    compile(cache);
    return seconds_since(start);
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  JitTimes t;
  JitCache first(dir);
  t.cold = timed(first);
  std::vector<double> disk, memory;
  for (int i = 0; i < 5; ++i) {
    JitCache again(dir);
    disk.push_back(timed(again));
    memory.push_back(timed(again));
  }
  t.disk = median(disk);
  t.memory = median(memory);
  std::filesystem::remove_all(dir);
  return t;
}

void print_jit(const std::string& what, const JitTimes& t) {
  fmt::print("  {:<22} cold {:>9.1f} ms   disk hit {:>8.3f} ms ({:>7.0f}x faster)   memory hit {:>8.4f} ms ({:>9.0f}x)\n",
             what, t.cold * 1e3, t.disk * 1e3, t.cold / t.disk, t.memory * 1e3, t.cold / t.memory);
}

int run_jit(const Config& cfg) {
  const int n = cfg.ranks == 0 ? 8 : cfg.ranks;
  const std::string algo = cfg.comm.algo.empty() ? "ring" : cfg.comm.algo;
  KernelShape shape;
  shape.nranks = n;
  shape.dtype = cfg.dtypes.front();
  shape.op = cfg.ops.front();
  shape.channels = cfg.comm.channels;
  shape.tile_bytes = cfg.comm.tile_bytes;
  shape.protocol = cfg.comm.protocol.value_or(Protocol::Simple);
  const auto start = std::chrono::steady_clock::now();
  const EmittedKernel k = generate_kernel(find_shipped_schedule(Collective::AllReduce, algo).file, shape);
  const double generate = seconds_since(start);
  fmt::print("# JIT: {} allreduce, N = {}, {} {}: generate {:.1f} ms\n", algo, n, data_type_name(shape.dtype),
             reduce_op_name(shape.op), generate * 1e3);
  NvrtcRequest req;
  req.source = k.source;
  req.name = k.kernel_name + ".cu";
  req.arch = cfg.arch;
  req.options = cfg.nvrtc_options;
  print_jit("nvrtc " + cfg.arch + " cubin", time_jit([&](JitCache& c) { nvrtc_build_cached(c, req); }));
  HostCompileRequest host;
  host.source = k.source;
  host.name = k.kernel_name + ".cpp";
  print_jit(host_compiler() + " shared object", time_jit([&](JitCache& c) { host_compile_cached(c, host); }));
  return 0;
}

}  // namespace
}  // namespace ccc::bench

int main(int argc, char** argv) {
  const ccc::bench::Config cfg = ccc::bench::parse(argc, argv);
  try {
    if (cfg.probe) return ccc::bench::run_probe();
    if (!cfg.calibrate.empty()) return ccc::bench::run_calibrate(cfg);
    return cfg.jit ? ccc::bench::run_jit(cfg) : ccc::bench::run_bandwidth(cfg);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ccc-bench: error: {}\n", e.what());
    return 1;
  }
}
