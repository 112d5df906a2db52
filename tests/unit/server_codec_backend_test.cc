// Backend selection, per-block errors, device-failure fallback, degraded marking and the codec
// metrics' backend labels (server/service/codec_backend.h). The CUDA codec is replaced by a
// fake at its interface (codec::CudaCodec): the seam that lets a machine without a GPU drive
// every branch. The real CUDA codec is tested in tests/gpu/, the server binary's selection
// without a device in tests/integration/server_codec_backend_test.cc.
#include <atomic>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/metrics/metrics.h"
#include "server/service/codec_backend.h"

namespace turbokv::server {
namespace {

using codec::BlockCodec;
using codec::DType;

// Runs the CPU codec behind the CudaCodec interface, or misbehaves as told.
class FakeCuda : public codec::CudaCodec {
 public:
  enum class Mode { kLikeCpu, kCorruptFirstByte, kFail, kFailAndDisable };
  explicit FakeCuda(std::shared_ptr<std::atomic<Mode>> mode,
                    std::shared_ptr<std::atomic<int>> calls)
      : mode_(std::move(mode)), calls_(std::move(calls)) {}

  std::string DeviceName() const override { return "Fake GPU (sm_00)"; }
  bool healthy() const override { return healthy_; }
  double last_kernel_seconds() const override { return 0; }

  absl::Status EncodeBatch(const BlockCodec& codec,
                           absl::Span<const absl::Span<const uint8_t>> raws,
                           absl::Span<const absl::Span<uint8_t>> packeds,
                           absl::Span<absl::Status> block_status) override {
    ++*calls_;
    if (absl::Status s = Misbehave(); !s.ok()) return s;
    for (size_t i = 0; i < raws.size(); ++i) block_status[i] = codec.Encode(raws[i], packeds[i]);
    if (mode_->load() == Mode::kCorruptFirstByte) packeds[0][codec.header().size()] ^= 1;
    return absl::OkStatus();
  }
  absl::Status DecodeBatch(const BlockCodec& codec,
                           absl::Span<const absl::Span<const uint8_t>> packeds, DType out_dtype,
                           codec::LayerRange range, absl::Span<const absl::Span<uint8_t>> outs,
                           absl::Span<absl::Status> block_status) override {
    ++*calls_;
    if (absl::Status s = Misbehave(); !s.ok()) return s;
    for (size_t i = 0; i < packeds.size(); ++i) {
      block_status[i] = codec.Decode(packeds[i], out_dtype, range, outs[i]);
    }
    return absl::OkStatus();
  }
  absl::Status DecodeToDevice(const BlockCodec&, absl::Span<const absl::Span<const uint8_t>>, DType,
                              codec::LayerRange, void*, size_t, void*,
                              absl::Span<absl::Status>) override {
    return absl::UnimplementedError("fake");
  }

 private:
  absl::Status Misbehave() {
    switch (mode_->load()) {
      case Mode::kFail:
        return absl::InternalError("CUDA encode kernel launch: injected");
      case Mode::kFailAndDisable:
        healthy_ = false;
        return absl::InternalError(
            "CUDA cudaStreamSynchronize: cudaErrorIllegalAddress (injected)");
      default:
        return absl::OkStatus();
    }
  }
  std::shared_ptr<std::atomic<Mode>> mode_;
  std::shared_ptr<std::atomic<int>> calls_;
  bool healthy_ = true;
};

struct Fixture {
  std::shared_ptr<std::atomic<FakeCuda::Mode>> mode =
      std::make_shared<std::atomic<FakeCuda::Mode>>(FakeCuda::Mode::kLikeCpu);
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  CudaCodecFactory Factory() {
    return [m = mode, c = calls]() -> absl::StatusOr<std::unique_ptr<codec::CudaCodec>> {
      return std::make_unique<FakeCuda>(m, c);
    };
  }
};

// The value of one sample of `family` whose labels include all of `labels`.
double Sample(prometheus::Registry& registry, const std::string& family,
              const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      size_t hits = 0;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        auto it = labels.find(l.name);
        if (it != labels.end() && it->second == l.value) ++hits;
      }
      if (hits == labels.size())
        return f.type == prometheus::MetricType::Gauge ? m.gauge.value : m.counter.value;
    }
  }
  return -1;  // no such sample
}

BlockCodec SmallCodec() {
  return *BlockCodec::Create(codec::BlockShape{2, 4, 2, 64, DType::kFloat32},
                             *codec::PresetSpec("k4v4-g32", 64));
}

