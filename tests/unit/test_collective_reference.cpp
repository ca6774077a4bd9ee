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
