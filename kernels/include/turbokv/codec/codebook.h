// Lloyd–Max codebooks for the coordinates of a uniformly random unit vector (DESIGN.md 3, step 3).
//
// For a random unit vector in R^g each coordinate t has density f(t) ∝ (1 − t²)^((g−3)/2) on
// [−1, 1] (≈ N(0, 1/g) for large g). The b-bit codebook is the 2^b-level Lloyd–Max quantizer
// of that density: each level is the conditional mean of its cell and each threshold is the
// midpoint of its two neighbouring levels (Lloyd 1957/1982; Max 1960). It depends only on
// (g, b): no calibration data. TurboQuant (Zandieh et al., 2025, arXiv:2504.19874, section 3.1)
// uses exactly this scalar quantizer after a random rotation.
#ifndef TURBOKV_CODEC_CODEBOOK_H_
#define TURBOKV_CODEC_CODEBOOK_H_

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
};

// The codebook for group size g ∈ {8, 16, 32, 64, 128, 256} and b ∈ {1, 2, 3, 4, 8}.
// Computed on first use by Lloyd iteration on a 1,000,001-point grid of [0, 1] (the density is
// symmetric), then cached for the life of the process; deterministic. Thread-safe.
// InvalidArgument for any other (g, b).
[[nodiscard]] absl::StatusOr<const Codebook*> GetCodebook(int group_size, int bits);

// g · MSE of the Gaussian N(0, 1/g) Lloyd–Max quantizer with 2^b levels is the large-g limit:
// 0.3634, 0.1175, 0.03455, 0.009501 for b = 1..4 (Max 1960, table).

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_CODEBOOK_H_