TEST(CodecBackendTest, CpuWhenAskedAndWhenNoDevice) {
  absl::StatusOr<CodecBackend> cpu = SelectCodecBackend(CodecBackendKind::kCpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->cuda, nullptr);
  EXPECT_EQ(cpu->name.rfind("cpu-", 0), 0u) << cpu->name;
  EXPECT_EQ(cpu->name, cpu->cpu_name);

  const CudaCodecFactory none = []() -> absl::StatusOr<std::unique_ptr<codec::CudaCodec>> {
    return absl::UnavailableError("no CUDA device is usable: 0 devices found");
  };
  absl::StatusOr<CodecBackend> autob = SelectCodecBackend(CodecBackendKind::kAuto, none);
  ASSERT_TRUE(autob.ok());
  EXPECT_EQ(autob->cuda, nullptr);
  EXPECT_EQ(autob->detail, "CUDA not used: no CUDA device is usable: 0 devices found");
  const absl::StatusOr<CodecBackend> cuda = SelectCodecBackend(CodecBackendKind::kCuda, none);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cuda.status().message().find("0 devices found"), std::string::npos) << cuda.status();
}

TEST(CodecBackendTest, CudaOnlyAfterTheSelfTestPasses) {
  Fixture f;
  absl::StatusOr<CodecBackend> good = SelectCodecBackend(CodecBackendKind::kAuto, f.Factory());
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->name, "cuda");
  EXPECT_NE(good->cuda, nullptr);
  EXPECT_NE(good->detail.find("Fake GPU (sm_00), self-test passed"), std::string::npos)
      << good->detail;
  EXPECT_GT(f.calls->load(), 0);

  // A device whose bytes differ from the CPU's is not used.
  f.mode->store(FakeCuda::Mode::kCorruptFirstByte);
  absl::StatusOr<CodecBackend> bad = SelectCodecBackend(CodecBackendKind::kAuto, f.Factory());
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->cuda, nullptr);
  EXPECT_EQ(bad->name, bad->cpu_name);
  EXPECT_NE(bad->detail.find(
                "failed the start-up self-test: self-test: packed k4v4-g32 head_dim 128 fp16 "
                "differs from the CPU at byte"),
            std::string::npos)
      << bad->detail;
  const absl::StatusOr<CodecBackend> forced =
      SelectCodecBackend(CodecBackendKind::kCuda, f.Factory());
  EXPECT_EQ(forced.status().code(), absl::StatusCode::kFailedPrecondition) << forced.status();

  f.mode->store(FakeCuda::Mode::kFail);
  const absl::StatusOr<CodecBackend> failing =
      SelectCodecBackend(CodecBackendKind::kAuto, f.Factory());
  ASSERT_TRUE(failing.ok());
  EXPECT_EQ(failing->cuda, nullptr);
}

