// A user's program, written against NVIDIA's public headers only: the toolkit's nccl.h (NCCL
// 2.28), cuda.h (the CUDA driver API) and the host-side conversions of <cuda_fp16.h>,
// <cuda_bf16.h> and <cuda_fp8.h>. It includes no header of this project. The tests link it
// against the project's NCCL-API library and -lcuda, and run it with a fake CUDA driver whose
// device memory is host memory and whose devices are few; it is nevertheless written exactly as
// for real GPUs: every buffer comes from cuMemAlloc (or ncclMemAlloc), data moves only through
// cuMemcpyHtoD/DtoH, work goes on a stream from cuStreamCreate, and the host never touches a
// device pointer.
//
//   nccl_user_program MODE [NRANKS [DATATYPES]]   (NRANKS: 1..8, default 4; DATATYPES: "all", the
//                                                  default, or nccl.h's names without the
//                                                  prefix, e.g. float32,bfloat16,int8)
//
// As a user's launcher would, the parent takes an ncclUniqueId and forks NRANKS children; each
// child picks device rank % cuDeviceGetCount(), makes its primary context current, joins with
// ncclCommInitRank and runs the checks of MODE:
//   collectives  every collective (AllReduce with every op, in and out of place, and a
//                PreMulSum op for the float types; ReduceScatter, AllGather, Broadcast, Bcast,
//                Reduce, AlltoAll, Gather, Scatter), a Send/Recv ring and a group of two
//                collectives, for every datatype of nccl.h and counts 1, 13 and 1000; results
//                are compared bit-exactly (see bit_exact), and whatever a call must not write
//                must still hold the 0xFF poison. Then the communicator queries, ncclCommSplit
//                and a collective into ncclMemAlloc memory.
//   abort        the last rank aborts its communicator right after init; every other rank must
//                see an error (from its ncclAllReduce or from ncclCommGetAsyncError within 30 s).
//   init-only    init, print rank and count, destroy (a quick linkage check).
//   one-process  no fork: ncclCommInitAll's NRANKS ranks, driven from one thread in a group.
//   group-init   collectives' checks on a communicator made inside ncclGroupStart/End.
// A child exits 0 when every check passed, 1 otherwise (a failed NCCL or CUDA call ends it at
// once, naming the call). The parent kills every child if they are not all done within 300 s,
// prints one summary line and exits non-zero if any child failed.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <nccl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr int kDefaultRanks = 4;
constexpr int kMaxRanks = 8;
constexpr auto kChildrenDeadline = std::chrono::seconds(300);
constexpr auto kAbortDeadline = std::chrono::seconds(30);
constexpr auto kAbortPollInterval = std::chrono::milliseconds(10);
constexpr std::array<size_t, 3> kCounts = {1, 13, 1000};
constexpr size_t kLargestElement = 8;  // bytes: int64, uint64, double
constexpr std::byte kPoison{0xFF};
constexpr double kPreMulScalar = 0.5;
constexpr int kMinimumVersion = 22800;  // NCCL_VERSION(2, 28, 0)
constexpr size_t kMemAllocBytes = 4096;
constexpr size_t kMemAllocCount = 256;  // floats reduced into the ncclMemAlloc buffer
constexpr size_t kSplitCount = 1000;
constexpr size_t kAbortCount = 1024;
constexpr int kMaxMismatchesShown = 3;

// ---------------------------------------------------------------------------------------------
// Output. Each line goes out in one write(2): unbuffered, so nothing is lost or repeated across
// fork and _exit, and the ranks' lines never interleave mid-line.

[[gnu::format(printf, 1, 0)]] std::string vformat(const char* format, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string text(length > 0 ? static_cast<size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(text.data(), text.size() + 1, format, args);
  return text;
}

[[gnu::format(printf, 1, 2)]] std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::string text = vformat(format, args);
  va_end(args);
  return text;
}

void write_line(int fd, std::string line) {
  line += '\n';
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    data += written;
    left -= static_cast<size_t>(written);
  }
}

[[gnu::format(printf, 1, 2)]] void say(const char* format, ...) {
  va_list args;
  va_start(args, format);
  write_line(STDOUT_FILENO, vformat(format, args));
  va_end(args);
}

[[gnu::format(printf, 1, 2)]] void complain(const char* format, ...) {
  va_list args;
  va_start(args, format);
  write_line(STDERR_FILENO, vformat(format, args));
  va_end(args);
}

// ---------------------------------------------------------------------------------------------
// One rank (one child process): its device, stream and communicator, and its tally of checks.

struct Rank {
  int rank = 0;
  int nranks = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  ncclComm_t comm = nullptr;  // null once destroyed or aborted
  int checks_passed = 0;
  int checks_failed = 0;
};

// A failed NCCL or CUDA call ends the rank: report it, abort the communicator so that the peers
// see an error rather than wait for this rank, and exit 1.
[[noreturn]] void fail_call(Rank& self, std::string_view call, const std::string& why) {
  complain("rank %d: %.*s failed: %s", self.rank, static_cast<int>(call.size()), call.data(),
           why.c_str());
  if (ncclComm_t comm = std::exchange(self.comm, nullptr)) ncclCommAbort(comm);
  ::_exit(1);
}

void nccl_ok(Rank& self, ncclResult_t result, std::string_view call) {
  if (result == ncclSuccess) return;
  const char* last_error = ncclGetLastError(self.comm);
  fail_call(self, call,
            strprintf("%s (%s)", ncclGetErrorString(result), last_error ? last_error : ""));
}

const char* cuda_error_text(CUresult result) {
  const char* text = nullptr;
  if (cuGetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) return "unknown error";
  return text;
}

void cuda_ok(Rank& self, CUresult result, std::string_view call) {
  if (result == CUDA_SUCCESS) return;
  fail_call(self, call, strprintf("%s (CUresult %d)", cuda_error_text(result), static_cast<int>(result)));
}

void record_check(Rank& self, bool passed) { ++(passed ? self.checks_passed : self.checks_failed); }

// A check of one fact (not of a buffer): counted, and reported when it fails.
void check_that(Rank& self, bool passed, const std::string& what) {
  record_check(self, passed);
  if (!passed) complain("rank %d: CHECK FAILED: %s", self.rank, what.c_str());
}

// ---------------------------------------------------------------------------------------------
// Device memory and copies (driver API only).

void* as_pointer(CUdeviceptr address) { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }
CUdeviceptr as_device_address(void* pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer));
}

