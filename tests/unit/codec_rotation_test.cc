// Randomized Hadamard rotation: orthogonality, exact inverse, pinned sign stream.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "turbokv/codec/rotation.h"
#include "turbokv/codec/types.h"

namespace turbokv::codec {
namespace {

TEST(RotationTest, SplitMix64MatchesReferenceStream) {
  // Reference splitmix64.c (Vigna) seeded with 0: the first three outputs.
  const uint64_t gamma = 0x9E3779B97F4A7C15ULL;
  EXPECT_EQ(SplitMix64Mix(1 * gamma), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(SplitMix64Mix(2 * gamma), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(SplitMix64Mix(3 * gamma), 0x06C45D188009454FULL);
}

TEST(RotationTest, KnownSignVector) {
  // FORMAT.md worked example: default seed, layer 0, K. Pinned so that any change to the sign
  // stream (which would silently corrupt every stored block) fails here.
  const uint64_t key = RotationKey(kDefaultRotationSeed, 0, 0);
  const std::vector<float> signs = RotationSigns(key, 16);
  std::string pattern;
  for (float s : signs) pattern += s > 0 ? '+' : '-';
  EXPECT_EQ(pattern, "++-+--++--+--+++");
  EXPECT_NE(RotationKey(kDefaultRotationSeed, 0, 0), RotationKey(kDefaultRotationSeed, 0, 1));
  EXPECT_NE(RotationKey(kDefaultRotationSeed, 0, 0), RotationKey(kDefaultRotationSeed, 1, 0));
  EXPECT_NE(RotationKey(kDefaultRotationSeed, 0, 0), RotationKey(kDefaultRotationSeed + 1, 0, 0));
}

TEST(RotationTest, SignsAreBalanced) {
  const std::vector<float> signs = RotationSigns(RotationKey(1234, 3, 1), 1 << 16);
  double sum = 0;
  for (float s : signs) sum += s;
  EXPECT_LT(std::fabs(sum) / signs.size(), 0.01);
}

class RotationBySize : public testing::TestWithParam<int> {};

TEST_P(RotationBySize, PreservesNormsAndInvertsExactly) {
  const int g = GetParam();
  std::mt19937 rng(g);
  std::normal_distribution<float> normal;
  const uint64_t key = RotationKey(42, 7, 1);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<float> u(g), v;
    for (float& x : u) x = normal(rng);
    v = u;
    const int offset = g * (trial % 4);
    RotateGroup(v.data(), g, key, offset);
    double nu = 0, nv = 0;
    for (int j = 0; j < g; ++j) {
      nu += double(u[j]) * u[j];
      nv += double(v[j]) * v[j];
    }
    EXPECT_NEAR(std::sqrt(nv) / std::sqrt(nu), 1.0, 1e-6);
    InverseRotateGroup(v.data(), g, key, offset);
    for (int j = 0; j < g; ++j) EXPECT_NEAR(v[j], u[j], 1e-6f * (1 + std::fabs(u[j])));
  }
}

TEST_P(RotationBySize, IsOrthogonalMatrix) {
  // Columns of R = H·D are orthonormal: <R e_i, R e_j> = δ_ij.
  const int g = GetParam();
  const uint64_t key = RotationKey(9, 0, 0);
  std::vector<std::vector<float>> cols(g, std::vector<float>(g, 0.0f));
  for (int i = 0; i < g; ++i) {
    cols[i][i] = 1.0f;
    RotateGroup(cols[i].data(), g, key, 0);
  }
  for (int i = 0; i < g; ++i) {
    for (int j = i; j < g; ++j) {
      double dot = 0;
      for (int t = 0; t < g; ++t) dot += double(cols[i][t]) * cols[j][t];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-6) << i << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, RotationBySize, testing::Values(8, 16, 32, 64, 128, 256));

}  // namespace
}  // namespace turbokv::codec
