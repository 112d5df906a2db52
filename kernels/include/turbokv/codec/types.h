// Shapes, dtypes and codec configuration of a KV block (docs/architecture.md).
//
// A raw KV block is a dense row-major tensor
//   [num_layers][2][block_tokens][num_kv_heads][head_dim]   (index 0 of the "2" axis = K, 1 = V)
// of fp16, bf16 or fp32. A head vector is one [head_dim] row. The codec works on head vectors
// independently, group by group (a group is `group_size` consecutive coordinates).
#ifndef TURBOKV_CODEC_TYPES_H_
#define TURBOKV_CODEC_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace turbokv::codec {

// Element type of raw KV tensors. Values are the format's on-disk codes (kernels/FORMAT.md).
enum class DType : uint8_t {
  kFloat16 = 1,   // IEEE binary16
  kBFloat16 = 2,  // bfloat16 (upper half of binary32)
  kFloat32 = 3,   // IEEE binary32
};

// Bytes per element: 2, 2 or 4.
size_t DTypeSize(DType dtype);
// "fp16", "bf16", "fp32".
std::string_view DTypeName(DType dtype);
// Accepts "fp16"/"float16"/"f16", "bf16"/"bfloat16", "fp32"/"float32"/"f32".
// InvalidArgument for anything else.
[[nodiscard]] absl::StatusOr<DType> ParseDType(std::string_view name);

// Limits the format accepts (a parser rejects anything outside them).
inline constexpr int kMaxLayers = 4096;
inline constexpr int kMaxBlockTokens = 65535;
inline constexpr int kMaxKvHeads = 4096;
inline constexpr int kMaxHeadDim = 4096;

// The shape of one raw KV block.
struct BlockShape {
  int num_layers = 0;             // >= 1
  int block_tokens = 0;           // tokens per block, >= 1 (vLLM: 16, LMCache: 256)
  int num_kv_heads = 0;           // KV heads of this shard, >= 1
  int head_dim = 0;               // multiple of 8
  DType dtype = DType::kFloat16;  // element type of the raw tensor

  // Head vectors in one K (or V) section of one layer: block_tokens * num_kv_heads.
  size_t vectors_per_section() const {
    return static_cast<size_t>(block_tokens) * static_cast<size_t>(num_kv_heads);
  }
  // K and V elements in the whole block: num_layers * 2 * block_tokens * num_kv_heads * head_dim.
  size_t num_values() const {
    return static_cast<size_t>(num_layers) * 2 * vectors_per_section() *
           static_cast<size_t>(head_dim);
  }
  // Bytes of the raw block in `dtype`.
  size_t raw_bytes() const { return num_values() * DTypeSize(dtype); }
  size_t raw_bytes_as(DType d) const { return num_values() * DTypeSize(d); }
};

// InvalidArgument naming the offending field when a shape is outside the limits above.
[[nodiscard]] absl::Status ValidateShape(const BlockShape& shape);

// How the K (or V) section of one layer is stored.
//   bits 1..6, 8: TurboQuant-MSE (docs/architecture.md, "The codec") with `group_size`-coordinate
//                       groups, one fp16 scale per group, optional QJL residual.
//   bits 16:            every value as fp16 (protected layers); group_size is ignored.
//   bits 0:             the raw source bytes, verbatim (the `raw` preset; bit-exact).
struct SectionCodec {
  int bits = 4;         // Default: 4
  int group_size = 32;  // power of two in [8, 256] that divides head_dim. Default: 32
  bool qjl = false;     // add the 1-bit QJL residual (bits 1..8 only). Default: off

  bool quantized() const { return bits >= 1 && bits <= 8; }
  friend bool operator==(const SectionCodec& a, const SectionCodec& b) {
    return a.bits == b.bits && (a.quantized() ? a.group_size == b.group_size : true) &&
           a.qjl == b.qjl;
  }
  friend bool operator!=(const SectionCodec& a, const SectionCodec& b) { return !(a == b); }
};

// Seeds used unless a namespace sets its own. Arbitrary fixed constants; they are written into
// every packed block, so changing them changes nothing already stored.
inline constexpr uint64_t kDefaultRotationSeed = 0x7475726B6F6B7631ULL;  // "turbokv1"
inline constexpr uint64_t kDefaultQjlSeed = 0x716A6C7475726B31ULL;       // "qjlturk1"

// The codec configuration of a namespace.
struct CodecSpec {
  SectionCodec key;    // Default: 4-bit, g = 32
  SectionCodec value;  // Default: 4-bit, g = 32
  // The first / last N layers are stored at `protected_bits` (8: TurboQuant with
  // g = largest power of two dividing head_dim, at most 256; 16: fp16). Default: 0, 0, 8.
  int protected_first_layers = 0;
  int protected_last_layers = 0;
  int protected_bits = 8;
  // Store n / ||y_hat|| instead of n so decoded groups keep their length (docs/architecture.md,
  // codec step 5).
  bool norm_correction = true;  // Default: on
  uint64_t rotation_seed = kDefaultRotationSeed;
  uint64_t qjl_seed = kDefaultQjlSeed;
};

// The codecs actually used for layer `layer` (protected layers resolved).
struct LayerCodec {
  SectionCodec key;
  SectionCodec value;
};
// One LayerCodec per layer. InvalidArgument when the spec does not fit the shape, with a
// message naming the field and the expected value ("head_dim 96 is not a multiple of
// key.group_size 64").
[[nodiscard]] absl::StatusOr<std::vector<LayerCodec>> ResolveLayerCodecs(const CodecSpec& spec,
                                                                         const BlockShape& shape);

// Presets (docs/architecture.md, "The codec"):
//   k8v6          K 8-bit g = head_dim, V 6-bit g = 64        (~7.2 bpv at head_dim 128)
//   k8v4          K 8-bit g = head_dim, V 4-bit g = 32        (~6.3 bpv at head_dim 128)
//   k6v6          K 6-bit g = 32, V 6-bit g = 64              (6.375 bpv)
//   k6v5          K 6-bit, V 5-bit, g = 32                     (6.0 bpv)
//   k6v4          K 6-bit, V 4-bit, g = 32                     (5.5 bpv)
//   k5v4          K 5-bit g = 32, V 4-bit g = 64              (4.875 bpv)
//   k4v4-g32      K 4-bit, V 4-bit, g = 32                     (4.5 bpv)
//   k4v3-g32      K 4-bit, V 3-bit, g = 32                     (4.0 bpv)
//   k3v3-g32      K 3-bit, V 3-bit, g = 32                     (3.5 bpv)
//   k3v2-g32-qjl  K 2-bit + QJL, V 2-bit, g = 32               (3.25 bpv)
//   k3v2          K 3-bit g = 32, V 2-bit g = 64              (2.875 bpv)
//   raw           stored verbatim in the source dtype          (16 bpv for fp16)
// A preset's group size g becomes gcd(head_dim, g) when head_dim is not a multiple of it
// (head_dim 80 -> 16; head_dim 8 -> 8), so every preset applies to every head_dim that is a
// multiple of 8. NotFound-free: unknown names give InvalidArgument listing the known ones.
[[nodiscard]] absl::StatusOr<CodecSpec> PresetSpec(std::string_view name, int head_dim);
const std::vector<std::string>& PresetNames();

// Bits per value of a block with this shape and codec: every stored byte (header, scales,
// QJL bits, checksum) * 8 / num_values.
double BitsPerValue(size_t packed_bytes, const BlockShape& shape);

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_TYPES_H_
