#include "server/service/codec_backend.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace turbokv::server {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Records and logs a device failure; marks the backend degraded when the CUDA codec was
// disabled by it (or already was).
void OnDeviceFailure(const CodecBackend& b, CodecOp op, const absl::Status& error) {
  CodecBackendState& st = *b.state;
  const bool disabled = !b.cuda->healthy();
  if (!st.logged_device_error.exchange(true)) {
    spdlog::error(
        "CUDA codec {} failed: {}; the batch runs on the CPU ({}){}",
        op == CodecOp::kEncode ? "encode" : "decode", std::string(error.message()), b.cpu_name,
        disabled ? "; the CUDA codec is disabled, every later batch runs on the CPU" : "");
  }
  if (st.metrics != nullptr) st.metrics->RecordCodecFallback(op, CodecFallback::kDeviceError);
  if (disabled && !st.degraded.exchange(true) && st.metrics != nullptr) {
    st.metrics->SetCodecDegraded(true);
  }
}

// Whether the GPU should be tried; counts a "degraded" fallback when it is not.
bool UseGpu(const CodecBackend& b, CodecOp op) {
  if (b.cuda == nullptr) return false;
  if (!b.state->degraded.load()) return true;
  if (b.state->metrics != nullptr)
    b.state->metrics->RecordCodecFallback(op, CodecFallback::kDegraded);
  return false;
}

void Record(const CodecBackend& b, CodecOp op, CodecPath path, double seconds, uint64_t bytes) {
  if (b.state->metrics != nullptr) b.state->metrics->RecordCodec(op, path, seconds, bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<codec::CudaCodec>> OpenDefaultCudaCodec() {
  return codec::CudaCodec::Create();
}

absl::StatusOr<CodecBackend> SelectCodecBackend(CodecBackendKind kind,
                                                const CudaCodecFactory& open_cuda) {
  CodecBackend backend;
  backend.cpu_isa = codec::DetectCpuIsa();
  backend.cpu_name = codec::CpuIsaName(backend.cpu_isa);
  backend.name = backend.cpu_name;
  if (kind == CodecBackendKind::kCpu) {
    backend.detail = "CPU codec requested";
    return backend;
  }
  auto not_cuda = [&](const std::string& why) -> absl::StatusOr<CodecBackend> {
    if (kind == CodecBackendKind::kCuda) {
      return absl::FailedPreconditionError(
          absl::StrCat("--codec-backend=cuda: ", why, "; use --codec-backend=cpu or auto"));
    }
    backend.detail = absl::StrCat("CUDA not used: ", why);
    return backend;
  };
  absl::StatusOr<std::unique_ptr<codec::CudaCodec>> cuda = open_cuda();
  if (!cuda.ok()) return not_cuda(std::string(cuda.status().message()));
  const auto start = std::chrono::steady_clock::now();
  const absl::Status test = codec::SelfTestCudaCodec(**cuda);
  if (!test.ok()) {
    return not_cuda(
        absl::StrCat((*cuda)->DeviceName(), " failed the start-up self-test: ", test.message()));
  }
  backend.cuda = std::shared_ptr<codec::CudaCodec>(std::move(*cuda));
  backend.name = "cuda";
  backend.detail = absl::StrCat(backend.cuda->DeviceName(), ", self-test passed in ",
                                static_cast<int>(SecondsSince(start) * 1000), " ms; CPU fallback ",
                                backend.cpu_name);
  return backend;
}

std::vector<absl::Status> EncodeBlocks(const CodecBackend& backend, const codec::BlockCodec& codec,
                                       absl::Span<const absl::Span<const uint8_t>> raws,
                                       absl::Span<const absl::Span<uint8_t>> packeds) {
  std::vector<absl::Status> statuses(raws.size());
  if (raws.empty()) return statuses;
  uint64_t bytes = 0;
  for (const auto& r : raws) bytes += r.size();
  if (UseGpu(backend, CodecOp::kEncode)) {
    const auto start = std::chrono::steady_clock::now();
    const absl::Status device =
        backend.cuda->EncodeBatch(codec, raws, packeds, absl::MakeSpan(statuses));
    // Time on the device path counts as CUDA's even when the call failed: it was spent there.
    Record(backend, CodecOp::kEncode, CodecPath::kCuda, SecondsSince(start),
           device.ok() ? bytes : 0);
    if (device.ok()) return statuses;
    OnDeviceFailure(backend, CodecOp::kEncode, device);
  }
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < raws.size(); ++i) {
    statuses[i] = codec.Encode(raws[i], packeds[i], backend.cpu_isa);
  }
  Record(backend, CodecOp::kEncode, CodecPath::kCpu, SecondsSince(start), bytes);
  return statuses;
}

std::vector<absl::Status> DecodeBlocks(const CodecBackend& backend, const codec::BlockCodec& codec,
                                       absl::Span<const absl::Span<const uint8_t>> packeds,
                                       codec::DType out_dtype, codec::LayerRange range,
                                       absl::Span<const absl::Span<uint8_t>> outs) {
  std::vector<absl::Status> statuses(packeds.size());
  if (packeds.empty()) return statuses;
  uint64_t bytes = 0;
  for (const auto& o : outs) bytes += o.size();
  if (UseGpu(backend, CodecOp::kDecode)) {
    const auto start = std::chrono::steady_clock::now();
    const absl::Status device =
        backend.cuda->DecodeBatch(codec, packeds, out_dtype, range, outs, absl::MakeSpan(statuses));
    Record(backend, CodecOp::kDecode, CodecPath::kCuda, SecondsSince(start),
           device.ok() ? bytes : 0);
    if (device.ok()) return statuses;
    OnDeviceFailure(backend, CodecOp::kDecode, device);
  }
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < packeds.size(); ++i) {
    statuses[i] = codec.Decode(packeds[i], out_dtype, range, outs[i], backend.cpu_isa);
  }
  Record(backend, CodecOp::kDecode, CodecPath::kCpu, SecondsSince(start), bytes);
  return statuses;
}

}  // namespace turbokv::server
