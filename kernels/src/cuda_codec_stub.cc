// Built when the CUDA backend is not: every call reports Unavailable.
#include "turbokv/codec/cuda_codec.h"

namespace turbokv::codec {

bool CudaBuilt() { return false; }

absl::StatusOr<std::unique_ptr<CudaCodec>> CudaCodec::Create(const CudaCodecOptions&) {
  return absl::UnavailableError(
      "turbokv was built without the CUDA backend (no nvcc found at configure time; "
      "configure with -DTURBOKV_ENABLE_CUDA=ON on a machine with the CUDA toolkit)");
}

}  // namespace turbokv::codec
