#include "collective_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ccc {

namespace {

// --- element encodings (host side; the prelude has its own for the kernels) ---

bool is_fp8(DataType t) { return t == DataType::F8E4M3 || t == DataType::F8E5M2; }

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

double half_to_double(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(mant | 0x400, exp - 25);
}

// Exact for the values fill_input uses (normal, at most 11 significant bits).
uint16_t float_to_half_exact(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffff) == 0) return static_cast<uint16_t>(x >> 16);
  const uint32_t sign = (x >> 16) & 0x8000, exp = ((x >> 23) & 0xff) - 127 + 15;
  return static_cast<uint16_t>(sign | (exp << 10) | ((x & 0x7fffff) >> 13));
}

// OCP fp8 (E4M3 has no infinity: all ones is NaN, the rest of its top exponent normal).
double fp8_to_double(uint8_t b, int exp_bits, int mant_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1, top = (1 << exp_bits) - 1;
  const int exp = (b >> mant_bits) & top, mant = b & ((1 << mant_bits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const bool e4m3 = exp_bits == 4;
  if (e4m3 ? (b & 0x7f) == 0x7f : exp == top) return mant || e4m3 ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, 1 - bias - mant_bits);
  return sign * std::ldexp(mant | (1 << mant_bits), exp - bias - mant_bits);
}

// Exact for the values fill_input uses for fp8 (-1, 0, 1).
uint8_t float_to_fp8_exact(float f, int exp_bits, int mant_bits) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffff) == 0) return static_cast<uint8_t>(x >> 24);
  const uint32_t sign = (x >> 24) & 0x80, exp = ((x >> 23) & 0xff) - 127 + ((1 << (exp_bits - 1)) - 1);
  return static_cast<uint8_t>(sign | (exp << mant_bits) | ((x & 0x7fffff) >> (23 - mant_bits)));
}

