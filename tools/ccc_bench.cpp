// ccc-bench: collective bandwidth shaped like nccl-tests' all_reduce_perf, on the host or CUDA
// backend, and (--jit) the JIT cache: cold compile against disk and memory hits.
//
//   ccc-bench [-b MIN] [-e MAX] [-f FACTOR] [-d TYPE] [-o OP] [-n ITERS] [-w WARMUP] [-c 0|1]
//             [--backend host|cuda] [--ranks N] [--devices 0,1,..] [--algo NAME]
//             [--collective C] [--root R] [--channels C] [--tile-bytes B] [--baseline]
//   ccc-bench --jit [--ranks N] [--algo NAME] [-d TYPE] [-o OP] [--arch sm_90] [--nvrtc-option OPT]...
//
// Sizes take K, M and G suffixes. size is the bytes of a rank's largest buffer (N blocks for
// reduce_scatter's send and allgather's recv), count the per-rank ABI count; algbw = size / time
// and busbw = algbw times nccl-tests' factor (allreduce 2(N-1)/N, reduce_scatter and allgather
// (N-1)/N, broadcast and reduce 1). --baseline adds a same-size copy (memcpy or cuMemcpyDtoD)
// timed in the same run, and algbw as a fraction of it.
// --nvrtc-option adds one option to the --jit NVRTC compile (repeat it: --nvrtc-option -Xptxas
// --nvrtc-option -O1), to time NVRTC and ptxas settings.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench_buffers.h"
#include "ccc/collective_reference.h"
#include "ccc/communicator.h"
#include "ccc/cost_model.h"
#include "ccc/cuda_driver.h"
#include "ccc/host_compile.h"
#include "ccc/kernel_source.h"
#include "ccc/nvrtc_jit.h"
#include "ccc/shipped_schedules.h"

namespace ccc::bench {
namespace {

struct Config {
  uint64_t min_bytes = 8, max_bytes = 32 << 20;
  double factor = 2;
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  int iters = 20, warmup = 5;
  bool check = true;
  std::string backend = "host";
  int ranks = 0;  // 0: 4 host ranks, or one per listed CUDA device
  std::vector<int> devices;
  Collective collective = Collective::AllReduce;
  int root = 0;
  CommOptions comm;
  bool baseline = false;
  bool jit = false;
  std::string arch = "sm_90";
  std::vector<std::string> nvrtc_options;  // --jit: extra NVRTC options, e.g. -Xptxas -O1
};

[[noreturn]] void usage(const std::string& message) {
  fmt::print(stderr, "ccc-bench: error: {}\n(see the comment at the top of tools/ccc_bench.cpp, or -h)\n", message);
  std::exit(2);
}

uint64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string suffix = end;
  const double scale = suffix.empty() ? 1 : suffix == "K" ? 1 << 10 : suffix == "M" ? 1 << 20 : suffix == "G" ? 1 << 30 : 0;
  if (end == text.c_str() || scale == 0 || v < 0) usage(fmt::format("bad size '{}'", text));
  return static_cast<uint64_t>(v * scale);
}

int parse_int_arg(const std::string& text, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < 0 || v > (1 << 30)) usage(fmt::format("bad {} '{}'", what, text));
  return static_cast<int>(v);
}

DataType parse_type(const std::string& name) {
  static const std::map<std::string, DataType> nccl_names = {
      {"double", DataType::F64}, {"float", DataType::F32}, {"half", DataType::F16}, {"bfloat16", DataType::BF16},
      {"int64", DataType::I64}, {"uint64", DataType::U64}, {"int32", DataType::I32}, {"int", DataType::I32},
      {"uint32", DataType::U32}, {"int8", DataType::I8}, {"uint8", DataType::U8}};
  if (auto t = parse_data_type(name)) return *t;
  if (auto it = nccl_names.find(name); it != nccl_names.end()) return it->second;
  usage(fmt::format("unknown type '{}'", name));
}

