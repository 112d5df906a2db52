// The AVX2 path must give the scalar path's bytes and values exactly.
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"

namespace turbokv::codec {
namespace {

class IsaEquivalence : public testing::TestWithParam<std::tuple<std::string, int, DType>> {};

TEST_P(IsaEquivalence, IdenticalPackedBytesAndDecodedValues) {
  if (DetectCpuIsa() == CpuIsa::kScalar) GTEST_SKIP() << "CPU has no AVX2/FMA/F16C";
  const auto& [preset, head_dim, dtype] = GetParam();
  // 37 tokens x 3 heads: not a multiple of the 8- or 16-lane width.
  const BlockShape shape{2, 37, 3, head_dim, dtype};
  absl::StatusOr<CodecSpec> spec = PresetSpec(preset, head_dim);
  ASSERT_TRUE(spec.ok());
  for (bool nc : {true, false}) {
    spec->norm_correction = nc;
    absl::StatusOr<BlockCodec> c = BlockCodec::Create(shape, *spec);
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<uint8_t> raw = testing_util::RandomBlock(shape, head_dim);
    // Zero groups and tiny values exercise the edge paths.
    std::fill(raw.begin(), raw.begin() + 64 * DTypeSize(dtype), 0);
    std::vector<uint8_t> scalar(c->packed_bytes()), avx2(c->packed_bytes());
    ASSERT_TRUE(c->Encode(raw, absl::MakeSpan(scalar), CpuIsa::kScalar).ok());
    ASSERT_TRUE(c->Encode(raw, absl::MakeSpan(avx2), CpuIsa::kAvx2).ok());
    ASSERT_EQ(scalar, avx2);
    if (DetectCpuIsa() == CpuIsa::kAvx512) {
      std::vector<uint8_t> avx512(c->packed_bytes());
      ASSERT_TRUE(c->Encode(raw, absl::MakeSpan(avx512), CpuIsa::kAvx512).ok());
      ASSERT_EQ(scalar, avx512) << "AVX-512";
    }
    for (DType out : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      std::vector<uint8_t> a(*c->DecodedBytes(out, {})), b(a.size());
      ASSERT_TRUE(c->Decode(scalar, out, {}, absl::MakeSpan(a), CpuIsa::kScalar).ok());
      ASSERT_TRUE(c->Decode(scalar, out, {}, absl::MakeSpan(b), CpuIsa::kAvx2).ok());
      ASSERT_EQ(a, b);
      if (DetectCpuIsa() == CpuIsa::kAvx512) {
        std::fill(b.begin(), b.end(), 0);
        ASSERT_TRUE(c->Decode(scalar, out, {}, absl::MakeSpan(b), CpuIsa::kAvx512).ok());
        ASSERT_EQ(a, b) << "AVX-512";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, IsaEquivalence,
    testing::Combine(testing::Values("k8v6", "k8v4", "k6v6", "k6v5", "k6v4", "k5v4", "k4v4-g32",
                                     "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "k3v2", "raw"),
                     testing::Values(8, 64, 80, 96, 128, 256),
                     testing::Values(DType::kFloat16, DType::kBFloat16, DType::kFloat32)));

}  // namespace
}  // namespace turbokv::codec
