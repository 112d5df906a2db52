// Packed block format v1 (kernels/FORMAT.md documents every byte).
#include "format.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "checksum_simd.h"
#include "section_codec.h"
#include "turbokv/codec/status_macros.h"
#include "xxhash.h"

namespace turbokv::codec {
namespace internal {
namespace {

void Put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }
void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
void Put64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }
uint16_t Get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

int Log2(int v) {
  int r = 0;
  while ((1 << r) < v) ++r;
  return r;
}

// One section codec as two bytes: bits, then group_log2 (low nibble; 0 for bits 0/16) | qjl<<7.
void PutSection(std::vector<uint8_t>& b, size_t at, const SectionCodec& s) {
  b[at] = static_cast<uint8_t>(s.bits);
  b[at + 1] = static_cast<uint8_t>((s.quantized() ? Log2(s.group_size) : 0) | (s.qjl ? 0x80 : 0));
}

SectionCodec GetSection(const uint8_t* p) {
  SectionCodec s;
  s.bits = p[0];
  s.group_size = s.bits >= 1 && s.bits <= 8 ? 1 << (p[1] & 0x0F) : 0;
  s.qjl = (p[1] & 0x80) != 0;
  return s;
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("packed block is corrupt: ", what));
}

}  // namespace

std::vector<uint8_t> WriteHeader(const BlockCodec& codec) {
  const BlockShape& shape = codec.shape();
  const int layers = shape.num_layers;
  std::vector<uint8_t> b(HeaderBytes(layers), 0);
  std::memcpy(&b[0], kMagic, 4);
  Put16(b, 4, kFormatVersion);
  Put16(b, 6, codec.spec().norm_correction ? kFlagNormCorrection : 0);
  Put64(b, 8, codec.namespace_id());
  Put64(b, 16, codec.spec().rotation_seed);
  Put64(b, 24, codec.spec().qjl_seed);
  Put16(b, 32, static_cast<uint16_t>(shape.num_layers));
  Put16(b, 34, static_cast<uint16_t>(shape.block_tokens));
  Put16(b, 36, static_cast<uint16_t>(shape.num_kv_heads));
  Put16(b, 38, static_cast<uint16_t>(shape.head_dim));
  b[40] = static_cast<uint8_t>(shape.dtype);
  const CodecSpec& spec = codec.spec();
  const bool any_protected = spec.protected_first_layers > 0 || spec.protected_last_layers > 0;
  b[41] = static_cast<uint8_t>(any_protected ? spec.protected_bits : 0);
  Put16(b, 42, static_cast<uint16_t>(spec.protected_first_layers));
  Put16(b, 44, static_cast<uint16_t>(spec.protected_last_layers));
  PutSection(b, 46, spec.key);
  PutSection(b, 48, spec.value);
  Put32(b, 52, static_cast<uint32_t>(b.size()));
  size_t at = kFixedHeaderBytes;
  for (const LayerCodec& lc : codec.layers()) {
    PutSection(b, at, lc.key);
    PutSection(b, at + 2, lc.value);
    at += 4;
  }
  for (int l = 0; l < layers; ++l) {
    Put32(b, at, static_cast<uint32_t>(codec.plans()[2 * l].offset));
    at += 4;
  }
  Put32(b, at, static_cast<uint32_t>(codec.packed_bytes() - kChecksumBytes));
  return b;
}

uint64_t Checksum(absl::Span<const uint8_t> bytes) {
  // The widest build of XXH3 this CPU runs (checksum_simd.h); the same 64 bits on each.
  static const int path = Avx512Available() && HaveChecksumAvx512Build() ? 2
                          : Avx2Available() && HaveChecksumAvx2Build()   ? 1
                                                                         : 0;
  switch (path) {
    case 2:
      return ChecksumAvx512(bytes.data(), bytes.size());
    case 1:
      return ChecksumAvx2(bytes.data(), bytes.size());
    default:
      return XXH3_64bits(bytes.data(), bytes.size());
  }
}

}  // namespace internal

using internal::Corrupt;

