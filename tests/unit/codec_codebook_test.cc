// Codebooks: pinned against docs/architecture.md, "The codec" and checked for Lloyd–Max optimality.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "turbokv/codec/codebook.h"

namespace turbokv::codec {
namespace {

struct Reference {
  int g;
  double b1;
  double b2[2];
  double b3[4];
  double b4_top;
  double g_mse[4];
};

// the codebook table of docs/architecture.md (positive half; symmetric).
const Reference kTable[] = {
    {8,
     0.29103,
     {0.15792, 0.50482},
     {0.08281, 0.25238, 0.43616, 0.65772},
     0.76484,
     {0.3224, 0.09477, 0.02606, 0.006870}},
    {16,
     0.20261,
     {0.11249, 0.36721},
     {0.05992, 0.18368, 0.32174, 0.49920},
     0.60389,
     {0.3432, 0.1058, 0.03008, 0.008094}},
    {32,
     0.14215,
     {0.07980, 0.26332},
     {0.04285, 0.13176, 0.23246, 0.36627},
     0.45343,
     {0.3534, 0.1116, 0.03226, 0.008774}},
    {64,
     0.10013,
     {0.05652, 0.18750},
     {0.03047, 0.09383, 0.16617, 0.26391},
     0.33080,
     {0.3584, 0.1145, 0.03339, 0.009132}},
    {128,
     0.07066,
     {0.03999, 0.13304},
     {0.02160, 0.06659, 0.11814, 0.18840},
     0.23766,
     {0.3609, 0.1160, 0.03397, 0.009315}},
    {256,
     0.04992,
     {0.02829, 0.09424},
     {0.01530, 0.04717, 0.08377, 0.13385},
     0.16941,
     {0.3621, 0.1167, 0.03426, 0.009408}},
};

const Codebook& Get(int g, int b) {
  absl::StatusOr<const Codebook*> cb = GetCodebook(g, b);
  EXPECT_TRUE(cb.ok()) << cb.status();
  return **cb;
}

TEST(CodebookTest, MatchesDesignTable) {
  for (const Reference& r : kTable) {
    SCOPED_TRACE(testing::Message() << "g=" << r.g);
    EXPECT_NEAR(Get(r.g, 1).levels_f64[1], r.b1, 1e-4);
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(Get(r.g, 2).levels_f64[2 + i], r.b2[i], 1e-4);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(Get(r.g, 3).levels_f64[4 + i], r.b3[i], 1e-4);
    EXPECT_NEAR(Get(r.g, 4).levels_f64[15], r.b4_top, 1e-4);
    for (int b = 1; b <= 4; ++b) {
      // Table values carry 4 significant digits.
      EXPECT_NEAR(Get(r.g, b).g_mse, r.g_mse[b - 1], 1e-4 * r.g_mse[b - 1] + 5e-5) << "b=" << b;
    }
  }
}

TEST(CodebookTest, ApproachesGaussianLloydMaxForLargeGroups) {
  // Max (1960): 0.3634, 0.1175, 0.03455, 0.009501. g = 256 is within 0.5%.
  const double gaussian[4] = {0.3634, 0.1175, 0.03455, 0.009501};
  for (int b = 1; b <= 4; ++b) {
    EXPECT_NEAR(Get(256, b).g_mse / gaussian[b - 1], 1.0, 0.01) << "b=" << b;
    EXPECT_LT(Get(256, b).g_mse, gaussian[b - 1]);  // the exact density is lighter-tailed
  }
}

// Independent check of both Lloyd–Max conditions with Simpson's rule on each cell (a different
// quadrature from the one the codebook was computed with).
class Optimality : public testing::TestWithParam<std::tuple<int, int>> {};

double Density(double t, double k) { return std::pow(std::max(0.0, 1.0 - t * t), k); }

TEST_P(Optimality, LevelsAreCellMeansAndThresholdsAreMidpoints) {
  const auto [g, b] = GetParam();
  const Codebook& cb = Get(g, b);
  const int n = 1 << b;
  ASSERT_EQ(cb.levels.size(), static_cast<size_t>(n));
  ASSERT_EQ(cb.thresholds.size(), static_cast<size_t>(n - 1));
  const double k = (g - 3) / 2.0;
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(cb.levels_f64[i], -cb.levels_f64[n - 1 - i], 1e-15);  // symmetric
    if (i + 1 < n) {
      EXPECT_LT(cb.levels_f64[i], cb.levels_f64[i + 1]);
      EXPECT_DOUBLE_EQ(cb.thresholds_f64[i], 0.5 * (cb.levels_f64[i] + cb.levels_f64[i + 1]));
      EXPECT_EQ(cb.thresholds[i], static_cast<float>(cb.thresholds_f64[i]));
    }
    EXPECT_EQ(cb.levels[i], static_cast<float>(cb.levels_f64[i]));
    const double lo = i == 0 ? -1.0 : cb.thresholds_f64[i - 1];
    const double hi = i == n - 1 ? 1.0 : cb.thresholds_f64[i];
    const int steps = 20000;
    const double h = (hi - lo) / steps;
    double mass = 0, moment = 0;
    for (int s = 0; s <= steps; ++s) {
      const double t = lo + s * h;
      const double w = (s == 0 || s == steps) ? 1 : (s % 2 ? 4 : 2);
      mass += w * Density(t, k);
      moment += w * t * Density(t, k);
    }
    // Cells far in the tail carry little mass; compare the centroid relative to the cell width.
    EXPECT_NEAR(moment / mass, cb.levels_f64[i], 1e-6 * std::max(1.0, (hi - lo) * 10))
        << "level " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllGroupsAndBits, Optimality,
                         testing::Combine(testing::Values(8, 16, 32, 64, 128, 256),
                                          testing::Values(1, 2, 3, 4, 5, 6, 8)));

TEST_P(Optimality, BucketTableGivesTheNearestLevel) {
  const auto [g, b] = GetParam();
  const Codebook& cb = Get(g, b);
  ASSERT_GT(cb.buckets, 0);
  auto reference = [&](float y) {
    int n = 0;
    for (float t : cb.thresholds) n += y > t;
    return n;
  };
  auto bucketed = [&](float y) {
    const int base = cb.bucket_base[CodebookBucket(cb, y)];
    return base + (y > cb.thresholds_padded[base]) + (y > cb.thresholds_padded[base + 1]);
  };
  std::vector<float> ys;
  for (float t : cb.thresholds) {
    ys.push_back(t);
    ys.push_back(std::nextafter(t, -2.0f));
    ys.push_back(std::nextafter(t, 2.0f));
  }
  std::mt19937 rng(g * 16 + b);
  std::uniform_real_distribution<float> u(-1.05f, 1.05f);
  for (int i = 0; i < 20000; ++i) ys.push_back(u(rng));
  for (float y : ys) ASSERT_EQ(bucketed(y), reference(y)) << "y=" << y;
}

TEST(CodebookTest, RejectsUnsupportedParameters) {
  EXPECT_EQ(GetCodebook(24, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetCodebook(512, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetCodebook(32, 7).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetCodebook(32, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(GetCodebook(24, 4).status().message().find("group_size 24"), std::string::npos);
}

TEST(CodebookTest, IsCachedAndDeterministic) {
  absl::StatusOr<const Codebook*> a = GetCodebook(32, 3);
  absl::StatusOr<const Codebook*> b = GetCodebook(32, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

}  // namespace
}  // namespace turbokv::codec
