// Chooses the codec backend at start-up (--codec-backend auto|cpu|cuda).
#ifndef TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_
#define TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/server_options.h"
#include "turbokv/codec/block_codec.h"

namespace turbokv::server {

struct CodecBackend {
  std::string name;  // "cpu-avx2", "cpu-scalar" (or "cuda"): log, metrics label, Stats
  codec::CpuIsa cpu_isa = codec::CpuIsa::kAuto;  // the CPU path, resolved
  bool cuda = false;
};

// kAuto and kCpu: the CPU codec on the best ISA this CPU has. kCuda: FailedPrecondition with
// an explanation when the CUDA backend is not available (the server then refuses to start).
[[nodiscard]] absl::StatusOr<CodecBackend> SelectCodecBackend(CodecBackendKind kind);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_CODEC_BACKEND_H_