Collective parse_collective(const std::string& name) {
  for (Collective c : {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                       Collective::Broadcast, Collective::Reduce})
    if (name == collective_name(c)) return c;
  usage(fmt::format("unknown collective '{}'", name));
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      fmt::print("usage: ccc-bench [-b MIN] [-e MAX] [-f FACTOR] [-d TYPE] [-o OP] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
                 "                 [--backend host|cuda] [--ranks N] [--devices 0,1,..] [--algo NAME]\n"
                 "                 [--collective C] [--root R] [--channels C] [--tile-bytes B] [--baseline]\n"
                 "       ccc-bench --jit [--ranks N] [--algo NAME] [-d TYPE] [-o OP] [--arch sm_90] [--nvrtc-option OPT]...\n");
      std::exit(0);
    } else if (a == "-b") { c.min_bytes = parse_size(value());
    } else if (a == "-e") { c.max_bytes = parse_size(value());
    } else if (a == "-f") { c.factor = std::strtod(value().c_str(), nullptr);
    } else if (a == "-d") { c.dtype = parse_type(value());
    } else if (a == "-o") {
      const std::string op = value();
      if (!parse_reduce_op(op)) usage(fmt::format("unknown op '{}'", op));
      c.op = *parse_reduce_op(op);
    } else if (a == "-n") { c.iters = std::max(1, parse_int_arg(value(), "iteration count"));
    } else if (a == "-w") { c.warmup = parse_int_arg(value(), "warmup count");
    } else if (a == "-c") { c.check = parse_int_arg(value(), "-c") != 0;
    } else if (a == "--backend") {
      c.backend = value();
      if (c.backend != "host" && c.backend != "cuda") usage("--backend is host or cuda");
    } else if (a == "--ranks") { c.ranks = parse_int_arg(value(), "rank count");
    } else if (a == "--devices") {
      std::string list = value();
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        c.devices.push_back(parse_int_arg(list.substr(pos, comma - pos), "device"));
        pos = comma + 1;
      }
    } else if (a == "--algo") { c.comm.algo = value();
    } else if (a == "--collective") { c.collective = parse_collective(value());
    } else if (a == "--root") { c.root = parse_int_arg(value(), "root");
    } else if (a == "--channels") { c.comm.channels = parse_int_arg(value(), "channel count");
    } else if (a == "--tile-bytes") { c.comm.tile_bytes = static_cast<int64_t>(parse_size(value()));
    } else if (a == "--baseline") { c.baseline = true;
    } else if (a == "--jit") { c.jit = true;
    } else if (a == "--arch") { c.arch = value();
    } else if (a == "--nvrtc-option") { c.nvrtc_options.push_back(value());
    } else {
      usage(fmt::format("unknown argument '{}'", a));
    }
  }
  if (c.factor <= 1) usage("-f must be greater than 1");
  if (c.min_bytes > c.max_bytes) usage("-b is larger than -e");
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

// One checked run: inputs filled, outputs poisoned, every element compared.
uint64_t checked_run(Communicator& comm, RankMemory& mem, CollectiveCall call, int n) {
  const uint64_t in_bytes = send_bytes(call, n), out_bytes = recv_bytes(call, n);
  const uint64_t elem = data_type_size(call.dtype);
  std::vector<std::vector<unsigned char>> inputs(n, std::vector<unsigned char>(in_bytes));
  std::vector<unsigned char> host(out_bytes);
  for (int r = 0; r < n; ++r) {
    poison(call.dtype, out_bytes / elem, host.data());
    mem.upload(r, const_cast<void*>(static_cast<const void*>(call.recv[r])), host.data(), out_bytes);
    fill_input(call.dtype, r, 1, in_bytes / elem, inputs[r].data());
    mem.upload(r, const_cast<void*>(call.send[r]), inputs[r].data(), in_bytes);
  }
  comm.run(call);
  comm.synchronize();
  std::vector<const void*> input_ptrs;
  for (const auto& in : inputs) input_ptrs.push_back(in.data());
  uint64_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    mem.download(r, host.data(), call.recv[r], out_bytes);
    wrong += count_wrong(call, n, r, input_ptrs, host.data());
  }
  return wrong;
}

