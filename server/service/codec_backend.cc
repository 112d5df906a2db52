#include "server/service/codec_backend.h"

namespace turbokv::server {

absl::StatusOr<CodecBackend> SelectCodecBackend(CodecBackendKind kind) {
  if (kind == CodecBackendKind::kCuda) {
    // The codec library exposes no CUDA entry point yet (kernels/include/turbokv/codec has no
    // CUDA API), so even a CUDA build cannot serve from the GPU. Say so instead of silently
    // falling back to the CPU.
#if defined(TURBOKV_SERVER_HAVE_CUDA)
    return absl::FailedPreconditionError(
        "--codec-backend=cuda: this build has CUDA, but the codec library exposes no CUDA "
        "block codec API the server can call yet; use --codec-backend=cpu or auto");
#else
    return absl::FailedPreconditionError(
        "--codec-backend=cuda: this turbokv-server was built without the CUDA codec backend "
        "(TURBOKV_ENABLE_CUDA=OFF or no nvcc); use --codec-backend=cpu or auto");
#endif
  }
  CodecBackend backend;
  backend.cpu_isa = codec::DetectCpuIsa();
  backend.name = codec::CpuIsaName(backend.cpu_isa);
  if (backend.name.rfind("cpu", 0) != 0) backend.name = "cpu-" + backend.name;
  return backend;
}

}  // namespace turbokv::server
