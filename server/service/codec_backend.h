// The codec backend (--codec-backend auto|cpu|cuda), chosen once at start-up, and the batch
// encode / decode calls the handlers use so they need not care which backend runs.
#ifndef TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_
#define TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/server_options.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/cuda_codec.h"

namespace turbokv::server {

struct CodecBackend {
  // "cpu-avx2", "cpu-scalar" or "cuda": the log, the metrics label, StatsResponse.
  std::string name;
  // Human-readable detail for the start-up log: the GPU's name, or why CUDA is not used.
  std::string detail;
  codec::CpuIsa cpu_isa = codec::CpuIsa::kAuto;  // CPU path (resolved); also the fallback
  std::shared_ptr<codec::CudaCodec> cuda;        // null: the CPU codec
};

// kCpu: the CPU codec on the best ISA this CPU has. kCuda: the CUDA codec, or
// FailedPrecondition saying why it is not available (the server then refuses to start).
// kAuto: CUDA when available, else the CPU (detail says why not CUDA).
[[nodiscard]] absl::StatusOr<CodecBackend> SelectCodecBackend(CodecBackendKind kind);

// Encodes raws[i] -> packeds[i] (sizes as BlockCodec::Encode) with the backend: one batch on
// the GPU, block by block on the CPU. One status per block. If the GPU batch fails, every
// block is redone on the CPU so each gets its own status.
std::vector<absl::Status> EncodeBlocks(const CodecBackend& backend, const codec::BlockCodec& codec,
                                       absl::Span<const absl::Span<const uint8_t>> raws,
                                       absl::Span<const absl::Span<uint8_t>> packeds);

// Decodes layers `range` of packeds[i] into outs[i] (sizes as BlockCodec::Decode), as above.
std::vector<absl::Status> DecodeBlocks(const CodecBackend& backend, const codec::BlockCodec& codec,
                                       absl::Span<const absl::Span<const uint8_t>> packeds,
                                       codec::DType out_dtype, codec::LayerRange range,
                                       absl::Span<const absl::Span<uint8_t>> outs);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_
