#include <algorithm>
#include <cstring>

#include "section_codec.h"

namespace turbokv::codec::internal {

SectionLayout LayoutOf(const SectionCodec& codec, size_t vectors, int head_dim, DType source) {
  SectionLayout l;
  const size_t values = vectors * static_cast<size_t>(head_dim);
  if (codec.bits == 0) {
    l.bytes = values * DTypeSize(source);
    return l;
  }
  if (codec.bits == 16) {
    l.bytes = values * 2;
    return l;
  }
  const size_t g = static_cast<size_t>(codec.group_size);
  l.groups = values / g;
  size_t at = 0;
  l.scales = at;
  at += 2 * l.groups;
  if (codec.qjl) {
    l.residuals = at;
    at += 2 * l.groups;
  }
  l.indices = at;
  at += l.groups * (g * static_cast<size_t>(codec.bits) / 8);
  if (codec.qjl) {
    l.qjl_bits = at;
    at += l.groups * (g / 8);
  }
  l.bytes = at;
  return l;
}

std::vector<uint32_t> LaneSignMasks(uint64_t sign_key, int head_dim, int g) {
  constexpr int kLanes = 8;
  const int groups = head_dim / g;
  std::vector<uint32_t> masks(static_cast<size_t>(groups) * g * kLanes);
  for (int phase = 0; phase < groups; ++phase) {
    for (int j = 0; j < g; ++j) {
      for (int l = 0; l < kLanes; ++l) {
        const int k = (phase + l) % groups;
        masks[(static_cast<size_t>(phase) * g + j) * kLanes + l] =
            SignNegative(sign_key, k * g + j) ? 0x80000000u : 0u;
      }
    }
  }
  return masks;
}

float MaxFiniteOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return kMaxHalf;
    case DType::kBFloat16:
      return kMaxBFloat16;
    case DType::kFloat32:
      return kMaxFloat;
  }
  return kMaxFloat;
}

bool HasWideScale(const uint8_t* scales, size_t groups) {
  uint16_t any = 0;
  for (size_t i = 0; i < groups; ++i) {
    uint16_t h;
    std::memcpy(&h, scales + 2 * i, 2);
    any |= h;
  }
  return (any & kWideScaleBit) != 0;
}

float LoadAsFloat(const uint8_t* p, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return BFloat16ToFloat(h);
    }
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
  }
  return 0.0f;
}