double bf16_to_double(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// An element read as a double (floats) or as its two's-complement bits widened (integers).
struct Value {
  double f = 0;
  uint64_t u = 0;  // integers: wraps like the kernels' arithmetic
  int64_t s = 0;   // integers: sign-extended
};

Value load(DataType t, const void* base, uint64_t i) {
  const auto* p = static_cast<const unsigned char*>(base) + i * data_type_size(t);
  Value v;
  switch (t) {
    case DataType::F64: std::memcpy(&v.f, p, 8); break;
    case DataType::F32: { float f; std::memcpy(&f, p, 4); v.f = f; break; }
    case DataType::F16: { uint16_t h; std::memcpy(&h, p, 2); v.f = half_to_double(h); break; }
    case DataType::BF16: { uint16_t b; std::memcpy(&b, p, 2); v.f = bf16_to_double(b); break; }
    case DataType::I64: case DataType::U64: std::memcpy(&v.u, p, 8); v.s = static_cast<int64_t>(v.u); break;
    case DataType::I32: { int32_t x; std::memcpy(&x, p, 4); v.s = x; v.u = static_cast<uint64_t>(v.s); break; }
    case DataType::U32: { uint32_t x; std::memcpy(&x, p, 4); v.u = x; v.s = x; break; }
    case DataType::I8: { int8_t x; std::memcpy(&x, p, 1); v.s = x; v.u = static_cast<uint64_t>(v.s); break; }
    case DataType::U8: { uint8_t x; std::memcpy(&x, p, 1); v.u = x; v.s = x; break; }
    case DataType::F8E4M3: v.f = fp8_to_double(*p, 4, 3); break;
    case DataType::F8E5M2: v.f = fp8_to_double(*p, 5, 2); break;
  }
  return v;
}

void store_small(DataType t, void* base, uint64_t i, double value) {
  auto* p = static_cast<unsigned char*>(base) + i * data_type_size(t);
  switch (t) {
    case DataType::F64: std::memcpy(p, &value, 8); break;
    case DataType::F32: { const float f = static_cast<float>(value); std::memcpy(p, &f, 4); break; }
    case DataType::F16: { const uint16_t h = float_to_half_exact(static_cast<float>(value)); std::memcpy(p, &h, 2); break; }
    case DataType::BF16: { const uint16_t b = static_cast<uint16_t>(float_bits(static_cast<float>(value)) >> 16); std::memcpy(p, &b, 2); break; }
    case DataType::F8E4M3: *p = float_to_fp8_exact(static_cast<float>(value), 4, 3); break;
    case DataType::F8E5M2: *p = float_to_fp8_exact(static_cast<float>(value), 5, 2); break;
    default: {
      const auto bits = static_cast<uint64_t>(static_cast<int64_t>(value));
      std::memcpy(p, &bits, data_type_size(t));  // little-endian: the low bytes
    }
  }
}

bool is_float(DataType t) {
  return t == DataType::F64 || t == DataType::F32 || t == DataType::F16 || t == DataType::BF16 || is_fp8(t);
}

bool is_signed(DataType t) {
  return t == DataType::I64 || t == DataType::I32 || t == DataType::I8;
}

int mantissa_bits(DataType t) {
  switch (t) {
    case DataType::F64: return 52;
    case DataType::F32: return 23;
    case DataType::F16: return 10;
    case DataType::F8E4M3: return 3;
    case DataType::F8E5M2: return 2;
    default: return 7;  // bf16
  }
}

// The exponent of the smallest normal value.
int min_exponent(DataType t) {
  switch (t) {
    case DataType::F64: return -1022;
    case DataType::F16: case DataType::F8E5M2: return -14;
    case DataType::F8E4M3: return -6;
    default: return -126;  // f32, bf16
  }
}

// The spacing of `t`'s values at magnitude |x|.
double ulp_at(DataType t, double x) {
  const int e = x == 0 ? min_exponent(t) : std::max(std::ilogb(x), min_exponent(t));
  return std::ldexp(1.0, e - mantissa_bits(t));
}

// The largest integer up to which every integer is exact: fp8 sums of -1, 0 and 1 (fill_input)
// are exact, whatever order the kernel adds them in, while no partial sum passes it.
double exact_integers(DataType t) { return std::ldexp(1.0, mantissa_bits(t) + 1); }

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines two integers the way the kernels do: wrapping in the element's width.
uint64_t combine_int(ReduceOp op, bool is_signed_type, uint64_t a, uint64_t b, int64_t as, int64_t bs) {
  switch (op) {
    case ReduceOp::Sum: case ReduceOp::Avg: return a + b;
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return is_signed_type ? static_cast<uint64_t>(std::min(as, bs)) : std::min(a, b);
    case ReduceOp::Max: return is_signed_type ? static_cast<uint64_t>(std::max(as, bs)) : std::max(a, b);
  }
  return 0;
}

// Sign- or zero-extends the low `bytes` bytes of `u`.
int64_t narrow_signed(uint64_t u, size_t bytes) {
  if (bytes == 8) return static_cast<int64_t>(u);
  const int shift = 64 - 8 * static_cast<int>(bytes);
  return static_cast<int64_t>(u << shift) >> shift;
}
uint64_t narrow_unsigned(uint64_t u, size_t bytes) {
  return bytes == 8 ? u : u & ((uint64_t{1} << (8 * bytes)) - 1);
}

// The exact reduction of in[0..k) under `op`, in double (floats; exact for fill_random's inputs
// but for avg's division and products, which double rounds far below any element type's ulp).
double reduced_exactly(ReduceOp op, int nranks, const Value* in, int k) {
  double acc = in[0].f;
  for (int j = 1; j < k; ++j) {
    switch (op) {
      case ReduceOp::Sum: case ReduceOp::Avg: acc += in[j].f; break;
      case ReduceOp::Prod: acc *= in[j].f; break;
      case ReduceOp::Min: acc = std::min(acc, in[j].f); break;
      case ReduceOp::Max: acc = std::max(acc, in[j].f); break;
    }
  }
  return op == ReduceOp::Avg ? acc / nranks : acc;
}

// Does `out` match the reduction of `in[0..k)` under `op` (plus `*residual`, an epilogue's,
// where not null)?
bool reduced_matches(DataType t, ReduceOp op, int nranks, const Value* in, int k, const Value& out,
                     const Value* residual) {
  if (is_float(t)) {
    const double acc = reduced_exactly(op == ReduceOp::Avg ? ReduceOp::Sum : op, nranks, in, k);
    // A sum kept in fp8 between passes rounds each time past exact_integers: by at most half an
    // ulp of the largest partial sum, once per rank at most.
    double sum_error = 0;
    if (is_fp8(t) && (op == ReduceOp::Sum || op == ReduceOp::Avg)) {
      double magnitude = 0;
      for (int j = 0; j < k; ++j) magnitude += std::fabs(in[j].f);
      if (magnitude > exact_integers(t)) sum_error = k * std::ldexp(magnitude, -mantissa_bits(t) - 1);
    }
    const double res = residual != nullptr ? residual->f : 0;
    if (op != ReduceOp::Avg) return sum_error == 0 ? out.f == acc + res : std::fabs(out.f - (acc + res)) <= sum_error;
    const double expected = acc / nranks;  // rounded once, then once more with a residual
    const double rounding = std::ldexp(std::fabs(expected), -mantissa_bits(t)) * 2 +
                            (residual != nullptr ? std::ldexp(std::fabs(expected + res), -mantissa_bits(t)) : 0);
    return std::fabs(out.f - (expected + res)) <= rounding + sum_error / nranks;
  }
  const size_t bytes = data_type_size(t);
  const bool sgn = is_signed(t);
  uint64_t acc = in[0].u;
  int64_t acc_s = in[0].s;
  for (int j = 1; j < k; ++j) {
    acc = combine_int(op, sgn, acc, in[j].u, acc_s, in[j].s);
    acc_s = narrow_signed(acc, bytes);
    acc = sgn ? static_cast<uint64_t>(acc_s) : narrow_unsigned(acc, bytes);
  }
  if (op == ReduceOp::Avg) {
    acc = sgn ? static_cast<uint64_t>(acc_s / nranks) : acc / static_cast<uint64_t>(nranks);
  }
  if (residual != nullptr) acc += residual->u;  // wrapping, as the kernels' add
  return narrow_unsigned(acc, bytes) == narrow_unsigned(out.u, bytes);
}

bool same_element(DataType t, const Value& a, const Value& b) {
  return is_float(t) ? (a.f == b.f || (std::isnan(a.f) && std::isnan(b.f)))
                     : narrow_unsigned(a.u, data_type_size(t)) == narrow_unsigned(b.u, data_type_size(t));
}

}  // namespace

