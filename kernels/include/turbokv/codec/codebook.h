// Lloyd–Max codebooks for the coordinates of a uniformly random unit vector (docs/architecture.md,
// codec step 3).
//
// For a random unit vector in R^g each coordinate t has density f(t) ∝ (1 − t²)^((g−3)/2) on
// [−1, 1] (≈ N(0, 1/g) for large g). The b-bit codebook is the 2^b-level Lloyd–Max quantizer
// of that density: each level is the conditional mean of its cell and each threshold is the
// midpoint of its two neighbouring levels (Lloyd 1957/1982; Max 1960). It depends only on
// (g, b): no calibration data. TurboQuant (Zandieh et al., 2025, arXiv:2504.19874, section 3.1)
// uses exactly this scalar quantizer after a random rotation.
#ifndef TURBOKV_CODEC_CODEBOOK_H_
#define TURBOKV_CODEC_CODEBOOK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace turbokv::codec {

struct Codebook {
  int group_size = 0;  // g
  int bits = 0;        // b
  // 2^b levels, ascending, symmetric about 0, rounded to fp32 (the values decode uses).
  std::vector<float> levels;
  // 2^b − 1 decision thresholds, ascending: thresholds[i] = (levels[i] + levels[i+1]) / 2 in
  // double, rounded to fp32. A coordinate y gets index #{i : y > thresholds[i]}.
  std::vector<float> thresholds;
  // The same levels and thresholds in double, as the Lloyd iteration left them.
  std::vector<double> levels_f64;
  std::vector<double> thresholds_f64;
  // g · E[(t − Q(t))²] under the exact density: the expected ||u − û||² of a unit group.
  double g_mse = 0;
  int iterations = 0;  // Lloyd iterations until the largest level moved less than 1e-14

  // Acceleration table for the nearest-level search (used by the SIMD paths for b = 8; the
  // result is always exactly #{i : y > thresholds[i]}). Bucket of y:
  //   k = (int) clamp((y − bucket_lo) · bucket_scale, 0, buckets − 1)   (fp32, no FMA)
  // bucket_base[k] = #{i : bucket(thresholds[i]) < k}; every bucket holds at most two
  // thresholds, so idx = bucket_base[k] + (y > tp[bucket_base[k]]) + (y > tp[bucket_base[k]+1])
  // with tp = thresholds followed by two +inf.
  int buckets = 0;
  float bucket_lo = 0;
  float bucket_scale = 0;
  std::vector<int32_t> bucket_base;      // [buckets]
  std::vector<float> thresholds_padded;  // [2^b + 1]
};

// The bucket of y in `cb`'s acceleration table (the exact float operations the SIMD paths use).
inline int CodebookBucket(const Codebook& cb, float y) {
  float f = (y - cb.bucket_lo) * cb.bucket_scale;
  if (!(f > 0.0f)) f = 0.0f;  // also NaN
  const float top = static_cast<float>(cb.buckets - 1);
  if (f > top) f = top;
  return static_cast<int>(f);
}

// The codebook for group size g ∈ {8, 16, 32, 64, 128, 256} and b ∈ {1, 2, 3, 4, 5, 6, 8}.
// Computed on first use by Lloyd iteration on a 1,000,001-point grid of [0, 1] (the density is
// symmetric), then cached for the life of the process; deterministic. Thread-safe.
// InvalidArgument for any other (g, b).
[[nodiscard]] absl::StatusOr<const Codebook*> GetCodebook(int group_size, int bits);

// g · MSE of the Gaussian N(0, 1/g) Lloyd–Max quantizer with 2^b levels is the large-g limit:
// 0.3634, 0.1175, 0.03455, 0.009501 for b = 1..4 (Max 1960, table).

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_CODEBOOK_H_
