// Internal: encode / decode one K or V section of one layer on the CPU.
//
// A section is `vectors` head vectors of `head_dim` coordinates (raw layout:
// [block_tokens][num_kv_heads][head_dim], contiguous in the raw block). Its packed layout is
// documented in kernels/FORMAT.md ("Sections").
#ifndef TURBOKV_KERNELS_SRC_SECTION_CODEC_H_
#define TURBOKV_KERNELS_SRC_SECTION_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "group_math.h"
#include "turbokv/codec/codebook.h"
#include "turbokv/codec/types.h"

namespace turbokv::codec::internal {

struct SectionJob {
  SectionCodec codec;
  GroupParams params;  // valid when codec.quantized()
  int head_dim = 0;
  size_t vectors = 0;
  DType source = DType::kFloat16;  // dtype of the raw section
  // [G][g][8] sign masks for the 8-lane path (LaneSignMasks), or null.
  const uint32_t* lane_sign_masks = nullptr;
  const Codebook* codebook = nullptr;  // quantized sections: levels, thresholds, bucket table
};

// Sign masks (0 or 0x80000000) for the 8-lane SIMD path: entry [phase][j][lane] is the sign of
// coordinate ((phase + lane) mod G)·g + j of the head vector, G = head_dim / g.
std::vector<uint32_t> LaneSignMasks(uint64_t sign_key, int head_dim, int g);

// Where a section's parts start, relative to the section.
struct SectionLayout {
  size_t groups = 0;     // vectors * head_dim / g
  size_t scales = 0;     // fp16 [groups]
  size_t residuals = 0;  // fp16 [groups] (QJL only)
  size_t indices = 0;    // [groups][g * bits / 8]
  size_t qjl_bits = 0;   // [groups][g / 8] (QJL only)
  size_t bytes = 0;      // total
};
SectionLayout LayoutOf(const SectionCodec& codec, size_t vectors, int head_dim, DType source);

// Index of the first non-finite value of `values` elements of `dtype` at `src`, or `values` when
// all are finite (a vectorizable scan of the exponent bits).
size_t FirstNonFinite(const uint8_t* src, size_t values, DType dtype);

// First problem found while encoding, if any.
struct EncodeError {
  enum Kind { kNone, kNonFinite, kScaleOverflow } kind = kNone;
  size_t vector = 0;   // head vector index within the section
  int coordinate = 0;  // coordinate (kNonFinite) or first coordinate of the group
};

// Scalar reference path (group_math.h, one group at a time), for groups [begin, end) of a
// quantized section; the SIMD paths use it for the groups left over after their last full batch.
EncodeError EncodeGroupsScalar(const SectionJob& job, const SectionLayout& lay, size_t begin,
                               size_t end, const uint8_t* src, uint8_t* dst);
void DecodeGroupsScalar(const SectionJob& job, const SectionLayout& lay, size_t begin, size_t end,
                        const uint8_t* src, DType out_dtype, uint8_t* out);
// Whole sections (any codec).
EncodeError EncodeSectionScalar(const SectionJob& job, const uint8_t* src, uint8_t* dst);
void DecodeSectionScalar(const SectionJob& job, const uint8_t* src, DType out_dtype, uint8_t* out);

// AVX2 path: identical bytes and values; only compiled on x86-64. Returns false if it cannot
// handle the job (then the caller uses the scalar path).
bool Avx2Available();
bool EncodeSectionAvx2(const SectionJob& job, const uint8_t* src, uint8_t* dst, EncodeError* err,
                       bool allow_avx512);
// `allow_avx512`: decode the first groups sixteen at a time when the CPU has AVX-512.
bool DecodeSectionAvx2(const SectionJob& job, const uint8_t* src, DType out_dtype, uint8_t* out,
                       bool allow_avx512);

// AVX-512 decode of the first (multiple of 16) groups of a quantized 1-4-bit non-QJL section;
// returns how many groups it decoded (0 when it does not apply or the CPU lacks AVX-512).
bool Avx512Available();
size_t DecodeSectionAvx512(const SectionJob& job, const SectionLayout& lay, const uint8_t* src,
                           DType out_dtype, uint8_t* out);
// The same for encode: groups encoded (a multiple of 16), or -1 when a value is not finite or a
// scale overflows (the caller then falls back to the scalar path, which reports where).
int64_t EncodeSectionAvx512(const SectionJob& job, const SectionLayout& lay, const uint8_t* src,
                            uint8_t* dst);

// Largest finite value of `dtype` (the clamp of wide groups, group_math.h).
float MaxFiniteOf(DType dtype);
// True when any of the `groups` fp16 scales at `scales` is a wide scale (FORMAT.md, "Wide
// scales"); the SIMD decoders leave such sections to the scalar path.
bool HasWideScale(const uint8_t* scales, size_t groups);

// Element conversions used by both paths.
float LoadAsFloat(const uint8_t* p, DType dtype, size_t i);
void StoreFromFloat(uint8_t* p, DType dtype, size_t i, float v);

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_SRC_SECTION_CODEC_H_
