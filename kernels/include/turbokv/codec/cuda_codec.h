// CUDA backend of the codec: batched encode / decode of many blocks per launch.
//
// The per-group math is group_math.h, compiled by nvcc with -fmad=false and IEEE division and
// square root, so packed bytes equal the CPU's byte for byte and decoded values equal the CPU's
// (tests/gpu/codec_gpu_test.cc). Kernels: one thread per group, one launch per (layer, K/V)
// section across every block of the batch. Header and checksum are written on the host.
//
// Built only when CMake finds nvcc (TURBOKV_ENABLE_CUDA=AUTO|ON); without it, or without a
// device at run time, CudaCodec::Create returns Unavailable and callers use the CPU path.
// Thread safety: a CudaCodec serializes its calls internally (one stream).
#ifndef TURBOKV_CODEC_CUDA_CODEC_H_
#define TURBOKV_CODEC_CUDA_CODEC_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "turbokv/codec/block_codec.h"

namespace turbokv::codec {

// True when this library was built with the CUDA backend.
bool CudaBuilt();

class CudaCodec {
 public:
  virtual ~CudaCodec() = default;

  // Unavailable when built without CUDA or when no device can be used (message says why).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaCodec>> Create(int device = 0);

  // Device name and compute capability, e.g. "NVIDIA H200 (sm_90)".
  virtual std::string DeviceName() const = 0;

  // raws[i] (codec.raw_bytes() each) -> packeds[i] (codec.packed_bytes() each), identical to
  // codec.Encode. InvalidArgument as BlockCodec::Encode (the failing block is re-encoded on
  // the CPU to name the exact position); Internal on CUDA errors.
  [[nodiscard]] virtual absl::Status EncodeBatch(const BlockCodec& codec,
                                                 absl::Span<const absl::Span<const uint8_t>> raws,
                                                 absl::Span<const absl::Span<uint8_t>> packeds) = 0;

  // Decodes layers `range` of each packed block (header must be this codec's) into outs[i]
  // (codec.DecodedBytes(out_dtype, range) each). Checksums are not verified here.
  [[nodiscard]] virtual absl::Status DecodeBatch(const BlockCodec& codec,
                                                 absl::Span<const absl::Span<const uint8_t>> packeds,
                                                 DType out_dtype, LayerRange range,
                                                 absl::Span<const absl::Span<uint8_t>> outs) = 0;

  // Kernel-only timing of the last call, in seconds (excludes host<->device copies).
  virtual double last_kernel_seconds() const = 0;
};

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_CUDA_CODEC_H_
