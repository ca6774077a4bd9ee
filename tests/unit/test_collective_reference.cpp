#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "collective_reference.h"
#include "../../device/ccc_device.h"

using namespace ccc;

namespace {

template <typename T>
std::vector<std::vector<T>> inputs(DataType t, int nranks, uint64_t elems) {
  std::vector<std::vector<T>> in(nranks, std::vector<T>(elems));
  for (int r = 0; r < nranks; ++r) fill_input(t, r, 7, elems, in[r].data());
  return in;
}

template <typename T>
std::vector<const void*> pointers(const std::vector<std::vector<T>>& v) {
  std::vector<const void*> p;
  for (const auto& x : v) p.push_back(x.data());
  return p;
}

}  // namespace

TEST(CollectiveReference, InputsAreSmallAndVaried) {
  const auto f = inputs<float>(DataType::F32, 2, 1000);
  int distinct_signs = 0;
  for (float v : f[0]) {
    EXPECT_TRUE(v == 0.5f || v == 1 || v == 2 || v == -0.5f || v == -1 || v == -2) << v;
    distinct_signs += v < 0;
  }
  EXPECT_GT(distinct_signs, 300);
  EXPECT_NE(f[0], f[1]) << "ranks differ";
  const auto i = inputs<int8_t>(DataType::I8, 1, 1000);
  for (int8_t v : i[0]) EXPECT_LE(std::abs(v), 7);
}

TEST(CollectiveReference, AllReduceSumOfInt32) {
  const int n = 3;
  const uint64_t count = 257;
  const auto in = inputs<int32_t>(DataType::I32, n, count);
  std::vector<int32_t> out(count);
  for (uint64_t i = 0; i < count; ++i) out[i] = in[0][i] + in[1][i] + in[2][i];
  CollectiveCall call;
  call.count = count;
  call.dtype = DataType::I32;
  const auto p = pointers(in);
  EXPECT_EQ(count_wrong(call, n, 1, p, out.data()), 0u);
  out[100] += 1;
  EXPECT_EQ(count_wrong(call, n, 1, p, out.data()), 1u);
  poison(DataType::I32, count, out.data());
  EXPECT_EQ(count_wrong(call, n, 1, p, out.data()), count);
  call.op = ReduceOp::Max;
  for (uint64_t i = 0; i < count; ++i) out[i] = std::max({in[0][i], in[1][i], in[2][i]});
  EXPECT_EQ(count_wrong(call, n, 0, p, out.data()), 0u);
}

TEST(CollectiveReference, AvgAllowsOneRoundingOfTheDivision) {
  const int n = 3;
  const auto in = inputs<float>(DataType::F32, n, 64);
  std::vector<float> out(64);
  for (int i = 0; i < 64; ++i) out[i] = (in[0][i] + in[1][i] + in[2][i]) * (1.0f / 3);
  CollectiveCall call;
  call.count = 64;
  call.op = ReduceOp::Avg;
  EXPECT_EQ(count_wrong(call, n, 0, pointers(in), out.data()), 0u);
  poison(DataType::F32, 64, out.data());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(count_wrong(call, n, 0, pointers(in), out.data()), 64u);
}

TEST(CollectiveReference, BlockLayoutsOfScatterAndGather) {
  const int n = 2;
  const uint64_t count = 5;
  const auto in = inputs<uint8_t>(DataType::U8, n, n * count);
  CollectiveCall rs;
  rs.collective = Collective::ReduceScatter;
  rs.count = count;
  rs.dtype = DataType::U8;
  std::vector<uint8_t> out(count);
  for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<uint8_t>(in[0][count + i] + in[1][count + i]);
  EXPECT_EQ(count_wrong(rs, n, 1, pointers(in), out.data()), 0u);
  EXPECT_GT(count_wrong(rs, n, 0, pointers(in), out.data()), 0u) << "rank 0's block differs";
  CollectiveCall ag = rs;
  ag.collective = Collective::AllGather;
  std::vector<uint8_t> gathered(n * count);
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < count; ++i) gathered[p * count + i] = in[p][i];
  EXPECT_EQ(count_wrong(ag, n, 0, pointers(in), gathered.data()), 0u);
}

