// Generated kernels, compiled for the host and run on threads, against a plain reference: every
// dtype and op, in and out of place, counts that split evenly and unevenly, buffers at aligned and
// misaligned offsets, outputs poisoned first. Integers must match bit for bit. Floats must be
// within (N + 2) * u * sum|x_i| of the exact result (sum; / N for avg), (N + 2) * u * |exact| for
// prod, where u is the dtype's unit roundoff (partial results are stored in the dtype between
// steps, so up to N roundings), and exact for min and max. Every rank must end with the same bits
// (every shipped schedule here is an allreduce: replicas must not drift apart), and every result
// must be bit-identical to the previous launch's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <random>
#include <thread>

#include "lower.h"
#include "codegen_pipeline.h"
#include "host_harness.h"
#include "runtime_test_support.h"

namespace ccc {
namespace {

constexpr uint64_t kTimeoutNs = 20'000'000'000ull;
constexpr unsigned char kPoison = 0xcd;

struct FloatFormat {
  int exp_bits, mant_bits;
  bool finite = false;  // OCP E4M3: no infinity, NaN only at all ones, the rest of the top exponent normal
};
FloatFormat float_format(DataType t) {
  switch (t) {
    case DataType::F64: return {11, 52};
    case DataType::F32: return {8, 23};
    case DataType::F16: return {5, 10};
    case DataType::F8E4M3: return {4, 3, true};
    case DataType::F8E5M2: return {5, 2};
    default: return {8, 7};  // bf16
  }
}

double decode_float(uint64_t bits, FloatFormat f) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const uint64_t e = (bits >> f.mant_bits) & ((1ull << f.exp_bits) - 1), m = bits & ((1ull << f.mant_bits) - 1);
  const double sign = (bits >> (f.exp_bits + f.mant_bits)) & 1 ? -1.0 : 1.0;
  const uint64_t top = (1ull << f.exp_bits) - 1;
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - f.mant_bits);
  if (f.finite ? e == top && m == (1ull << f.mant_bits) - 1 : e == top) return m || f.finite ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<double>(m | (1ull << f.mant_bits)), static_cast<int>(e) - bias - f.mant_bits);
}

uint64_t load_bits(const unsigned char* p, int size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);  // little endian
  return v;
}

// A random finite value: magnitude in [0.25, 4), or [0.5, 2) and positive for products.
uint64_t random_float_bits(std::mt19937_64& rng, FloatFormat f, ReduceOp op) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const bool prod = op == ReduceOp::Prod;
  const uint64_t e = bias + (prod ? static_cast<int>(rng() % 2) - 1 : static_cast<int>(rng() % 4) - 2);
  const uint64_t sign = prod ? 0 : rng() & 1;
  return sign << (f.exp_bits + f.mant_bits) | e << f.mant_bits | (rng() & ((1ull << f.mant_bits) - 1));
}

// The exact integer result, wrapping like the kernel (two's complement, then truncating division).
uint64_t int_reference(DataType t, ReduceOp op, const std::vector<uint64_t>& x) {
  const int bits = static_cast<int>(data_type_size(t)) * 8;
  const uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  const bool is_signed = t == DataType::I8 || t == DataType::I32 || t == DataType::I64;
  auto as_signed = [&](uint64_t v) {
    return bits == 64 || !(v >> (bits - 1) & 1) ? static_cast<int64_t>(v) : static_cast<int64_t>(v | ~mask);
  };
  auto less = [&](uint64_t a, uint64_t b) { return is_signed ? as_signed(a) < as_signed(b) : a < b; };
  uint64_t acc = x[0];
  for (size_t i = 1; i < x.size(); ++i) {
    switch (op) {
      case ReduceOp::Sum: case ReduceOp::Avg: acc = (acc + x[i]) & mask; break;
      case ReduceOp::Prod: acc = (acc * x[i]) & mask; break;
      case ReduceOp::Min: acc = less(x[i], acc) ? x[i] : acc; break;
      case ReduceOp::Max: acc = less(acc, x[i]) ? x[i] : acc; break;
    }
  }
  if (op == ReduceOp::Avg) {
    const int64_t n = static_cast<int64_t>(x.size());
    acc = (is_signed ? static_cast<uint64_t>(as_signed(acc) / n) : acc / static_cast<uint64_t>(n)) & mask;
  }
  return acc;
}

struct Check {
  bool ok = true;
  std::string first_failure;
};

std::string hex(uint64_t bits) {
  char text[24];
  std::snprintf(text, sizeof text, "%#llx", static_cast<unsigned long long>(bits));
  return text;
}

// Float results within the bound may still differ in their last bits between ranks that reduced
// in different orders: compare every rank's output with rank 0's, bit for bit.
Check same_bits_on_every_rank(const testing::HostBuffers& b, int n, uint64_t count, int size) {
  for (int r = 1; r < n; ++r)
    for (uint64_t i = 0; i < count; ++i)
      if (std::memcmp(b.output(r) + i * size, b.output(0) + i * size, size) != 0)
        return {false, "rank " + std::to_string(r) + " element " + std::to_string(i) + ": bits " +
                           hex(load_bits(b.output(r) + i * size, size)) + ", rank 0 has " +
                           hex(load_bits(b.output(0) + i * size, size))};
  return {};
}