void fill_input(DataType dtype, int rank, uint64_t salt, uint64_t elems, void* dst) {
  static constexpr double kFloatValues[] = {-2, -1, -0.5, 0.5, 1, 2};
  for (uint64_t i = 0; i < elems; ++i) {
    const uint64_t h = mix(i * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(rank) * 0x632be59bd9b4e019ULL + salt);
    const double v = is_fp8(dtype) ? static_cast<double>(static_cast<int>(h % 3) - 1)
                     : is_float(dtype) ? kFloatValues[h % 6]
                     : is_signed(dtype) ? static_cast<double>(static_cast<int>(h % 15) - 7)
                                        : static_cast<double>(h % 15);
    store_small(dtype, dst, i, v);
  }
}

void poison(DataType dtype, uint64_t elems, void* dst) {
  if (!is_float(dtype)) {
    std::memset(dst, 0x5a, elems * data_type_size(dtype));
    return;
  }
  const uint64_t nan_bits[] = {0x7ff8dead00000000ULL, 0x7fc0dead, 0x7e01, 0x7fc1, 0x7f};
  const int which = dtype == DataType::F64 ? 0 : dtype == DataType::F32 ? 1 : dtype == DataType::F16 ? 2
                    : is_fp8(dtype)        ? 4 : 3;
  const size_t size = data_type_size(dtype);
  for (uint64_t i = 0; i < elems; ++i)
    std::memcpy(static_cast<unsigned char*>(dst) + i * size, &nan_bits[which], size);
}