absl::StatusOr<PackedBlockInfo> ParsePackedBlock(absl::Span<const uint8_t> packed) {
  const size_t size = packed.size();
  const uint8_t* p = packed.data();
  if (size < internal::kFixedHeaderBytes + internal::kChecksumBytes) {
    return Corrupt(absl::StrCat("it is ", size, " bytes; a packed block has at least ",
                                internal::kFixedHeaderBytes + internal::kChecksumBytes));
  }
  if (std::memcmp(p, internal::kMagic, 4) != 0) return Corrupt("magic is not \"TKVB\"");
  PackedBlockInfo info;
  info.format_version = internal::Get16(p + 4);
  if (info.format_version != internal::kFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed block format_version ", info.format_version,
                     " is not supported; expected ", internal::kFormatVersion));
  }
  const uint16_t flags = internal::Get16(p + 6);
  if (flags & ~internal::kFlagNormCorrection)
    return Corrupt(absl::StrCat("unknown flags 0x", absl::Hex(flags)));
  if (p[50] != 0 || p[51] != 0) return Corrupt("reserved header bytes are not zero");
  info.norm_correction = (flags & internal::kFlagNormCorrection) != 0;
  info.namespace_id = internal::Get64(p + 8);
  info.rotation_seed = internal::Get64(p + 16);
  info.qjl_seed = internal::Get64(p + 24);
  info.shape.num_layers = internal::Get16(p + 32);
  info.shape.block_tokens = internal::Get16(p + 34);
  info.shape.num_kv_heads = internal::Get16(p + 36);
  info.shape.head_dim = internal::Get16(p + 38);
  info.shape.dtype = static_cast<DType>(p[40]);
  if (absl::Status s = ValidateShape(info.shape); !s.ok()) return Corrupt(s.message());
  info.spec.norm_correction = info.norm_correction;
  info.spec.rotation_seed = info.rotation_seed;
  info.spec.qjl_seed = info.qjl_seed;
  info.spec.protected_bits = p[41] == 0 ? 8 : p[41];
  info.spec.protected_first_layers = internal::Get16(p + 42);
  info.spec.protected_last_layers = internal::Get16(p + 44);
  info.spec.key = internal::GetSection(p + 46);
  info.spec.value = internal::GetSection(p + 48);
  absl::StatusOr<std::vector<LayerCodec>> resolved = ResolveLayerCodecs(info.spec, info.shape);
  if (!resolved.ok()) return Corrupt(resolved.status().message());
  if ((info.spec.protected_first_layers > 0 || info.spec.protected_last_layers > 0) !=
      (p[41] != 0)) {
    return Corrupt("protected_bits and the protected layer counts disagree");
  }
  const int layers = info.shape.num_layers;
  info.header_bytes = internal::HeaderBytes(layers);
  if (internal::Get32(p + 52) != info.header_bytes) {
    return Corrupt(absl::StrCat("header_bytes is ", internal::Get32(p + 52), "; expected ",
                                info.header_bytes, " for ", layers, " layers"));
  }
  if (size < info.header_bytes + internal::kChecksumBytes) {
    return Corrupt(absl::StrCat("it is ", size, " bytes; its header alone needs ",
                                info.header_bytes + internal::kChecksumBytes));
  }
  info.layers.resize(layers);
  const size_t vectors = info.shape.vectors_per_section();
  size_t expected = info.header_bytes;
  const uint8_t* table = p + internal::kFixedHeaderBytes;
  const uint8_t* offsets = table + 4 * static_cast<size_t>(layers);
  info.layer_offsets.resize(layers + 1);
  for (int l = 0; l < layers; ++l) {
    LayerCodec& lc = info.layers[l];
    lc.key = internal::GetSection(table + 4 * l);
    lc.value = internal::GetSection(table + 4 * l + 2);
    if (lc.key != (*resolved)[l].key || lc.value != (*resolved)[l].value) {
      return Corrupt(
          absl::StrCat("layer ", l, " codec table entry disagrees with the header's codec"));
    }
    info.layer_offsets[l] = internal::Get32(offsets + 4 * l);
    if (info.layer_offsets[l] != expected) {
      return Corrupt(
          absl::StrCat("layer ", l, " offset is ", info.layer_offsets[l], "; expected ", expected));
    }
    expected += SectionBytes(lc.key, vectors, info.shape.head_dim, info.shape.dtype) +
                SectionBytes(lc.value, vectors, info.shape.head_dim, info.shape.dtype);
  }
  info.layer_offsets[layers] = internal::Get32(offsets + 4 * static_cast<size_t>(layers));
  if (info.layer_offsets[layers] != expected) {
    return Corrupt(
        absl::StrCat("end offset is ", info.layer_offsets[layers], "; expected ", expected));
  }
  info.total_bytes = expected + internal::kChecksumBytes;
  if (size != info.total_bytes) {
    return Corrupt(absl::StrCat("it is ", size, " bytes; its header describes ", info.total_bytes,
                                size < info.total_bytes ? " (truncated)" : " (trailing bytes)"));
  }
  return info;
}

absl::Status VerifyPackedChecksum(absl::Span<const uint8_t> packed) {
  if (packed.size() < internal::kChecksumBytes) return Corrupt("shorter than its checksum");
  const size_t body = packed.size() - internal::kChecksumBytes;
  const uint64_t want = internal::Get64(packed.data() + body);
  const uint64_t got = internal::Checksum(packed.first(body));
  if (want != got) {
    return Corrupt(absl::StrCat("checksum mismatch (stored 0x", absl::Hex(want, absl::kZeroPad16),
                                ", computed 0x", absl::Hex(got, absl::kZeroPad16), ")"));
  }
  return absl::OkStatus();
}

}  // namespace turbokv::codec
