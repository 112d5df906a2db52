// BlockCodec: round trips, presets, shapes, dtypes, layer ranges, bpv and bad input.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/codebook.h"

namespace turbokv::codec {
namespace {

using testing_util::LoadAs;
using testing_util::RandomBlock;
using testing_util::RelMse;
using testing_util::StoreAs;

BlockCodec MakeCodec(const BlockShape& shape, const CodecSpec& spec, uint64_t ns = 0) {
  absl::StatusOr<BlockCodec> c = BlockCodec::Create(shape, spec, ns);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

std::vector<uint8_t> EncodeOk(const BlockCodec& c, const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> packed(c.packed_bytes());
  absl::Status s = c.Encode(raw, absl::MakeSpan(packed));
  EXPECT_TRUE(s.ok()) << s;
  return packed;
}

std::vector<uint8_t> DecodeOk(const BlockCodec& c, const std::vector<uint8_t>& packed, DType out,
                              LayerRange range = {}) {
  std::vector<uint8_t> dec(*c.DecodedBytes(out, range));
  absl::Status s = c.Decode(packed, out, range, absl::MakeSpan(dec));
  EXPECT_TRUE(s.ok()) << s;
  return dec;
}

CodecSpec Preset(const std::string& name, int head_dim) {
  absl::StatusOr<CodecSpec> s = PresetSpec(name, head_dim);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Error bound per preset on Gaussian input: theory of the coarser of K/V plus 10% slack
// (norm correction shifts MSE slightly; QJL adds variance).
double Tolerance(const std::string& preset) {
  if (preset == "k8v4" || preset == "k4v4-g32" || preset == "k6v4" || preset == "k5v4")
    return 0.0092 * 1.1;
  if (preset == "k6v5") return 0.0025 * 1.1;  // 5-bit g = 32: g·MSE ≈ 0.0024
  if (preset == "k6v6" || preset == "k8v6") return 0.00065 * 1.1;  // 6-bit g = 64: ≈ 0.0006
  if (preset == "k3v2") return (0.0323 + 0.1145) / 2 * 1.1;        // 3-bit g = 32, 2-bit g = 64
  if (preset == "k4v3-g32") return (0.0092 + 0.0323) / 2 * 1.1;
  if (preset == "k3v3-g32") return 0.0323 * 1.1;
  if (preset == "k3v2-g32-qjl") return 0.14;
  return 0;
}

class PresetRoundTrip : public testing::TestWithParam<std::tuple<std::string, int, DType>> {};

TEST_P(PresetRoundTrip, WithinToleranceAndRawIsBitExact) {
  const auto& [preset, head_dim, dtype] = GetParam();
  const BlockShape shape{3, 16, 2, head_dim, dtype};
  const BlockCodec c = MakeCodec(shape, Preset(preset, head_dim));
  const std::vector<uint8_t> raw = RandomBlock(shape, 11 + head_dim);
  const std::vector<uint8_t> packed = EncodeOk(c, raw);
  ASSERT_TRUE(VerifyPackedChecksum(packed).ok());
  if (preset == "raw") {
    EXPECT_EQ(DecodeOk(c, packed, dtype), raw);  // bit-exact in the source dtype
    return;
  }
  const double rel = RelMse(shape, raw, DecodeOk(c, packed, DType::kFloat32));
  EXPECT_LT(rel, Tolerance(preset));
  EXPECT_GT(rel, Tolerance(preset) / 10);  // a codec that stored nothing lossy would be suspect
  // Decoding straight to fp16/bf16 is the fp32 decode rounded once.
  const std::vector<uint8_t> f32 = DecodeOk(c, packed, DType::kFloat32);
  const std::vector<uint8_t> f16 = DecodeOk(c, packed, DType::kFloat16);
  const std::vector<uint8_t> b16 = DecodeOk(c, packed, DType::kBFloat16);
  for (size_t i = 0; i < shape.num_values(); ++i) {
    const float v = LoadAs(DType::kFloat32, f32, i);
    ASSERT_EQ(LoadAs(DType::kFloat16, f16, i), HalfToFloat(FloatToHalf(v)));
    ASSERT_EQ(LoadAs(DType::kBFloat16, b16, i), BFloat16ToFloat(FloatToBFloat16(v)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    PresetsShapesDtypes, PresetRoundTrip,
    testing::Combine(testing::Values("k8v6", "k8v4", "k6v6", "k6v5", "k6v4", "k5v4", "k4v4-g32",
                                     "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "k3v2", "raw"),
                     testing::Values(64, 80, 96, 128, 192, 256),
                     testing::Values(DType::kFloat16, DType::kBFloat16, DType::kFloat32)));

TEST(BlockCodecTest, PresetGroupSizesFollowHeadDim) {
  EXPECT_EQ(Preset("k4v4-g32", 128).key.group_size, 32);
  EXPECT_EQ(Preset("k4v4-g32", 80).key.group_size, 16);
  EXPECT_EQ(Preset("k4v4-g32", 8).key.group_size, 8);
  EXPECT_EQ(Preset("k8v4", 128).key.group_size, 128);
  EXPECT_EQ(Preset("k8v4", 96).key.group_size, 32);
  EXPECT_EQ(Preset("k8v4", 512).key.group_size, 256);
  EXPECT_TRUE(Preset("k3v2-g32-qjl", 64).key.qjl);
  EXPECT_FALSE(Preset("k3v2-g32-qjl", 64).value.qjl);
  absl::StatusOr<CodecSpec> bad = PresetSpec("k5v5", 128);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("k4v4-g32"), std::string::npos);
}

TEST(BlockCodecTest, BitsPerValueMatchesFormula) {
  // k4v4-g32: 4 bits + 16/32 bits of scale per value = 4.5, plus header and checksum.
  const BlockShape shape{30, 16, 3, 64, DType::kFloat16};
  const BlockCodec c = MakeCodec(shape, Preset("k4v4-g32", 64));
  const size_t header = 56 + 4 * 30 + 4 * 31 + 8;
  EXPECT_EQ(c.packed_bytes(), shape.num_values() * 45 / 80 + header);
  EXPECT_DOUBLE_EQ(c.bits_per_value(), 4.5 + header * 8.0 / shape.num_values());
  // k3v2-g32-qjl: K 2 + 1 (QJL) + 16/32 + 16/32, V 2 + 16/32 -> (4 + 2.5) / 2 = 3.25.
  const BlockCodec q = MakeCodec(shape, Preset("k3v2-g32-qjl", 64));
  EXPECT_EQ(q.packed_bytes(), shape.num_values() * 325 / 800 + header);
  // k8v4 at head_dim 128: K 8 + 16/128, V 4.5.
  const BlockShape s128{32, 16, 8, 128, DType::kFloat16};
  const BlockCodec k8 = MakeCodec(s128, Preset("k8v4", 128));
  EXPECT_DOUBLE_EQ(k8.bits_per_value(),
                   (8.125 + 4.5) / 2 + (56 + 8 * 32 + 4 + 8) * 8.0 / s128.num_values());
  // raw fp16 is exactly 16 plus the header.
  const BlockCodec raw = MakeCodec(shape, Preset("raw", 64));
  EXPECT_EQ(raw.packed_bytes(), shape.raw_bytes() + header);
}

TEST(BlockCodecTest, QualityOnRandomDirectionsIsAtTheTheory) {
  // Gaussian vectors: every group's direction is uniform on the sphere, so with norm
  // correction off the relative MSE is g·MSE of the codebook (docs/architecture.md, "The codec").
  const BlockShape shape{4, 64, 8, 128, DType::kFloat32};
  for (int bits : {1, 2, 3, 4}) {
    for (int g : {32, 64, 128}) {
      CodecSpec spec;
      spec.key = spec.value = {bits, g, false};
      spec.norm_correction = false;
      const BlockCodec c = MakeCodec(shape, spec);
      double err = 0, ref = 0;
      for (uint32_t seed = 0; seed < 2; ++seed) {
        const std::vector<uint8_t> raw = RandomBlock(shape, 100 + seed);
        const double rel = RelMse(shape, raw, DecodeOk(c, EncodeOk(c, raw), DType::kFloat32));
        err += rel;
        ref += 1;
      }
      const double theory = (*GetCodebook(g, bits))->g_mse;
      EXPECT_NEAR(err / ref / theory, 1.0, 0.01) << "b=" << bits << " g=" << g;
    }
  }
}

TEST(BlockCodecTest, NormCorrectionKeepsGroupLengths) {
  const BlockShape shape{1, 32, 2, 64, DType::kFloat32};
  const std::vector<uint8_t> raw = RandomBlock(shape, 5);
  CodecSpec spec;
  spec.key = spec.value = {3, 32, false};
  const std::vector<uint8_t> dec =
      DecodeOk(MakeCodec(shape, spec), EncodeOk(MakeCodec(shape, spec), raw), DType::kFloat32);
  for (size_t grp = 0; grp < shape.num_values() / 32; ++grp) {
    double nx = 0, ny = 0;
    for (size_t j = grp * 32; j < grp * 32 + 32; ++j) {
      nx += std::pow(LoadAs(DType::kFloat32, raw, j), 2);
      ny += std::pow(LoadAs(DType::kFloat32, dec, j), 2);
    }
    // Only the fp16 rounding of the stored scale remains (relative 2^-11).
    EXPECT_NEAR(std::sqrt(ny / nx), 1.0, 1e-3);
  }
}

TEST(BlockCodecTest, QjlMakesInnerProductsUnbiased) {
  // 2-bit MSE quantization shrinks <q, x̂> toward zero; QJL (without norm correction) removes
  // the bias. Measured over many random (q, x) pairs.
  const BlockShape shape{1, 256, 4, 64, DType::kFloat32};
  const std::vector<uint8_t> raw = RandomBlock(shape, 77);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> q(64);
  for (float& v : q) v = normal(rng);
  auto ratio = [&](bool qjl) {
    CodecSpec spec;
    spec.key = spec.value = {2, 32, qjl};
    spec.norm_correction = false;
    const BlockCodec c = MakeCodec(shape, spec);
    const std::vector<uint8_t> dec = DecodeOk(c, EncodeOk(c, raw), DType::kFloat32);
    double num = 0, den = 0;
    for (size_t v = 0; v < shape.num_values() / 64; ++v) {
      double a = 0, b = 0;
      for (int j = 0; j < 64; ++j) {
        a += q[j] * LoadAs(DType::kFloat32, raw, v * 64 + j);
        b += q[j] * LoadAs(DType::kFloat32, dec, v * 64 + j);
      }
      num += a * b;
      den += a * a;
    }
    return num / den;  // regression slope of <q,x̂> on <q,x>
  };
  const double mse_only = ratio(false);
  const double with_qjl = ratio(true);
  EXPECT_LT(mse_only, 0.92);         // biased low: ≈ 1 − g·MSE(2 bits) ≈ 0.89
  EXPECT_NEAR(with_qjl, 1.0, 0.03);  // unbiased
}

TEST(BlockCodecTest, ZerosStayExactlyZeroAndOneTokenWorks) {
  const BlockShape shape{2, 1, 1, 64, DType::kFloat16};
  std::vector<uint8_t> raw(shape.raw_bytes(), 0);
  for (const std::string& p : PresetNames()) {
    const BlockCodec c = MakeCodec(shape, Preset(p, 64));
    const std::vector<uint8_t> dec = DecodeOk(c, EncodeOk(c, raw), DType::kFloat32);
    for (size_t i = 0; i < shape.num_values(); ++i)
      ASSERT_EQ(LoadAs(DType::kFloat32, dec, i), 0.0f) << p;
  }
  // A zero group next to a non-zero one in the same head vector.
  for (size_t i = 32; i < 64; ++i) StoreAs(DType::kFloat16, raw, i, 1.0f);
  const BlockCodec c = MakeCodec(shape, Preset("k4v4-g32", 64));
  const std::vector<uint8_t> dec = DecodeOk(c, EncodeOk(c, raw), DType::kFloat32);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(LoadAs(DType::kFloat32, dec, i), 0.0f);
  double err = 0;
  for (size_t i = 32; i < 64; ++i) err += std::pow(LoadAs(DType::kFloat32, dec, i) - 1.0, 2);
  EXPECT_LT(err / 32, 0.02);  // 4-bit g = 32: g·MSE ≈ 0.009 on average
  EXPECT_GT(err, 0.0);
}

TEST(BlockCodecTest, LayerRangeDecodeEqualsSliceOfFullDecode) {
  const BlockShape shape{6, 16, 3, 64, DType::kFloat16};
  CodecSpec spec = Preset("k4v3-g32", 64);
  spec.protected_first_layers = 1;
  spec.protected_last_layers = 2;
  const BlockCodec c = MakeCodec(shape, spec);
  const std::vector<uint8_t> packed = EncodeOk(c, RandomBlock(shape, 9));
  const std::vector<uint8_t> full = DecodeOk(c, packed, DType::kFloat16);
  const size_t layer_bytes = full.size() / 6;
  const std::vector<uint8_t> part = DecodeOk(c, packed, DType::kFloat16, {2, 5});
  ASSERT_EQ(part.size(), 3 * layer_bytes);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), full.begin() + 2 * layer_bytes));
  // A range decode reads only its layers: damage another layer and it is unaffected.
  std::vector<uint8_t> damaged = packed;
  damaged[c.plans()[0].offset + 3] ^= 0xFF;  // layer 0
  EXPECT_EQ(DecodeOk(c, damaged, DType::kFloat16, {2, 5}), part);
  EXPECT_FALSE(VerifyPackedChecksum(damaged).ok());
  // Bad ranges.
  std::vector<uint8_t> out(layer_bytes);
  EXPECT_EQ(c.Decode(packed, DType::kFloat16, {3, 3}, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.Decode(packed, DType::kFloat16, {5, 7}, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BlockCodecTest, ProtectedLayersUseHigherPrecision) {
  const BlockShape shape{4, 16, 2, 128, DType::kFloat32};
  CodecSpec spec = Preset("k3v3-g32", 128);
  spec.protected_first_layers = 1;
  spec.protected_bits = 16;
  spec.protected_last_layers = 1;
  const BlockCodec c = MakeCodec(shape, spec);
  EXPECT_EQ(c.layers()[0].key.bits, 16);
  EXPECT_EQ(c.layers()[1].key.bits, 3);
  EXPECT_EQ(c.layers()[3].value.bits, 16);
  const std::vector<uint8_t> raw = RandomBlock(shape, 4);
  const std::vector<uint8_t> dec = DecodeOk(c, EncodeOk(c, raw), DType::kFloat32);
  const size_t layer_values = shape.num_values() / 4;
  for (size_t i = 0; i < layer_values; ++i) {
    const float x = LoadAs(DType::kFloat32, raw, i);
    ASSERT_EQ(LoadAs(DType::kFloat32, dec, i), HalfToFloat(FloatToHalf(x)));  // fp16 exact
  }
}

TEST(BlockCodecTest, RejectsNonFiniteValuesNamingTheSpotButNotLargeOnes) {
  const BlockShape shape{2, 4, 2, 64, DType::kFloat32};
  const BlockCodec c = MakeCodec(shape, Preset("k4v4-g32", 64));
  std::vector<uint8_t> raw = RandomBlock(shape, 1);
  std::vector<uint8_t> packed(c.packed_bytes());
  // layer 1, V, token 2, head 1, coordinate 5
  const size_t at = ((((1 * 2 + 1) * 4 + 2) * 2 + 1) * 64) + 5;
  StoreAs(DType::kFloat32, raw, at, std::numeric_limits<float>::quiet_NaN());
  absl::Status s = c.Encode(raw, absl::MakeSpan(packed));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 1 V token 2 head 1 coordinate 5"), std::string::npos) << s;
  StoreAs(DType::kFloat32, raw, at, std::numeric_limits<float>::infinity());
  EXPECT_EQ(c.Encode(raw, absl::MakeSpan(packed)).code(), absl::StatusCode::kInvalidArgument);
  StoreAs(DType::kFloat32, raw, at, 1e6f);  // group norm 1e6 > 65504: a wide scale, stored
  EXPECT_TRUE(c.Encode(raw, absl::MakeSpan(packed)).ok());
  // fp16 sections (protected layers at 16 bits) refuse values beyond fp16, naming the spot.
  CodecSpec prot = Preset("k4v4-g32", 64);
  prot.protected_first_layers = 2;
  prot.protected_bits = 16;
  const BlockCodec pc = MakeCodec(shape, prot);
  packed.assign(pc.packed_bytes(), 0);
  s = pc.Encode(raw, absl::MakeSpan(packed));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 1 V token 2 head 1 coordinate 5"), std::string::npos) << s;
  EXPECT_NE(s.message().find("16-bit section stores fp16"), std::string::npos) << s;
}

TEST(BlockCodecTest, RejectsBadShapesSpecsAndBufferSizes) {
  CodecSpec spec;
  spec.key = spec.value = {4, 64, false};
  auto code = [](const absl::StatusOr<BlockCodec>& c) { return c.status().code(); };
  absl::StatusOr<BlockCodec> c = BlockCodec::Create({1, 16, 1, 96, DType::kFloat16}, spec);
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("head_dim 96 is not a multiple of key.group_size 64"),
            std::string::npos)
      << c.status();
  EXPECT_EQ(code(BlockCodec::Create({0, 16, 1, 64, DType::kFloat16}, spec)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(BlockCodec::Create({1, 16, 1, 60, DType::kFloat16}, spec)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(BlockCodec::Create({1, 16, 1, 64, static_cast<DType>(9)}, spec)),
            absl::StatusCode::kInvalidArgument);
  spec.key.bits = 7;
  EXPECT_EQ(code(BlockCodec::Create({1, 16, 1, 64, DType::kFloat16}, spec)),
            absl::StatusCode::kInvalidArgument);
  spec.key = {4, 24, false};
  EXPECT_EQ(code(BlockCodec::Create({1, 16, 1, 96, DType::kFloat16}, spec)),
            absl::StatusCode::kInvalidArgument);
  spec.key = {16, 32, true};
  EXPECT_EQ(code(BlockCodec::Create({1, 16, 1, 64, DType::kFloat16}, spec)),
            absl::StatusCode::kInvalidArgument);
  spec.key = {4, 32, false};
  spec.protected_bits = 4;
  spec.protected_first_layers = 1;
  EXPECT_EQ(code(BlockCodec::Create({1, 16, 1, 64, DType::kFloat16}, spec)),
            absl::StatusCode::kInvalidArgument);

  const BlockShape shape{1, 16, 1, 64, DType::kFloat16};
  const BlockCodec ok = MakeCodec(shape, Preset("k4v4-g32", 64));
  std::vector<uint8_t> raw(shape.raw_bytes() - 2), packed(ok.packed_bytes());
  absl::Status s = ok.Encode(raw, absl::MakeSpan(packed));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expected 4096"), std::string::npos) << s;
  raw.resize(shape.raw_bytes());
  packed.resize(packed.size() + 1);
  EXPECT_EQ(ok.Encode(raw, absl::MakeSpan(packed)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlockCodecTest, EncodeIsDeterministicAndBatchMatchesSingle) {
  const BlockShape shape{2, 16, 2, 64, DType::kBFloat16};
  const BlockCodec c = MakeCodec(shape, Preset("k3v2-g32-qjl", 64), 0xABCDEF);
  std::vector<std::vector<uint8_t>> raws, outs;
  for (uint32_t i = 0; i < 7; ++i) {
    raws.push_back(RandomBlock(shape, i));
    outs.emplace_back(c.packed_bytes());
  }
  std::vector<absl::Span<const uint8_t>> in(raws.begin(), raws.end());
  std::vector<absl::Span<uint8_t>> out;
  for (auto& o : outs) out.push_back(absl::MakeSpan(o));
  ASSERT_TRUE(c.EncodeBatch(in, out, 3).ok());
  for (size_t i = 0; i < raws.size(); ++i) EXPECT_EQ(outs[i], EncodeOk(c, raws[i]));
}

TEST(BlockCodecTest, SectionsEncodedOutOfOrderAndSealedGiveEncodesBytes) {
  const BlockShape shape{3, 16, 2, 64, DType::kFloat16};
  for (const char* preset : {"k4v4-g32", "k3v2-g32-qjl", "raw"}) {
    SCOPED_TRACE(preset);
    const BlockCodec c = MakeCodec(shape, Preset(preset, 64), 0x1234);
    const std::vector<uint8_t> raw = RandomBlock(shape, 9);
    const size_t section = c.section_raw_bytes();
    ASSERT_EQ(section * c.num_sections(), raw.size());
    std::vector<uint8_t> packed(c.packed_bytes(), 0xee);
    // Sections 4..5 first, then 0..3 (as chunks that arrive in pieces would).
    ASSERT_TRUE(c.EncodeSections(absl::MakeConstSpan(raw).subspan(4 * section, 2 * section), 4,
                                 absl::MakeSpan(packed))
                    .ok());
    ASSERT_TRUE(
        c.EncodeSections(absl::MakeConstSpan(raw).first(4 * section), 0, absl::MakeSpan(packed))
            .ok());
    c.SealPacked(absl::MakeSpan(packed));
    EXPECT_EQ(packed, EncodeOk(c, raw));
    // Not whole sections, or past the end: InvalidArgument.
    EXPECT_EQ(
        c.EncodeSections(absl::MakeConstSpan(raw).first(section - 1), 0, absl::MakeSpan(packed))
            .code(),
        absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        c.EncodeSections(absl::MakeConstSpan(raw).first(2 * section), 5, absl::MakeSpan(packed))
            .code(),
        absl::StatusCode::kInvalidArgument);
  }
}

TEST(BlockCodecTest, DecodeRejectsBlocksOfAnotherCodec) {
  const BlockShape shape{2, 16, 2, 64, DType::kFloat16};
  const BlockCodec a = MakeCodec(shape, Preset("k4v4-g32", 64), 1);
  const BlockCodec b = MakeCodec(shape, Preset("k4v4-g32", 64), 2);
  const std::vector<uint8_t> packed = EncodeOk(a, RandomBlock(shape, 0));
  std::vector<uint8_t> out(*b.DecodedBytes(DType::kFloat16, {}));
  absl::Status s = b.Decode(packed, DType::kFloat16, {}, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<BlockCodec> from = BlockCodec::FromPacked(packed);
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(from->namespace_id(), 1u);
  EXPECT_TRUE(std::equal(from->header().begin(), from->header().end(), a.header().begin()));
}

}  // namespace
}  // namespace turbokv::codec
