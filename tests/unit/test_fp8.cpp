// The prelude's fp8 conversions (device/ccc_data.h, Fp8), which host emulation and the GPU both
// run, against the CUDA toolkit's own (cuda_fp8.h, __NV_SATFINITE: what NCCL's fp8 reductions
// use): every fp8 value to float, and float to fp8 over a sweep of every float bit pattern's
// neighbourhood that matters (every 61st pattern, plus the edges: zero, subnormals, the largest
// finite values and their rounding boundaries, infinities, NaN).
#include <gtest/gtest.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../../device/ccc_device.h"

namespace {

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool same(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

uint8_t toolkit_from(float f, __nv_fp8_interpretation_t kind) {
  return __nv_cvt_float_to_fp8(f, __NV_SATFINITE, kind);
}

TEST(Fp8, EveryValueConvertsToFloatAsTheToolkitDoes) {
  for (int b = 0; b < 256; ++b) {
    __nv_fp8_e4m3 e4m3;
    e4m3.__x = static_cast<__nv_fp8_storage_t>(b);
    __nv_fp8_e5m2 e5m2;
    e5m2.__x = static_cast<__nv_fp8_storage_t>(b);
    EXPECT_TRUE(same(ccc::Fp8E4M3::to_float(static_cast<unsigned char>(b)), static_cast<float>(e4m3))) << b;
    EXPECT_TRUE(same(ccc::Fp8E5M2::to_float(static_cast<unsigned char>(b)), static_cast<float>(e5m2))) << b;
  }
}

TEST(Fp8, FloatsRoundToNearestEvenAndSaturateAsTheToolkitDoes) {
  std::vector<uint32_t> patterns;
  for (uint64_t u = 0; u < (1ull << 32); u += 61) patterns.push_back(static_cast<uint32_t>(u));
  for (float edge : {0.f, 448.f, 464.f, 465.f, 480.f, 57344.f, 61440.f, 61441.f, 1e30f, INFINITY, 0x1p-9f, 0x1p-10f,
                     0x1.8p-10f, 0x1p-16f, 0x1p-17f, 0x1.8p-17f, 0x1p-6f, 0x1p-14f, 1.0625f, 1.1875f, 1.125f, NAN}) {
    uint32_t u;
    std::memcpy(&u, &edge, 4);
    for (uint32_t sign : {0u, 0x80000000u})
      for (int d = -2; d <= 2; ++d) patterns.push_back((u ^ sign) + static_cast<uint32_t>(d));
  }
  int wrong = 0;
  for (uint32_t u : patterns) {
    const float f = as_float(u);
    const uint8_t want4 = toolkit_from(f, __NV_E4M3), want5 = toolkit_from(f, __NV_E5M2);
    const uint8_t got4 = ccc::Fp8E4M3::from_float(f), got5 = ccc::Fp8E5M2::from_float(f);
    // NaN: any NaN encoding will do (the toolkit and ccc both give 0x7f, sign aside).
    const bool nan = std::isnan(f);
    if (nan ? (got4 & 0x7f) != 0x7f : got4 != want4) {
      if (++wrong <= 5) ADD_FAILURE() << std::hex << "e4m3 of 0x" << u << ": 0x" << +got4 << ", toolkit 0x" << +want4;
    }
    if (nan ? (got5 & 0x7f) <= 0x7c : got5 != want5) {
      if (++wrong <= 5) ADD_FAILURE() << std::hex << "e5m2 of 0x" << u << ": 0x" << +got5 << ", toolkit 0x" << +want5;
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(ccc::Fp8E4M3::from_float(1000.f), 0x7e);  // 448, the largest finite
  EXPECT_EQ(ccc::Fp8E5M2::from_float(-INFINITY), 0xfb);  // -57344
}

}  // namespace