// Fills every rank's input, poisons every output, runs the kernel twice (blocks of `threads`
// threads) and checks both runs.
Check run_and_check(testing::HostEntry entry, const EmittedKernel& k, const KernelOptions& o, int n, uint64_t count,
                    uint64_t offset, unsigned threads = testing::kTestBlockThreads) {
  const int size = static_cast<int>(data_type_size(o.dtype));
  testing::HostBuffers b(n, count * size, k.scratch_bytes(count), offset, o.in_place, k.ll_bytes(count));
  std::mt19937_64 rng(count * 131 + n * 7 + static_cast<int>(o.dtype) * 3 + static_cast<int>(o.op));
  const bool is_float = data_type_is_float(o.dtype);
  const FloatFormat f = is_float ? float_format(o.dtype) : FloatFormat{};
  std::vector<std::vector<uint64_t>> inputs(n, std::vector<uint64_t>(count));
  // The epilogue's residual: the same on every rank (tensor parallelism's), at the data's offset
  // past a 16-byte boundary for even counts (vectors) and at another for odd ones (elements).
  const bool residual = o.epilogue == Epilogue::Residual;
  std::vector<uint64_t> residual_values(residual ? count : 0);
  std::vector<std::vector<unsigned char>> residual_alloc(residual ? n : 0);
  for (uint64_t& v : residual_values) v = is_float ? random_float_bits(rng, f, ReduceOp::Sum) : rng();
  for (int r = 0; r < static_cast<int>(residual_alloc.size()); ++r) {
    residual_alloc[r].resize(count * size + 2 * size + 16);
    unsigned char* at = residual_alloc[r].data() + (16 - reinterpret_cast<uintptr_t>(residual_alloc[r].data()) % 16) % 16 +
                        (count % 2 == 0 ? offset : offset ^ size);
    for (uint64_t i = 0; i < count; ++i) std::memcpy(at + i * size, &residual_values[i], size);
    b.epilogue.push_back({at, nullptr, nullptr, nullptr, 0, 0.0f, 0.0f});
  }
  Check check;
  std::vector<unsigned char> previous;
  for (int launch = 0; launch < 2; ++launch) {
    for (int r = 0; r < n; ++r) {
      for (uint64_t i = 0; i < count; ++i) {
        if (launch == 0) inputs[r][i] = is_float ? random_float_bits(rng, f, o.op) : rng();
        std::memcpy(b.input(r) + i * size, &inputs[r][i], size);
      }
      if (!o.in_place) std::memset(b.output(r), kPoison, count * size);
    }
    testing::launch_host(entry, b, k.channels, count, kTimeoutNs, {}, threads);
    for (int r = 0; r < n; ++r)
      if (b.error(r) != 0) return {false, "rank " + std::to_string(r) + " error " + std::to_string(b.error(r))};
    const uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    std::vector<uint64_t> x(n);
    for (uint64_t i = 0; i < count && check.ok; ++i) {
      for (int q = 0; q < n; ++q) x[q] = inputs[q][i] & mask;
      uint64_t expect = 0;
      double exact = 0, bound = 0;
      if (!is_float) {
        expect = int_reference(o.dtype, o.op, x);
        if (residual) expect = (expect + residual_values[i]) & mask;
      } else {
        double magnitude = 0;
        for (int q = 0; q < n; ++q) {
          const double v = decode_float(x[q], f);
          magnitude += std::fabs(v);
          if (q == 0) {
            exact = v;
            continue;
          }
          switch (o.op) {
            case ReduceOp::Sum: case ReduceOp::Avg: exact += v; break;
            case ReduceOp::Prod: exact *= v; break;
            case ReduceOp::Min: exact = std::min(exact, v); break;
            case ReduceOp::Max: exact = std::max(exact, v); break;
          }
        }
        if (o.op == ReduceOp::Avg) {
          exact /= n;
          magnitude /= n;
        }
        if (o.op == ReduceOp::Prod) magnitude = std::fabs(exact);
        if (o.op != ReduceOp::Min && o.op != ReduceOp::Max) bound = (n + 2) * std::ldexp(magnitude, -f.mant_bits - 1);
        if (residual) {  // one more rounding, of the sum with the residual
          const double res = decode_float(residual_values[i] & mask, f);
          exact += res;
          bound += std::ldexp(std::fabs(exact) + magnitude + std::fabs(res), -f.mant_bits - 1);
        }
      }
      for (int r = 0; r < n; ++r) {
        const uint64_t got = load_bits(b.output(r) + i * size, size);
        const bool good = is_float ? std::fabs(decode_float(got, f) - exact) <= bound : got == expect;
        if (good) continue;
        const std::string want = is_float ? std::to_string(exact) + " +- " + std::to_string(bound) + ", got " +
                                                std::to_string(decode_float(got, f))
                                          : std::to_string(expect) + ", got " + std::to_string(got);
        check = {false, "rank " + std::to_string(r) + " element " + std::to_string(i) + ": want " + want};
        break;
      }
    }
    if (check.ok) check = same_bits_on_every_rank(b, n, count, size);
    std::vector<unsigned char> now;
    for (int r = 0; r < n; ++r) now.insert(now.end(), b.output(r), b.output(r) + count * size);
    if (launch == 1 && now != previous) return {false, "second launch differs from the first"};
    previous = std::move(now);
  }
  return check;
}

