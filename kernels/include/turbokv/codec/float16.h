// Exact float <-> fp16 / bf16 conversions, identical on the host and in CUDA code.
// FloatToHalf and FloatToBFloat16 round to nearest even (as F16C vcvtps2ph and CUDA's
// __float2half_rn / __float2bfloat16_rn); HalfToFloat and BFloat16ToFloat are exact.
#ifndef TURBOKV_CODEC_FLOAT16_H_
#define TURBOKV_CODEC_FLOAT16_H_

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define TURBOKV_HD __host__ __device__ __forceinline__
#else
#define TURBOKV_HD inline
#endif

namespace turbokv::codec {

TURBOKV_HD uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
TURBOKV_HD float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
// IEEE binary16 -> binary32, exact (subnormals included).
TURBOKV_HD float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return BitsFloat(sign);
  // Subnormal half: value = mant * 2^-24, exactly representable in binary32.
  int e = -1;
  do {
    mant <<= 1;
    ++e;
  } while ((mant & 0x400u) == 0);
  mant &= 0x3FFu;
  return BitsFloat(sign | (static_cast<uint32_t>(112 - e) << 23) | (mant << 13));
}

// binary32 -> binary16, round to nearest even (as F16C's vcvtps2ph with imm 0 and CUDA's
// __float2half_rn). Overflow gives inf; callers check finiteness where it matters.
TURBOKV_HD uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  }
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
  if (ax < 0x38800000u) {               // below the smallest normal half (2^-14): subnormal or zero
    if (ax < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 ties to even zero)
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24 ; result = m >> (shift) with rounding
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ax - 0x38000000u;  // rebias exponent 127 -> 15 (in the float's bit layout)
  const uint32_t rem = r & 0x1FFFu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

TURBOKV_HD float BFloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

// binary32 -> bfloat16, round to nearest even (finite inputs).
TURBOKV_HD uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_FLOAT16_H_
