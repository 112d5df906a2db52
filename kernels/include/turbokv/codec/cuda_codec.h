// CUDA backend of the codec: batched encode / decode of many blocks per launch, and decode of
// packed blocks straight into device memory (a serving engine's KV buffers).
//
// Bytes: the kernels run group_math.h's operations in its order (nvcc -fmad=false, IEEE
// division and square root), so packed bytes equal BlockCodec::Encode's byte for byte and
// decoded values equal BlockCodec::Decode's (tests/gpu/codec_gpu_test.cc on a device;
// tests/unit/codec_warp_test.cc runs the kernels' per-warp code on a CPU emulator).
//
// Kernels (kernels/src/warp_codec.h): a warp handles 32 groups of g <= 32 coordinates (one lane
// per group; a head vector of 128 is 4 lanes) or 4-16 larger groups (2-8 lanes per group, the
// cross-lane Walsh–Hadamard butterflies as xor shuffles), 16-byte loads and stores, templated
// on (group size, bits, QJL) with a run-time switch; one launch per (g, bits, QJL) of the codec
// covers every such section of every block of a chunk.
//
// Host side: each call takes one of `max_concurrent_calls` staging slots (two CUDA streams,
// pinned host buffers and device buffers each), cuts the batch into chunks of about
// `chunk_bytes` and alternates them over the two streams, so the host's staging copy of one chunk
// overlaps the other's transfers and kernels. A codec's device constants (sign bytes, QJL
// matrices, section lists, codebooks) are uploaded once and cached (bounded, least recently
// used first out). Header and checksum are computed on the host.
//
// Errors: per block, InvalidArgument (bad values or sizes, as BlockCodec::Encode, with the
// CPU's message naming the position) or the CPU decoder's error for a foreign or damaged
// block; the call's own status is for the device: Internal for a CUDA error (after which the
// codec is disabled: every later call returns Unavailable naming the first error), Unavailable
// when disabled. cudaError_t never leaves this backend.
//
// Built only when CMake finds nvcc (TURBOKV_ENABLE_CUDA=AUTO|ON); without it, or without a
// device at run time, CudaCodec::Create returns Unavailable and callers use the CPU path.
// Thread safety: all methods may be called from any number of threads.
#ifndef TURBOKV_CODEC_CUDA_CODEC_H_
#define TURBOKV_CODEC_CUDA_CODEC_H_

#include <cstddef>
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

struct CudaCodecOptions {
  int device = 0;  // CUDA device ordinal. Default: 0
  // Calls that run at once; each further call waits for a free slot. Each slot holds two
  // chunks' pinned and device buffers. Default: 2
  int max_concurrent_calls = 2;
  // Raw bytes staged per chunk (a block larger than this is a chunk of its own). Default: 32 MiB
  size_t chunk_bytes = size_t{32} << 20;
  // Codecs whose device constants stay cached. Default: 64
  int max_cached_codecs = 64;
};

class CudaCodec {
 public:
  virtual ~CudaCodec() = default;

  // Unavailable when built without CUDA or when no device can be used (message says why);
  // InvalidArgument for a device ordinal that does not exist or bad options.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaCodec>> Create(
      const CudaCodecOptions& options = {});

  // Device name and compute capability, e.g. "NVIDIA H200 (sm_90)".
  virtual std::string DeviceName() const = 0;
  // False once a CUDA error has disabled this codec.
  virtual bool healthy() const = 0;

  // raws[i] (codec.raw_bytes() each) -> packeds[i] (codec.packed_bytes() each), identical to
  // codec.Encode. On OK, block_status[i] is each block's result (raws.size() entries).
  [[nodiscard]] virtual absl::Status EncodeBatch(const BlockCodec& codec,
                                                 absl::Span<const absl::Span<const uint8_t>> raws,
                                                 absl::Span<const absl::Span<uint8_t>> packeds,
                                                 absl::Span<absl::Status> block_status) = 0;

  // Decodes layers `range` of each packed block (header must be this codec's) into outs[i]
  // (codec.DecodedBytes(out_dtype, range) each), identical to codec.Decode. Checksums are not
  // verified here. On OK, block_status[i] is each block's result.
  [[nodiscard]] virtual absl::Status DecodeBatch(
      const BlockCodec& codec, absl::Span<const absl::Span<const uint8_t>> packeds, DType out_dtype,
      LayerRange range, absl::Span<const absl::Span<uint8_t>> outs,
      absl::Span<absl::Status> block_status) = 0;

  // Decodes packed blocks held in host memory into device memory on this codec's device:
  // out_device is [packeds.size()][range layers][2][block_tokens][num_kv_heads][head_dim] of
  // out_dtype (out_bytes = packeds.size() * codec.DecodedBytes(out_dtype, range) bytes,
  // 16-byte aligned). The work is queued on `stream` (a cudaStream_t of this device, or null
  // for the legacy default stream) after what is already queued there, and the call returns
  // once it is complete. A block that fails (block_status) is left as zeros.
  [[nodiscard]] virtual absl::Status DecodeToDevice(
      const BlockCodec& codec, absl::Span<const absl::Span<const uint8_t>> packeds, DType out_dtype,
      LayerRange range, void* out_device, size_t out_bytes, void* stream,
      absl::Span<absl::Status> block_status) = 0;

  // Kernel time of the most recent call to finish (any thread), in seconds: the sum over its
  // chunks of the interval from the first kernel's start to the last kernel's end (no copies).
  virtual double last_kernel_seconds() const = 0;
};

// Start-up check of a device codec: encodes fixed blocks for a set of codecs that covers every
// kernel family (g = 16..256, 2-8 bits, QJL, fp16 / bf16 / fp32 input, zero groups) and decodes
// them into every output dtype, then compares with the CPU codec byte for byte.
// OK when all match; Internal naming the first codec and byte that differ; the device error
// when a call fails.
[[nodiscard]] absl::Status SelfTestCudaCodec(CudaCodec& cuda);

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_CUDA_CODEC_H_