// Small tiles and two channels so that modest counts still cross many windows and channels.
KernelOptions options(DataType t, ReduceOp op, bool in_place) {
  KernelOptions o;
  o.dtype = t;
  o.op = op;
  o.tile_bytes = 1024;
  o.channels = 2;
  o.pipeline = 2;
  o.in_place = in_place;
  return o;
}

// Every dtype with sum; every op on a float, a 16-bit float, a signed and an unsigned integer;
// in place for some. The large count runs for f32 and u8 sums only (time).
std::vector<KernelOptions> variants() {
  std::vector<KernelOptions> v;
  for (DataType t : kAllDataTypes) v.push_back(options(t, ReduceOp::Sum, false));
  for (DataType t : {DataType::F32, DataType::F16, DataType::I32, DataType::U8})
    for (ReduceOp op : {ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) v.push_back(options(t, op, false));
  for (DataType t : {DataType::F32, DataType::I8}) v.push_back(options(t, ReduceOp::Sum, true));
  v.push_back(options(DataType::BF16, ReduceOp::Avg, true));
  return v;
}

// The counts that cross many windows, channels and (ll) the protocol's cap run for one variant
// per element size, every op on one type, and every in-place variant: where a chunk, a window or
// a line ends depends on the element's size, not on its type or the op, which the small counts
// (0, 1, 7, 4097) cover for every variant. (They were most of the suite's host-run time.)
bool crosses_every_window(const KernelOptions& o) {
  if (o.in_place) return true;
  if (o.dtype == DataType::F32) return true;  // every op
  return o.op == ReduceOp::Sum && (o.dtype == DataType::U8 || o.dtype == DataType::F16 || o.dtype == DataType::F64);
}

struct Shape {
  const char* schedule;
  int ranks;
  Protocol protocol = Protocol::Simple;
  unsigned threads = testing::kTestBlockThreads;  // per block
};
// Readable in test listings (ctest shows the parameter): "ring N=5 T=32", "oneshot N=3 ll T=7".
void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.schedule << " N=" << s.ranks << (s.protocol == Protocol::Ll ? " ll" : "") << " T=" << s.threads;
}

// Every variant of `variants` on the shipped schedule (or test schedule) of shape `s`, in place
// and out, each at small and (crosses_every_window) large counts, at aligned and misaligned
// offsets.
void run_shape(const Shape& s, const std::vector<KernelOptions>& variants, const std::string& tag) {
  std::vector<KernelOptions> opts;
  std::vector<EmittedKernel> kernels;
  for (bool in_place : {false, true}) {
    testing::Planned p = testing::plan_shipped(s.schedule, s.ranks, in_place);
    ASSERT_TRUE(p.planned || in_place) << p.errors;
    if (!p.planned) {
      std::printf("[host] %s N=%d: no in-place plan (%s)\n", s.schedule, s.ranks, p.errors.c_str());
      continue;
    }
    for (KernelOptions o : variants)
      if (o.in_place == in_place) {
        o.protocol = s.protocol;
        opts.push_back(o);
        kernels.push_back(emit_cuda(testing::lowered(*p.planned, o)));
      }
  }
  testing::HostLibrary lib(kernels, std::filesystem::path(s.schedule).stem().string() + "_n" + std::to_string(s.ranks) +
                                       (s.protocol == Protocol::Ll ? "_ll" : "") + tag);
  ASSERT_EQ(lib.error(), "");
  for (size_t v = 0; v < kernels.size(); ++v) {
    const KernelOptions& o = opts[v];
    const uint64_t size = data_type_size(o.dtype), tile = o.tile_bytes / size;
    std::vector<uint64_t> counts = {0, 1, 7, 4097};
    if (crosses_every_window(o)) {
      counts.push_back(tile * o.channels * s.ranks * 3);
      if (o.protocol == Protocol::Ll) {
        // ll's cap: the largest count it takes, and nothing above it (the runtime refuses those).
        counts.back() = std::min<uint64_t>(counts.back(), kLlMaxBytes / size);
        counts.push_back(kLlMaxBytes / size);
      } else if (o.op == ReduceOp::Sum && (o.dtype == DataType::F32 || o.dtype == DataType::U8)) {
        counts.push_back(1000003);
      }
    }
    testing::HostEntry entry = lib.entry(kernels[v].kernel_name);
    ASSERT_NE(entry, nullptr) << kernels[v].kernel_name;
    for (uint64_t count : counts)
      for (uint64_t offset : {uint64_t{0}, size}) {  // 16-byte aligned, and not
        Check c = run_and_check(entry, kernels[v], o, s.ranks, count, offset, s.threads);
        EXPECT_TRUE(c.ok) << kernels[v].kernel_name << " count " << count << " offset " << offset << ": " << c.first_failure;
      }
  }
}

class HostRun : public ::testing::TestWithParam<Shape> {};

TEST_P(HostRun, MatchesTheReference) { run_shape(GetParam(), variants(), ""); }

