// BlockCodec::ValidatePackedValues: packed input is checked as strictly as raw input. Every block
// the encoder writes passes; a block whose scales, QJL residual norms or plain values are
// poisoned (checksum recomputed, so only the value check can catch it) is InvalidArgument.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/codebook.h"
#include "turbokv/codec/float16.h"
#include "xxhash.h"

namespace turbokv::codec {
namespace {

using testing_util::RandomBlock;
using testing_util::StoreAs;

BlockCodec MakeCodec(const BlockShape& shape, const CodecSpec& spec) {
  absl::StatusOr<BlockCodec> c = BlockCodec::Create(shape, spec, 0x1234);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

std::vector<uint8_t> EncodeOk(const BlockCodec& c, const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> packed(c.packed_bytes());
  absl::Status s = c.Encode(raw, absl::MakeSpan(packed));
  EXPECT_TRUE(s.ok()) << s;
  return packed;
}

void Reseal(std::vector<uint8_t>& packed) {
  const uint64_t sum = XXH3_64bits(packed.data(), packed.size() - 8);
  std::memcpy(packed.data() + packed.size() - 8, &sum, 8);
}

void Put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }

// Byte offset of section `s` (2 * layer + kv) of `packed`.
size_t SectionOffset(const BlockCodec& c, const std::vector<uint8_t>& packed, int s) {
  absl::StatusOr<PackedBlockInfo> info = ParsePackedBlock(packed);
  EXPECT_TRUE(info.ok()) << info.status();
  size_t at = info->layer_offsets[s / 2];
  if (s % 2 == 1) {
    at += SectionBytes(c.layers()[s / 2].key, c.shape().vectors_per_section(), c.shape().head_dim,
                       c.shape().dtype);
  }
  return at;
}

BlockShape Shape(DType dtype = DType::kFloat16) {
  BlockShape s;
  s.num_layers = 3;
  s.block_tokens = 4;
  s.num_kv_heads = 2;
  s.head_dim = 64;
  s.dtype = dtype;
  return s;
}

CodecSpec Spec(SectionCodec key, SectionCodec value) {
  CodecSpec s;
  s.key = key;
  s.value = value;
  return s;
}

TEST(ValidatePackedValuesTest, ResidualBoundHoldsForEveryCodebook) {
  // A QJL residual is ||y - q(y)|| for a unit vector y quantized to the nearest level, so it is
  // at most ||y|| + sqrt(g) * |the level nearest 0|. The validator allows [0, 2]. One bit is
  // the worst case (levels move towards 0 with more bits: 1.82 at g = 8, 1 bit; 1.45 at 2
  // bits; 1.01 at 8 bits): every g at 1 bit, every bit width at g = 8 and 32.
  for (auto [g, bits] : std::vector<std::pair<int, int>>{{8, 1},
                                                         {16, 1},
                                                         {32, 1},
                                                         {64, 1},
                                                         {128, 1},
                                                         {256, 1},
                                                         {8, 2},
                                                         {8, 3},
                                                         {8, 4},
                                                         {8, 8},
                                                         {32, 2},
                                                         {32, 3},
                                                         {32, 4},
                                                         {32, 8}}) {
    {
      absl::StatusOr<const Codebook*> cb = GetCodebook(g, bits);
      ASSERT_TRUE(cb.ok()) << cb.status();
      float smallest = std::abs((*cb)->levels[0]);
      for (float l : (*cb)->levels) smallest = std::min(smallest, std::abs(l));
      EXPECT_LT(1.0 + std::sqrt(static_cast<double>(g)) * smallest, 1.9) << g << " " << bits;
    }
  }
}

TEST(ValidatePackedValuesTest, EveryEncodedBlockPasses) {
  std::vector<std::pair<DType, CodecSpec>> cases;
  for (DType d : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    for (const std::string& preset : PresetNames()) {
      absl::StatusOr<CodecSpec> spec = PresetSpec(preset, 64);
      ASSERT_TRUE(spec.ok()) << spec.status();
      cases.push_back({d, *spec});
    }
    cases.push_back({d, Spec({1, 8, true}, {2, 16, true})});
    cases.push_back({d, Spec({16, 0, false}, {0, 0, false})});
  }
  std::mt19937 rng(7);
  for (const auto& [dtype, spec] : cases) {
    const BlockShape shape = Shape(dtype);
    const BlockCodec c = MakeCodec(shape, spec);
    std::vector<std::vector<uint8_t>> raws = {RandomBlock(shape, rng())};
    // Extremes: one-hot vectors at the largest magnitude that still encodes, constants, tiny
    // values and zeros.
    std::vector<uint8_t> extreme(shape.raw_bytes(), 0);
    const float big = dtype == DType::kFloat16 ? 60000.0f : 1e30f;
    for (size_t i = 0; i < shape.num_values(); ++i) {
      const size_t v = i / shape.head_dim, j = i % shape.head_dim;
      float x = 0;
      switch (v % 4) {
        case 0:
          x = j == v % shape.head_dim ? big : 0;
          break;
        case 1:
          x = dtype == DType::kFloat16 ? 1000.0f : 1e20f;
          break;
        case 2:
          x = dtype == DType::kFloat16 ? 1e-6f : 1e-30f;
          break;
        default:
          x = 0;
          break;
      }
      StoreAs(dtype, extreme, i, x);
    }
    raws.push_back(extreme);
    for (const auto& raw : raws) {
      std::vector<uint8_t> packed(c.packed_bytes());
      absl::Status enc = c.Encode(raw, absl::MakeSpan(packed));
      if (!enc.ok()) continue;  // e.g. a scale overflow of the extreme block: nothing to check
      EXPECT_TRUE(c.ValidatePackedValues(packed).ok())
          << c.ValidatePackedValues(packed) << " dtype " << DTypeName(dtype);
    }
  }
}

TEST(ValidatePackedValuesTest, PoisonedScalesAndResidualsAreInvalidArgument) {
  const BlockShape shape = Shape();
  const BlockCodec c = MakeCodec(shape, Spec({2, 32, true}, {4, 32, false}));
  const std::vector<uint8_t> good = EncodeOk(c, RandomBlock(shape, 1));
  ASSERT_TRUE(c.ValidatePackedValues(good).ok());
  const size_t groups = shape.vectors_per_section() * shape.head_dim / 32;
  // Layer 1 V (section 3), group 5: scales.
  // fp16 Inf/NaN, and wide scales (sign bit set) whose bf16 is Inf/NaN.
  for (uint16_t bad : {uint16_t{0x7C00}, uint16_t{0x7E00}, uint16_t{0x7FFF}, uint16_t{0xFF80},
                       uint16_t{0xFFC0}, uint16_t{0xFFFF}}) {
    std::vector<uint8_t> p = good;
    Put16(p, SectionOffset(c, p, 3) + 2 * 5, bad);
    Reseal(p);
    ASSERT_TRUE(VerifyPackedChecksum(p).ok());
    absl::Status s = c.ValidatePackedValues(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("layer 1 V group 5: scale"), std::string::npos) << s;
  }
  // Layer 2 K (section 4, QJL): residual norms follow the scales.
  for (uint16_t bad : {uint16_t{0x7C00}, uint16_t{0x7E01}, uint16_t{0x4001}, uint16_t{0x8001}}) {
    std::vector<uint8_t> p = good;
    Put16(p, SectionOffset(c, p, 4) + 2 * groups + 2 * 7, bad);
    Reseal(p);
    absl::Status s = c.ValidatePackedValues(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("layer 2 K group 7: QJL residual norm"), std::string::npos) << s;
  }
  // The largest finite scale, wide scales (the largest: 0xFF7F; a wide zero) and a residual of
  // exactly 2 are values, not poison.
  std::vector<uint8_t> p = good;
  Put16(p, SectionOffset(c, p, 0), 0x7BFF);
  Put16(p, SectionOffset(c, p, 0) + 2, 0xFF7F);
  Put16(p, SectionOffset(c, p, 0) + 4, 0x8000);
  Put16(p, SectionOffset(c, p, 0) + 6, 0xBC00);
  Put16(p, SectionOffset(c, p, 0) + 2 * groups, 0x4000);
  Reseal(p);
  EXPECT_TRUE(c.ValidatePackedValues(p).ok());
  // Wrong size: DataLoss.
  p.pop_back();
  EXPECT_EQ(c.ValidatePackedValues(p).code(), absl::StatusCode::kDataLoss);
}

TEST(ValidatePackedValuesTest, NonFinitePlainSectionsAreInvalidArgument) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    const BlockShape shape = Shape(dtype);
    // K: fp16 section, V: raw source bytes.
    const BlockCodec c = MakeCodec(shape, Spec({16, 0, false}, {0, 0, false}));
    const std::vector<uint8_t> good = EncodeOk(c, RandomBlock(shape, 2));
    ASSERT_TRUE(c.ValidatePackedValues(good).ok());
    std::vector<uint8_t> p = good;
    // Layer 0 K, token 1, head 1, coordinate 3 = value (1 * 2 + 1) * 64 + 3.
    Put16(p, SectionOffset(c, p, 0) + 2 * (3 * 64 + 3), 0x7C00);
    Reseal(p);
    absl::Status s = c.ValidatePackedValues(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("layer 0 K token 1 head 1 coordinate 3"), std::string::npos) << s;
    p = good;
    const size_t v_at = SectionOffset(c, p, 5) + DTypeSize(dtype) * 70;
    if (dtype == DType::kFloat32) {
      const float nan = std::nanf("");
      std::memcpy(&p[v_at], &nan, 4);
    } else {
      Put16(p, v_at, dtype == DType::kFloat16 ? 0x7E00 : 0x7FC0);
    }
    Reseal(p);
    s = c.ValidatePackedValues(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("layer 2 V token 0 head 1 coordinate 6"), std::string::npos) << s;
  }
}

