#include "server/service/codec_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace turbokv::server {

absl::StatusOr<CodecBackend> SelectCodecBackend(CodecBackendKind kind) {
  CodecBackend backend;
  backend.cpu_isa = codec::DetectCpuIsa();
  backend.name = codec::CpuIsaName(backend.cpu_isa);
  if (backend.name.rfind("cpu", 0) != 0) backend.name = "cpu-" + backend.name;
  if (kind == CodecBackendKind::kCpu) {
    backend.detail = "CPU codec requested";
    return backend;
  }
  absl::StatusOr<std::unique_ptr<codec::CudaCodec>> cuda = codec::CudaCodec::Create();
  if (!cuda.ok()) {
    const std::string why(cuda.status().message());
    if (kind == CodecBackendKind::kCuda) {
      return absl::FailedPreconditionError(
          absl::StrCat("--codec-backend=cuda: ", why, "; use --codec-backend=cpu or auto"));
    }
    backend.detail = absl::StrCat("CUDA not used: ", why);
    return backend;
  }
  backend.cuda = std::shared_ptr<codec::CudaCodec>(std::move(*cuda));
  backend.name = "cuda";
  backend.detail = backend.cuda->DeviceName();
  return backend;
}

std::vector<absl::Status> EncodeBlocks(const CodecBackend& backend, const codec::BlockCodec& codec,
                                       absl::Span<const absl::Span<const uint8_t>> raws,
                                       absl::Span<const absl::Span<uint8_t>> packeds) {
  std::vector<absl::Status> statuses(raws.size());
  if (raws.empty()) return statuses;
  // Per-block statuses from the device (bad data fails only its block); a device failure
  // redoes the batch on the CPU.
  if (backend.cuda != nullptr &&
      backend.cuda->EncodeBatch(codec, raws, packeds, absl::MakeSpan(statuses)).ok()) {
    return statuses;
  }
  for (size_t i = 0; i < raws.size(); ++i) {
    statuses[i] = codec.Encode(raws[i], packeds[i], backend.cpu_isa);
  }
  return statuses;
}

std::vector<absl::Status> DecodeBlocks(const CodecBackend& backend, const codec::BlockCodec& codec,
                                       absl::Span<const absl::Span<const uint8_t>> packeds,
                                       codec::DType out_dtype, codec::LayerRange range,
                                       absl::Span<const absl::Span<uint8_t>> outs) {
  std::vector<absl::Status> statuses(packeds.size());
  if (packeds.empty()) return statuses;
  if (backend.cuda != nullptr &&
      backend.cuda->DecodeBatch(codec, packeds, out_dtype, range, outs, absl::MakeSpan(statuses)).ok()) {
    return statuses;
  }
  for (size_t i = 0; i < packeds.size(); ++i) {
    statuses[i] = codec.Decode(packeds[i], out_dtype, range, outs[i], backend.cpu_isa);
  }
  return statuses;
}

}  // namespace turbokv::server
