// The codec backend (--codec-backend auto|cpu|cuda), chosen once at start-up, and the batch
// encode / decode calls the handlers use so they need not care which backend runs.
//
// Selection: cpu runs the CPU codec on the best ISA the CPU has. auto and cuda open the CUDA
// codec and run its start-up self-test (codec::SelfTestCudaCodec: fixed blocks encoded and
// decoded on the device, compared with the CPU byte for byte); auto uses CUDA only when both
// succeed and otherwise the CPU (detail says why), cuda refuses to start.
//
// Failures: a block with bad data fails alone (InvalidArgument, the CPU's message) on either
// backend. A device failure (the CUDA call itself fails) never fails a block: the batch is redone
// on the CPU, logged once, counted in turbokv_codec_fallbacks_total{op, reason="device_error"};
// when the error disabled the CUDA codec the backend is degraded from then on
// (turbokv_codec_degraded 1, every later batch on the CPU, counted with reason="degraded").
// Codec time and bytes are labelled with the backend that really ran (backend="cuda" only for
// work the device did).
//
// Thread safety: EncodeBlocks / DecodeBlocks may run on any number of threads at once.
#ifndef TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_
#define TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/metrics/metrics.h"
#include "server/server_options.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/cuda_codec.h"

namespace turbokv::server {

// What the batch calls share across copies of a CodecBackend.
struct CodecBackendState {
  Metrics* metrics = nullptr;         // null: nothing is recorded
  std::atomic<bool> degraded{false};  // the CUDA codec failed for good; the CPU runs instead
  std::atomic<bool> logged_device_error{false};
};

struct CodecBackend {
  // "cuda" or the CPU path ("cpu-avx2", "cpu-avx512", "cpu-scalar"): the log, the
  // turbokv_codec_backend_info label, StatsResponse.
  std::string name;
  // The CPU path's name: the label of work the CPU does (the fallback of a CUDA backend).
  std::string cpu_name;
  // Human-readable detail for the start-up log: the GPU's name, or why CUDA is not used.
  std::string detail;
  codec::CpuIsa cpu_isa = codec::CpuIsa::kAuto;  // CPU path (resolved); also the fallback
  std::shared_ptr<codec::CudaCodec> cuda;        // null: the CPU codec
  std::shared_ptr<CodecBackendState> state = std::make_shared<CodecBackendState>();

  // Codec metrics are recorded into `metrics` (which must outlive every batch call).
  void AttachMetrics(Metrics* metrics) const { state->metrics = metrics; }
  bool degraded() const { return state->degraded.load(); }
};

// Opens the CUDA codec (the seam tests replace).
using CudaCodecFactory = std::function<absl::StatusOr<std::unique_ptr<codec::CudaCodec>>()>;
absl::StatusOr<std::unique_ptr<codec::CudaCodec>> OpenDefaultCudaCodec();

// kCpu: the CPU codec. kCuda: the CUDA codec when it opens and passes its self-test, else
// FailedPrecondition saying why (the server then refuses to start). kAuto: the same test, the
// CPU codec when it does not pass (detail says why).
[[nodiscard]] absl::StatusOr<CodecBackend> SelectCodecBackend(
    CodecBackendKind kind, const CudaCodecFactory& open_cuda = OpenDefaultCudaCodec);

// Encodes raws[i] -> packeds[i] (sizes as BlockCodec::Encode): one batch on the GPU, block by
// block on the CPU. One status per block; see the header comment for device failures.
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
