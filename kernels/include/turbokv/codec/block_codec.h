// Encode raw KV blocks to packed blocks (format v1, kernels/FORMAT.md) and back.
//
// Thread safety: a BlockCodec is immutable after Create(); any number of threads may call its
// const methods at once.
//
// Errors (absl codes equal gRPC codes):
//   InvalidArgument  bad shape / codec / buffer size, non-finite input, a value beyond fp16 in
//                    a 16-bit section, a packed block whose header does not match this codec.
//   DataLoss         a packed block that is truncated, inconsistent or fails its checksum.
#ifndef TURBOKV_CODEC_BLOCK_CODEC_H_
#define TURBOKV_CODEC_BLOCK_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "turbokv/codec/codebook.h"
#include "turbokv/codec/types.h"

namespace turbokv::codec {

// Which CPU code path runs the per-group math. All give identical packed bytes and identical
// decoded values; kAuto picks the best the CPU has (checked at run time): kAvx512 (AVX2 paths
// plus a 16-lane AVX-512 decode of 1-4-bit sections), else kAvx2 (AVX2+FMA+F16C), else kScalar.
enum class CpuIsa { kAuto, kScalar, kAvx2, kAvx512 };
// The path kAuto resolves to on this CPU.
CpuIsa DetectCpuIsa();
const char* CpuIsaName(CpuIsa isa);

// Half-open layer range [begin, end). end = -1 means "to the last layer".
struct LayerRange {
  int begin = 0;
  int end = -1;
};

// What a packed block says about itself (parsed and validated header).
struct PackedBlockInfo {
  uint16_t format_version = 0;
  uint64_t namespace_id = 0;
  BlockShape shape;
  bool norm_correction = true;
  uint64_t rotation_seed = 0;
  uint64_t qjl_seed = 0;
  CodecSpec spec;                       // the codec as written (seeds, protection, K/V codecs)
  std::vector<LayerCodec> layers;       // one per layer (consistent with spec)
  size_t header_bytes = 0;              // bytes before the first layer section
  std::vector<uint32_t> layer_offsets;  // num_layers + 1 offsets, from the start of the block
  size_t total_bytes = 0;               // whole block including the 8-byte checksum
};

// Parses and validates a packed block's header and layer table against its length. Does not
// read layer sections and does not verify the checksum (see VerifyPackedChecksum).
// DataLoss: truncated, bad magic, inconsistent sizes. InvalidArgument: unsupported version or
// codec values. Never reads outside `packed`.
[[nodiscard]] absl::StatusOr<PackedBlockInfo> ParsePackedBlock(absl::Span<const uint8_t> packed);

// DataLoss unless the trailing xxHash3-64 equals the hash of everything before it.
[[nodiscard]] absl::Status VerifyPackedChecksum(absl::Span<const uint8_t> packed);

class BlockCodec {
 public:
  // InvalidArgument when the shape or spec is invalid (message names the field).
  [[nodiscard]] static absl::StatusOr<BlockCodec> Create(const BlockShape& shape,
                                                         const CodecSpec& spec,
                                                         uint64_t namespace_id = 0);
  // The codec that produced `packed` (header parsed and validated; checksum not verified).
  [[nodiscard]] static absl::StatusOr<BlockCodec> FromPacked(absl::Span<const uint8_t> packed);

  const BlockShape& shape() const { return shape_; }
  const CodecSpec& spec() const { return spec_; }
  uint64_t namespace_id() const { return namespace_id_; }
  const std::vector<LayerCodec>& layers() const { return layers_; }

  // Bytes of one raw block in the namespace dtype.
  size_t raw_bytes() const { return shape_.raw_bytes(); }
  // Bytes of one packed block. Fixed for a given shape and spec.
  size_t packed_bytes() const { return packed_bytes_; }
  // packed_bytes * 8 / num_values (headers and checksum included).
  double bits_per_value() const { return BitsPerValue(packed_bytes_, shape_); }
  // The header bytes every block of this codec starts with (header_bytes() of them).
  absl::Span<const uint8_t> header() const { return header_; }

  // raw: [num_layers][2][block_tokens][num_kv_heads][head_dim] of shape().dtype, raw_bytes().
  // packed: exactly packed_bytes(). InvalidArgument on wrong sizes, non-finite values or a
  // value beyond ±65504 in a 16-bit (fp16) section (message names layer, K/V, token, head and
  // group). Groups whose norm is beyond fp16 get wide scales (FORMAT.md), not an error.
  [[nodiscard]] absl::Status Encode(absl::Span<const uint8_t> raw, absl::Span<uint8_t> packed,
                                    CpuIsa isa = CpuIsa::kAuto) const;

