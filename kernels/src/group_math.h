// Per-group TurboQuant math shared by the CPU backends and the CUDA kernels
// (compiled by g++ and nvcc). Every function here is the *definition* of a step of the
// codec: the AVX2 path and the CUDA kernels perform exactly these float operations in exactly
// this order, so all backends produce identical packed bytes and identical decoded values.
// No fused multiply-add: the build uses -ffp-contract=off (g++) and -fmad=false (nvcc).
//
// References: docs/architecture.md, "The codec"; kernels/FORMAT.md; TurboQuant (Zandieh, Daliri,
// Hadian, Mirrokni 2025, arXiv:2504.19874) Algorithm 1 (MSE quantizer) and QJL (Zandieh, Daliri,
// Han 2024, arXiv:2406.03482) for the 1-bit residual.
#ifndef TURBOKV_KERNELS_SRC_GROUP_MATH_H_
#define TURBOKV_KERNELS_SRC_GROUP_MATH_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "turbokv/codec/float16.h"

namespace turbokv::codec::internal {

using ::turbokv::codec::BFloat16ToFloat;
using ::turbokv::codec::BitsFloat;
using ::turbokv::codec::FloatBits;
using ::turbokv::codec::FloatToBFloat16;
using ::turbokv::codec::FloatToHalf;
using ::turbokv::codec::HalfToFloat;

inline constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ULL;
inline constexpr int kMaxGroupSize = 256;
// sqrt(pi / 2): the QJL dequantization constant (QJL, Lemma 3.2).
inline constexpr double kSqrtHalfPi = 1.2533141373155002512;

TURBOKV_HD uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

TURBOKV_HD uint64_t SectionKey(uint64_t seed, int layer, int kv) {
  return Mix64(seed ^ Mix64((static_cast<uint64_t>(layer) << 1) | static_cast<uint64_t>(kv)));
}

// True when coordinate j of the head vector gets sign −1.
TURBOKV_HD bool SignNegative(uint64_t key, int j) {
  return (Mix64(key + static_cast<uint64_t>(j + 1) * kSplitMixGamma) >> 63) != 0;
}

TURBOKV_HD float FlipSign(float f, bool negative) {
  return negative ? BitsFloat(FloatBits(f) ^ 0x80000000u) : f;
}

TURBOKV_HD bool IsFiniteFloat(float f) { return (FloatBits(f) & 0x7F800000u) != 0x7F800000u; }

// In-place unnormalized fast Walsh–Hadamard transform in Sylvester (natural) order:
// for h = 1, 2, 4, ..., g/2 and every pair (i, i + h) inside blocks of 2h:
// (a, b) <- (a + b, a − b).
TURBOKV_HD void FwhtInPlace(float* v, int g) {
  for (int h = 1; h < g; h <<= 1) {
    for (int i = 0; i < g; i += h << 1) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j];
        const float b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

// 1/sqrt(g) rounded to fp32: the orthonormal Hadamard scale.
TURBOKV_HD float HadamardScale(int g) {
  switch (g) {
    case 8:
      return 0.35355339059327376220f;
    case 16:
      return 0.25f;
    case 32:
      return 0.17677669529663688110f;
    case 64:
      return 0.125f;
    case 128:
      return 0.088388347648318440550f;
    case 256:
      return 0.0625f;
    default:
      return 0.0f;
  }
}

// Index of the nearest level: #{i : y > thresholds[i]}, by branch-free binary search over the
// 2^bits − 1 ascending thresholds. Ties (y == threshold) go to the lower level.
TURBOKV_HD int NearestLevel(float y, const float* thresholds, int bits) {
  int idx = 0;
  for (int step = 1 << (bits - 1); step >= 1; step >>= 1) {
    if (y > thresholds[idx + step - 1]) idx += step;
  }
  return idx;
}

// Bit-packing: indices of `bits` bits each, little-endian, LSB first, contiguous. A group of
// g >= 8 indices always fills whole bytes (g * bits is a multiple of 8).
TURBOKV_HD void PackIndices(const uint8_t* idx, int count, int bits, uint8_t* out) {
  if (bits == 8) {
    for (int i = 0; i < count; ++i) out[i] = idx[i];
    return;
  }
  uint32_t acc = 0;
  int nbits = 0;
  int o = 0;
  for (int i = 0; i < count; ++i) {
    acc |= static_cast<uint32_t>(idx[i]) << nbits;
    nbits += bits;
    while (nbits >= 8) {
      out[o++] = static_cast<uint8_t>(acc & 0xFFu);
      acc >>= 8;
      nbits -= 8;
    }
  }
}

TURBOKV_HD void UnpackIndices(const uint8_t* in, int count, int bits, uint8_t* idx) {
  if (bits == 8) {
    for (int i = 0; i < count; ++i) idx[i] = in[i];
    return;
  }
  const uint32_t mask = (1u << bits) - 1u;
  uint32_t acc = 0;
  int nbits = 0;
  int p = 0;
  for (int i = 0; i < count; ++i) {
    while (nbits < bits) {
      acc |= static_cast<uint32_t>(in[p++]) << nbits;
      nbits += 8;
    }
    idx[i] = static_cast<uint8_t>(acc & mask);
    acc >>= bits;
    nbits -= bits;
  }
}

// Sum of squares in index order (no pairwise tree, no FMA): the canonical reduction.
TURBOKV_HD float SumSquares(const float* v, int g) {
  float s = 0.0f;
  for (int i = 0; i < g; ++i) s = s + v[i] * v[i];
  return s;
}

// Parameters of one section's quantizer, shared by encode and decode.
struct GroupParams {
  int g = 32;                         // group size (power of two, 8..256)
  int bits = 4;                       // 1..8
  const float* levels = nullptr;      // [2^bits]
  const float* thresholds = nullptr;  // [2^bits − 1]
  bool norm_correction = true;
  const float* qjl = nullptr;  // [g][g] row-major Gaussian matrix S, or null
  float qjl_coef = 0.0f;       // (float)(sqrt(pi/2) / g)
  uint64_t sign_key = 0;
};

// What one encoded group is made of, before it is laid out in the section.
struct EncodedGroup {
  uint16_t scale = 0;     // fp16: n / ||y_hat'|| (norm correction) or n
  uint16_t residual = 0;  // fp16 ||r|| (QJL only)
  uint8_t idx[kMaxGroupSize];
  uint8_t qjl_bits[kMaxGroupSize / 8];
};

// y_hat' (rotated domain) of a group: levels plus the QJL correction when enabled.
//   y_hat'_c = levels[idx_c] + coef * ||r|| * Σ_i S[i][c] * s_i,   s_i = ±1 from the QJL bits
// The sum runs over i in increasing order.
TURBOKV_HD void ReconstructRotated(const GroupParams& p, const uint8_t* idx,
                                   const uint8_t* qjl_bits, float residual_norm, float* y_hat) {
  for (int c = 0; c < p.g; ++c) y_hat[c] = p.levels[idx[c]];
  if (p.qjl == nullptr) return;
  const float k = p.qjl_coef * residual_norm;
  for (int c = 0; c < p.g; ++c) {
    float acc = 0.0f;
    for (int i = 0; i < p.g; ++i) {
      const float s = p.qjl[i * p.g + c];
      acc = acc + (((qjl_bits[i >> 3] >> (i & 7)) & 1u) ? s : -s);
    }
    y_hat[c] = y_hat[c] + k * acc;
  }
}

// Wide scales (FORMAT.md, "Wide scales"). A group whose fp16 scale would not be finite (its
// norm is beyond fp16's range: 32 values of 12,000 have norm 67,882) is encoded from
// x · 2^-72 instead, and its scale is stored as 0x8000 | bf16(scale'), meaning
// bf16(scale') · 2^72. Scales are never negative, so the sign bit of today's fp16 scales is
// free; groups that fit fp16 keep exactly the bytes they had. 2^-72 keeps Σ x'² finite for any
// finite fp32 input (|x'| < 2^56, g <= 256) and both multiplies by powers of two are exact
// (up to underflow of values 2^-72 below the group's largest, which then hardly matter).
inline constexpr uint16_t kWideScaleBit = 0x8000u;
TURBOKV_HD float WideDown() { return 0x1p-72f; }
TURBOKV_HD float WideUp() { return 0x1p72f; }
TURBOKV_HD bool IsWideScale(uint16_t scale_h) { return (scale_h & kWideScaleBit) != 0; }
// The fp32 value of a stored scale before the 2^72 of a wide one.
TURBOKV_HD float ScaleBitsToFloat(uint16_t scale_h) {
  return IsWideScale(scale_h) ? BFloat16ToFloat(static_cast<uint16_t>(scale_h & 0x7FFFu))
                              : HalfToFloat(scale_h);
}
// Largest finite value of the output dtype (fp16 65504, bf16 0x7F7F, fp32 FLT_MAX): a decoded
// value of a wide group is clamped to ±this before the final rounding, so a wide group always
// decodes to finite values (a coordinate reconstructed slightly above a value near the dtype's
// maximum would otherwise round to infinity).
inline constexpr float kMaxHalf = 65504.0f;
inline constexpr float kMaxBFloat16 = 0x1.fep127f;
inline constexpr float kMaxFloat = 0x1.fffffep127f;
TURBOKV_HD float ClampMagnitude(float v, float limit) {
  return v > limit ? limit : (v < -limit ? -limit : v);
}

// Steps 1-5 of EncodeGroup up to the fp32 scale (returned in *scale; 0 for an all-zero group,
// whose indices, residual and sign bits are then zero too).
TURBOKV_HD void EncodeGroupSteps(const GroupParams& p, const float* x, int sign_offset,
                                 EncodedGroup* out, float* scale_out) {
  float y[kMaxGroupSize];
  const int g = p.g;
  const float ss = SumSquares(x, g);
  for (int j = 0; j < g; ++j) y[j] = FlipSign(x[j], SignNegative(p.sign_key, sign_offset + j));
  FwhtInPlace(y, g);
  const float n = sqrtf(ss);
  const float c = HadamardScale(g) / n;
  if (ss == 0.0f || !IsFiniteFloat(c)) {
    *scale_out = 0.0f;
    out->residual = 0;
    for (int i = 0; i < g; ++i) out->idx[i] = 0;
    for (int i = 0; i < g / 8; ++i) out->qjl_bits[i] = 0;
    return;
  }
  for (int j = 0; j < g; ++j) y[j] = y[j] * c;
  for (int j = 0; j < g; ++j)
    out->idx[j] = static_cast<uint8_t>(NearestLevel(y[j], p.thresholds, p.bits));

  float residual_norm = 0.0f;
  if (p.qjl != nullptr) {
    float r[kMaxGroupSize];
    for (int j = 0; j < g; ++j) r[j] = y[j] - p.levels[out->idx[j]];
    for (int i = 0; i < g / 8; ++i) out->qjl_bits[i] = 0;
    for (int i = 0; i < g; ++i) {
      float acc = 0.0f;
      for (int c = 0; c < g; ++c) acc = acc + p.qjl[i * g + c] * r[c];
      if (acc >= 0.0f)
        out->qjl_bits[i >> 3] = static_cast<uint8_t>(out->qjl_bits[i >> 3] | (1u << (i & 7)));
    }
    out->residual = FloatToHalf(sqrtf(SumSquares(r, g)));
    residual_norm = HalfToFloat(out->residual);
  } else {
    out->residual = 0;
  }

  float scale = n;
  if (p.norm_correction) {
    float y_hat[kMaxGroupSize];
    ReconstructRotated(p, out->idx, out->qjl_bits, residual_norm, y_hat);
    const float yn = sqrtf(SumSquares(y_hat, g));
    scale = n / yn;
  }
  *scale_out = scale;
}

// Encodes one group of g source values already converted to float (all finite; the caller
// checks). `sign_offset` is the index of the group's first coordinate in the head vector.
// Returns false when not even a wide scale is finite (only possible for a degenerate
// reconstruction; the caller reports InvalidArgument).
//   1. ss = Σ x_j² (index order); w = FWHT(D·x) (signs first, unnormalized transform).
//   2. n = sqrt(ss); c = (1/sqrt g) / n; ss == 0 or c not finite -> all-zero group:
//      scale 0, indices 0 (decodes to exact zeros).
//   3. y_j = w_j · c (the rotated unit vector); idx_j = NearestLevel(y_j).
//   4. QJL: r = y − levels[idx]; bit_i = (Σ_c S[i][c] r_c) >= 0; residual = fp16(||r||).
//   5. scale = n / ||y_hat'|| with norm correction (y_hat' uses the fp16 residual), else n;
//      stored as fp16(scale) when that is finite, else the group is encoded again from
//      x · 2^-72 and stored with a wide scale 0x8000 | bf16(scale').
// Normalizing after the transform (one multiply by c) is the same rotation as normalizing
// first; the order is fixed here because it decides the exact float results.
TURBOKV_HD bool EncodeGroup(const GroupParams& p, const float* x, int sign_offset,
                            EncodedGroup* out) {
  float scale;
  EncodeGroupSteps(p, x, sign_offset, out, &scale);
  out->scale = FloatToHalf(scale);
  if ((out->scale & 0x7C00u) != 0x7C00u) return true;
  float xs[kMaxGroupSize];
  for (int j = 0; j < p.g; ++j) xs[j] = x[j] * WideDown();
  EncodeGroupSteps(p, xs, sign_offset, out, &scale);
  const uint16_t b = FloatToBFloat16(scale);
  if ((b & 0x7F80u) == 0x7F80u) return false;
  out->scale = b == 0 ? 0 : static_cast<uint16_t>(kWideScaleBit | b);
  return true;
}

// Decodes one group into x (floats before the final cast to the output dtype):
//   z = FWHT(y_hat'); m = scale · (1/sqrt g); x_j = ±(z_j · m); for a wide scale
//   x_j = ±clamp((z_j · m) · 2^72, limit) with `limit` the output dtype's largest finite value.
TURBOKV_HD void DecodeGroup(const GroupParams& p, const uint8_t* idx, const uint8_t* qjl_bits,
                            uint16_t scale_h, uint16_t residual_h, int sign_offset, float limit,
                            float* x) {
  const int g = p.g;
  ReconstructRotated(p, idx, qjl_bits, HalfToFloat(residual_h), x);
  FwhtInPlace(x, g);
  const float m = ScaleBitsToFloat(scale_h) * HadamardScale(g);
  if (!IsWideScale(scale_h)) {
    for (int j = 0; j < g; ++j)
      x[j] = FlipSign(x[j] * m, SignNegative(p.sign_key, sign_offset + j));
    return;
  }
  for (int j = 0; j < g; ++j) {
    x[j] = FlipSign(ClampMagnitude((x[j] * m) * WideUp(), limit),
                    SignNegative(p.sign_key, sign_offset + j));
  }
}

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_SRC_GROUP_MATH_H_