TEST(ValidatePackedValuesTest, BlocksThatPassDecodeToFiniteValues) {
  // Any scales and residuals the validator allows, any index and sign bits: the fp32 and bf16
  // decodes are finite (fp16 output can overflow only where raw input of that magnitude would).
  const BlockShape shape = Shape();
  std::mt19937 rng(3);
  for (const CodecSpec& spec :
       {Spec({1, 8, true}, {8, 64, false}), Spec({3, 16, true}, {2, 8, true}),
        Spec({4, 32, false}, {1, 256 / 4, true})}) {
    const BlockCodec c = MakeCodec(shape, spec);
    std::vector<uint8_t> p = EncodeOk(c, RandomBlock(shape, 4));
    absl::StatusOr<PackedBlockInfo> info = ParsePackedBlock(p);
    ASSERT_TRUE(info.ok());
    for (int round = 0; round < 20; ++round) {
      for (size_t i = info->header_bytes; i + 8 < p.size(); ++i) p[i] = static_cast<uint8_t>(rng());
      for (int s = 0; s < 2 * shape.num_layers; ++s) {
        const SectionCodec& sc = s % 2 == 0 ? c.layers()[s / 2].key : c.layers()[s / 2].value;
        const size_t groups = shape.vectors_per_section() * shape.head_dim / sc.group_size;
        const size_t at = SectionOffset(c, p, s);
        for (size_t g = 0; g < groups; ++g) {
          // Every fourth scale wide: any finite bf16 pattern (FORMAT.md, "Wide scales").
          Put16(p, at + 2 * g,
                g % 4 == 3 ? static_cast<uint16_t>(0x8000u | rng() % 0x7F80u)
                           : static_cast<uint16_t>(rng() % 0x7C00));
          if (sc.qjl) Put16(p, at + 2 * (groups + g), static_cast<uint16_t>(rng() % 0x4001));
        }
      }
      Reseal(p);
      ASSERT_TRUE(c.ValidatePackedValues(p).ok()) << c.ValidatePackedValues(p);
      for (DType out : {DType::kFloat32, DType::kBFloat16}) {
        std::vector<uint8_t> dec(*c.DecodedBytes(out, {}));
        ASSERT_TRUE(c.Decode(p, out, {}, absl::MakeSpan(dec)).ok());
        for (size_t i = 0; i < shape.num_values(); ++i) {
          const float v = testing_util::LoadAs(out, dec, i);
          ASSERT_TRUE(std::isfinite(v)) << "value " << i << " of " << DTypeName(out);
        }
      }
    }
  }
}

}  // namespace
}  // namespace turbokv::codec