// Threads per block vary over the shapes: one (no fibers), 7 (fewer than some schedules have
// waits, and odd), 32, 512 (what the CUDA kernels launch with) and 1024 (CUDA's most).
INSTANTIATE_TEST_SUITE_P(Shipped, HostRun,
                         ::testing::Values(Shape{"ring", 1, Protocol::Simple, 1}, Shape{"ring", 2, Protocol::Simple, 512},
                                           Shape{"ring", 3, Protocol::Simple, 7}, Shape{"ring", 5}, Shape{"ring", 8},
                                           Shape{"oneshot", 3, Protocol::Simple, 512}, Shape{"oneshot", 9, Protocol::Simple, 7},
                                           Shape{"twoshot", 4, Protocol::Simple, 1}, Shape{"twoshot", 7},
                                           Shape{"butterfly", 2, Protocol::Simple, 1024}, Shape{"butterfly", 8},
                                           Shape{"tree", 5, Protocol::Simple, 7}, Shape{"dbtree", 6}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(info.param.schedule) + std::to_string(info.param.ranks);
                         });

// Scratch slots (`scratch N slots`: one chunk of any position each; MSCCL's allpairs), whose
// passes address a slot by the chunk they move (ccc_peer_table.h, view): odd N and counts put
// chunks of several sizes through one slot size.
INSTANTIATE_TEST_SUITE_P(Slots, HostRun,
                         ::testing::Values(Shape{"tests/lit/run/allpairs_slots.sched", 5, Protocol::Simple, 7},
                                           Shape{"tests/lit/run/allpairs_slots.sched", 3, Protocol::Ll, 32}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string("allpairs_slots") + std::to_string(info.param.ranks) +
                                  (info.param.protocol == Protocol::Ll ? "ll" : "");
                         });

// Protocol ll (pushed lines of data and flag) on every shipped allreduce: the same checks,
// including the second launch over the same receive slots, in place and out of place.
INSTANTIATE_TEST_SUITE_P(ShippedLl, HostRun,
                         ::testing::Values(Shape{"ring", 1, Protocol::Ll}, Shape{"ring", 5, Protocol::Ll, 512},
                                           Shape{"oneshot", 3, Protocol::Ll, 7}, Shape{"oneshot", 9, Protocol::Ll},
                                           Shape{"twoshot", 4, Protocol::Ll, 512}, Shape{"twoshot", 7, Protocol::Ll, 1},
                                           Shape{"butterfly", 8, Protocol::Ll}, Shape{"tree", 5, Protocol::Ll, 7},
                                           Shape{"dbtree", 6, Protocol::Ll}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(info.param.schedule) + std::to_string(info.param.ranks) + "ll";
                         });

// The fused epilogue (allreduce + residual): every shipped allreduce schedule adds the residual
// once per element where it completes the element, so the copies after carry it; a residual added
// twice, or never, or another element's, is wrong. Sums of every element size and a float and an
// integer type, avg (the op's finish before the residual), in place and out; both protocols.
std::vector<KernelOptions> residual_variants() {
  std::vector<KernelOptions> v;
  for (DataType t : {DataType::F32, DataType::BF16, DataType::F8E4M3, DataType::I32, DataType::F64})
    v.push_back(options(t, ReduceOp::Sum, false));
  v.push_back(options(DataType::F32, ReduceOp::Avg, false));
  v.push_back(options(DataType::F16, ReduceOp::Sum, true));
  v.push_back(options(DataType::U8, ReduceOp::Sum, true));
  for (KernelOptions& o : v) o.epilogue = Epilogue::Residual;
  return v;
}

class HostRunResidual : public ::testing::TestWithParam<Shape> {};

TEST_P(HostRunResidual, AddsTheResidualOnceWhereEachElementCompletes) {
  run_shape(GetParam(), residual_variants(), "_residual");
}

INSTANTIATE_TEST_SUITE_P(Shipped, HostRunResidual,
                         ::testing::Values(Shape{"ring", 3, Protocol::Simple, 7}, Shape{"oneshot", 4},
                                           Shape{"twoshot", 5, Protocol::Simple, 32}, Shape{"butterfly", 4},
                                           Shape{"tree", 5, Protocol::Simple, 7}, Shape{"dbtree", 3},
                                           Shape{"ring", 4, Protocol::Ll}, Shape{"oneshot", 3, Protocol::Ll, 7},
                                           Shape{"twoshot", 4, Protocol::Ll}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::string(info.param.schedule) + std::to_string(info.param.ranks) +
                                  (info.param.protocol == Protocol::Ll ? "ll" : "");
                         });