  // Checks the values `packed` (which must carry this codec's header, as Decode requires)
  // holds, as strictly as Encode checks raw input, so that a block accepted packed decodes to
  // finite values like one encoded here: every group scale is a finite, non-negative fp16 or a
  // finite wide scale (0x8000 | bf16, FORMAT.md "Wide scales");
  // every QJL residual norm is a finite fp16 in [0, 2] (the residual of a unit vector's
  // nearest-level quantization is at most 1 + sqrt(g) * |smallest level| < 1.83, see
  // FORMAT.md "Validation"); every value of an fp16 (bits 16) or raw (bits 0) section is
  // finite. Index and QJL sign bits need no check: every b-bit pattern names a codebook level
  // and section sizes are fixed by the header (ParsePackedBlock checks them). Reads every scale
  // and every plain section, nothing else; the same scalar code on every ISA.
  // InvalidArgument naming layer, K/V, group or value and the bad fp16 bits; DataLoss when
  // `packed` has the wrong size.
  [[nodiscard]] absl::Status ValidatePackedValues(absl::Span<const uint8_t> packed) const;

  // Streaming encode, for a block whose raw bytes arrive in pieces (or to spread one block over
  // threads). Section s = layer s / 2, K (s even) or V (s odd); each is section_raw_bytes()
  // contiguous raw bytes, in order, in the raw layout. EncodeSections encodes sections
  // [first, first + raw_sections.size() / section_raw_bytes()) from `raw_sections` (exactly
  // those sections' raw bytes) into their places in `packed` (packed_bytes()); calls on
  // disjoint section ranges of one packed buffer may run at the same time. SealPacked writes
  // the header and the checksum once every section is written. EncodeSections of every section
  // followed by SealPacked gives exactly Encode's bytes. Errors as Encode (InvalidArgument;
  // the message names layer, K/V, token, head and group).
  size_t section_raw_bytes() const {
    return shape_.vectors_per_section() * shape_.head_dim * DTypeSize(shape_.dtype);
  }
  size_t num_sections() const { return plans_.size(); }
  [[nodiscard]] absl::Status EncodeSections(absl::Span<const uint8_t> raw_sections, size_t first,
                                            absl::Span<uint8_t> packed,
                                            CpuIsa isa = CpuIsa::kAuto) const;
  void SealPacked(absl::Span<uint8_t> packed) const;

  // Bytes of the codec's set-up tables (sign masks, QJL matrices) for `layers` of `shape`,
  // before building them: what Create() would allocate. For admission checks.
  static size_t SetupBytes(const BlockShape& shape, const std::vector<LayerCodec>& layers);

  // Decodes layers [range.begin, range.end) of `packed` (which must carry this codec's
  // header) into out: [range layers][2][block_tokens][num_kv_heads][head_dim] of `out_dtype`.
  // Touches only the header and the requested layers' sections; the checksum is not verified
  // here (call VerifyPackedChecksum on data from untrusted storage first).
  // InvalidArgument: wrong out size, bad range, header of another codec. DataLoss: truncated.
  [[nodiscard]] absl::Status Decode(absl::Span<const uint8_t> packed, DType out_dtype,
                                    LayerRange range, absl::Span<uint8_t> out,
                                    CpuIsa isa = CpuIsa::kAuto) const;

  // Bytes Decode writes for a range (after clamping end = -1).
  absl::StatusOr<size_t> DecodedBytes(DType out_dtype, LayerRange range) const;

  // Encodes many blocks, spreading them over `num_threads` threads (1 = the calling thread).
  // raws[i] -> packeds[i]. Stops at the first error and returns it.
  [[nodiscard]] absl::Status EncodeBatch(absl::Span<const absl::Span<const uint8_t>> raws,
                                         absl::Span<const absl::Span<uint8_t>> packeds,
                                         int num_threads = 1, CpuIsa isa = CpuIsa::kAuto) const;

  // Per-(layer, K/V) precomputed state: sign stream key and QJL matrix. Public only so the
  // CUDA backend (same library family) can read it; treat as opaque.
  struct SectionPlan {
    SectionCodec codec;
    uint64_t sign_key = 0;
    std::shared_ptr<const std::vector<float>> qjl_matrix;  // [g][g] when codec.qjl
    std::vector<uint32_t> lane_sign_masks;                 // SIMD sign table (quantized sections)
    const Codebook* codebook = nullptr;  // quantized sections (process-lifetime cache)
    size_t offset = 0;                   // byte offset of the section in the packed block
    size_t bytes = 0;                    // bytes of the section
  };
  const std::vector<SectionPlan>& plans() const { return plans_; }  // [num_layers * 2]

 private:
  BlockCodec() = default;

  BlockShape shape_;
  CodecSpec spec_;
  uint64_t namespace_id_ = 0;
  std::vector<LayerCodec> layers_;
  std::vector<SectionPlan> plans_;
  std::vector<uint8_t> header_;
  size_t packed_bytes_ = 0;
};

// The expected bytes of one section for `vectors` head vectors of `head_dim` coordinates.
size_t SectionBytes(const SectionCodec& codec, size_t vectors, int head_dim, DType source);

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_BLOCK_CODEC_H_
