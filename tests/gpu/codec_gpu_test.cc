// CUDA codec vs CPU codec on a device: identical packed bytes and identical decoded values for
// every preset x head_dim x dtype, per-block errors, chunking over both streams, concurrent
// callers, decode into device memory, and the start-up self-test. Every test skips without a
// device (GTEST_SKIP); tests/unit/codec_warp_test.cc checks the kernels' per-warp code on the CPU.
#include <cuda_runtime.h>

#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/cuda_codec.h"

namespace turbokv::codec {
namespace {

CudaCodec* Gpu() {
  static std::unique_ptr<CudaCodec> gpu = [] {
    absl::StatusOr<std::unique_ptr<CudaCodec>> c = CudaCodec::Create();
    return c.ok() ? *std::move(c) : nullptr;
  }();
  return gpu.get();
}

#define SKIP_WITHOUT_DEVICE() \
  if (Gpu() == nullptr) GTEST_SKIP() << CudaCodec::Create().status()

struct Blocks {
  std::vector<std::vector<uint8_t>> raw, cpu, gpu;
  std::vector<absl::Span<const uint8_t>> in;
  std::vector<absl::Span<uint8_t>> out;
  std::vector<absl::Status> status;
};

Blocks MakeBlocks(const BlockCodec& codec, int n, uint32_t seed) {
  Blocks b;
  for (int i = 0; i < n; ++i) {
    b.raw.push_back(testing_util::RandomBlock(codec.shape(), seed + i));
    b.cpu.emplace_back(codec.packed_bytes());
    b.gpu.emplace_back(codec.packed_bytes());
  }
  for (size_t j = 0; j < std::min<size_t>(64, codec.shape().num_values()); ++j) {
    testing_util::StoreAs(codec.shape().dtype, b.raw[0], j, 0.0f);  // zero groups
  }
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(codec.Encode(b.raw[i], absl::MakeSpan(b.cpu[i]), CpuIsa::kScalar).ok());
    b.in.push_back(b.raw[i]);
    b.out.push_back(absl::MakeSpan(b.gpu[i]));
  }
  b.status.resize(n);
  return b;
}

class GpuMatchesCpu : public testing::TestWithParam<std::tuple<std::string, int, DType>> {};

TEST_P(GpuMatchesCpu, PackedBytesAndDecodedValues) {
  SKIP_WITHOUT_DEVICE();
  const auto& [preset, head_dim, dtype] = GetParam();
  const BlockShape shape{3, 16, 3, head_dim, dtype};
  absl::StatusOr<CodecSpec> spec = PresetSpec(preset, head_dim);
  ASSERT_TRUE(spec.ok());
  spec->protected_last_layers = 1;  // exercise an 8-bit layer in every block
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *spec, 42);
  ASSERT_TRUE(codec.ok()) << codec.status();
  constexpr int kBlocks = 9;
  Blocks b = MakeBlocks(*codec, kBlocks, 1000);
  absl::Status s = Gpu()->EncodeBatch(*codec, b.in, b.out, absl::MakeSpan(b.status));
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(b.status[i].ok()) << b.status[i];
    ASSERT_EQ(b.gpu[i], b.cpu[i]) << "block " << i;
  }
  for (DType out_dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (LayerRange range : {LayerRange{0, -1}, LayerRange{1, 3}}) {
      const size_t bytes = *codec->DecodedBytes(out_dtype, range);
      std::vector<std::vector<uint8_t>> c(kBlocks, std::vector<uint8_t>(bytes)),
          g(kBlocks, std::vector<uint8_t>(bytes));
      std::vector<absl::Span<const uint8_t>> packed;
      std::vector<absl::Span<uint8_t>> outs;
      for (int i = 0; i < kBlocks; ++i) {
        ASSERT_TRUE(
            codec->Decode(b.cpu[i], out_dtype, range, absl::MakeSpan(c[i]), CpuIsa::kScalar).ok());
        packed.push_back(b.cpu[i]);
        outs.push_back(absl::MakeSpan(g[i]));
      }
      s = Gpu()->DecodeBatch(*codec, packed, out_dtype, range, outs, absl::MakeSpan(b.status));
      ASSERT_TRUE(s.ok()) << s;
      for (int i = 0; i < kBlocks; ++i) {
        ASSERT_TRUE(b.status[i].ok()) << b.status[i];
        ASSERT_EQ(g[i], c[i]) << "block " << i << " " << DTypeName(out_dtype);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, GpuMatchesCpu,
    testing::Combine(testing::Values("k8v6", "k8v4", "k6v6", "k6v5", "k6v4", "k5v4", "k4v4-g32",
                                     "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "k3v2", "raw"),
                     testing::Values(8, 64, 96, 128, 256),
                     testing::Values(DType::kFloat16, DType::kBFloat16, DType::kFloat32)));

class GpuConfigs : public testing::TestWithParam<std::tuple<int, int, bool>> {};

// Every (g, bits, qjl) kernel instance.
TEST_P(GpuConfigs, PackedBytesAndDecodedValues) {
  SKIP_WITHOUT_DEVICE();
  const auto& [g, bits, qjl] = GetParam();
  const CodecSpec spec = testing_util::KernelInstanceSpec(g, bits, qjl);
  absl::StatusOr<BlockCodec> codec =
      BlockCodec::Create(BlockShape{2, 16, 2, 256, DType::kFloat16}, spec);
  ASSERT_TRUE(codec.ok());
  Blocks b = MakeBlocks(*codec, 3, 5);
  ASSERT_TRUE(Gpu()->EncodeBatch(*codec, b.in, b.out, absl::MakeSpan(b.status)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(b.gpu[i], b.cpu[i]) << "block " << i;
  const size_t bytes = *codec->DecodedBytes(DType::kFloat32, {});
  std::vector<uint8_t> want(bytes), got(bytes);
  ASSERT_TRUE(
      codec->Decode(b.cpu[2], DType::kFloat32, {}, absl::MakeSpan(want), CpuIsa::kScalar).ok());
  const absl::Span<const uint8_t> packed[] = {b.cpu[2]};
  const absl::Span<uint8_t> outs[] = {absl::MakeSpan(got)};
  ASSERT_TRUE(Gpu()
                  ->DecodeBatch(*codec, packed, DType::kFloat32, {}, outs,
                                absl::MakeSpan(b.status).first(1))
                  .ok());
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(AllInstances, GpuConfigs,
                         testing::Combine(testing::Values(8, 16, 32, 64, 128, 256),
                                          testing::Values(1, 2, 3, 4, 5, 6, 8), testing::Bool()));

TEST(GpuCodecTest, BadInputFailsOnlyItsBlock) {
  SKIP_WITHOUT_DEVICE();
  const BlockShape shape{2, 4, 2, 64, DType::kFloat32};
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *PresetSpec("k4v4-g32", 64));
  ASSERT_TRUE(codec.ok());
  Blocks b = MakeBlocks(*codec, 4, 3);
  testing_util::StoreAs(DType::kFloat32, b.raw[2], 700, std::numeric_limits<float>::quiet_NaN());
  const absl::Status s = Gpu()->EncodeBatch(*codec, b.in, b.out, absl::MakeSpan(b.status));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(b.status[2].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      b.status[2].message().find("non-finite value at layer 0 V token 1 head 0 coordinate 60"),
      std::string::npos)
      << b.status[2];
  for (int i : {0, 1, 3}) {
    EXPECT_TRUE(b.status[i].ok()) << b.status[i];
    EXPECT_EQ(b.gpu[i], b.cpu[i]);
  }
  EXPECT_TRUE(Gpu()->healthy());
}

// Group norms beyond fp16 (kernels/FORMAT.md, "Wide scales"): the kernels flag the block, the
// host encodes it on the CPU (the CPU's bytes); the device decodes wide scales itself, equal to
// the CPU decode in every output dtype.
TEST(GpuCodecTest, WideScalesEncodeAndDecodeLikeTheCpu) {
  SKIP_WITHOUT_DEVICE();
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const BlockShape shape{2, 4, 2, 64, dtype};
    absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *PresetSpec("k4v4-g32", 64));
    ASSERT_TRUE(codec.ok());
    Blocks b = MakeBlocks(*codec, 3, 5);
    const float huge = dtype == DType::kFloat32 ? 3.0e38f : 0x1.fep127f;
    for (size_t j = 0; j < 64; ++j) {
      testing_util::StoreAs(dtype, b.raw[1], j, 12000.0f);
      testing_util::StoreAs(dtype, b.raw[1], 8 * 64 + j, j % 2 ? huge : -huge);
    }
    ASSERT_TRUE(codec->Encode(b.raw[1], absl::MakeSpan(b.cpu[1]), CpuIsa::kScalar).ok());
    const absl::Status s = Gpu()->EncodeBatch(*codec, b.in, b.out, absl::MakeSpan(b.status));
    ASSERT_TRUE(s.ok()) << s;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(b.status[i].ok()) << b.status[i];
      EXPECT_EQ(b.gpu[i], b.cpu[i]) << "block " << i;
    }
    for (DType out : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      const size_t bytes = *codec->DecodedBytes(out, {});
      std::vector<std::vector<uint8_t>> want(3, std::vector<uint8_t>(bytes)), got = want;
      std::vector<absl::Span<const uint8_t>> in;
      std::vector<absl::Span<uint8_t>> outs;
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(
            codec->Decode(b.cpu[i], out, {}, absl::MakeSpan(want[i]), CpuIsa::kScalar).ok());
        in.push_back(b.cpu[i]);
        outs.push_back(absl::MakeSpan(got[i]));
      }
      std::vector<absl::Status> st(3);
      ASSERT_TRUE(Gpu()->DecodeBatch(*codec, in, out, {}, outs, absl::MakeSpan(st)).ok());
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(st[i].ok()) << st[i];
        EXPECT_EQ(got[i], want[i]) << "block " << i << " out " << DTypeName(out);
      }
    }
  }
  EXPECT_TRUE(Gpu()->healthy());
}

