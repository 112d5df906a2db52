// Wide scales (kernels/FORMAT.md, "Wide scales"): a group whose norm is beyond fp16's range is
// stored, never refused. Such groups round-trip within the codec's usual error on every CPU
// path, with the same bytes on each; their indices are exactly those of the same group scaled
// into fp16's range (the quantization is scale-invariant); values up to the fp32 / bf16 maximum
// decode to finite values; blocks that fit fp16 keep their bytes (FormatTest.GoldenBlock).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/float16.h"

namespace turbokv::codec {
namespace {

using testing_util::LoadAs;
using testing_util::RandomBlock;
using testing_util::StoreAs;

std::vector<CpuIsa> Isas() {
  std::vector<CpuIsa> isas{CpuIsa::kScalar};
  if (DetectCpuIsa() != CpuIsa::kScalar) isas.push_back(CpuIsa::kAvx2);
  if (DetectCpuIsa() == CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  return isas;
}

std::vector<uint16_t> Scales(const BlockCodec& c, const std::vector<uint8_t>& packed, int section) {
  const SectionCodec& sc =
      section % 2 == 0 ? c.layers()[section / 2].key : c.layers()[section / 2].value;
  const size_t groups = c.shape().vectors_per_section() * c.shape().head_dim / sc.group_size;
  std::vector<uint16_t> out(groups);
  std::memcpy(out.data(), packed.data() + c.plans()[section].offset, 2 * groups);
  return out;
}

// Σ (x − x̂)² / Σ x² over values [begin, end) of a raw block and its fp32 decode.
double RelMse(DType dtype, const std::vector<uint8_t>& raw, const std::vector<uint8_t>& dec,
              size_t begin, size_t end) {
  double e = 0, r = 0;
  for (size_t i = begin; i < end; ++i) {
    const double x = LoadAs(dtype, raw, i), y = LoadAs(DType::kFloat32, dec, i);
    e += (x - y) * (x - y);
    r += x * x;
  }
  return e / r;
}

struct Case {
  const char* preset;
  DType dtype;
  double bound;  // relative MSE of the large vectors (the codec's usual error at these bits)
};

class WideScales : public testing::TestWithParam<Case> {};

// Layer 0 K token 0 head 0: 32 values of 12,000 (norm 67,882) and an alternating ±12,000 head;
// layer 0 V token 1 head 1: near the dtype's maximum (fp32 3e38, bf16 its largest 3.39e38);
// every other vector ordinary keys-like data.
TEST_P(WideScales, LargeGroupsRoundTripWithIdenticalBytesOnEveryIsa) {
  const Case& k = GetParam();
  const BlockShape shape{2, 3, 2, 128, k.dtype};
  absl::StatusOr<CodecSpec> spec = PresetSpec(k.preset, shape.head_dim);
  ASSERT_TRUE(spec.ok());
  absl::StatusOr<BlockCodec> c = BlockCodec::Create(shape, *spec, 9);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint8_t> raw = RandomBlock(shape, 5);
  const size_t hd = shape.head_dim, vps = shape.vectors_per_section() * hd;
  for (size_t j = 0; j < hd; ++j)
    StoreAs(k.dtype, raw, j, j < 32 ? 12000.0f : (j % 2 ? -12000.0f : 12000.0f) * (1 + j % 7) / 2);
  const float huge = k.dtype == DType::kFloat32    ? 3.0e38f
                     : k.dtype == DType::kBFloat16 ? 0x1.fep127f
                                                   : 60000.0f;
  const size_t v1 = vps + 3 * hd;  // layer 0 V, token 1, head 1
  for (size_t j = 0; j < hd; ++j)
    StoreAs(k.dtype, raw, v1 + j, (j % 3 ? huge : -huge) * (j % 5 == 0 ? 1.0f : 0.75f));

  std::vector<std::vector<uint8_t>> packed;
  for (CpuIsa isa : Isas()) {
    packed.emplace_back(c->packed_bytes());
    const absl::Status s = c->Encode(raw, absl::MakeSpan(packed.back()), isa);
    ASSERT_TRUE(s.ok()) << CpuIsaName(isa) << ": " << s;
    EXPECT_EQ(packed.back(), packed.front())
        << CpuIsaName(isa) << " bytes differ from the scalar path";
  }
  ASSERT_TRUE(VerifyPackedChecksum(packed[0]).ok());
  ASSERT_TRUE(c->ValidatePackedValues(packed[0]).ok()) << c->ValidatePackedValues(packed[0]);
  // The large groups carry wide scales, the ordinary ones fp16 scales.
  const std::vector<uint16_t> k0 = Scales(*c, packed[0], 0);
  // (With QJL, ‖ŷ'‖ > 1 can bring n / ‖ŷ'‖ of the 12,000s back under 65,504.)
  if (!c->layers()[0].key.qjl) {
    EXPECT_TRUE(k0[0] & 0x8000) << std::hex << k0[0];
  }
  const size_t g32 = 32 / c->layers()[0].key.group_size;  // the group holding coordinate 32
  EXPECT_TRUE(k0[g32] & 0x8000) << std::hex << k0[g32];
  EXPECT_FALSE(k0.back() & 0x8000) << std::hex << k0.back();
  const std::vector<uint16_t> v0 = Scales(*c, packed[0], 1);
  EXPECT_TRUE(v0[(3 * hd) / c->layers()[0].value.group_size] & 0x8000);

  for (DType out : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    std::vector<std::vector<uint8_t>> dec;
    for (CpuIsa isa : Isas()) {
      dec.emplace_back(*c->DecodedBytes(out, {}));
      ASSERT_TRUE(c->Decode(packed[0], out, {}, absl::MakeSpan(dec.back()), isa).ok());
      EXPECT_EQ(dec.back(), dec.front())
          << CpuIsaName(isa) << " decode differs, out " << DTypeName(out);
    }
    for (size_t i = 0; i < shape.num_values(); ++i) {
      ASSERT_TRUE(std::isfinite(LoadAs(out, dec[0], i)))
          << "value " << i << " of " << DTypeName(out);
    }
    if (out != DType::kFloat32) continue;
    EXPECT_LT(RelMse(k.dtype, raw, dec[0], 0, hd), k.bound) << "12,000s";
    EXPECT_LT(RelMse(k.dtype, raw, dec[0], v1, v1 + hd), k.bound) << "near the maximum";
    EXPECT_LT(RelMse(k.dtype, raw, dec[0], hd, vps), k.bound) << "ordinary vectors";
  }
}

INSTANTIATE_TEST_SUITE_P(PresetsAndDtypes, WideScales,
                         testing::Values(Case{"k4v4-g32", DType::kFloat32, 0.02},
                                         Case{"k4v4-g32", DType::kBFloat16, 0.02},
                                         Case{"k4v4-g32", DType::kFloat16, 0.02},
                                         Case{"k4v3-g32", DType::kFloat32, 0.05},
                                         Case{"k8v4", DType::kFloat32, 0.02},
                                         Case{"k8v4", DType::kBFloat16, 0.02},
                                         Case{"k3v2-g32-qjl", DType::kFloat32, 0.2},
                                         Case{"k3v2-g32-qjl", DType::kBFloat16, 0.2}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.preset) + "_" +
                                              std::string(DTypeName(info.param.dtype));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// A wide group quantizes exactly as the same group scaled into fp16's range: same indices,
// scale 2^k times the narrow one up to fp16 vs bf16 rounding.
TEST(WideScaleTest, IndicesEqualThoseOfTheGroupScaledIntoRange) {
  const BlockShape shape{1, 2, 1, 64, DType::kFloat32};
  for (const char* preset : {"k4v4-g32", "k8v4"}) {
    absl::StatusOr<BlockCodec> c = BlockCodec::Create(shape, *PresetSpec(preset, 64), 1);
    ASSERT_TRUE(c.ok());
    const std::vector<uint8_t> small = RandomBlock(shape, 11);
    std::vector<uint8_t> big = small;
    const float factor = 0x1p20f;  // ~8 * 2^20: every group beyond 65,504
    for (size_t i = 0; i < shape.num_values(); ++i)
      StoreAs(shape.dtype, big, i, LoadAs(shape.dtype, small, i) * factor);
    std::vector<uint8_t> ps(c->packed_bytes()), pb(c->packed_bytes());
    ASSERT_TRUE(c->Encode(small, absl::MakeSpan(ps)).ok());
    ASSERT_TRUE(c->Encode(big, absl::MakeSpan(pb)).ok());
    for (int s = 0; s < 2; ++s) {
      const std::vector<uint16_t> a = Scales(*c, ps, s), b = Scales(*c, pb, s);
      for (size_t g = 0; g < a.size(); ++g) {
        ASSERT_TRUE(b[g] & 0x8000) << preset << " section " << s << " group " << g;
        const double narrow = HalfToFloat(a[g]) * static_cast<double>(factor);
        const double wide =
            BFloat16ToFloat(static_cast<uint16_t>(b[g] & 0x7FFF)) * std::ldexp(1.0, 72);
        EXPECT_NEAR(wide / narrow, 1.0, 1.0 / 128) << preset << " section " << s << " group " << g;
      }
      // Everything after the scales (indices) is identical.
      const size_t at = c->plans()[s].offset + 2 * a.size(),
                   end = c->plans()[s].offset + c->plans()[s].bytes;
      EXPECT_TRUE(std::equal(ps.begin() + at, ps.begin() + end, pb.begin() + at))
          << preset << " section " << s;
    }
  }
}

// The largest finite fp32 (and -max, and a group of them) decodes finite: coordinates that
// reconstruct beyond the dtype's maximum are clamped to it.
TEST(WideScaleTest, ValuesAtTheDtypeMaximumDecodeFinite) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const BlockShape shape{1, 1, 1, 32, dtype};
    absl::StatusOr<BlockCodec> c = BlockCodec::Create(shape, *PresetSpec("k4v4-g32", 32), 1);
    ASSERT_TRUE(c.ok());
    std::vector<uint8_t> raw(shape.raw_bytes());
    const float max = dtype == DType::kFloat32 ? std::numeric_limits<float>::max() : 0x1.fep127f;
    for (size_t i = 0; i < shape.num_values(); ++i) StoreAs(dtype, raw, i, i % 2 ? max : -max);
    std::vector<uint8_t> packed(c->packed_bytes());
    ASSERT_TRUE(c->Encode(raw, absl::MakeSpan(packed)).ok());
    for (DType out : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      std::vector<uint8_t> dec(*c->DecodedBytes(out, {}));
      ASSERT_TRUE(c->Decode(packed, out, {}, absl::MakeSpan(dec)).ok());
      for (size_t i = 0; i < shape.num_values(); ++i) {
        const float v = LoadAs(out, dec, i);
        ASSERT_TRUE(std::isfinite(v))
            << DTypeName(dtype) << " -> " << DTypeName(out) << " value " << i;
        if (out == dtype) {
          EXPECT_EQ(std::signbit(v), i % 2 == 0) << i;
        }
      }
      if (out == DType::kFloat32) {
        std::vector<uint8_t> dec32 = dec;
        EXPECT_LT(RelMse(dtype, raw, dec32, 0, shape.num_values()), 0.02);
      }
    }
  }
}

// A damaged wide scale (its sign bit, the wide marker, or its exponent) is caught by the
// checksum: DataLoss before anything decodes it.
TEST(WideScaleTest, DamagedWideScaleIsDataLoss) {
  const BlockShape shape{1, 1, 1, 32, DType::kFloat32};
  absl::StatusOr<BlockCodec> c = BlockCodec::Create(shape, *PresetSpec("k4v4-g32", 32), 1);
  ASSERT_TRUE(c.ok());
  std::vector<uint8_t> raw(shape.raw_bytes());
  for (size_t i = 0; i < shape.num_values(); ++i) StoreAs(shape.dtype, raw, i, 12000.0f);
  std::vector<uint8_t> packed(c->packed_bytes());
  ASSERT_TRUE(c->Encode(raw, absl::MakeSpan(packed)).ok());
  const size_t at = c->plans()[0].offset;
  ASSERT_TRUE(packed[at + 1] & 0x80);
  for (uint8_t flip : {0x80, 0x40, 0x01}) {
    std::vector<uint8_t> p = packed;
    p[at + 1] ^= flip;
    EXPECT_EQ(VerifyPackedChecksum(p).code(), absl::StatusCode::kDataLoss) << int{flip};
  }
}

// Sections without scales: raw sections keep any finite value bit for bit; a 16-bit (fp16)
// section still cannot hold a value beyond 65,504 and says what to use instead.
TEST(WideScaleTest, PlainSectionsOfLargeValues) {
  const BlockShape shape{2, 2, 1, 32, DType::kFloat32};
  CodecSpec spec = *PresetSpec("raw", 32);
  absl::StatusOr<BlockCodec> raw_codec = BlockCodec::Create(shape, spec, 1);
  ASSERT_TRUE(raw_codec.ok());
  std::vector<uint8_t> raw = RandomBlock(shape, 3);
  StoreAs(shape.dtype, raw, 5, 3.0e38f);
  std::vector<uint8_t> packed(raw_codec->packed_bytes()), dec(raw.size());
  ASSERT_TRUE(raw_codec->Encode(raw, absl::MakeSpan(packed)).ok());
  ASSERT_TRUE(raw_codec->Decode(packed, DType::kFloat32, {}, absl::MakeSpan(dec)).ok());
  EXPECT_EQ(dec, raw);

  spec = *PresetSpec("k4v4-g32", 32);
  spec.protected_first_layers = 1;
  spec.protected_bits = 16;
  absl::StatusOr<BlockCodec> p16 = BlockCodec::Create(shape, spec, 1);
  ASSERT_TRUE(p16.ok());
  packed.assign(p16->packed_bytes(), 0);
  const absl::Status s = p16->Encode(raw, absl::MakeSpan(packed));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("protect layers at 8 bits"), std::string::npos) << s;
  // At 8 bits the protected layer takes it (wide scale).
  spec.protected_bits = 8;
  absl::StatusOr<BlockCodec> p8 = BlockCodec::Create(shape, spec, 1);
  ASSERT_TRUE(p8.ok());
  packed.assign(p8->packed_bytes(), 0);
  ASSERT_TRUE(p8->Encode(raw, absl::MakeSpan(packed)).ok());
  ASSERT_TRUE(p8->Decode(packed, DType::kFloat32, {}, absl::MakeSpan(dec)).ok());
  EXPECT_NEAR(LoadAs(DType::kFloat32, dec, 5) / 3.0e38, 1.0, 0.05);
}

}  // namespace
}  // namespace turbokv::codec