void fill_random(DataType dtype, int rank, uint64_t salt, uint64_t elems, void* dst) {
  if (!is_float(dtype)) return fill_input(dtype, rank, salt, elems, dst);
  for (uint64_t i = 0; i < elems; ++i) {
    const uint64_t h = mix(i * 0xd1b54a32d192ed03ULL + static_cast<uint64_t>(rank) * 0x8cb92ba72f3d8dd7ULL + salt);
    double v = std::ldexp(static_cast<double>(h % 8192) - 4096, -12);
    if (std::fabs(v) < std::ldexp(1.0, min_exponent(dtype))) {
      v = 0;  // e4m3's subnormals (store_small writes normal values only)
    } else {  // rounded to the type (nearest, ties to even), so the value stored is the input
      const double spacing = ulp_at(dtype, v);
      v = std::nearbyint(v / spacing) * spacing;
    }
    store_small(dtype, dst, i, v);
  }
}

namespace {

// A fused allreduce's output against its value computed in double: the exact sum plus the
// residual, then, for the norm, times the row's exact 1 / rms and the weight. The scale is the
// sum's (its terms' magnitudes, and the residual's) through the same factors: what the output's
// roundings are relative to (the pre-norm sum rounded once to the type, then the norm's).
double epilogue_ulp_error(const CollectiveCall& call, int nranks, std::span<const void* const> inputs,
                          const void* output, const RankEpilogue& e) {
  const DataType t = call.dtype;
  const bool norm = call.epilogue == Epilogue::ResidualRmsNorm;
  const uint64_t row_length = norm ? call.hidden : call.count;
  std::vector<Value> in(nranks);
  std::vector<double> sum(row_length), scale(row_length);
  double worst = 0;
  for (uint64_t row = 0; row < call.count; row += row_length) {
    double squares = 0;
    for (uint64_t j = 0; j < row_length; ++j) {
      for (int p = 0; p < nranks; ++p) in[p] = load(t, inputs[p], row + j);
      const double exact = reduced_exactly(call.op, nranks, in.data(), nranks), residual = load(t, e.residual, row + j).f;
      double terms = std::fabs(exact);
      if (call.op == ReduceOp::Sum || call.op == ReduceOp::Avg) {
        terms = 0;
        for (int p = 0; p < nranks; ++p) terms += std::fabs(in[p].f);
        if (call.op == ReduceOp::Avg) terms /= nranks;
      }
      sum[j] = exact + residual;
      scale[j] = terms + std::fabs(residual);
      squares += sum[j] * sum[j];
    }
    const double factor = norm ? 1 / std::sqrt(squares / static_cast<double>(row_length) + call.eps) : 1;
    for (uint64_t j = 0; j < row_length; ++j) {
      const double weight = norm ? load(t, e.weight, j).f : 1, got = load(t, output, row + j).f;
      if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(got - sum[j] * factor * weight) / ulp_at(t, scale[j] * factor * std::fabs(weight)));
    }
  }
  return worst;
}

}  // namespace

double max_ulp_error(const CollectiveCall& call, int nranks, int rank, std::span<const void* const> inputs,
                     const void* output, const RankEpilogue& epilogue) {
  const DataType t = call.dtype;
  if (call.epilogue != Epilogue::None && call.collective == Collective::AllReduce && is_float(t))
    return epilogue_ulp_error(call, nranks, inputs, output, epilogue);
  const bool reduces = call.collective == Collective::AllReduce || call.collective == Collective::Reduce ||
                       call.collective == Collective::ReduceScatter;
  if (!is_float(t) || !reduces || (call.collective == Collective::Reduce && rank != call.root)) return 0;
  const uint64_t offset = call.collective == Collective::ReduceScatter ? rank * call.count : 0;
  std::vector<Value> in(nranks);
  double worst = 0;
  for (uint64_t i = 0; i < call.count; ++i) {
    for (int p = 0; p < nranks; ++p) in[p] = load(t, inputs[p], offset + i);
    const double exact = reduced_exactly(call.op, nranks, in.data(), nranks), got = load(t, output, i).f;
    if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
    double scale = std::fabs(exact);  // a sum's: the sum of its terms' magnitudes
    if (call.op == ReduceOp::Sum || call.op == ReduceOp::Avg) {
      scale = 0;
      for (int p = 0; p < nranks; ++p) scale += std::fabs(in[p].f);
      if (call.op == ReduceOp::Avg) scale /= nranks;
    }
    worst = std::max(worst, std::fabs(got - exact) / ulp_at(t, scale));
  }
  return worst;
}