TEST(GpuCodecTest, ManyChunksOverBothStreamsAndConcurrentCallers) {
  SKIP_WITHOUT_DEVICE();
  CudaCodecOptions options;
  options.chunk_bytes = 200 * 1024;  // several chunks per call
  options.max_concurrent_calls = 2;
  absl::StatusOr<std::unique_ptr<CudaCodec>> gpu = CudaCodec::Create(options);
  ASSERT_TRUE(gpu.ok());
  const BlockShape shape{4, 16, 4, 128, DType::kFloat16};  // 128 KiB raw
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *PresetSpec("k3v3-g32", 128));
  ASSERT_TRUE(codec.ok());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, -1);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Blocks b = MakeBlocks(*codec, 13, 100 * t);
      if (!(*gpu)->EncodeBatch(*codec, b.in, b.out, absl::MakeSpan(b.status)).ok()) return;
      int bad = 0;
      for (int i = 0; i < 13; ++i) bad += (b.status[i].ok() && b.gpu[i] == b.cpu[i]) ? 0 : 1;
      mismatches[t] = bad;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

TEST(GpuCodecTest, DecodesIntoDeviceMemory) {
  SKIP_WITHOUT_DEVICE();
  const BlockShape shape{3, 16, 2, 128, DType::kFloat16};
  absl::StatusOr<CodecSpec> spec = PresetSpec("k8v4", 128);
  spec->protected_first_layers = 1;
  spec->protected_bits = 16;
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *spec);
  ASSERT_TRUE(codec.ok());
  Blocks b = MakeBlocks(*codec, 5, 9);
  std::vector<uint8_t> damaged = b.cpu[3];
  damaged[5] ^= 0xFF;  // a foreign header: that block fails, the others decode
  std::vector<absl::Span<const uint8_t>> packed{b.cpu[0], b.cpu[1], b.cpu[2], damaged, b.cpu[4]};
  for (LayerRange range : {LayerRange{0, -1}, LayerRange{1, 3}}) {
    const size_t block_out = *codec->DecodedBytes(DType::kBFloat16, range);
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 5 * block_out), cudaSuccess);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    absl::Status s =
        Gpu()->DecodeToDevice(*codec, packed, DType::kBFloat16, range, dev, 5 * block_out, stream,
                              absl::MakeSpan(b.status).first(5));
    ASSERT_TRUE(s.ok()) << s;
    std::vector<uint8_t> host(5 * block_out);
    ASSERT_EQ(cudaMemcpy(host.data(), dev, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 5; ++i) {
      std::vector<uint8_t> got(host.begin() + i * block_out, host.begin() + (i + 1) * block_out);
      if (i == 3) {
        EXPECT_FALSE(b.status[i].ok());
        EXPECT_EQ(got, std::vector<uint8_t>(block_out, 0)) << "a failed block is zeros";
        continue;
      }
      ASSERT_TRUE(b.status[i].ok()) << b.status[i];
      std::vector<uint8_t> want(block_out);
      ASSERT_TRUE(codec->Decode(b.cpu[i], DType::kBFloat16, range, absl::MakeSpan(want)).ok());
      EXPECT_EQ(got, want) << "block " << i;
    }
    cudaStreamDestroy(stream);
    cudaFree(dev);
  }
}

TEST(GpuCodecTest, SelfTestPasses) {
  SKIP_WITHOUT_DEVICE();
  const absl::Status s = SelfTestCudaCodec(*Gpu());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(GpuCodecTest, CreateWithoutDeviceIsUnavailable) {
  if (Gpu() != nullptr) GTEST_SKIP() << "a device is present";
  EXPECT_EQ(CudaCodec::Create().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace turbokv::codec