int run_bandwidth(const Config& cfg) {
  std::unique_ptr<RankMemory> mem;
  std::optional<Communicator> comm;
  int n = cfg.ranks;
  if (cfg.backend == "host") {
    if (n == 0) n = 4;
    mem = host_memory();
    comm.emplace(Communicator::host(n, cfg.comm));
  } else if (cfg.devices.size() > 1) {
    n = static_cast<int>(cfg.devices.size());
    mem = cuda_memory(cfg.devices);
    comm.emplace(Communicator::cuda(cfg.devices, cfg.comm));
  } else {  // virtual ranks on one device
    const int device = cfg.devices.empty() ? 0 : cfg.devices[0];
    if (n == 0) n = 8;
    mem = cuda_memory({device});
    comm.emplace(Communicator::cuda_virtual(device, n, cfg.comm));
  }
  const uint64_t elem = data_type_size(cfg.dtype);
  const bool blocks = cfg.collective == Collective::ReduceScatter || cfg.collective == Collective::AllGather;
  const uint64_t unit = elem * (blocks ? n : 1);
  std::vector<void*> region_a, region_b;
  for (int r = 0; r < n; ++r) {
    region_a.push_back(mem->alloc(r, cfg.max_bytes + unit));
    region_b.push_back(mem->alloc(r, cfg.max_bytes + unit));
  }
  fmt::print("# ccc-bench: {} on {} {} ranks, {} {}, schedule {}\n#\n", collective_name(cfg.collective), n,
             cfg.backend, data_type_name(cfg.dtype), reduce_op_name(cfg.op),
             cfg.comm.algo.empty() ? "chosen per size" : cfg.comm.algo);
  const std::string placement_header = fmt::format("{:>9} {:>7} {:>7} {:>6}", "time", "algbw", "busbw", "#wrong");
  fmt::print("# {:>10} {:>12} {:>6} {:>6} {:>5}   {}   {}   {:<10}{}\n", "size", "count", "type", "redop", "root",
             placement_header, placement_header, "algo", cfg.baseline ? "   copy  ratio" : "");
  fmt::print("# {:>10} {:>12} {:>6} {:>6} {:>5}   {:>9} {:>7} {:>7} {:>6}   {:>9} {:>7} {:>7} {:>6}   {:<10}{}\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "",
             cfg.baseline ? "  (GB/s)" : "");
  const bool rooted = cfg.collective == Collective::Broadcast || cfg.collective == Collective::Reduce;
  uint64_t total_wrong = 0;
  for (double size = static_cast<double>(cfg.min_bytes); size <= static_cast<double>(cfg.max_bytes); size *= cfg.factor) {
    CollectiveCall call;
    call.collective = cfg.collective;
    call.count = static_cast<uint64_t>(size) / unit;
    call.dtype = cfg.dtype;
    call.op = cfg.op;
    call.root = rooted ? cfg.root : -1;
    if (call.count == 0) continue;
    const uint64_t bytes = call.count * unit;
    std::string row = fmt::format("  {:>10} {:>12} {:>6} {:>6} {:>5}", bytes, call.count, data_type_name(cfg.dtype),
                                  reduce_op_name(cfg.op), rooted ? cfg.root : -1);
    double out_of_place_algbw = 0;
    for (bool in_place : {false, true}) {
      const Placement p = place(region_a, region_b, call, n, in_place);
      call.send = p.send;
      call.recv = p.recv;
      const uint64_t wrong = cfg.check ? checked_run(*comm, *mem, call, n) : 0;
      total_wrong += wrong;
      for (int i = 0; i < cfg.warmup; ++i) comm->run(call);
      comm->synchronize();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < cfg.iters; ++i) comm->run(call);
      comm->synchronize();
      const double t = seconds_since(start) / cfg.iters;
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      if (!in_place) out_of_place_algbw = algbw;
      row += fmt::format("   {:>9.2f} {:>7.2f} {:>7.2f} {:>6}", t * 1e6, algbw,
                         algbw * bus_factor(cfg.collective, n), cfg.check ? std::to_string(wrong) : "N/A");
    }
    row += fmt::format("   {:<10}", comm->algorithm_for(call));
    if (cfg.baseline) {
      const double copy = static_cast<double>(bytes) / mem->time_copy(0, region_b[0], region_a[0], bytes, cfg.iters) / 1e9;
      row += fmt::format(" {:>7.2f} {:>6.3f}", copy, out_of_place_algbw / copy);
    }
    fmt::print("{}\n", row);
    std::fflush(stdout);
  }
  fmt::print("# Out of bounds values : {} {}\n", total_wrong, total_wrong == 0 ? "OK" : "FAILED");
  return total_wrong == 0 ? 0 : 1;
}

// --- JIT cache timings ---

struct JitTimes {
  double cold = 0, disk = 0, memory = 0;  // seconds
};

// Times `compile` through a fresh cache directory: a miss, a disk hit from a new cache on the
// same directory, and a memory hit (medians of several hits).
template <typename Compile>
JitTimes time_jit(Compile&& compile) {
  std::string pattern = (std::filesystem::temp_directory_path() / "ccc-bench-jit-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory");
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
  shape.dtype = cfg.dtype;
  shape.op = cfg.op;
  shape.channels = cfg.comm.channels;
  shape.tile_bytes = cfg.comm.tile_bytes;
  const auto start = std::chrono::steady_clock::now();
  const EmittedKernel k = generate_kernel(find_shipped_schedule(Collective::AllReduce, algo).file, shape);
  const double generate = seconds_since(start);
  fmt::print("# JIT: {} allreduce, N = {}, {} {}: generate {:.1f} ms\n", algo, n, data_type_name(cfg.dtype),
             reduce_op_name(cfg.op), generate * 1e3);
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
    return cfg.jit ? ccc::bench::run_jit(cfg) : ccc::bench::run_bandwidth(cfg);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ccc-bench: error: {}\n", e.what());
    return 1;
  }
}
