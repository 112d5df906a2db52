// Software fp16 / bf16 conversions: exhaustive round trips and a cross-check against F16C.
#include <cmath>
#include <cstring>
#include <random>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/float16.h"

namespace turbokv::codec {
namespace {

TEST(Float16Test, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(HalfToFloat(static_cast<uint16_t>(h))));
      continue;
    }
    EXPECT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Float16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);                      // ties to even: infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -26)), 0x0001);         // 1.5 * 2^-25 -> 2^-24
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even (1.0)
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie -> even (1 + 2^-9)
  EXPECT_EQ(FloatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(BitsFloat(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(BitsFloat(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(BFloat16ToFloat(0xC040), -3.0f);
}

#if defined(__x86_64__)
TEST(Float16Test, MatchesF16cOnRandomFloats) {
  if (DetectCpuIsa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU has no AVX2/F16C";
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns over the whole finite range and a dense band around fp16's range.
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x807FFFFFu) | ((100u + (bits >> 24) % 60u) << 23);
    const float f = BitsFloat(bits);
    if (std::isnan(f)) continue;
    const uint16_t want = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(FloatToHalf(f), want) << std::hexfloat << f;
  }
}
#endif

}  // namespace
}  // namespace turbokv::codec
