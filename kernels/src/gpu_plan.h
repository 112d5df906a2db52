// How the CUDA backend lays a codec out on the device, shared by the kernels (nvcc), the
// backend's host code and the warp emulator test (g++). No CUDA runtime calls here.
//
// Aligned layout: on the device a packed block is kept with every part of every section (fp16
// scales, residual norms, packed indices, QJL sign bits; an unquantized section's bytes) on a
// 16-byte boundary, so the kernels use 16-byte vector loads and stores. The host converts
// between this layout and the packed format (kernels/FORMAT.md) while it copies through the
// pinned staging buffers, a copy it makes anyway. Header and checksum are host-only.
//
// Constants: each codec gets one device buffer (GpuPlan::blob) holding every section's sign
// bytes and QJL matrix and, per (g, bits, qjl) of the codec, the DeviceSection list a launch
// walks; each (g, bits) codebook is one small table copied to shared memory by every CTA.
#ifndef TURBOKV_KERNELS_SRC_GPU_PLAN_H_
#define TURBOKV_KERNELS_SRC_GPU_PLAN_H_

#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "section_codec.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/codebook.h"
#include "warp_codec.h"

namespace turbokv::codec::internal {

inline constexpr size_t kDeviceAlign = 16;
// Bucket tables longer than this are not used by the kernels (binary search instead). Every
// codebook of the format has 2^bits buckets.
inline constexpr int kMaxDeviceBuckets = 256;

TURBOKV_HD size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// One quantized section as a launch sees it (device memory).
struct DeviceSection {
  SectionArgs args;     // device pointers into the codec's blob
  uint32_t index = 0;   // 2 * layer + kv
  uint64_t scales = 0;  // offsets of the parts in an aligned block
  uint64_t residuals = 0;
  uint64_t indices = 0;
  uint64_t qjl_bits = 0;
};

// The argument of one encode or decode launch: every section with one (g, bits, qjl) in
// layers [first_section / 2, ...) of `blocks` consecutive blocks.
struct GroupLaunch {
  int group_size = 0;  // the (g, bits, qjl) of every section in the list
  int bits = 0;
  bool qjl = false;
  const DeviceSection* sections = nullptr;  // [num_sections]
  uint32_t num_sections = 0;
  uint32_t tiles_per_section = 0;
  uint64_t groups = 0;  // per section
  uint32_t blocks = 0;
  CodebookTables codebook;  // in device memory (kernels copy it to shared memory)
  // Values: encode reads raw blocks, decode writes output blocks ([layers][2][...] of dtype).
  uint8_t* values = nullptr;
  uint64_t values_block_stride = 0;   // bytes from one block to the next
  uint64_t values_section_bytes = 0;  // bytes of one section
  uint32_t first_section = 0;         // section index stored at values offset 0
  DType dtype = DType::kFloat16;
  // Aligned packed blocks: encode writes, decode reads.
  uint8_t* aligned = nullptr;
  uint64_t aligned_block_stride = 0;
  uint32_t* errors = nullptr;  // encode: [blocks] flags (1 = bad input in that block)
};

// The tile `t` of launch `a`: what EncodeTile / DecodeTile read and write.
TURBOKV_HD TileIo TileIoFor(const GroupLaunch& a, const DeviceSection& s, const TileCoord& t,
                            int groups_per_tile) {
  TileIo io;
  uint8_t* values = a.values + t.block * a.values_block_stride +
                    static_cast<uint64_t>(s.index - a.first_section) * a.values_section_bytes;
  io.values_in = values;
  io.values_out = values;
  io.dtype = a.dtype;
  uint8_t* block = a.aligned + t.block * a.aligned_block_stride;
  io.parts.scales = block + s.scales;
  io.parts.residuals = block + s.residuals;
  io.parts.indices = block + s.indices;
  io.parts.qjl_bits = block + s.qjl_bits;
  io.first_group = static_cast<size_t>(t.tile) * groups_per_tile;
  io.groups = a.groups;
  io.error = a.errors == nullptr ? nullptr : a.errors + t.block;
  return io;
}

// An unquantized section (bits 16: fp16; bits 0: the source dtype verbatim) in the aligned block.
struct DevicePlainSection {
  uint32_t index = 0;  // 2 * layer + kv
  DType stored = DType::kFloat16;
  uint64_t aligned_offset = 0;
};

// The argument of the plain-section decode launch: every unquantized section in range.
struct PlainLaunch {
  const DevicePlainSection* sections = nullptr;  // [num_sections]
  uint32_t num_sections = 0;
  uint64_t chunks_per_section = 0;  // 8-value chunks
  uint32_t blocks = 0;
  const uint8_t* aligned = nullptr;
  uint64_t aligned_block_stride = 0;
  uint8_t* values = nullptr;  // output blocks, as GroupLaunch::values
  uint64_t values_block_stride = 0;
  uint64_t values_section_bytes = 0;
  uint32_t first_section = 0;
  DType dtype = DType::kFloat16;  // output dtype
};

TURBOKV_HD uint64_t PlainItems(const PlainLaunch& a) {
  return static_cast<uint64_t>(a.blocks) * a.num_sections * a.chunks_per_section;
}

// Work item i of a plain launch: 8 values converted from the stored dtype to the output dtype,
// as DecodeSectionScalar writes them.
TURBOKV_HD void DecodePlainItem(const PlainLaunch& a, uint64_t i) {
  const uint64_t chunk = i % a.chunks_per_section;
  const uint64_t rest = i / a.chunks_per_section;
  const DevicePlainSection& s = a.sections[rest % a.num_sections];
  const uint64_t block = rest / a.num_sections;
  const uint8_t* src = a.aligned + block * a.aligned_block_stride + s.aligned_offset +
                       chunk * 8 * ValueBytes(s.stored);
  uint8_t* dst = a.values + block * a.values_block_stride +
                 static_cast<uint64_t>(s.index - a.first_section) * a.values_section_bytes +
                 chunk * 8 * ValueBytes(a.dtype);
  float v[8];
  LoadChunk(src, s.stored, v);
  StoreChunk(dst, a.dtype, v);
}

// Where one section lives in the aligned block, and in the packed block.
struct AlignedSection {
  SectionCodec codec;
  SectionLayout packed;      // parts relative to packed_offset (FORMAT.md)
  size_t packed_offset = 0;  // of the section in the packed block
  // Offsets in the aligned block, each a multiple of kDeviceAlign.
  size_t scales = 0, residuals = 0, indices = 0, qjl_bits = 0;  // quantized sections
  size_t plain = 0;                                             // unquantized: verbatim bytes
};

// One (g, bits, qjl) of a codec: the sections that use it, in layer order.
struct GroupConfig {
  int g = 0;
  int bits = 0;
  bool qjl = false;
  std::vector<uint32_t> sections;  // section indices (2 * layer + kv), ascending
  size_t list_offset = 0;          // of its DeviceSection[] in the blob
};

// Everything the backend uploads once per codec.
struct GpuPlan {
  std::vector<AlignedSection> sections;  // [num_layers * 2]
  size_t aligned_block_bytes = 0;        // multiple of kDeviceAlign
  size_t quantized_bytes = 0;            // the quantized parts come first: [0, quantized_bytes)
  std::vector<GroupConfig> configs;
  std::vector<uint32_t> plain;   // unquantized section indices, ascending
  size_t plain_list_offset = 0;  // of their DevicePlainSection[] in the blob
  // Blob contents, host side; pointers inside DeviceSection entries are filled in by
  // MaterializeBlob for a given device base address.
  std::vector<uint8_t> blob;
  struct SectionConst {
    size_t signs = 0;       // offset of the sign bytes in the blob
    size_t qjl = SIZE_MAX;  // offset of the QJL matrix (QJL sections)
  };
  std::vector<SectionConst> consts;  // [num_layers * 2]
};

[[nodiscard]] GpuPlan MakeGpuPlan(const BlockCodec& codec);

// The blob with every DeviceSection's pointers rebased on `base` (where the blob will live).
std::vector<uint8_t> MaterializeBlob(const GpuPlan& plan, const BlockCodec& codec, uintptr_t base);

// A (g, bits) codebook's device table: levels, padded thresholds and bucket table, each part
// 16-aligned. `tables` receives the part offsets (pointers relative to 0; add the base).
std::vector<uint8_t> MakeCodebookBlob(const Codebook& cb, CodebookTables* tables);
CodebookTables RebaseCodebook(const CodebookTables& tables, uintptr_t base);

// The launch list for encoding (or decoding layers [begin, end) of) `blocks` blocks: one per
// GroupConfig with sections in range. Pointers are left null: the caller sets values,
// aligned, errors and codebook.
std::vector<GroupLaunch> MakeLaunches(const GpuPlan& plan, const BlockCodec& codec,
                                      uintptr_t blob_base, int layer_begin, int layer_end,
                                      uint32_t blocks, DType values_dtype);

// The plain-section launch for layers [begin, end) (num_sections 0: none). Pointers as above.
PlainLaunch MakePlainLaunch(const GpuPlan& plan, const BlockCodec& codec, uintptr_t blob_base,
                            int layer_begin, int layer_end, uint32_t blocks, DType out_dtype);

// Tiles (warp work items) of a launch.
TURBOKV_HD uint64_t LaunchTiles(const GroupLaunch& a) {
  return static_cast<uint64_t>(a.blocks) * a.num_sections * a.tiles_per_section;
}

// Copies the quantized sections' parts from an aligned block to their places in a packed block.
void AlignedToPacked(const GpuPlan& plan, const uint8_t* aligned, uint8_t* packed);
// Copies layers [begin, end) of a packed block (quantized parts and plain sections) into an
// aligned block.
void PackedToAligned(const GpuPlan& plan, const uint8_t* packed, int layer_begin, int layer_end,
                     uint8_t* aligned);

// Completes a packed block whose quantized sections are in place: header, the unquantized
// sections (encoded from `raw` on the CPU) and the checksum. InvalidArgument as
// BlockCodec::Encode for bad values in an unquantized section.
[[nodiscard]] absl::Status FinishPackedBlock(const BlockCodec& codec, absl::Span<const uint8_t> raw,
                                             absl::Span<uint8_t> packed);

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_SRC_GPU_PLAN_H_