namespace {

// Whether fp8 e4m3 `q` is not `v` rounded to the nearest e4m3 value (within half a unit in the
// last place at v, either way at a tie), saturated at +-448. Independent of the kernels'
// conversion: it only asks where the decoded value lies.
bool e4m3_misquantised(float v, uint8_t q) {
  const double got = fp8_to_double(q, 4, 3);
  if (std::isnan(v)) return !std::isnan(got);
  if (std::fabs(v) >= 448) return got != std::copysign(448.0, v);
  const int exponent = std::max(std::ilogb(v == 0 ? 1.0f : v), -6);  // below 2^-6: the subnormals' spacing
  return !(std::fabs(got - v) <= std::ldexp(1.0, exponent - 3) / 2);
}

// An allreduce + residual + RMSNorm's rank output (and residual_out, and the fp8 output) against
// the norm of the exact sums, computed in double.
uint64_t rmsnorm_wrong(const CollectiveCall& call, int nranks, std::span<const void* const> inputs, const void* output,
                       const RankEpilogue& e) {
  const DataType t = call.dtype;
  const double tolerance = std::ldexp(1.0, -mantissa_bits(t)) + std::ldexp(1.0, -20);
  std::vector<Value> in(nranks);
  std::vector<double> sum(call.hidden);
  uint64_t wrong = 0;
  for (uint64_t row = 0; row < call.count; row += call.hidden) {
    double squares = 0;
    for (uint64_t j = 0; j < call.hidden; ++j) {
      for (int p = 0; p < nranks; ++p) in[p] = load(t, inputs[p], row + j);
      sum[j] = reduced_exactly(call.op, nranks, in.data(), nranks) + load(t, e.residual, row + j).f;
      squares += sum[j] * sum[j];
      if (e.residual_out != nullptr) wrong += load(t, e.residual_out, row + j).f != sum[j];
    }
    const double scale = 1 / std::sqrt(squares / static_cast<double>(call.hidden) + call.eps);
    for (uint64_t j = 0; j < call.hidden; ++j) {
      const double want = sum[j] * scale * load(t, e.weight, j).f, got = load(t, output, row + j).f;
      wrong += !(std::fabs(got - want) <= tolerance * std::fabs(want));
      if (e.quant_out != nullptr)
        wrong += e4m3_misquantised(static_cast<float>(got) * (1.0f / *call.quant_scale),
                                   static_cast<const uint8_t*>(e.quant_out)[row + j]);
    }
  }
  return wrong;
}

}  // namespace

uint64_t count_wrong(const CollectiveCall& call, int nranks, int rank, std::span<const void* const> inputs,
                     const void* output, const RankEpilogue& epilogue) {
  if (call.epilogue == Epilogue::ResidualRmsNorm) return rmsnorm_wrong(call, nranks, inputs, output, epilogue);
  const void* residual = epilogue.residual;
  const DataType t = call.dtype;
  const uint64_t n = call.count;
  uint64_t wrong = 0;
  std::vector<Value> in(nranks);
  switch (call.collective) {
    case Collective::AllReduce:
    case Collective::Reduce:
    case Collective::ReduceScatter: {
      if (call.collective == Collective::Reduce && rank != call.root) return 0;
      const uint64_t offset = call.collective == Collective::ReduceScatter ? rank * n : 0;
      for (uint64_t i = 0; i < n; ++i) {
        for (int p = 0; p < nranks; ++p) in[p] = load(t, inputs[p], offset + i);
        const Value res = residual != nullptr ? load(t, residual, i) : Value{};
        wrong += !reduced_matches(t, call.op, nranks, in.data(), nranks, load(t, output, i),
                                  residual != nullptr ? &res : nullptr);
      }
      break;
    }
    case Collective::AllGather:
      for (int p = 0; p < nranks; ++p)
        for (uint64_t i = 0; i < n; ++i)
          wrong += !same_element(t, load(t, inputs[p], i), load(t, output, p * n + i));
      break;
    case Collective::Broadcast:
      for (uint64_t i = 0; i < n; ++i)
        wrong += !same_element(t, load(t, inputs[call.root], i), load(t, output, i));
      break;
    case Collective::AllToAll:  // block p of the output is block `rank` of rank p's input
      for (int p = 0; p < nranks; ++p)
        for (uint64_t i = 0; i < n; ++i)
          wrong += !same_element(t, load(t, inputs[p], rank * n + i), load(t, output, p * n + i));
      break;
  }
  return wrong;
}

