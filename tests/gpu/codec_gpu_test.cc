// CUDA codec vs CPU codec: identical packed bytes and identical decoded values.
#include <limits>
#include <memory>
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/cuda_codec.h"

namespace turbokv::codec {
namespace {

CudaCodec* Gpu() {
  static std::unique_ptr<CudaCodec> gpu = [] {
    absl::StatusOr<std::unique_ptr<CudaCodec>> c = CudaCodec::Create(0);
    return c.ok() ? *std::move(c) : nullptr;
  }();
  return gpu.get();
}

class GpuMatchesCpu : public testing::TestWithParam<std::tuple<std::string, int, DType>> {};

TEST_P(GpuMatchesCpu, PackedBytesAndDecodedValues) {
  if (Gpu() == nullptr) GTEST_SKIP() << CudaCodec::Create(0).status();
  const auto& [preset, head_dim, dtype] = GetParam();
  const BlockShape shape{3, 16, 3, head_dim, dtype};
  absl::StatusOr<CodecSpec> spec = PresetSpec(preset, head_dim);
  ASSERT_TRUE(spec.ok());
  spec->protected_last_layers = 1;  // exercise an 8-bit layer in every block
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *spec, 42);
  ASSERT_TRUE(codec.ok()) << codec.status();
  constexpr int kBlocks = 9;
  std::vector<std::vector<uint8_t>> raws, cpu(kBlocks), gpu(kBlocks);
  std::vector<absl::Span<const uint8_t>> in;
  std::vector<absl::Span<uint8_t>> out;
  for (int i = 0; i < kBlocks; ++i) {
    raws.push_back(testing_util::RandomBlock(shape, 1000 + i));
    if (i == 0) std::fill(raws[0].begin(), raws[0].begin() + 64, 0);  // zero groups
    cpu[i].resize(codec->packed_bytes());
    gpu[i].resize(codec->packed_bytes());
    ASSERT_TRUE(codec->Encode(raws[i], absl::MakeSpan(cpu[i]), CpuIsa::kScalar).ok());
  }
  for (int i = 0; i < kBlocks; ++i) {
    in.push_back(raws[i]);
    out.push_back(absl::MakeSpan(gpu[i]));
  }
  absl::Status s = Gpu()->EncodeBatch(*codec, in, out);
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < kBlocks; ++i) ASSERT_EQ(gpu[i], cpu[i]) << "block " << i;

  for (DType out_dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (LayerRange range : {LayerRange{0, -1}, LayerRange{1, 3}}) {
      const size_t bytes = *codec->DecodedBytes(out_dtype, range);
      std::vector<std::vector<uint8_t>> c(kBlocks, std::vector<uint8_t>(bytes)),
          g(kBlocks, std::vector<uint8_t>(bytes));
      std::vector<absl::Span<const uint8_t>> packed;
      std::vector<absl::Span<uint8_t>> outs;
      for (int i = 0; i < kBlocks; ++i) {
        ASSERT_TRUE(codec->Decode(cpu[i], out_dtype, range, absl::MakeSpan(c[i]), CpuIsa::kScalar).ok());
        packed.push_back(cpu[i]);
        outs.push_back(absl::MakeSpan(g[i]));
      }
      s = Gpu()->DecodeBatch(*codec, packed, out_dtype, range, outs);
      ASSERT_TRUE(s.ok()) << s;
      for (int i = 0; i < kBlocks; ++i) ASSERT_EQ(g[i], c[i]) << "block " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, GpuMatchesCpu,
    testing::Combine(testing::Values("k8v4", "k4v4-g32", "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "raw"),
                     testing::Values(8, 64, 96, 128, 256),
                     testing::Values(DType::kFloat16, DType::kBFloat16, DType::kFloat32)));

TEST(GpuCodecTest, ReportsBadInputLikeTheCpu) {
  if (Gpu() == nullptr) GTEST_SKIP() << CudaCodec::Create(0).status();
  const BlockShape shape{2, 4, 2, 64, DType::kFloat32};
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *PresetSpec("k4v4-g32", 64));
  ASSERT_TRUE(codec.ok());
  std::vector<uint8_t> raw = testing_util::RandomBlock(shape, 3);
  testing_util::StoreAs(DType::kFloat32, raw, 700, std::numeric_limits<float>::quiet_NaN());
  std::vector<uint8_t> packed(codec->packed_bytes());
  std::vector<absl::Span<const uint8_t>> in{raw};
  std::vector<absl::Span<uint8_t>> out{absl::MakeSpan(packed)};
  const absl::Status s = Gpu()->EncodeBatch(*codec, in, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s;
}

TEST(GpuCodecTest, CreateWithoutDeviceIsUnavailable) {
  if (Gpu() != nullptr) GTEST_SKIP() << "a device is present";
  EXPECT_EQ(CudaCodec::Create(0).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace turbokv::codec
