// Internal: AVX2 helpers shared by the SIMD translation units (section_avx2.cc,
// section_avx512.cc). Everything is in an unnamed namespace on purpose: each TU is compiled
// with its own target flags, and a shared inline definition could hand AVX-512 code to a CPU
// that only has AVX2.
#ifndef TURBOKV_KERNELS_SRC_SIMD_AVX2_COMMON_H_
#define TURBOKV_KERNELS_SRC_SIMD_AVX2_COMMON_H_

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "group_math.h"
#include "turbokv/codec/types.h"

namespace turbokv::codec::internal {
namespace {

// The helpers work on register arrays; inlining them lets the compiler keep those arrays in
// registers (profiles showed the FWHT stages as out-of-line calls otherwise).
#define TURBOKV_SIMD_INLINE inline __attribute__((always_inline))

constexpr int kLanes = 8;

TURBOKV_SIMD_INLINE void Transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
  const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
  const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
  const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Eight consecutive source values as floats (exact conversions).
TURBOKV_SIMD_INLINE __m256 LoadRow(const uint8_t* src, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kFloat16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
    case DType::kBFloat16: {
      const __m256i w =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    case DType::kFloat32:
    default:
      return _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i));
  }
}

// Round-to-nearest-even float -> bf16 for finite values, as FloatToBFloat16.
TURBOKV_SIMD_INLINE __m128i ToBFloat16(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m128i lo = _mm256_castsi256_si128(r);
  const __m128i hi = _mm256_extracti128_si256(r, 1);
  return _mm_packus_epi32(lo, hi);  // values are < 65536: no saturation
}

TURBOKV_SIMD_INLINE void StoreRow(uint8_t* out, DType dtype, size_t i, __m256 v) {
  switch (dtype) {
    case DType::kFloat16:
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                       _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
      return;
    case DType::kBFloat16:
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), ToBFloat16(v));
      return;
    case DType::kFloat32:
      _mm256_storeu_ps(reinterpret_cast<float*>(out + 4 * i), v);
      return;
  }
}

// GCC/Clang vector extensions: + and - work on __m256 and __m512 alike.
template <typename V>
TURBOKV_SIMD_INLINE void Butterfly(V& a, V& b) {
  const V s = a + b;
  b = a - b;
  a = s;
}

// FWHT stages h = 1, 2, 4 on one tile of 8 consecutive coordinates (registers).
template <typename V>
TURBOKV_SIMD_INLINE void FwhtStageA(V v[8]) {
  for (int h = 1; h < 8; h <<= 1) {
    for (int i = 0; i < 8; i += h << 1) {
      for (int j = i; j < i + h; ++j) Butterfly(v[j], v[j + h]);
    }
  }
}

// FWHT stages h = 8 .. g/2: they pair coordinates of the same column (j mod 8), so each of the
// 8 columns is transformed on its own, in registers. Together with stage A this is exactly
// FwhtInPlace: every butterfly sees the same operands.
// `then(j, z)` maps each finished coordinate before it is stored (elementwise, so fusing it
// here changes no result).
template <int kG, typename V, typename Then>
TURBOKV_SIMD_INLINE void FwhtStageB(V* x, Then then) {
  constexpr int g = kG;
  constexpr int tiles = g / 8;
  for (int c = 0; c < 8; ++c) {
    V r[kMaxGroupSize / 8];
    for (int t = 0; t < tiles; ++t) r[t] = x[t * 8 + c];
    for (int h = 1; h < tiles; h <<= 1) {
      for (int i = 0; i < tiles; i += h << 1) {
        for (int j = i; j < i + h; ++j) Butterfly(r[j], r[j + h]);
      }
    }
    for (int t = 0; t < tiles; ++t) x[t * 8 + c] = then(t * 8 + c, r[t]);
  }
}

template <int kG, typename V>
TURBOKV_SIMD_INLINE void FwhtStageB(V* x) {
  if constexpr (kG > 8) FwhtStageB<kG>(x, [](int, V z) { return z; });
}

// Calls fn(integral_constant bits, integral_constant g) for the supported combinations; false
// for anything else.
template <typename Fn>
bool DispatchGroup(int g, Fn fn) {
  switch (g) {
    case 8:
      return fn(std::integral_constant<int, 8>());
    case 16:
      return fn(std::integral_constant<int, 16>());
    case 32:
      return fn(std::integral_constant<int, 32>());
    case 64:
      return fn(std::integral_constant<int, 64>());
    case 128:
      return fn(std::integral_constant<int, 128>());
    case 256:
      return fn(std::integral_constant<int, 256>());
    default:
      return false;
  }
}

template <typename Fn>
bool DispatchBitsAndGroup(int bits, int g, Fn fn) {
  auto with_bits = [&](auto b) { return DispatchGroup(g, [&](auto gc) { return fn(b, gc); }); };
  switch (bits) {
    case 1:
      return with_bits(std::integral_constant<int, 1>());
    case 2:
      return with_bits(std::integral_constant<int, 2>());
    case 3:
      return with_bits(std::integral_constant<int, 3>());
    case 4:
      return with_bits(std::integral_constant<int, 4>());
    case 5:
      return with_bits(std::integral_constant<int, 5>());
    case 6:
      return with_bits(std::integral_constant<int, 6>());
    case 8:
      return with_bits(std::integral_constant<int, 8>());
    default:
      return false;
  }
}

}  // namespace
}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_SRC_SIMD_AVX2_COMMON_H_