class DeviceBuffer {
 public:
  DeviceBuffer(Rank& self, size_t bytes) : self_(self), bytes_(bytes) {
    cuda_ok(self_, cuMemAlloc(&address_, bytes_), "cuMemAlloc");
  }
  ~DeviceBuffer() { cuda_ok(self_, cuMemFree(address_), "cuMemFree"); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr address() const { return address_; }
  void* pointer() const { return as_pointer(address_); }

 private:
  Rank& self_;
  size_t bytes_;
  CUdeviceptr address_ = 0;
};

void upload(Rank& self, CUdeviceptr destination, std::span<const std::byte> bytes) {
  cuda_ok(self, cuMemcpyHtoD(destination, bytes.data(), bytes.size()), "cuMemcpyHtoD");
}

std::vector<std::byte> download(Rank& self, CUdeviceptr source, size_t bytes) {
  std::vector<std::byte> host(bytes);
  cuda_ok(self, cuMemcpyDtoH(host.data(), source, bytes), "cuMemcpyDtoH");
  return host;
}

void poison_device_memory(Rank& self, CUdeviceptr destination, size_t bytes) {
  upload(self, destination, std::vector<std::byte>(bytes, kPoison));
}

void synchronize(Rank& self) { cuda_ok(self, cuStreamSynchronize(self.stream), "cuStreamSynchronize"); }

// ---------------------------------------------------------------------------------------------
// The datatypes of nccl.h: how a (small, exact) value is encoded in each, and decoded back.

struct Dtype {
  ncclDataType_t id;
  const char* name;
  size_t size;
  int fraction_bits;  // of a float type; 0 for an integer type
  void (*encode)(double value, std::byte* out);
  double (*decode)(const std::byte* in);

  bool is_float() const { return fraction_bits > 0; }
};

// Integers wrap modulo 2^bits, as NCCL's integer arithmetic does (an int8 product of 256 is 0).
template <class T>
void encode_integer(double value, std::byte* out) {
  const T x = static_cast<T>(static_cast<int64_t>(value));
  std::memcpy(out, &x, sizeof x);
}

template <class T>
double decode_integer(const std::byte* in) {
  T x;
  std::memcpy(&x, in, sizeof x);
  return static_cast<double>(x);
}

template <class T>
void encode_native_float(double value, std::byte* out) {
  const T x = static_cast<T>(value);
  std::memcpy(out, &x, sizeof x);
}

template <class T>
double decode_native_float(const std::byte* in) {
  T x;
  std::memcpy(&x, in, sizeof x);
  return static_cast<double>(x);
}

void encode_float16(double value, std::byte* out) {
  const __half_raw raw = static_cast<__half_raw>(__float2half_rn(static_cast<float>(value)));
  std::memcpy(out, &raw.x, sizeof raw.x);
}

double decode_float16(const std::byte* in) {
  __half_raw raw;
  std::memcpy(&raw.x, in, sizeof raw.x);
  return __half2float(__half(raw));
}

void encode_bfloat16(double value, std::byte* out) {
  const __nv_bfloat16_raw raw =
      static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(static_cast<float>(value)));
  std::memcpy(out, &raw.x, sizeof raw.x);
}

double decode_bfloat16(const std::byte* in) {
  __nv_bfloat16_raw raw;
  std::memcpy(&raw.x, in, sizeof raw.x);
  return __bfloat162float(__nv_bfloat16(raw));
}

template <__nv_fp8_interpretation_t Format>
void encode_float8(double value, std::byte* out) {
  out[0] = std::byte{__nv_cvt_float_to_fp8(static_cast<float>(value), __NV_SATFINITE, Format)};
}

template <__nv_fp8_interpretation_t Format>
double decode_float8(const std::byte* in) {
  const __half_raw widened = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(in[0]), Format);
  return __half2float(__half(widened));
}

constexpr std::array<Dtype, ncclNumTypes> kDtypes = {{
    {ncclInt8, "int8", 1, 0, encode_integer<int8_t>, decode_integer<int8_t>},
    {ncclUint8, "uint8", 1, 0, encode_integer<uint8_t>, decode_integer<uint8_t>},
    {ncclInt32, "int32", 4, 0, encode_integer<int32_t>, decode_integer<int32_t>},
    {ncclUint32, "uint32", 4, 0, encode_integer<uint32_t>, decode_integer<uint32_t>},
    {ncclInt64, "int64", 8, 0, encode_integer<int64_t>, decode_integer<int64_t>},
    {ncclUint64, "uint64", 8, 0, encode_integer<uint64_t>, decode_integer<uint64_t>},
    {ncclFloat16, "float16", 2, 10, encode_float16, decode_float16},
    {ncclFloat32, "float32", 4, 23, encode_native_float<float>, decode_native_float<float>},
    {ncclFloat64, "float64", 8, 52, encode_native_float<double>, decode_native_float<double>},
    {ncclBfloat16, "bfloat16", 2, 7, encode_bfloat16, decode_bfloat16},
    {ncclFloat8e4m3, "float8e4m3", 1, 3, encode_float8<__NV_E4M3>, decode_float8<__NV_E4M3>},
    {ncclFloat8e5m2, "float8e5m2", 1, 2, encode_float8<__NV_E5M2>, decode_float8<__NV_E5M2>},
}};

constexpr bool indexed_by_id(const std::array<Dtype, ncclNumTypes>& dtypes) {
  for (size_t i = 0; i < dtypes.size(); ++i)
    if (static_cast<size_t>(dtypes[i].id) != i) return false;
  return true;
}
static_assert(indexed_by_id(kDtypes), "kDtypes is indexed by ncclDataType_t");

const Dtype& dtype_of(ncclDataType_t id) { return kDtypes[static_cast<size_t>(id)]; }

// The datatypes `collectives` checks: every one, unless the command line names some (the
// launcher sets this before it forks).
std::vector<const Dtype*> selected_dtypes;