// A block barrier left out of the prelude is caught by a host run with more than one thread per
// block, and only then: the mutant drops the barrier after the threads that read the peers'
// mailboxes have filled in the block's table (PeerTable::load_peers), so the other threads, which
// run first, read the table before it holds the peers' buffers and reduce the wrong data.
TEST(HostRunMutation, AMissingBlockBarrierIsCaught) {
  test::ScratchDir dir;
  for (const auto& f : std::filesystem::directory_iterator(CCC_SOURCE_DIR "/device"))
    std::filesystem::copy_file(f.path(), dir.path() / f.path().filename());
  const std::filesystem::path common = dir.path() / "ccc_peer_table.h";
  std::string text;
  {
    std::ifstream in(common);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string barrier = "    return barrier_and(ok);\n  }\n\n  /* Makes peer p's input and output usable here";
  const size_t at = text.find(barrier);
  ASSERT_NE(at, std::string::npos) << "the mutated barrier moved: update this test";
  text.replace(at, std::string("    return barrier_and(ok);").size(), "    return ok;");
  std::ofstream(common) << text;

  testing::Planned p = testing::plan_shipped("ring", 4);
  ASSERT_TRUE(p.planned) << p.errors;
  const KernelOptions o = options(DataType::I32, ReduceOp::Sum, false);
  const EmittedKernel k = emit_cuda(testing::lowered(*p.planned, o));
  testing::HostLibrary lib({k}, "mutant_missing_barrier", dir.path().string());
  ASSERT_EQ(lib.error(), "");
  const uint64_t count = 4097;
  EXPECT_TRUE(run_and_check(lib.entry(k.kernel_name), k, o, 4, count, 0, 1).ok) << "one thread needs no barrier";
  const Check many = run_and_check(lib.entry(k.kernel_name), k, o, 4, count, 0, 32);
  EXPECT_FALSE(many.ok) << "32 threads per block: the missing barrier went unseen";
  std::printf("[host] the mutant with 32 threads per block: %s\n", many.first_failure.c_str());
}

// A step's chunk copies run together while that costs the GPU's block no more round trips than
// copying them one at a time (ProtocolSimple::copy_batch), else one at a time: two-shot's all-gather both
// ways, with 64 KiB tiles (HostRun's 1 KiB tiles always copy together). With 2 channels, f32 and
// 512 GPU threads (2048 elements a round), a channel's slice of a chunk is count / (2 N): 100 N
// elements is one round, and copies together; 32768 * 2 N + 5 is 16 rounds together or 2 per copy
// apart, so apart (batches of at most 4: N = 10 copies its 9 as 4, 4 and 1).
TEST(HostRunCopies, TogetherAndApartMatchTheReference) {
  for (int n : {4, 10}) {
    testing::Planned p = testing::plan_shipped("twoshot", n);
    ASSERT_TRUE(p.planned) << p.errors;
    KernelOptions o;
    o.channels = 2;
    const EmittedKernel k = emit_cuda(testing::lowered(*p.planned, o));
    testing::HostLibrary lib({k}, "twoshot_copies_n" + std::to_string(n));
    ASSERT_EQ(lib.error(), "");
    for (uint64_t count : {uint64_t(100) * n, uint64_t(32768) * 2 * n + 5})
      for (unsigned threads : {1u, 32u}) {
        const Check c = run_and_check(lib.entry(k.kernel_name), k, o, n, count, 0, threads);
        EXPECT_TRUE(c.ok) << "N " << n << " count " << count << " T " << threads << ": " << c.first_failure;
      }
  }
}

// One rank never starts: every other rank must give up with an error, within the timeout plus
// scheduling slack, instead of hanging.
TEST(HostRunFailure, DeadPeerTimesOut) {
  testing::Planned p = testing::plan_shipped("ring", 4);
  ASSERT_TRUE(p.planned) << p.errors;
  const KernelOptions o = options(DataType::F32, ReduceOp::Sum, false);
  EmittedKernel k = emit_cuda(testing::lowered(*p.planned, o));
  testing::HostLibrary lib({k}, "dead_peer");
  ASSERT_EQ(lib.error(), "");
  const uint64_t count = 100000, timeout_ns = 200'000'000;
  testing::HostBuffers b(4, count * 4, 0, 0, false);
  const double seconds = testing::launch_host(lib.entry(k.kernel_name), b, k.channels, count, timeout_ns, {2});
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(b.error(2), unsigned{CCC_OK});  // never ran
  for (int r : {0, 1, 3}) EXPECT_TRUE(b.error(r) == CCC_ERR_TIMEOUT || b.error(r) == CCC_ERR_PEER_FAILED) << "rank " << r << ": " << b.error(r);
  // Rank 3 reads from rank 2 first: it is the one that times out; the others may see it fail.
  EXPECT_EQ(b.error(3), unsigned{CCC_ERR_TIMEOUT});
  std::printf("[host] dead peer: launch returned after %.3f s (timeout 0.2 s)\n", seconds);
}

// A step program naming a data pass its kernel was not built with stops the rank with
// CCC_ERR_BAD_PROGRAM instead of skipping the pass: ring without its 2-source reduce.
TEST(HostRunFailure, PassMissingFromTheKernelIsAnError) {
  testing::Planned p = testing::plan_shipped("ring", 2);
  ASSERT_TRUE(p.planned) << p.errors;
  EmittedKernel k = emit_cuda(testing::lowered(*p.planned, options(DataType::F32, ReduceOp::Sum, false)));
  const std::string passes = "typedef ccc::Passes<ccc::Pass<1>, ccc::Pass<2>> Passes;";
  const size_t at = k.source.find(passes);
  ASSERT_NE(at, std::string::npos) << k.source;
  k.source.replace(at, passes.size(), "typedef ccc::Passes<ccc::Pass<1>> Passes;");
  testing::HostLibrary lib({k}, "missing_pass");
  ASSERT_EQ(lib.error(), "");
  const uint64_t count = 1000;
  testing::HostBuffers b(2, count * 4, 0, 0, false);
  testing::launch_host(lib.entry(k.kernel_name), b, k.channels, count, kTimeoutNs);
  EXPECT_TRUE(b.error(0) == CCC_ERR_BAD_PROGRAM || b.error(1) == CCC_ERR_BAD_PROGRAM);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(b.error(r) == CCC_ERR_BAD_PROGRAM || b.error(r) == CCC_ERR_PEER_FAILED) << "rank " << r << ": " << b.error(r);
}

// Waits poll the waiting rank's own inbox, never the peer's memory: rank 2 of a one-shot never
// runs, but its input and mailbox are in place and the others' inboxes say it finished every
// step, so ranks 0 and 1 complete with the right sums (a kernel that polled rank 2's own
// progress, which stays 0, would time out). And they pushed their progress into rank 2's inbox.
TEST(HostRunPush, WaitsReadTheirOwnInboxNotThePeersProgress) {
  const int n = 3;
  testing::Planned p = testing::plan_shipped("oneshot", n);
  ASSERT_TRUE(p.planned) << p.errors;
  EmittedKernel k = emit_cuda(testing::lowered(*p.planned, options(DataType::I32, ReduceOp::Sum, false)));
  testing::HostLibrary lib({k}, "push");
  ASSERT_EQ(lib.error(), "");
  const uint64_t count = 5000;
  testing::HostBuffers b(n, count * 4, 0, 0, false);
  for (int r = 0; r < n; ++r)
    for (uint64_t i = 0; i < count; ++i) reinterpret_cast<int*>(b.input(r))[i] = static_cast<int>(i) * (r + 1);
  const unsigned long long first_epoch = 1ull << 40, finished = first_epoch + (1ull << 30);
  for (int c = 0; c < k.channels; ++c) {
    b.sync[2].mailbox[2 * c + 1] = b.own[2];  // the first launch's slot (epoch 1: parity 1),
    b.sync[2].mailbox[2 * c + 1].call |= first_epoch;  // its call stamped as PeerTable::publish does
    for (int r : {0, 1}) b.sync[r].inbox[c * n + 2] = finished;
  }
  testing::launch_host(lib.entry(k.kernel_name), b, k.channels, count, 2'000'000'000ull, {2});
  for (int r : {0, 1}) {
    EXPECT_EQ(b.error(r), unsigned{CCC_OK}) << "rank " << r;
    for (uint64_t i = 0; i < count; ++i)
      ASSERT_EQ(reinterpret_cast<int*>(b.output(r))[i], static_cast<int>(i) * 6) << "rank " << r << " element " << i;
    for (int c = 0; c < k.channels; ++c) {
      const unsigned long long pushed = b.sync[2].inbox[c * n + r];
      EXPECT_EQ(pushed >> 40, 1u) << "rank " << r << " channel " << c << " pushed its first launch's progress";
      EXPECT_GT(pushed, first_epoch) << "rank " << r << " channel " << c << " pushed past \"entered\"";
    }
  }
  EXPECT_EQ(b.sync[2].progress[0], 0u);
}

// Several processes (ccc_abi.h, ccc_registry): a peer's input reaches a reader only through the
// reader's own registry. One process stands in for N: the owner runs on its buffer (values x_p),
// and each reader q's registry maps that buffer's allocation to an alias of its own (values
// y_qp), so the sums read x_q + sum of y_qp over the peers p only if every peer pointer was
// translated, by the reader's table, for the right owner, keeping the offset into the
// allocation. A decoy entry (same range, wrong owner, poison) comes first in every table. Rank
// 1's input lies in the registry's shared range: used as it is, x_1 everywhere. One-shot: every
// rank reads every peer's input and writes only its own output. `missing`: no rank has an entry
// for that owner's input or output.
struct RegisteredInputs {
  static constexpr int n = 3;
  static constexpr uint64_t count = 5000, offset = 4;
  testing::Planned p = testing::plan_shipped("oneshot", n);
  EmittedKernel k = emit_cuda(testing::lowered(*p.planned, options(DataType::I32, ReduceOp::Sum, false)));
  testing::HostBuffers b{n, count * 4, 0, offset, false};
  std::vector<ccc_registry> registry = std::vector<ccc_registry>(n);
  std::vector<std::vector<int>> alias = std::vector<std::vector<int>>(n * n);  // [reader * n + owner]
  std::vector<int> poison = std::vector<int>(count + offset, -1);

  static int x(int p, uint64_t i) { return -static_cast<int>(i + 7) * (p + 1); }
  static int y(int q, int p, uint64_t i) { return static_cast<int>(i) * (p + 1) + 1000 * (q + 1); }
  int expected(int q, uint64_t i) const {
    int sum = x(q, i);
    for (int p = 0; p < n; ++p)
      if (p != q) sum += p == 1 ? x(1, i) : y(q, p, i);
    return sum;
  }
  RegisteredInputs(int missing = -1) {
    for (int p = 0; p < n; ++p)
      for (uint64_t i = 0; i < count; ++i) reinterpret_cast<int*>(b.input(p))[i] = x(p, i);
    for (int q = 0; q < n; ++q) {
      b.state[q].registry = &registry[q];
      ccc_registry& t = registry[q];
      t.shared_base = reinterpret_cast<unsigned long long>(b.in_alloc[1].data());
      t.shared_bytes = b.in_alloc[1].size();
      for (int p = 0; p < n; ++p) {
        if (p == q) continue;
        // The outputs, which one-shot never reads from a peer, must be reachable too (the
        // kernel translates a peer's input and output together): here at the same address.
        const unsigned long long out = reinterpret_cast<unsigned long long>(b.out_alloc[p].data());
        if (p != missing) t.entries[t.count++] = {out, b.out_alloc[p].size(), out, p, 0};
        if (p == 1) continue;
        const unsigned long long base = reinterpret_cast<unsigned long long>(b.in_alloc[p].data());
        t.entries[t.count++] = {base, b.in_alloc[p].size(), reinterpret_cast<unsigned long long>(poison.data()), (p + 1) % n, 0};
        if (p == missing) continue;
        std::vector<int>& a = alias[q * n + p];
        a.assign(count + offset, 0);  // ints: offset (bytes) / 4 elements before the buffer
        for (uint64_t i = 0; i < count; ++i) a[offset / 4 + i] = y(q, p, i);
        t.entries[t.count++] = {base, b.in_alloc[p].size(), reinterpret_cast<unsigned long long>(a.data()), p, 0};
      }
    }
    for (int q = 0; q < n; ++q) std::memset(b.output(q), kPoison, count * 4);
  }
};

TEST(HostRunRegistry, PeersInputsAreReadThroughTheReadersTranslation) {
  RegisteredInputs t;
  ASSERT_TRUE(t.p.planned) << t.p.errors;
  testing::HostLibrary lib({t.k}, "registry");
  ASSERT_EQ(lib.error(), "");
  testing::launch_host(lib.entry(t.k.kernel_name), t.b, t.k.channels, t.count, kTimeoutNs);
  for (int q = 0; q < t.n; ++q) {
    EXPECT_EQ(t.b.error(q), unsigned{CCC_OK}) << "rank " << q;
    for (uint64_t i = 0; i < t.count; ++i)
      ASSERT_EQ(reinterpret_cast<int*>(t.b.output(q))[i], t.expected(q, i)) << "rank " << q << " element " << i;
  }
}

// Rank 2's input is in no entry of ranks 0's and 1's tables (only the decoy, another owner's):
// they fail before touching any data (their outputs keep the poison), and rank 2, which reads
// them fine, fails at its exit wait on them instead of finishing. The first of 0 and 1 to fail
// records CCC_ERR_UNREGISTERED; the other may first see that failure (a channel of it still
// waiting for a late channel of the failed rank to enter) and record CCC_ERR_PEER_FAILED.
TEST(HostRunRegistry, APeerPointerNoEntryCoversFailsEveryRank) {
  RegisteredInputs t(2);
  ASSERT_TRUE(t.p.planned) << t.p.errors;
  testing::HostLibrary lib({t.k}, "registry_missing");
  ASSERT_EQ(lib.error(), "");
  testing::launch_host(lib.entry(t.k.kernel_name), t.b, t.k.channels, t.count, kTimeoutNs);
  EXPECT_TRUE(t.b.error(0) == CCC_ERR_UNREGISTERED || t.b.error(1) == CCC_ERR_UNREGISTERED);
  for (int q : {0, 1}) {
    EXPECT_TRUE(t.b.error(q) == CCC_ERR_UNREGISTERED || t.b.error(q) == CCC_ERR_PEER_FAILED) << "rank " << q << ": " << t.b.error(q);
    for (uint64_t i = 0; i < t.count; ++i) ASSERT_EQ(t.b.output(q)[4 * i], kPoison) << "rank " << q << " element " << i;
  }
  EXPECT_EQ(t.b.error(2), unsigned{CCC_ERR_PEER_FAILED});
}

// Protocol ll: kernels of one communicator with different channel counts share each rank's
// receive slots, while every channel counts its own launches. After a one-channel launch, channel
// 0 has written every line with the flag of epoch 1, and channel 1 of a two-channel launch is at
// epoch 1 as well: were the channel not part of the flag (ProtocolLl::ll_flag), it would take those
// stale lines for its peers' data. Each launch gets new inputs, so stale data cannot pass.
TEST(HostRunLl, KernelsOfDifferentChannelCountsShareTheSlots) {
  const int n = 3;
  const uint64_t count = 6000;
  testing::Planned p = testing::plan_shipped("oneshot", n);
  ASSERT_TRUE(p.planned) << p.errors;
  std::vector<EmittedKernel> kernels;
  for (int channels : {1, 2}) {
    KernelOptions o = options(DataType::I32, ReduceOp::Sum, false);
    o.protocol = Protocol::Ll;
    o.channels = channels;
    kernels.push_back(emit_cuda(testing::lowered(*p.planned, o)));
  }
  testing::HostLibrary lib(kernels, "ll_channel_counts");
  ASSERT_EQ(lib.error(), "");
  testing::HostBuffers b(n, count * 4, 0, 0, false, std::max(kernels[0].ll_bytes(count), kernels[1].ll_bytes(count)));
  int seed = 0;
  for (int which : {0, 1, 1, 0, 0, 1}) {
    const EmittedKernel& k = kernels[which];
    ++seed;
    for (int r = 0; r < n; ++r) {
      for (uint64_t i = 0; i < count; ++i) reinterpret_cast<int*>(b.input(r))[i] = seed * 1000 + (r + 1) * static_cast<int>(i);
      std::memset(b.output(r), kPoison, count * 4);
    }
    testing::launch_host(lib.entry(k.kernel_name), b, k.channels, count, kTimeoutNs);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(b.error(r), unsigned{CCC_OK}) << "launch " << seed << " rank " << r;
      for (uint64_t i = 0; i < count; ++i)
        ASSERT_EQ(reinterpret_cast<int*>(b.output(r))[i], seed * 3000 + 6 * static_cast<int>(i))
            << "launch " << seed << " (" << k.channels << " channels) rank " << r << " element " << i;
    }
  }
}

// Protocol ll: a line's flag carries its launch's 24-bit epoch, which wraps every 2^24 launches
// of the channel (hours of a serving loop). A consumer clears every line it has read, so after
// a launch that succeeded no line is left to be taken for data when the epoch comes round again.
// Forced here: after one launch the channels' progress words go back to where they were before
// it, as 2^24 launches later, and rank 0 never runs; rank 1 used to take rank 0's lines of the
// first launch for its input and succeed with stale sums. (After a failure every receive block
// is zeroed: HostBackend.ReportsPeerErrorsToEveryFailedRankAndResetsCounters.)
TEST(HostRunLl, AStaleLineIsNeverTakenForDataWhenTheEpochWraps) {
  const int n = 2;
  const uint64_t count = 3000;
  testing::Planned p = testing::plan_shipped("oneshot", n);
  ASSERT_TRUE(p.planned) << p.errors;
  KernelOptions o = options(DataType::I32, ReduceOp::Sum, false);
  o.protocol = Protocol::Ll;
  const EmittedKernel k = emit_cuda(testing::lowered(*p.planned, o));
  testing::HostLibrary lib({k}, "ll_wrap");
  ASSERT_EQ(lib.error(), "");
  testing::HostBuffers b(n, count * 4, 0, 0, false, k.ll_bytes(count));
  for (int r = 0; r < n; ++r)
    for (uint64_t i = 0; i < count; ++i) reinterpret_cast<int*>(b.input(r))[i] = (r + 1) * static_cast<int>(i);
  testing::launch_host(lib.entry(k.kernel_name), b, k.channels, count, kTimeoutNs);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(b.error(r), unsigned{CCC_OK});
    ASSERT_EQ(reinterpret_cast<int*>(b.output(r))[7], 21);
    for (size_t l = 0; l < b.ll_alloc[r].size(); ++l) ASSERT_EQ(b.ll_alloc[r][l], 0u) << "rank " << r << " line " << l;
  }
  for (int r = 0; r < n; ++r) {
    std::fill(std::begin(b.sync[r].progress), std::end(b.sync[r].progress), 0ull);  // the epochs come round
    for (uint64_t i = 0; i < count; ++i) reinterpret_cast<int*>(b.input(r))[i] = -1;
    std::memset(b.output(r), kPoison, count * 4);
  }
  testing::launch_host(lib.entry(k.kernel_name), b, k.channels, count, 200'000'000, {0});
  EXPECT_EQ(b.error(1), unsigned{CCC_ERR_TIMEOUT}) << "rank 1 took stale lines for rank 0's data";
  EXPECT_NE(reinterpret_cast<int*>(b.output(1))[7], 20) << "launch 1's rank 0 input summed with launch 2's";
}

