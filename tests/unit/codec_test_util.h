// Helpers shared by the codec tests: random raw blocks and error measures.
#ifndef TURBOKV_TESTS_UNIT_CODEC_TEST_UTIL_H_
#define TURBOKV_TESTS_UNIT_CODEC_TEST_UTIL_H_

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/float16.h"

namespace turbokv::codec::testing_util {

inline void StoreAs(DType d, std::vector<uint8_t>& raw, size_t i, float v) {
  if (d == DType::kFloat32) {
    std::memcpy(&raw[4 * i], &v, 4);
  } else {
    const uint16_t h = d == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
    std::memcpy(&raw[2 * i], &h, 2);
  }
}

inline float LoadAs(DType d, const std::vector<uint8_t>& raw, size_t i) {
  if (d == DType::kFloat32) {
    float f;
    std::memcpy(&f, &raw[4 * i], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &raw[2 * i], 2);
  return d == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
}

// Gaussian head vectors with per-vector scales in [0.5, 8) (keys-like magnitudes).
inline std::vector<uint8_t> RandomBlock(const BlockShape& s, uint32_t seed) {
  std::vector<uint8_t> raw(s.raw_bytes());
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> scale(0.5f, 8.0f);
  const size_t n = s.num_values();
  float sc = 1;
  for (size_t i = 0; i < n; ++i) {
    if (i % s.head_dim == 0) sc = scale(rng);
    StoreAs(s.dtype, raw, i, normal(rng) * sc);
  }
  return raw;
}

// Σ‖x − x̂‖² / Σ‖x‖² between a raw block and its fp32 decode.
inline double RelMse(const BlockShape& s, const std::vector<uint8_t>& raw,
                     const std::vector<uint8_t>& dec_f32) {
  double e = 0, r = 0;
  for (size_t i = 0; i < s.num_values(); ++i) {
    const double x = LoadAs(s.dtype, raw, i);
    const double y = LoadAs(DType::kFloat32, dec_f32, i);
    e += (x - y) * (x - y);
    r += x * x;
  }
  return e / r;
}

// The codec that exercises one (g, bits, qjl) kernel instance in both sections: K with QJL when
// `qjl`, V without, and the first layer protected at 16 bits (the plain-copy path).
inline CodecSpec KernelInstanceSpec(int g, int bits, bool qjl) {
  CodecSpec spec;
  spec.key = SectionCodec{bits, g, qjl};
  spec.value = SectionCodec{bits, g, false};
  spec.protected_first_layers = 1;
  spec.protected_bits = 16;
  return spec;
}

}  // namespace turbokv::codec::testing_util

#endif  // TURBOKV_TESTS_UNIT_CODEC_TEST_UTIL_H_