// "all", or datatype names separated by commas; false for a name nccl.h lacks.
bool select_dtypes(std::string_view list) {
  selected_dtypes.clear();
  for (const Dtype& dtype : kDtypes)
    if (list == "all") selected_dtypes.push_back(&dtype);
  while (list != "all" && !list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    const auto* found = std::find_if(kDtypes.begin(), kDtypes.end(), [&](const Dtype& d) { return name == d.name; });
    if (found == kDtypes.end()) return false;
    selected_dtypes.push_back(found);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return !selected_dtypes.empty();
}

// PreMulSum is checked on the 16-, 32- and 64-bit float types (not on fp8).
bool checks_premulsum(const Dtype& dtype) { return dtype.is_float() && dtype.size >= 2; }

std::vector<std::byte> encode(const Dtype& dtype, double value) {
  std::vector<std::byte> bytes(dtype.size);
  dtype.encode(value, bytes.data());
  return bytes;
}

// An element, for a mismatch report: its value and its bits.
std::string describe_element(const Dtype& dtype, const std::byte* element) {
  uint64_t bits = 0;
  std::memcpy(&bits, element, dtype.size);  // little-endian host: the low bytes
  return strprintf("%.9g (0x%0*llx)", dtype.decode(element), static_cast<int>(2 * dtype.size),
                static_cast<unsigned long long>(bits));
}

// ---------------------------------------------------------------------------------------------
// Inputs and expected results.

// Element i of rank r's send buffer: 0, 1 or 2.
double input_value(int rank, size_t index) { return static_cast<double>((static_cast<size_t>(rank) + index) % 3); }

std::vector<std::byte> encoded_inputs(const Dtype& dtype, int rank, size_t elements) {
  std::vector<std::byte> bytes(elements * dtype.size);
  for (size_t i = 0; i < elements; ++i) dtype.encode(input_value(rank, i), &bytes[i * dtype.size]);
  return bytes;
}

// Ranks 0 .. nranks-1.
std::vector<int> ranks_below(int nranks) {
  std::vector<int> ranks(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

enum class Reduction { Sum, Prod, Max, Min, Avg, PreMulSum };

struct BuiltinOp {
  ncclRedOp_t op;
  Reduction reduction;
  const char* name;
};

constexpr std::array<BuiltinOp, 5> kBuiltinOps = {{
    {ncclSum, Reduction::Sum, "Sum"},
    {ncclProd, Reduction::Prod, "Prod"},
    {ncclMax, Reduction::Max, "Max"},
    {ncclMin, Reduction::Min, "Min"},
    {ncclAvg, Reduction::Avg, "Avg"},
}};

static_assert(kBuiltinOps[ncclSum].op == ncclSum && kBuiltinOps[ncclAvg].op == ncclAvg,
              "kBuiltinOps is indexed by ncclRedOp_t");

const BuiltinOp& builtin_op(ncclRedOp_t op) { return kBuiltinOps[static_cast<size_t>(op)]; }

// The exact result of reducing element `index` of the given ranks' inputs. Integer Avg truncates
// (NCCL divides the integer sum); a product that overflows an integer type wraps in encode.
double reduce_inputs(Reduction reduction, const Dtype& dtype, std::span<const int> ranks, size_t index) {
  double sum = 0, product = 1;
  double max = -std::numeric_limits<double>::infinity(), min = std::numeric_limits<double>::infinity();
  for (int rank : ranks) {
    const double x = input_value(rank, index);
    sum += x;
    product *= x;
    max = std::max(max, x);
    min = std::min(min, x);
  }
  const double n = static_cast<double>(ranks.size());
  switch (reduction) {
    case Reduction::Sum: return sum;
    case Reduction::Prod: return product;
    case Reduction::Max: return max;
    case Reduction::Min: return min;
    case Reduction::Avg: return dtype.is_float() ? sum / n : std::trunc(sum / n);
    case Reduction::PreMulSum: return kPreMulScalar * sum;
  }
  return 0;
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Whether a reduction's result can be compared bit-exactly. With at most 4 ranks every partial
// result here is exact in every datatype (sums <= 8, products <= 16 and powers of two, quarters,
// halves), except averages over 3 ranks (thirds). With up to 8 ranks the same holds for the
// 16-bit and wider floats (sums <= 16, eighths), not for fp8. Where rounding depends on the order
// the library reduces in, the result is compared within a tolerance instead.
bool bit_exact(Reduction reduction, const Dtype& dtype, int nranks) {
  if (!dtype.is_float() || reduction == Reduction::Max || reduction == Reduction::Min) return true;
  if (reduction == Reduction::Avg && !is_power_of_two(nranks)) return false;
  return nranks <= 4 || dtype.fraction_bits >= 7;
}

// What element i of a checked buffer must hold: a value, or (nullopt) the poison it was filled
// with before the call, untouched.
using Expected = std::optional<double>;
using ExpectedElement = std::function<Expected(size_t index)>;

struct Comparison {
  bool exact = true;  // bit-exact; else within tolerance_ulps units in the last place
  double tolerance_ulps = 0;
};

Comparison compare_exactly() { return {}; }

Comparison compare_reduction(Reduction reduction, const Dtype& dtype, int nranks) {
  if (bit_exact(reduction, dtype, nranks)) return {};
  return {false, static_cast<double>(nranks)};
}

bool element_matches(const Dtype& dtype, const std::byte* got, const Expected& expected,
                     const Comparison& comparison) {
  if (!expected) {
    for (size_t b = 0; b < dtype.size; ++b)
      if (got[b] != kPoison) return false;
    return true;
  }
  if (comparison.exact) return std::memcmp(got, encode(dtype, *expected).data(), dtype.size) == 0;
  const double ulp = std::ldexp(std::max(1.0, std::fabs(*expected)), -dtype.fraction_bits);
  return std::fabs(dtype.decode(got) - *expected) <= comparison.tolerance_ulps * ulp;
}

// ---------------------------------------------------------------------------------------------
// Checking a result buffer.

// What a checked call was, for its mismatch report.
struct CallLabel {
  std::string call;
  const Dtype& dtype;
  std::string op;  // "-" for a collective without one
  size_t count;
};

// Downloads `elements` elements of `buffer` and compares every one with `expected`; counts one
// check, and on a mismatch reports the first few wrong elements.
void check_buffer(Rank& self, const CallLabel& label, CUdeviceptr buffer, size_t elements,
                  const ExpectedElement& expected, const Comparison& comparison) {
  const Dtype& dtype = label.dtype;
  const std::vector<std::byte> bytes = download(self, buffer, elements * dtype.size);
  size_t wrong = 0;
  std::string shown;
  for (size_t i = 0; i < elements; ++i) {
    const std::byte* got = &bytes[i * dtype.size];
    const Expected want = expected(i);
    if (element_matches(dtype, got, want, comparison)) continue;
    if (wrong++ < kMaxMismatchesShown) {
      const std::string wanted =
          want ? describe_element(dtype, encode(dtype, *want).data()) : std::string("the 0xFF poison (untouched)");
      shown += strprintf("; [%zu] got %s, expected %s", i, describe_element(dtype, got).c_str(), wanted.c_str());
    }
  }
  record_check(self, wrong == 0);
  if (wrong == 0) return;
  complain("rank %d: MISMATCH %s %s op %s count %zu: %zu of %zu elements wrong%s%s", self.rank,
           label.call.c_str(), dtype.name, label.op.c_str(), label.count, wrong, elements,
           comparison.exact ? "" : " (compared within a tolerance)", shown.c_str());
}

// ---------------------------------------------------------------------------------------------
// The collectives, for one datatype and count.

struct Buffers {
  explicit Buffers(Rank& self)
      : send(self, bytes_for(self)), recv(self, bytes_for(self)), recv2(self, bytes_for(self)) {}
  static size_t bytes_for(const Rank& self) {
    return static_cast<size_t>(self.nranks) * kCounts.back() * kLargestElement;
  }

  DeviceBuffer send, recv, recv2;
};

// One (datatype, count) combination.
struct Case {
  Rank& self;
  const Buffers& buffers;
  const Dtype& dtype;
  size_t count;

  int nranks() const { return self.nranks; }
  int rank() const { return self.rank; }
  // Elements of each buffer a call may touch: every checked buffer is checked this far, so what
  // a call must not write is checked too.
  size_t span() const { return count * static_cast<size_t>(self.nranks); }
  ncclDataType_t type() const { return dtype.id; }
  ncclComm_t comm() const { return self.comm; }
  CUstream stream() const { return self.stream; }

  std::vector<int> all_ranks() const { return ranks_below(self.nranks); }

  // This rank's inputs, v(rank, i) for i < span, into `buffer`.
  void fill_with_inputs(const DeviceBuffer& buffer) const {
    upload(self, buffer.address(), encoded_inputs(dtype, self.rank, span()));
  }
  void fill_with_poison(const DeviceBuffer& buffer) const {
    poison_device_memory(self, buffer.address(), span() * dtype.size);
  }
  void check(const std::string& call, const std::string& op, const DeviceBuffer& buffer,
             const ExpectedElement& expected, const Comparison& comparison) const {
    check_buffer(self, {call, dtype, op, count}, buffer.address(), span(), expected, comparison);
  }
};

enum class Placement { OutOfPlace, InPlace };

const char* describe(Placement placement) {
  return placement == Placement::InPlace ? "(in place)" : "(out of place)";
}

void check_allreduce(const Case& c, ncclRedOp_t op, Reduction reduction, const std::string& op_name,
                     Placement placement) {
  const DeviceBuffer& result = c.buffers.recv;
  const DeviceBuffer& source = placement == Placement::InPlace ? result : c.buffers.send;
  c.fill_with_inputs(c.buffers.send);
  if (placement == Placement::InPlace) c.fill_with_inputs(result);
  else c.fill_with_poison(result);
  nccl_ok(c.self, ncclAllReduce(source.pointer(), result.pointer(), c.count, c.type(), op, c.comm(), c.stream()),
          "ncclAllReduce");
  synchronize(c.self);
  const std::vector<int> ranks = c.all_ranks();
  c.check(std::string("ncclAllReduce ") + describe(placement), op_name, result,
          [&](size_t i) -> Expected {
            if (i < c.count) return reduce_inputs(reduction, c.dtype, ranks, i);
            if (placement == Placement::InPlace) return input_value(c.rank(), i);
            return std::nullopt;
          },
          compare_reduction(reduction, c.dtype, c.nranks()));
}

void check_allreduce_with_builtin_ops(const Case& c) {
  for (const BuiltinOp& op : kBuiltinOps)
    for (Placement placement : {Placement::OutOfPlace, Placement::InPlace})
      check_allreduce(c, op.op, op.reduction, op.name, placement);
}

void check_allreduce_with_premulsum(const Case& c) {
  std::vector<std::byte> scalar = encode(c.dtype, kPreMulScalar);  // host memory, read at creation
  ncclRedOp_t op;
  nccl_ok(c.self, ncclRedOpCreatePreMulSum(&op, scalar.data(), c.type(), ncclScalarHostImmediate, c.comm()),
          "ncclRedOpCreatePreMulSum");
  const std::string name = strprintf("PreMulSum(%g)", kPreMulScalar);
  for (Placement placement : {Placement::OutOfPlace, Placement::InPlace})
    check_allreduce(c, op, Reduction::PreMulSum, name, placement);
  nccl_ok(c.self, ncclRedOpDestroy(op, c.comm()), "ncclRedOpDestroy");
}

// ReduceScatter with recvcount = count: rank r gets the reduction of block r of every send buffer.
void check_reduce_scatter(const Case& c, const BuiltinOp& op) {
  c.fill_with_inputs(c.buffers.send);
  c.fill_with_poison(c.buffers.recv);
  nccl_ok(c.self,
          ncclReduceScatter(c.buffers.send.pointer(), c.buffers.recv.pointer(), c.count, c.type(), op.op,
                            c.comm(), c.stream()),
          "ncclReduceScatter");
  synchronize(c.self);
  const std::vector<int> ranks = c.all_ranks();
  const size_t block = static_cast<size_t>(c.rank()) * c.count;
  c.check("ncclReduceScatter", op.name, c.buffers.recv,
          [&](size_t i) -> Expected {
            if (i < c.count) return reduce_inputs(op.reduction, c.dtype, ranks, block + i);
            return std::nullopt;
          },
          compare_reduction(op.reduction, c.dtype, c.nranks()));
}

// Block p of an AllGather's or a Gather's result: rank p's first `count` inputs.
Expected gathered_element(const Case& c, size_t i) {
  return input_value(static_cast<int>(i / c.count), i % c.count);
}

void check_all_gather(const Case& c) {
  c.fill_with_inputs(c.buffers.send);
  c.fill_with_poison(c.buffers.recv);
  nccl_ok(c.self,
          ncclAllGather(c.buffers.send.pointer(), c.buffers.recv.pointer(), c.count, c.type(), c.comm(),
                        c.stream()),
          "ncclAllGather");
  synchronize(c.self);
  c.check("ncclAllGather", "-", c.buffers.recv, [&](size_t i) { return gathered_element(c, i); },
          compare_exactly());
}

void check_broadcast(const Case& c) {
  const int root = 1 % c.nranks();
  c.fill_with_inputs(c.buffers.send);
  c.fill_with_poison(c.buffers.recv);
  nccl_ok(c.self,
          ncclBroadcast(c.buffers.send.pointer(), c.buffers.recv.pointer(), c.count, c.type(), root, c.comm(),
                        c.stream()),
          "ncclBroadcast");
  synchronize(c.self);
  c.check(strprintf("ncclBroadcast (root %d)", root), "-", c.buffers.recv,
          [&](size_t i) -> Expected {
            if (i < c.count) return input_value(root, i);
            return std::nullopt;
          },
          compare_exactly());
}

void check_bcast_in_place(const Case& c) {
  const int root = 0;
  c.fill_with_inputs(c.buffers.recv);
  nccl_ok(c.self, ncclBcast(c.buffers.recv.pointer(), c.count, c.type(), root, c.comm(), c.stream()),
          "ncclBcast");
  synchronize(c.self);
  c.check(strprintf("ncclBcast (in place, root %d)", root), "-", c.buffers.recv,
          [&](size_t i) -> Expected { return input_value(i < c.count ? root : c.rank(), i); },
          compare_exactly());
}

// Only the root's result is defined; the other ranks pass no receive buffer at all.
void check_reduce(const Case& c, const BuiltinOp& op) {
  const int root = c.nranks() - 1;
  const bool is_root = c.rank() == root;
  c.fill_with_inputs(c.buffers.send);
  if (is_root) c.fill_with_poison(c.buffers.recv);
  void* recvbuff = is_root ? c.buffers.recv.pointer() : nullptr;
  nccl_ok(c.self,
          ncclReduce(c.buffers.send.pointer(), recvbuff, c.count, c.type(), op.op, root, c.comm(), c.stream()),
          "ncclReduce");
  synchronize(c.self);
  if (!is_root) return;
  const std::vector<int> ranks = c.all_ranks();
  c.check(strprintf("ncclReduce (root %d)", root), op.name, c.buffers.recv,
          [&](size_t i) -> Expected {
            if (i < c.count) return reduce_inputs(op.reduction, c.dtype, ranks, i);
            return std::nullopt;
          },
          compare_reduction(op.reduction, c.dtype, c.nranks()));
}

// AlltoAll: block p of rank r's result is block r of rank p's send buffer.
void check_all_to_all(const Case& c) {
  c.fill_with_inputs(c.buffers.send);
  c.fill_with_poison(c.buffers.recv);
  nccl_ok(c.self,
          ncclAlltoAll(c.buffers.send.pointer(), c.buffers.recv.pointer(), c.count, c.type(), c.comm(),
                       c.stream()),
          "ncclAlltoAll");
  synchronize(c.self);
  const size_t my_block = static_cast<size_t>(c.rank()) * c.count;
  c.check("ncclAlltoAll", "-", c.buffers.recv,
          [&](size_t i) -> Expected { return input_value(static_cast<int>(i / c.count), my_block + i % c.count); },
          compare_exactly());
}

void check_gather(const Case& c) {
  const int root = 0;
  const bool is_root = c.rank() == root;
  c.fill_with_inputs(c.buffers.send);
  if (is_root) c.fill_with_poison(c.buffers.recv);
  nccl_ok(c.self,
          ncclGather(c.buffers.send.pointer(), c.buffers.recv.pointer(), c.count, c.type(), root, c.comm(),
                     c.stream()),
          "ncclGather");
  synchronize(c.self);
  if (!is_root) return;
  c.check(strprintf("ncclGather (root %d)", root), "-", c.buffers.recv,
          [&](size_t i) { return gathered_element(c, i); }, compare_exactly());
}

// Scatter: rank r gets block r of the root's send buffer.
void check_scatter(const Case& c) {
  const int root = 0;
  c.fill_with_inputs(c.buffers.send);
  c.fill_with_poison(c.buffers.recv);
  nccl_ok(c.self,
          ncclScatter(c.buffers.send.pointer(), c.buffers.recv.pointer(), c.count, c.type(), root, c.comm(),
                      c.stream()),
          "ncclScatter");
  synchronize(c.self);
  const size_t my_block = static_cast<size_t>(c.rank()) * c.count;
  c.check(strprintf("ncclScatter (root %d)", root), "-", c.buffers.recv,
          [&](size_t i) -> Expected {
            if (i < c.count) return input_value(root, my_block + i);
            return std::nullopt;
          },
          compare_exactly());
}

// Every rank sends to the next and receives from the previous, in one group.
void check_ring_exchange(const Case& c) {
  const int next = (c.rank() + 1) % c.nranks();
  const int previous = (c.rank() - 1 + c.nranks()) % c.nranks();
  c.fill_with_inputs(c.buffers.send);
  c.fill_with_poison(c.buffers.recv);
  nccl_ok(c.self, ncclGroupStart(), "ncclGroupStart");
  nccl_ok(c.self, ncclSend(c.buffers.send.pointer(), c.count, c.type(), next, c.comm(), c.stream()), "ncclSend");
  nccl_ok(c.self, ncclRecv(c.buffers.recv.pointer(), c.count, c.type(), previous, c.comm(), c.stream()),
          "ncclRecv");
  nccl_ok(c.self, ncclGroupEnd(), "ncclGroupEnd");
  synchronize(c.self);
  c.check(strprintf("ncclSend/ncclRecv ring (from rank %d)", previous), "-", c.buffers.recv,
          [&](size_t i) -> Expected {
            if (i < c.count) return input_value(previous, i);
            return std::nullopt;
          },
          compare_exactly());
}

// An AllReduce and an AllGather on different buffers, in one group.
void check_grouped_collectives(const Case& c) {
  c.fill_with_inputs(c.buffers.send);
  c.fill_with_poison(c.buffers.recv);
  c.fill_with_poison(c.buffers.recv2);
  nccl_ok(c.self, ncclGroupStart(), "ncclGroupStart");
  nccl_ok(c.self,
          ncclAllReduce(c.buffers.send.pointer(), c.buffers.recv.pointer(), c.count, c.type(), ncclSum, c.comm(),
                        c.stream()),
          "ncclAllReduce");
  nccl_ok(c.self,
          ncclAllGather(c.buffers.send.pointer(), c.buffers.recv2.pointer(), c.count, c.type(), c.comm(),
                        c.stream()),
          "ncclAllGather");
  nccl_ok(c.self, ncclGroupEnd(), "ncclGroupEnd");
  synchronize(c.self);
  const std::vector<int> ranks = c.all_ranks();
  c.check("ncclAllReduce (grouped with an ncclAllGather)", "Sum", c.buffers.recv,
          [&](size_t i) -> Expected {
            if (i < c.count) return reduce_inputs(Reduction::Sum, c.dtype, ranks, i);
            return std::nullopt;
          },
          compare_reduction(Reduction::Sum, c.dtype, c.nranks()));
  c.check("ncclAllGather (grouped with an ncclAllReduce)", "-", c.buffers.recv2,
          [&](size_t i) { return gathered_element(c, i); }, compare_exactly());
}

void check_every_collective(const Case& c) {
  check_allreduce_with_builtin_ops(c);
  if (checks_premulsum(c.dtype)) check_allreduce_with_premulsum(c);
  check_reduce_scatter(c, builtin_op(ncclSum));
  check_reduce_scatter(c, builtin_op(ncclMax));
  check_all_gather(c);
  check_broadcast(c);
  check_bcast_in_place(c);
  check_reduce(c, builtin_op(ncclSum));
  check_reduce(c, builtin_op(ncclMin));
  check_all_to_all(c);
  check_gather(c);
  check_scatter(c);
  check_ring_exchange(c);
  check_grouped_collectives(c);
}

// ---------------------------------------------------------------------------------------------
// The communicator: queries, split, ncclMemAlloc.

void check_communicator_queries(Rank& self) {
  int count = -1, user_rank = -1, device = -1, version = 0;
  nccl_ok(self, ncclCommCount(self.comm, &count), "ncclCommCount");
  check_that(self, count == self.nranks, strprintf("ncclCommCount gave %d, expected %d", count, self.nranks));
  nccl_ok(self, ncclCommUserRank(self.comm, &user_rank), "ncclCommUserRank");
  check_that(self, user_rank == self.rank, strprintf("ncclCommUserRank gave %d, expected %d", user_rank, self.rank));
  nccl_ok(self, ncclCommCuDevice(self.comm, &device), "ncclCommCuDevice");
  check_that(self, device == static_cast<int>(self.device),
             strprintf("ncclCommCuDevice gave %d, expected the device of the context at init, %d", device,
                    static_cast<int>(self.device)));
  nccl_ok(self, ncclGetVersion(&version), "ncclGetVersion");
  check_that(self, version >= kMinimumVersion,
             strprintf("ncclGetVersion gave %d, expected at least %d", version, kMinimumVersion));
}

void check_no_async_error(Rank& self) {
  ncclResult_t async_error = ncclInternalError;
  nccl_ok(self, ncclCommGetAsyncError(self.comm, &async_error), "ncclCommGetAsyncError");
  check_that(self, async_error == ncclSuccess,
             strprintf("ncclCommGetAsyncError reported %s after the checks", ncclGetErrorString(async_error)));
}

// Split by parity (key = rank): an f32 Sum AllReduce on the child sums over the parent ranks of
// this rank's parity.
void check_split(Rank& self, const Buffers& buffers) {
  const int color = self.rank % 2;
  ncclComm_t child = nullptr;
  nccl_ok(self, ncclCommSplit(self.comm, color, self.rank, &child, nullptr), "ncclCommSplit");

  std::vector<int> same_parity;
  for (int r = color; r < self.nranks; r += 2) same_parity.push_back(r);
  const int expected_rank = self.rank / 2;  // keys are the parent ranks, so the order is kept

  int count = -1, user_rank = -1;
  nccl_ok(self, ncclCommCount(child, &count), "ncclCommCount");
  check_that(self, count == static_cast<int>(same_parity.size()),
             strprintf("ncclCommCount of the split (color %d) gave %d, expected %zu", color, count, same_parity.size()));
  nccl_ok(self, ncclCommUserRank(child, &user_rank), "ncclCommUserRank");
  check_that(self, user_rank == expected_rank,
             strprintf("ncclCommUserRank of the split (color %d) gave %d, expected %d", color, user_rank, expected_rank));

  const Dtype& dtype = dtype_of(ncclFloat32);
  upload(self, buffers.send.address(), encoded_inputs(dtype, self.rank, kSplitCount));
  poison_device_memory(self, buffers.recv.address(), kSplitCount * dtype.size);
  nccl_ok(self,
          ncclAllReduce(buffers.send.pointer(), buffers.recv.pointer(), kSplitCount, dtype.id, ncclSum, child,
                        self.stream),
          "ncclAllReduce");
  synchronize(self);
  check_buffer(self, {strprintf("ncclAllReduce on the split (color %d)", color), dtype, "Sum", kSplitCount},
               buffers.recv.address(), kSplitCount,
               [&](size_t i) -> Expected { return reduce_inputs(Reduction::Sum, dtype, same_parity, i); },
               compare_exactly());
  nccl_ok(self, ncclCommDestroy(child), "ncclCommDestroy");
}

// An f32 Sum AllReduce into a buffer from ncclMemAlloc; the rest of that buffer stays poisoned.
void check_mem_alloc_buffer(Rank& self, const Buffers& buffers) {
  void* memory = nullptr;
  nccl_ok(self, ncclMemAlloc(&memory, kMemAllocBytes), "ncclMemAlloc");
  const Dtype& dtype = dtype_of(ncclFloat32);
  const size_t elements = kMemAllocBytes / dtype.size;
  upload(self, buffers.send.address(), encoded_inputs(dtype, self.rank, kMemAllocCount));
  poison_device_memory(self, as_device_address(memory), kMemAllocBytes);
  nccl_ok(self,
          ncclAllReduce(buffers.send.pointer(), memory, kMemAllocCount, dtype.id, ncclSum, self.comm, self.stream),
          "ncclAllReduce");
  synchronize(self);
  const std::vector<int> ranks = ranks_below(self.nranks);
  check_buffer(self, {"ncclAllReduce into ncclMemAlloc memory", dtype, "Sum", kMemAllocCount},
               as_device_address(memory), elements,
               [&](size_t i) -> Expected {
                 if (i < kMemAllocCount) return reduce_inputs(Reduction::Sum, dtype, ranks, i);
                 return std::nullopt;
               },
               compare_exactly());
  nccl_ok(self, ncclMemFree(memory), "ncclMemFree");
}

// ---------------------------------------------------------------------------------------------
// The modes.

void destroy_communicator(Rank& self) {
  nccl_ok(self, ncclCommFinalize(self.comm), "ncclCommFinalize");
  nccl_ok(self, ncclCommDestroy(std::exchange(self.comm, nullptr)), "ncclCommDestroy");
}

void abort_communicator(Rank& self) {
  nccl_ok(self, ncclCommAbort(std::exchange(self.comm, nullptr)), "ncclCommAbort");
}

void run_collectives(Rank& self) {
  check_communicator_queries(self);
  {
    const Buffers buffers(self);
    for (const Dtype* dtype : selected_dtypes)
      for (size_t count : kCounts) check_every_collective({self, buffers, *dtype, count});
    check_split(self, buffers);
    check_mem_alloc_buffer(self, buffers);
  }
  check_no_async_error(self);
  destroy_communicator(self);
}

bool is_peer_failure(ncclResult_t result) {
  return result == ncclRemoteError || result == ncclSystemError || result == ncclInternalError;
}

// Polls ncclCommGetAsyncError until it reports an error or the deadline passes.
ncclResult_t wait_for_async_error(Rank& self, std::chrono::milliseconds& waited) {
  const auto start = std::chrono::steady_clock::now();
  ncclResult_t async_error = ncclSuccess;
  for (;;) {
    nccl_ok(self, ncclCommGetAsyncError(self.comm, &async_error), "ncclCommGetAsyncError");
    waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (async_error != ncclSuccess) return async_error;
    if (waited >= kAbortDeadline) return async_error;
    std::this_thread::sleep_for(kAbortPollInterval);
  }
}

// The last rank aborts at once; every other rank must see its AllReduce fail, at the call or
// through ncclCommGetAsyncError, and then aborts too.
void run_abort(Rank& self) {
  if (self.rank == self.nranks - 1) {
    abort_communicator(self);
    say("rank %d: aborted its communicator right after init", self.rank);
    return;
  }
  const Dtype& dtype = dtype_of(ncclFloat32);
  const DeviceBuffer send(self, kAbortCount * dtype.size), recv(self, kAbortCount * dtype.size);
  upload(self, send.address(), encoded_inputs(dtype, self.rank, kAbortCount));
  const ncclResult_t issued =
      ncclAllReduce(send.pointer(), recv.pointer(), kAbortCount, dtype.id, ncclSum, self.comm, self.stream);
  std::string seen = strprintf("ncclAllReduce returned %s", ncclGetErrorString(issued));
  bool saw_failure = is_peer_failure(issued);
  if (issued == ncclSuccess) {
    // The stream may fail or not once a peer has gone; what counts is the error NCCL reports.
    const CUresult synced = cuStreamSynchronize(self.stream);
    seen += strprintf(", cuStreamSynchronize returned %s", cuda_error_text(synced));
    std::chrono::milliseconds waited{0};
    const ncclResult_t async_error = wait_for_async_error(self, waited);
    seen += strprintf(", ncclCommGetAsyncError reported %s after %lld ms", ncclGetErrorString(async_error),
                   static_cast<long long>(waited.count()));
    saw_failure = async_error != ncclSuccess;
  } else if (!saw_failure) {
    const char* last_error = ncclGetLastError(self.comm);
    seen += strprintf(" (%s), not a remote, system or internal error", last_error ? last_error : "");
  }
  check_that(self, saw_failure, strprintf("no error seen after rank %d aborted: %s", self.nranks - 1, seen.c_str()));
  say("rank %d: %s: %s", self.rank, seen.c_str(), saw_failure ? "the abort was seen" : "the abort was NOT seen");
  abort_communicator(self);
}

void run_init_only(Rank& self) {
  int count = -1, user_rank = -1;
  nccl_ok(self, ncclCommCount(self.comm, &count), "ncclCommCount");
  nccl_ok(self, ncclCommUserRank(self.comm, &user_rank), "ncclCommUserRank");
  say("rank %d: initialized as rank %d of %d on device %d", self.rank, user_rank, count,
      static_cast<int>(self.device));
  check_that(self, count == self.nranks, strprintf("ncclCommCount gave %d, expected %d", count, self.nranks));
  check_that(self, user_rank == self.rank, strprintf("ncclCommUserRank gave %d, expected %d", user_rank, self.rank));
  nccl_ok(self, ncclCommDestroy(std::exchange(self.comm, nullptr)), "ncclCommDestroy");
}

enum class Mode { Collectives, Abort, InitOnly, OneProcess, GroupInit };

struct ModeName {
  Mode mode;
  const char* name;
};

constexpr std::array<ModeName, 5> kModes = {{
    {Mode::Collectives, "collectives"},
    {Mode::Abort, "abort"},
    {Mode::InitOnly, "init-only"},
    {Mode::OneProcess, "one-process"},
    {Mode::GroupInit, "group-init"},
}};

// ---------------------------------------------------------------------------------------------
// Mode one-process: the ranks of one ncclCommInitAll call, all driven from this thread inside a
// group (NCCL's rule for several ranks per thread): a float32 sum allreduce and an all-gather.

void detach_device(Rank& self);

float one_process_input(int rank, size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 3)); }

int run_one_process(int nranks) {
  constexpr size_t kCount = 1000;
  std::vector<Rank> ranks(nranks);
  cuda_ok(ranks[0], cuInit(0), "cuInit");
  int devices = 0;
  cuda_ok(ranks[0], cuDeviceGetCount(&devices), "cuDeviceGetCount");
  std::vector<int> devlist;
  for (int r = 0; r < nranks; ++r) {
    Rank& self = ranks[r];
    self.rank = r;
    self.nranks = nranks;
    cuda_ok(self, cuDeviceGet(&self.device, r % devices), "cuDeviceGet");
    cuda_ok(self, cuDevicePrimaryCtxRetain(&self.context, self.device), "cuDevicePrimaryCtxRetain");
    devlist.push_back(r % devices);
  }
  std::vector<ncclComm_t> comms(nranks);
  nccl_ok(ranks[0], ncclCommInitAll(comms.data(), nranks, devlist.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<DeviceBuffer>> send, sum, gathered;
  for (int r = 0; r < nranks; ++r) {
    Rank& self = ranks[r];
    self.comm = comms[r];
    cuda_ok(self, cuCtxSetCurrent(self.context), "cuCtxSetCurrent");
    cuda_ok(self, cuStreamCreate(&self.stream, CU_STREAM_DEFAULT), "cuStreamCreate");
    send.push_back(std::make_unique<DeviceBuffer>(self, kCount * sizeof(float)));
    sum.push_back(std::make_unique<DeviceBuffer>(self, kCount * sizeof(float)));
    gathered.push_back(std::make_unique<DeviceBuffer>(self, nranks * kCount * sizeof(float)));
    std::vector<float> input(kCount);
    for (size_t i = 0; i < kCount; ++i) input[i] = one_process_input(r, i);
    upload(self, send[r]->address(), std::as_bytes(std::span(input)));
    poison_device_memory(self, sum[r]->address(), kCount * sizeof(float));
    poison_device_memory(self, gathered[r]->address(), nranks * kCount * sizeof(float));
  }
  nccl_ok(ranks[0], ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < nranks; ++r) {
    Rank& self = ranks[r];
    cuda_ok(self, cuCtxSetCurrent(self.context), "cuCtxSetCurrent");
    nccl_ok(self, ncclAllReduce(send[r]->pointer(), sum[r]->pointer(), kCount, ncclFloat32, ncclSum, self.comm, self.stream),
            "ncclAllReduce");
    nccl_ok(self, ncclAllGather(send[r]->pointer(), gathered[r]->pointer(), kCount, ncclFloat32, self.comm, self.stream),
            "ncclAllGather");
  }
  nccl_ok(ranks[0], ncclGroupEnd(), "ncclGroupEnd");
  int failed = 0;
  for (int r = 0; r < nranks; ++r) {
    Rank& self = ranks[r];
    cuda_ok(self, cuCtxSetCurrent(self.context), "cuCtxSetCurrent");
    synchronize(self);
    const std::vector<std::byte> sums = download(self, sum[r]->address(), kCount * sizeof(float));
    const std::vector<std::byte> all = download(self, gathered[r]->address(), nranks * kCount * sizeof(float));
    size_t wrong = 0;
    for (size_t i = 0; i < kCount; ++i) {
      float expected = 0, got = 0;
      for (int p = 0; p < nranks; ++p) expected += one_process_input(p, i);
      std::memcpy(&got, sums.data() + i * sizeof(float), sizeof got);
      wrong += got != expected;
      for (int p = 0; p < nranks; ++p) {
        std::memcpy(&got, all.data() + (p * kCount + i) * sizeof(float), sizeof got);
        wrong += got != one_process_input(p, i);
      }
    }
    check_that(self, wrong == 0, strprintf("one-process allreduce and all-gather: %zu elements wrong", wrong));
    failed += self.checks_failed;
  }
  send.clear(), sum.clear(), gathered.clear();
  for (Rank& self : ranks) {
    nccl_ok(self, ncclCommDestroy(std::exchange(self.comm, nullptr)), "ncclCommDestroy");
    detach_device(self);
  }
  say("nccl_user_program one-process: %d rank(s), %s", nranks, failed == 0 ? "all passed" : "FAILED");
  return failed == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// One child: the device, the communicator, the mode's checks.

void attach_device(Rank& self) {
  cuda_ok(self, cuInit(0), "cuInit");
  int devices = 0;
  cuda_ok(self, cuDeviceGetCount(&devices), "cuDeviceGetCount");
  if (devices < 1) fail_call(self, "cuDeviceGetCount", "no CUDA device");
  cuda_ok(self, cuDeviceGet(&self.device, self.rank % devices), "cuDeviceGet");
  cuda_ok(self, cuDevicePrimaryCtxRetain(&self.context, self.device), "cuDevicePrimaryCtxRetain");
  cuda_ok(self, cuCtxSetCurrent(self.context), "cuCtxSetCurrent");
  cuda_ok(self, cuStreamCreate(&self.stream, CU_STREAM_DEFAULT), "cuStreamCreate");
}

void detach_device(Rank& self) {
  cuda_ok(self, cuStreamDestroy(self.stream), "cuStreamDestroy");
  cuda_ok(self, cuDevicePrimaryCtxRelease(self.device), "cuDevicePrimaryCtxRelease");
}

int run_rank(Mode mode, int rank, int nranks, const ncclUniqueId& id) {
  Rank self;
  self.rank = rank;
  self.nranks = nranks;
  attach_device(self);
  ncclComm_t comm = nullptr;
  if (mode == Mode::GroupInit) {  // nccl-tests' pattern: the init inside a group
    nccl_ok(self, ncclGroupStart(), "ncclGroupStart");
    nccl_ok(self, ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
    nccl_ok(self, ncclGroupEnd(), "ncclGroupEnd");
  } else {
    nccl_ok(self, ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank");
  }
  self.comm = comm;
  switch (mode) {
    case Mode::Collectives:
    case Mode::GroupInit: run_collectives(self); break;
    case Mode::Abort: run_abort(self); break;
    case Mode::InitOnly: run_init_only(self); break;
    case Mode::OneProcess: break;  // no fork: launch() runs it
  }
  detach_device(self);
  if (self.checks_failed == 0) say("rank %d: %d checks passed", rank, self.checks_passed);
  else say("rank %d: %d checks passed, %d FAILED", rank, self.checks_passed, self.checks_failed);
  return self.checks_failed == 0 ? 0 : 1;
}

[[noreturn]] void child_main(Mode mode, int rank, int nranks, const ncclUniqueId& id) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no rank outlives a launcher that was killed
  int status = 1;
  try {
    status = run_rank(mode, rank, nranks, id);
  } catch (const std::exception& error) {
    complain("rank %d: exception: %s", rank, error.what());
  } catch (...) {
    complain("rank %d: unknown exception", rank);
  }
  ::_exit(status);  // not exit(): the parent's atexit handlers and stdio are not the child's
}

// ---------------------------------------------------------------------------------------------
// The launcher: one child per rank, then wait for all of them (or kill them).

struct Child {
  enum class State { Running, Ended, Killed, Lost };
  int rank;
  pid_t pid;
  State state = State::Running;
  int status = 0;  // waitpid's, once Ended
};

std::string describe_outcome(const Child& child) {
  switch (child.state) {
    case Child::State::Running: return "still running";
    case Child::State::Killed: return strprintf("killed after %lld s", static_cast<long long>(kChildrenDeadline.count()));
    case Child::State::Lost: return "lost (waitpid failed)";
    case Child::State::Ended: break;
  }
  if (WIFEXITED(child.status)) return strprintf("exited %d", WEXITSTATUS(child.status));
  if (WIFSIGNALED(child.status)) return strprintf("killed by signal %d", WTERMSIG(child.status));
  return "ended oddly";
}

bool succeeded(const Child& child) {
  return child.state == Child::State::Ended && WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0;
}

void kill_and_reap(std::vector<Child>& children) {
  for (Child& child : children)
    if (child.state == Child::State::Running) ::kill(child.pid, SIGKILL);
  for (Child& child : children) {
    if (child.state != Child::State::Running) continue;
    int ignored = 0;
    while (::waitpid(child.pid, &ignored, 0) < 0 && errno == EINTR) {}
    child.state = Child::State::Killed;
  }
}

// Reaps the child if it has ended; returns whether it is still running.
bool poll_child(Child& child) {
  const pid_t reaped = ::waitpid(child.pid, &child.status, WNOHANG);
  if (reaped == child.pid) child.state = Child::State::Ended;
  else if (reaped < 0 && errno != EINTR) child.state = Child::State::Lost;
  return child.state == Child::State::Running;
}

// Polls the children until all have ended; past the deadline, kills those left.
void wait_for_children(std::vector<Child>& children) {
  const auto deadline = std::chrono::steady_clock::now() + kChildrenDeadline;
  for (;;) {
    size_t running = 0;
    for (Child& child : children)
      if (child.state == Child::State::Running && poll_child(child)) ++running;
    if (running == 0) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      complain("launcher: %zu rank(s) still running after %lld s: killing them", running,
               static_cast<long long>(kChildrenDeadline.count()));
      kill_and_reap(children);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int usage(const char* program) {
  complain("usage: %s collectives|abort|init-only|one-process|group-init [nranks (1..%d, default %d) [datatypes (all, or names such as "
           "float32,bfloat16)]]",
           program, kMaxRanks, kDefaultRanks);
  return 2;
}

std::optional<Mode> parse_mode(std::string_view name) {
  for (const ModeName& mode : kModes)
    if (name == mode.name) return mode.mode;
  return std::nullopt;
}

std::optional<int> parse_nranks(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 1 || value > kMaxRanks) return std::nullopt;
  return static_cast<int>(value);
}

int launch(int argc, char** argv) {
  if (argc < 2 || argc > 4) return usage(argv[0]);
  const std::optional<Mode> mode = parse_mode(argv[1]);
  const std::optional<int> nranks = argc >= 3 ? parse_nranks(argv[2]) : std::optional<int>(kDefaultRanks);
  if (!mode || !nranks || !select_dtypes(argc == 4 ? argv[3] : "all")) return usage(argv[0]);
  if (*mode == Mode::OneProcess) return run_one_process(*nranks);

  ncclUniqueId id;
  if (const ncclResult_t result = ncclGetUniqueId(&id); result != ncclSuccess) {
    const char* last_error = ncclGetLastError(nullptr);
    complain("launcher: ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(result), last_error ? last_error : "");
    return 1;
  }

  std::vector<Child> children;
  for (int rank = 0; rank < *nranks; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) child_main(*mode, rank, *nranks, id);
    if (pid < 0) {
      complain("launcher: fork failed: %s", std::strerror(errno));
      kill_and_reap(children);
      return 1;
    }
    children.push_back({rank, pid, Child::State::Running, 0});
  }
  wait_for_children(children);

  std::string failures;
  for (const Child& child : children)
    if (!succeeded(child)) failures += strprintf("%s rank %d %s", failures.empty() ? "" : ",", child.rank,
                                              describe_outcome(child).c_str());
  if (failures.empty()) {
    say("nccl_user_program %s: %d rank(s), all passed", argv[1], *nranks);
    return 0;
  }
  say("nccl_user_program %s: %d rank(s), FAILED:%s", argv[1], *nranks, failures.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return launch(argc, argv);
  } catch (const std::exception& error) {
    complain("launcher: exception: %s", error.what());
  } catch (...) {
    complain("launcher: unknown exception");
  }
  return 1;
}