// args.rank == -1: one "grid" of N * channels blocks runs every rank (block b is rank b / C,
// channel b % C), as a single GPU hosting virtual ranks would. Such a kernel is built for one
// device (.gpu scope on CUDA: KernelOptions::one_device); in host emulation it computes what the
// .sys kernel does.
TEST(HostRunVirtualRanks, OneGridRunsEveryRank) {
  const int n = 3;
  testing::Planned p = testing::plan_shipped("ring", n);
  ASSERT_TRUE(p.planned) << p.errors;
  for (bool one_device : {false, true}) {
    KernelOptions o = options(DataType::I32, ReduceOp::Sum, false);
    o.one_device = one_device;
    EmittedKernel k = emit_cuda(testing::lowered(*p.planned, o));
    testing::HostLibrary lib({k}, one_device ? "virtual_ranks_gpu" : "virtual_ranks");
    ASSERT_EQ(lib.error(), "");
    const uint64_t count = 5000;
    testing::HostBuffers b(n, count * 4, 0, 0, false);
    for (int r = 0; r < n; ++r)
      for (uint64_t i = 0; i < count; ++i) reinterpret_cast<int*>(b.input(r))[i] = static_cast<int>(i) * (r + 1);
    std::vector<std::thread> blocks;
    const ccc_launch_args args{b.state.data(), {}, b.own.data(), count, -1, kTimeoutNs, nullptr, {}, nullptr, 0};
    for (int block = 0; block < n * k.channels; ++block)
      blocks.emplace_back(run_host_block, lib.entry(k.kernel_name), args, block, k.channels,
                          testing::tsan_block_threads(testing::kTestBlockThreads));
    for (std::thread& t : blocks) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(b.error(r), unsigned{CCC_OK}) << k.kernel_name;
      EXPECT_EQ(b.sync[r].progress[0] >> 40, 1u);  // the first launch's epoch
      for (uint64_t i = 0; i < count; ++i)
        ASSERT_EQ(reinterpret_cast<int*>(b.output(r))[i], static_cast<int>(i) * 6)
            << k.kernel_name << " rank " << r << " element " << i;
    }
  }
}

}  // namespace
}  // namespace ccc