// fp8 inputs are -1, 0 and 1, so a sum is exact, in any order, while no partial sum passes the
// largest exact integer (e5m2: 8); past it, each of the kernel's roundings is allowed for.
TEST(CollectiveReference, Fp8SumsAreExactWhereTheyCanBe) {
  for (const auto& [t, n] : {std::pair(DataType::F8E5M2, 8), std::pair(DataType::F8E4M3, 8), std::pair(DataType::F8E5M2, 13)}) {
    const uint64_t count = 301;
    const auto in = inputs<uint8_t>(t, n, count);
    auto to = [&](uint8_t b) { return t == DataType::F8E5M2 ? ccc::Fp8E5M2::to_float(b) : ccc::Fp8E4M3::to_float(b); };
    auto from = [&](float f) { return t == DataType::F8E5M2 ? ccc::Fp8E5M2::from_float(f) : ccc::Fp8E4M3::from_float(f); };
    std::vector<uint8_t> out(count);
    int distinct = 0;
    for (uint64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += to(in[r][i]);
      out[i] = from(sum);
      distinct += std::fabs(to(in[0][i])) == 1;
    }
    EXPECT_GT(distinct, 150) << "inputs are -1, 0 or 1, mostly not 0";
    CollectiveCall call;
    call.count = count;
    call.dtype = t;
    const auto p = pointers(in);
    EXPECT_EQ(count_wrong(call, n, 0, p, out.data()), 0u) << data_type_name(t) << " N=" << n;
    if (n <= 8) {  // exact: one contribution too many is wrong everywhere
      for (uint64_t i = 0; i < count; ++i) out[i] = from(to(out[i]) + 1);
      EXPECT_EQ(count_wrong(call, n, 0, p, out.data()), count) << data_type_name(t) << " N=" << n;
    }
    poison(t, count, out.data());
    EXPECT_EQ(count_wrong(call, n, 0, p, out.data()), count);
  }
}

// The error against double, in ulps of the element type: an allreduce summed in float and rounded
// once (one-shot) is within half an ulp; one rounded after every addition (a ring's passes) is
// not, for the narrow types; a NaN is infinitely far; integers and copies have none.
template <class T>
void expect_ulp_errors(DataType t, double rounded_per_step_above) {
  const int n = 8;
  const uint64_t count = 999;
  std::vector<std::vector<T>> in(n, std::vector<T>(count));
  for (int r = 0; r < n; ++r) fill_random(t, r, 3, count, in[r].data());
  const auto p = pointers(in);
  std::vector<T> once(count), per_step(count);
  int distinct = 0;
  for (uint64_t i = 0; i < count; ++i) {
    float sum = 0;
    T acc = in[0][i];
    for (int r = 0; r < n; ++r) {
      const float x = Num<T>::to(in[r][i]);
      sum += x;  // exact: fill_random's values are multiples of 2^-12 below 1
      EXPECT_EQ(std::fmod(x * 4096.0f, 1.0f), 0.0f);
      if (r > 0) acc = Num<T>::from(Num<T>::to(acc) + x);
    }
    distinct += Num<T>::to(in[0][i]) != Num<T>::to(in[1][i]);
    once[i] = Num<T>::from(sum);
    per_step[i] = acc;
  }
  EXPECT_GT(distinct, 900) << data_type_name(t);
  CollectiveCall call;
  call.count = count;
  call.dtype = t;
  const double e = max_ulp_error(call, n, 0, p, once.data());
  EXPECT_LE(e, 0.5) << data_type_name(t);
  EXPECT_GT(e, 0.0) << data_type_name(t) << ": the sums are not all representable";
  EXPECT_GT(max_ulp_error(call, n, 0, p, per_step.data()), rounded_per_step_above) << data_type_name(t);
  poison(t, count, once.data());
  EXPECT_EQ(max_ulp_error(call, n, 0, p, once.data()), INFINITY) << data_type_name(t);
}