HostCollectiveBuffers::HostCollectiveBuffers(const CollectiveCall& shape, int nranks, bool in_place, size_t offset)
    : call_(shape), nranks_(nranks) {
  const auto [in_bytes, out_bytes] = checked_call_bytes(shape, nranks);  // before sizing anything
  const uint64_t block = shape.count * data_type_size(shape.dtype);
  for (int r = 0; r < nranks; ++r) {
    const uint64_t bytes = offset + (in_place ? std::max(in_bytes, out_bytes) : in_bytes + out_bytes);
    storage_.emplace_back(bytes / 8 + 1);
    auto* base = reinterpret_cast<unsigned char*>(storage_.back().data()) + offset;
    unsigned char* send = base;
    unsigned char* recv = in_place ? base : base + in_bytes;
    if (in_place && shape.collective == Collective::ReduceScatter) recv = base + r * block;
    if (in_place && shape.collective == Collective::AllGather) send = base + r * block;
    send_.push_back(send);
    recv_.push_back(recv);
  }
  call_.send = send_;
  call_.recv = recv_;
  if (shape.epilogue != Epilogue::None) {
    auto buffer = [&](uint64_t bytes) {
      epilogue_storage_.emplace_back((offset + bytes) / 8 + 1);
      return reinterpret_cast<unsigned char*>(epilogue_storage_.back().data()) + offset;
    };
    const bool norm = shape.epilogue == Epilogue::ResidualRmsNorm;
    for (int r = 0; r < nranks; ++r) {
      residual_.push_back(buffer(block));
      if (norm) {
        weight_.push_back(buffer(shape.hidden * data_type_size(shape.dtype)));
        residual_out_.push_back(buffer(block));
        if (shape.quant_scale) quant_out_.push_back(buffer(shape.count));
      }
    }
    call_.residual = residual_;
    call_.weight = weight_;
    call_.residual_out = residual_out_;
    call_.quant_out = quant_out_;
  }
}

void HostCollectiveBuffers::prepare(uint64_t salt) {
  const uint64_t elem = data_type_size(call_.dtype);
  inputs_.assign(nranks_, {});
  for (int r = 0; r < nranks_; ++r) {
    poison(call_.dtype, recv_bytes(call_, nranks_) / elem, recv_[r]);
    fill_input(call_.dtype, r, salt, send_bytes(call_, nranks_) / elem, const_cast<void*>(send_[r]));
    const auto* in = static_cast<const unsigned char*>(send_[r]);
    inputs_[r].assign(in, in + send_bytes(call_, nranks_));
  }
  for (const void* residual : residual_)  // rank 0's values of a later salt, on every rank
    fill_input(call_.dtype, 0, salt + 0x5eed, call_.count, const_cast<void*>(residual));
  for (const void* weight : weight_) fill_input(call_.dtype, 1, salt + 0x5eed, call_.hidden, const_cast<void*>(weight));
  for (void* out : residual_out_) poison(call_.dtype, call_.count, out);
  for (void* out : quant_out_) poison(DataType::F8E4M3, call_.count, out);
}

uint64_t HostCollectiveBuffers::wrong_elements() const {
  std::vector<const void*> inputs;
  for (const auto& in : inputs_) inputs.push_back(in.data());
  uint64_t wrong = 0;
  for (int r = 0; r < nranks_; ++r) {
    RankEpilogue e;
    if (!residual_.empty()) e.residual = residual_[r];
    if (!weight_.empty()) {
      e.weight = weight_[r];
      e.residual_out = residual_out_[r];
    }
    if (!quant_out_.empty()) e.quant_out = quant_out_[r];
    wrong += count_wrong(call_, nranks_, r, inputs, recv_[r], e);
  }
  return wrong;
}

}  // namespace ccc