void StoreFromFloat(uint8_t* p, DType dtype, size_t i, float v) {
  switch (dtype) {
    case DType::kFloat16: {
      const uint16_t h = FloatToHalf(v);
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DType::kBFloat16: {
      const uint16_t h = FloatToBFloat16(v);
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DType::kFloat32:
      std::memcpy(p + 4 * i, &v, 4);
      return;
  }
}

namespace {

// First non-finite element of a raw section, or `values` when all are finite. A tight loop over
// the exponent bits that the compiler vectorizes; the raw preset is a memcpy plus this check.
template <typename Word>
size_t FirstNonFiniteWord(const uint8_t* src, size_t values, Word exponent_mask) {
  constexpr size_t kChunk = 1024;
  for (size_t start = 0; start < values; start += kChunk) {
    const size_t end = std::min(values, start + kChunk);
    bool bad = false;
    for (size_t i = start; i < end; ++i) {
      Word w;
      std::memcpy(&w, src + sizeof(Word) * i, sizeof(Word));
      bad |= (w & exponent_mask) == exponent_mask;
    }
    if (bad) {
      for (size_t i = start; i < end; ++i) {
        Word w;
        std::memcpy(&w, src + sizeof(Word) * i, sizeof(Word));
        if ((w & exponent_mask) == exponent_mask) return i;
      }
    }
  }
  return values;
}

}  // namespace

size_t FirstNonFinite(const uint8_t* src, size_t values, DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return FirstNonFiniteWord<uint16_t>(src, values, 0x7C00u);
    case DType::kBFloat16:
      return FirstNonFiniteWord<uint16_t>(src, values, 0x7F80u);
    case DType::kFloat32:
      return FirstNonFiniteWord<uint32_t>(src, values, 0x7F800000u);
  }
  return 0;
}

namespace {

// Raw sections (verbatim copy) and fp16 sections (protected layers).
EncodeError EncodePlain(const SectionJob& job, const uint8_t* src, uint8_t* dst) {
  EncodeError err;
  const size_t values = job.vectors * static_cast<size_t>(job.head_dim);
  const size_t bad = FirstNonFinite(src, values, job.source);
  if (bad < values) {
    err.kind = EncodeError::kNonFinite;
    err.vector = bad / job.head_dim;
    err.coordinate = static_cast<int>(bad % job.head_dim);
    return err;
  }
  if (job.codec.bits == 0) {
    std::memcpy(dst, src, values * DTypeSize(job.source));
    return err;
  }
  for (size_t i = 0; i < values; ++i) {
    const uint16_t h = FloatToHalf(LoadAsFloat(src, job.source, i));
    if ((h & 0x7C00u) == 0x7C00u) {
      err.kind = EncodeError::kScaleOverflow;
      err.vector = i / job.head_dim;
      err.coordinate = static_cast<int>(i % job.head_dim);
      return err;
    }
    std::memcpy(dst + 2 * i, &h, 2);
  }
  return err;
}

void DecodePlain(const SectionJob& job, const uint8_t* src, DType out_dtype, uint8_t* out) {
  const size_t values = job.vectors * static_cast<size_t>(job.head_dim);
  const DType stored = job.codec.bits == 16 ? DType::kFloat16 : job.source;
  if (stored == out_dtype) {
    std::memcpy(out, src, values * DTypeSize(out_dtype));
    return;
  }
  for (size_t i = 0; i < values; ++i)
    StoreFromFloat(out, out_dtype, i, LoadAsFloat(src, stored, i));
}

}  // namespace

EncodeError EncodeGroupsScalar(const SectionJob& job, const SectionLayout& lay, size_t begin,
                               size_t end, const uint8_t* src, uint8_t* dst) {
  EncodeError err;
  const int g = job.codec.group_size;
  const int groups_per_vector = job.head_dim / g;
  const size_t index_bytes = static_cast<size_t>(g) * job.codec.bits / 8;
  float x[kMaxGroupSize];
  EncodedGroup enc;
  for (size_t gi = begin; gi < end; ++gi) {
    const size_t v = gi / groups_per_vector;
    const int k = static_cast<int>(gi % groups_per_vector);
    for (int j = 0; j < g; ++j) {
      x[j] = LoadAsFloat(src, job.source, gi * g + j);
      if (!IsFiniteFloat(x[j])) {
        err.kind = EncodeError::kNonFinite;
        err.vector = v;
        err.coordinate = k * g + j;
        return err;
      }
    }
    if (!EncodeGroup(job.params, x, k * g, &enc)) {
      err.kind = EncodeError::kScaleOverflow;
      err.vector = v;
      err.coordinate = k * g;
      return err;
    }
    std::memcpy(dst + lay.scales + 2 * gi, &enc.scale, 2);
    PackIndices(enc.idx, g, job.codec.bits, dst + lay.indices + gi * index_bytes);
    if (job.codec.qjl) {
      std::memcpy(dst + lay.residuals + 2 * gi, &enc.residual, 2);
      std::memcpy(dst + lay.qjl_bits + gi * (g / 8), enc.qjl_bits, g / 8);
    }
  }
  return err;
}

void DecodeGroupsScalar(const SectionJob& job, const SectionLayout& lay, size_t begin, size_t end,
                        const uint8_t* src, DType out_dtype, uint8_t* out) {
  const int g = job.codec.group_size;
  const int groups_per_vector = job.head_dim / g;
  const size_t index_bytes = static_cast<size_t>(g) * job.codec.bits / 8;
  float x[kMaxGroupSize];
  uint8_t idx[kMaxGroupSize];
  const uint8_t zero_bits[kMaxGroupSize / 8] = {};
  const float limit = MaxFiniteOf(out_dtype);
  for (size_t gi = begin; gi < end; ++gi) {
    const int k = static_cast<int>(gi % groups_per_vector);
    uint16_t scale, residual = 0;
    std::memcpy(&scale, src + lay.scales + 2 * gi, 2);
    UnpackIndices(src + lay.indices + gi * index_bytes, g, job.codec.bits, idx);
    const uint8_t* qbits = zero_bits;
    if (job.codec.qjl) {
      std::memcpy(&residual, src + lay.residuals + 2 * gi, 2);
      qbits = src + lay.qjl_bits + gi * (g / 8);
    }
    DecodeGroup(job.params, idx, qbits, scale, residual, k * g, limit, x);
    for (int j = 0; j < g; ++j) StoreFromFloat(out, out_dtype, gi * g + j, x[j]);
  }
}

EncodeError EncodeSectionScalar(const SectionJob& job, const uint8_t* src, uint8_t* dst) {
  if (!job.codec.quantized()) return EncodePlain(job, src, dst);
  const SectionLayout lay = LayoutOf(job.codec, job.vectors, job.head_dim, job.source);
  return EncodeGroupsScalar(job, lay, 0, lay.groups, src, dst);
}

void DecodeSectionScalar(const SectionJob& job, const uint8_t* src, DType out_dtype, uint8_t* out) {
  if (!job.codec.quantized()) {
    DecodePlain(job, src, out_dtype, out);
    return;
  }
  const SectionLayout lay = LayoutOf(job.codec, job.vectors, job.head_dim, job.source);
  DecodeGroupsScalar(job, lay, 0, lay.groups, src, out_dtype, out);
}

}  // namespace turbokv::codec::internal