// A fused allreduce's error: against the residual added to the exact sum, then the norm in
// double. bf16 outputs computed in double and rounded once are within half an ulp; one that
// leaves the residual out, or norms with the weight of the next element, is far off.
TEST(CollectiveReference, UlpErrorOfTheFusedEpilogueIsAgainstTheNormInDouble) {
  const int n = 4;
  const uint64_t hidden = 64, count = 3 * hidden;
  std::vector<std::vector<bf16>> in(n, std::vector<bf16>(count));
  for (int r = 0; r < n; ++r) fill_random(DataType::BF16, r, 3, count, in[r].data());
  std::vector<bf16> residual(count), weight(hidden);
  fill_random(DataType::BF16, n, 3, count, residual.data());
  fill_random(DataType::BF16, n + 1, 3, hidden, weight.data());
  auto fused = [&](bool with_residual, int weight_shift) {
    std::vector<bf16> out(count);
    for (uint64_t row = 0; row < count; row += hidden) {
      std::vector<double> s(hidden);
      double squares = 0;
      for (uint64_t j = 0; j < hidden; ++j) {
        for (int r = 0; r < n; ++r) s[j] += Num<bf16>::to(in[r][row + j]);
        if (with_residual) s[j] += Num<bf16>::to(residual[row + j]);
        squares += s[j] * s[j];
      }
      const double factor = 1 / std::sqrt(squares / hidden + 1e-6);
      for (uint64_t j = 0; j < hidden; ++j)
        out[row + j] = Num<bf16>::from(static_cast<float>(s[j] * factor * Num<bf16>::to(weight[(j + weight_shift) % hidden])));
    }
    return out;
  };
  CollectiveCall call;
  call.collective = Collective::AllReduce;
  call.count = count;
  call.dtype = DataType::BF16;
  call.epilogue = Epilogue::ResidualRmsNorm;
  call.hidden = hidden;
  call.eps = 1e-6f;
  const RankEpilogue e{residual.data(), weight.data()};
  const auto p = pointers(in);
  EXPECT_LE(max_ulp_error(call, n, 0, p, fused(true, 0).data(), e), 0.5);
  EXPECT_GT(max_ulp_error(call, n, 0, p, fused(false, 0).data(), e), 4);
  EXPECT_GT(max_ulp_error(call, n, 0, p, fused(true, 1).data(), e), 4);
  call.epilogue = Epilogue::Residual;  // no norm: the sum plus the residual
  std::vector<bf16> added(count);
  for (uint64_t i = 0; i < count; ++i) {
    float v = Num<bf16>::to(residual[i]);
    for (int r = 0; r < n; ++r) v += Num<bf16>::to(in[r][i]);
    added[i] = Num<bf16>::from(v);
  }
  EXPECT_LE(max_ulp_error(call, n, 0, p, added.data(), e), 0.5);
  EXPECT_GT(max_ulp_error(call, n, 0, p, in[0].data(), e), 4);
}

TEST(CollectiveReference, UlpErrorAgainstDouble) {
  expect_ulp_errors<bf16>(DataType::BF16, 1.0);
  expect_ulp_errors<f16>(DataType::F16, 0.5);
  expect_ulp_errors<f8e4m3>(DataType::F8E4M3, 1.0);
  expect_ulp_errors<f8e5m2>(DataType::F8E5M2, 1.0);

  // One element one ulp off a correctly rounded float: between half an ulp and one and a half.
  const int n = 3;
  std::vector<std::vector<float>> in(n, std::vector<float>(100));
  for (int r = 0; r < n; ++r) fill_random(DataType::F32, r, 5, 100, in[r].data());
  std::vector<float> out(100);
  for (int i = 0; i < 100; ++i) out[i] = in[0][i] + in[1][i] + in[2][i];
  CollectiveCall call;
  call.count = 100;
  call.dtype = DataType::F32;
  EXPECT_EQ(max_ulp_error(call, n, 0, pointers(in), out.data()), 0.0);
  out[42] = std::nextafter(out[42], INFINITY);
  const double e = max_ulp_error(call, n, 0, pointers(in), out.data());
  EXPECT_GE(e, 0.5);
  EXPECT_LE(e, 1.0);

  std::vector<std::vector<int32_t>> ints(n, std::vector<int32_t>(100));
  for (int r = 0; r < n; ++r) fill_random(DataType::I32, r, 5, 100, ints[r].data());
  std::vector<int32_t> wrong(100, 12345);
  call.dtype = DataType::I32;
  EXPECT_EQ(max_ulp_error(call, n, 0, pointers(ints), wrong.data()), 0.0) << "integers are counted by count_wrong";
}