TEST(CodecBackendTest, MetricsNameTheBackendThatRan) {
  Fixture f;
  absl::StatusOr<CodecBackend> backend = SelectCodecBackend(CodecBackendKind::kAuto, f.Factory());
  ASSERT_TRUE(backend.ok());
  prometheus::Registry registry;
  Metrics metrics(registry, backend->name, 1 << 30, backend->cpu_name);
  backend->AttachMetrics(&metrics);
  const std::string cpu = backend->cpu_name;

  const BlockCodec codec = SmallCodec();
  std::vector<std::vector<uint8_t>> raw, cpu_packed, packed;
  std::vector<absl::Span<const uint8_t>> in;
  std::vector<absl::Span<uint8_t>> out;
  for (int i = 0; i < 3; ++i) {
    raw.push_back(codec::testing_util::RandomBlock(codec.shape(), 40 + i));
    cpu_packed.emplace_back(codec.packed_bytes());
    ASSERT_TRUE(codec.Encode(raw[i], absl::MakeSpan(cpu_packed[i])).ok());
    packed.emplace_back(codec.packed_bytes());
  }
  for (int i = 0; i < 3; ++i) {
    in.push_back(raw[i]);
    out.push_back(absl::MakeSpan(packed[i]));
  }
  const double raw3 = 3.0 * codec.raw_bytes();

  // 1. On the device: labelled cuda.
  std::vector<absl::Status> st = EncodeBlocks(*backend, codec, in, out);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(st[i].ok()) << st[i];
  EXPECT_EQ(Sample(registry, "turbokv_codec_bytes_total", {{"op", "encode"}, {"backend", "cuda"}}),
            raw3);
  EXPECT_EQ(Sample(registry, "turbokv_codec_bytes_total", {{"op", "encode"}, {"backend", cpu}}), 0);

  // 2. Bad data in one block: that block fails, no fallback.
  std::vector<uint8_t> nan_block = raw[1];
  codec::testing_util::StoreAs(DType::kFloat32, nan_block, 9,
                               std::numeric_limits<float>::quiet_NaN());
  in[1] = nan_block;
  st = EncodeBlocks(*backend, codec, in, out);
  EXPECT_TRUE(st[0].ok() && st[2].ok());
  EXPECT_EQ(st[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Sample(registry, "turbokv_codec_fallbacks_total",
                   {{"op", "encode"}, {"reason", "device_error"}}),
            0);
  in[1] = raw[1];

  // 3. A device failure: the batch is redone on the CPU (right bytes), counted, labelled cpu.
  f.mode->store(FakeCuda::Mode::kFail);
  for (auto& p : packed) std::fill(p.begin(), p.end(), 0);
  st = EncodeBlocks(*backend, codec, in, out);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(st[i].ok()) << st[i];
    EXPECT_EQ(packed[i], cpu_packed[i]);
  }
  EXPECT_EQ(Sample(registry, "turbokv_codec_fallbacks_total",
                   {{"op", "encode"}, {"reason", "device_error"}}),
            1);
  EXPECT_EQ(Sample(registry, "turbokv_codec_bytes_total", {{"op", "encode"}, {"backend", cpu}}),
            raw3);
  EXPECT_EQ(Sample(registry, "turbokv_codec_bytes_total", {{"op", "encode"}, {"backend", "cuda"}}),
            2 * raw3);
  EXPECT_FALSE(backend->degraded());  // the codec is still healthy: the next batch tries again
  EXPECT_EQ(Sample(registry, "turbokv_codec_degraded", {}), 0);

  // 4. A failure that disables the CUDA codec: degraded, later batches skip the device.
  f.mode->store(FakeCuda::Mode::kFailAndDisable);
  st = EncodeBlocks(*backend, codec, in, out);
  EXPECT_TRUE(st[0].ok());
  EXPECT_TRUE(backend->degraded());
  EXPECT_EQ(Sample(registry, "turbokv_codec_degraded", {}), 1);
  const int calls = f.calls->load();
  std::vector<std::vector<uint8_t>> dec(
      3, std::vector<uint8_t>(*codec.DecodedBytes(DType::kFloat16, {})));
  std::vector<absl::Span<const uint8_t>> pk(cpu_packed.begin(), cpu_packed.end());
  std::vector<absl::Span<uint8_t>> dout;
  for (auto& d : dec) dout.push_back(absl::MakeSpan(d));
  st = DecodeBlocks(*backend, codec, pk, DType::kFloat16, {}, dout);
  EXPECT_TRUE(st[2].ok()) << st[2];
  std::vector<uint8_t> want(dec[2].size());
  ASSERT_TRUE(codec.Decode(cpu_packed[2], DType::kFloat16, {}, absl::MakeSpan(want)).ok());
  EXPECT_EQ(dec[2], want);
  EXPECT_EQ(f.calls->load(), calls) << "a degraded backend does not call the device";
  EXPECT_EQ(
      Sample(registry, "turbokv_codec_fallbacks_total", {{"op", "decode"}, {"reason", "degraded"}}),
      1);
  EXPECT_EQ(Sample(registry, "turbokv_codec_bytes_total", {{"op", "decode"}, {"backend", cpu}}),
            3.0 * want.size());
  EXPECT_EQ(Sample(registry, "turbokv_codec_bytes_total", {{"op", "decode"}, {"backend", "cuda"}}),
            0);
  EXPECT_EQ(Sample(registry, "turbokv_codec_backend_info", {{"backend", "cuda"}}), 1);
}

TEST(CodecBackendTest, CpuBackendHasOnlyCpuLabels) {
  absl::StatusOr<CodecBackend> backend = SelectCodecBackend(CodecBackendKind::kCpu);
  prometheus::Registry registry;
  Metrics metrics(registry, backend->name, 1 << 30, backend->cpu_name);
  backend->AttachMetrics(&metrics);
  const BlockCodec codec = SmallCodec();
  std::vector<uint8_t> raw = codec::testing_util::RandomBlock(codec.shape(), 1),
                       packed(codec.packed_bytes());
  const absl::Span<const uint8_t> in[] = {raw};
  const absl::Span<uint8_t> out[] = {absl::MakeSpan(packed)};
  EXPECT_TRUE(EncodeBlocks(*backend, codec, in, out)[0].ok());
  EXPECT_EQ(
      Sample(registry, "turbokv_codec_bytes_total", {{"op", "encode"}, {"backend", backend->name}}),
      static_cast<double>(codec.raw_bytes()));
  EXPECT_EQ(Sample(registry, "turbokv_codec_bytes_total", {{"backend", "cuda"}}), -1)
      << "no cuda series";
  EXPECT_EQ(Sample(registry, "turbokv_codec_fallbacks_total",
                   {{"op", "encode"}, {"reason", "device_error"}}),
            0);
}

}  // namespace
}  // namespace turbokv::server
