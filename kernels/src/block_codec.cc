#include "turbokv/codec/block_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "format.h"
#include "section_codec.h"
#include "turbokv/codec/codebook.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::codec {

using internal::EncodeError;
using internal::SectionJob;

CpuIsa DetectCpuIsa() {
  if (internal::Avx512Available()) return CpuIsa::kAvx512;
  return internal::Avx2Available() ? CpuIsa::kAvx2 : CpuIsa::kScalar;
}

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto:
      return "auto";
    case CpuIsa::kScalar:
      return "cpu-scalar";
    case CpuIsa::kAvx2:
      return "cpu-avx2";
    case CpuIsa::kAvx512:
      return "cpu-avx512";
  }
  return "unknown";
}

size_t SectionBytes(const SectionCodec& codec, size_t vectors, int head_dim, DType source) {
  return internal::LayoutOf(codec, vectors, head_dim, source).bytes;
}

namespace {

// The QJL projection S: [g][g] standard Gaussians by Box–Muller over the SplitMix64 stream of
// key = SectionKey(qjl_seed, layer, kv): element e = i*g + c uses outputs 2e+1 and 2e+2
// (FORMAT.md, "QJL matrix"). Computed in double, rounded to fp32.
std::shared_ptr<const std::vector<float>> MakeQjlMatrix(uint64_t key, int g) {
  auto m = std::make_shared<std::vector<float>>(static_cast<size_t>(g) * g);
  auto uniform = [key](uint64_t n) {  // (0, 1), 53 bits
    const uint64_t r = internal::Mix64(key + n * internal::kSplitMixGamma);
    return (static_cast<double>(r >> 11) + 0.5) * 0x1.0p-53;
  };
  for (size_t e = 0; e < m->size(); ++e) {
    const double u1 = uniform(2 * e + 1);
    const double u2 = uniform(2 * e + 2);
    (*m)[e] =
        static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586477 * u2));
  }
  return m;
}

internal::GroupParams ParamsFor(const BlockCodec::SectionPlan& plan, bool norm_correction) {
  internal::GroupParams p;
  if (!plan.codec.quantized()) return p;
  p.g = plan.codec.group_size;
  p.bits = plan.codec.bits;
  p.levels = plan.codebook->levels.data();
  p.thresholds = plan.codebook->thresholds.data();
  p.norm_correction = norm_correction;
  p.sign_key = plan.sign_key;
  if (plan.codec.qjl) {
    p.qjl = plan.qjl_matrix->data();
    p.qjl_coef = static_cast<float>(internal::kSqrtHalfPi / p.g);
  }
  return p;
}

// InvalidArgument when a specific path is requested that this CPU cannot run.
absl::Status CheckIsa(CpuIsa isa) {
  if (isa == CpuIsa::kAvx2 && !internal::Avx2Available()) {
    return absl::InvalidArgumentError("cpu-avx2 was requested but this CPU lacks AVX2/FMA/F16C");
  }
  if (isa == CpuIsa::kAvx512 && !internal::Avx512Available()) {
    return absl::InvalidArgumentError(
        "cpu-avx512 was requested but this CPU lacks AVX-512 F/DQ/VL");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BlockCodec> BlockCodec::Create(const BlockShape& shape, const CodecSpec& spec,
                                              uint64_t namespace_id) {
  TURBOKV_ASSIGN_OR_RETURN(std::vector<LayerCodec> layers, ResolveLayerCodecs(spec, shape));
  BlockCodec c;
  c.shape_ = shape;
  c.spec_ = spec;
  c.namespace_id_ = namespace_id;
  c.layers_ = std::move(layers);

  const size_t vectors = shape.vectors_per_section();
  size_t at = internal::HeaderBytes(shape.num_layers);
  c.plans_.resize(static_cast<size_t>(shape.num_layers) * 2);
  for (int l = 0; l < shape.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      SectionPlan& plan = c.plans_[2 * l + kv];
      plan.codec = kv == 0 ? c.layers_[l].key : c.layers_[l].value;
      plan.sign_key = internal::SectionKey(spec.rotation_seed, l, kv);
      if (plan.codec.qjl) {
        plan.qjl_matrix =
            MakeQjlMatrix(internal::SectionKey(spec.qjl_seed, l, kv), plan.codec.group_size);
      }
      if (plan.codec.quantized()) {
        plan.lane_sign_masks =
            internal::LaneSignMasks(plan.sign_key, shape.head_dim, plan.codec.group_size);
        TURBOKV_ASSIGN_OR_RETURN(plan.codebook,
                                 GetCodebook(plan.codec.group_size, plan.codec.bits));
      }
      plan.offset = at;
      plan.bytes = SectionBytes(plan.codec, vectors, shape.head_dim, shape.dtype);
      at += plan.bytes;
    }
  }
  c.packed_bytes_ = at + internal::kChecksumBytes;
  if (c.packed_bytes_ > internal::kMaxPackedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a packed block of this shape would be ",
                                                   c.packed_bytes_, " bytes; at most ",
                                                   internal::kMaxPackedBytes, " are allowed"));
  }
  c.header_ = internal::WriteHeader(c);
  return c;
}

absl::StatusOr<BlockCodec> BlockCodec::FromPacked(absl::Span<const uint8_t> packed) {
  TURBOKV_ASSIGN_OR_RETURN(PackedBlockInfo info, ParsePackedBlock(packed));
  return Create(info.shape, info.spec, info.namespace_id);
}

absl::StatusOr<size_t> BlockCodec::DecodedBytes(DType out_dtype, LayerRange range) const {
  const int end = range.end < 0 ? shape_.num_layers : range.end;
  if (range.begin < 0 || range.begin >= end || end > shape_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", range.begin, ", ", range.end,
                                                   ") is empty or outside 0..", shape_.num_layers));
  }
  return static_cast<size_t>(end - range.begin) * 2 * shape_.vectors_per_section() *
         shape_.head_dim * DTypeSize(out_dtype);
}

absl::Status BlockCodec::Encode(absl::Span<const uint8_t> raw, absl::Span<uint8_t> packed,
                                CpuIsa isa) const {
  if (raw.size() != raw_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw block is ", raw.size(), " bytes; expected ", raw_bytes(), " (",
                     std::string(DTypeName(shape_.dtype)), " [", shape_.num_layers, "][2][",
                     shape_.block_tokens, "][", shape_.num_kv_heads, "][", shape_.head_dim, "])"));
  }
  TURBOKV_RETURN_IF_ERROR(EncodeSections(raw, 0, packed, isa));
  SealPacked(packed);
  return absl::OkStatus();
}

absl::Status BlockCodec::EncodeSections(absl::Span<const uint8_t> raw_sections, size_t first,
                                        absl::Span<uint8_t> packed, CpuIsa isa) const {
  if (packed.size() != packed_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed buffer is ", packed.size(), " bytes; expected ", packed_bytes_));
  }
  const size_t section_raw = section_raw_bytes();
  if (raw_sections.size() % section_raw != 0 ||
      first + raw_sections.size() / section_raw > plans_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        raw_sections.size(), " raw bytes from section ", first, " are not whole sections of ",
        section_raw, " bytes within the block's ", plans_.size(), " sections"));
  }
  TURBOKV_RETURN_IF_ERROR(CheckIsa(isa));
  const bool use_avx2 = isa != CpuIsa::kScalar && internal::Avx2Available();
  const bool use_avx512 =
      (isa == CpuIsa::kAuto || isa == CpuIsa::kAvx512) && internal::Avx512Available();
  const size_t vectors = shape_.vectors_per_section();
  const size_t count = raw_sections.size() / section_raw;
  for (size_t s = first; s < first + count; ++s) {
    const SectionPlan& plan = plans_[s];
    const internal::GroupParams params = ParamsFor(plan, spec_.norm_correction);
    SectionJob job{
        plan.codec,      params,
        shape_.head_dim, vectors,
        shape_.dtype,    plan.lane_sign_masks.empty() ? nullptr : plan.lane_sign_masks.data(),
        plan.codebook};
    const uint8_t* src = raw_sections.data() + (s - first) * section_raw;
    uint8_t* dst = packed.data() + plan.offset;
    EncodeError err;
    if (!(use_avx2 && internal::EncodeSectionAvx2(job, src, dst, &err, use_avx512))) {
      err = internal::EncodeSectionScalar(job, src, dst);
    }
    if (err.kind != EncodeError::kNone) {
      const int layer = static_cast<int>(s / 2);
      const size_t token = err.vector / shape_.num_kv_heads;
      const size_t head = err.vector % shape_.num_kv_heads;
      const std::string where = absl::StrCat("layer ", layer, " ", s % 2 == 0 ? "K" : "V",
                                             " token ", token, " head ", head);
      if (err.kind == EncodeError::kNonFinite) {
        return absl::InvalidArgumentError(absl::StrCat("non-finite value at ", where,
                                                       " coordinate ", err.coordinate,
                                                       "; KV values must be finite"));
      }
      if (plan.codec.bits == 16) {
        return absl::InvalidArgumentError(absl::StrCat(
            "value too large at ", where, " coordinate ", err.coordinate,
            ": a 16-bit section stores fp16 (max 65504); protect layers at 8 bits (any "
            "magnitude) or keep them raw"));
      }
      // Wide scales (FORMAT.md) take any finite norm; only a degenerate reconstruction fails.
      return absl::InvalidArgumentError(
          absl::StrCat("value too large at ", where, " group starting at coordinate ",
                       err.coordinate, ": not even its wide (bf16 x 2^72) scale is finite"));
    }
  }
  return absl::OkStatus();
}

void BlockCodec::SealPacked(absl::Span<uint8_t> packed) const {
  std::memcpy(packed.data(), header_.data(), header_.size());
  const uint64_t sum = internal::Checksum(packed.first(packed.size() - internal::kChecksumBytes));
  std::memcpy(packed.data() + packed.size() - internal::kChecksumBytes, &sum, 8);
}

size_t BlockCodec::SetupBytes(const BlockShape& shape, const std::vector<LayerCodec>& layers) {
  size_t bytes = layers.size() * 2 * sizeof(SectionPlan);
  for (const LayerCodec& l : layers) {
    for (const SectionCodec* c : {&l.key, &l.value}) {
      if (!c->quantized()) continue;
      bytes += static_cast<size_t>(shape.head_dim) * 8 * sizeof(uint32_t);  // lane sign masks
      if (c->qjl) bytes += static_cast<size_t>(c->group_size) * c->group_size * sizeof(float);
    }
  }
  return bytes;
}

absl::Status BlockCodec::Decode(absl::Span<const uint8_t> packed, DType out_dtype, LayerRange range,
                                absl::Span<uint8_t> out, CpuIsa isa) const {
  TURBOKV_ASSIGN_OR_RETURN(size_t want, DecodedBytes(out_dtype, range));
  if (out.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("output buffer is ", out.size(), " bytes; expected ", want));
  }
  if (packed.size() != packed_bytes_) {
    return absl::DataLossError(absl::StrCat("packed block is ", packed.size(),
                                            " bytes; this codec's blocks are ", packed_bytes_));
  }
  if (std::memcmp(packed.data(), header_.data(), header_.size()) != 0) {
    // Tell a foreign-but-valid header (wrong namespace/codec) apart from a damaged one.
    absl::StatusOr<PackedBlockInfo> info = ParsePackedBlock(packed);
    if (!info.ok()) return info.status();
    return absl::InvalidArgumentError(
        "packed block header does not match this codec (namespace, shape or codec differ)");
  }
  TURBOKV_RETURN_IF_ERROR(CheckIsa(isa));
  const bool use_avx2 = isa != CpuIsa::kScalar && internal::Avx2Available();
  const bool use_avx512 =
      (isa == CpuIsa::kAuto || isa == CpuIsa::kAvx512) && internal::Avx512Available();
  const int end = range.end < 0 ? shape_.num_layers : range.end;
  const size_t vectors = shape_.vectors_per_section();
  const size_t section_out = vectors * shape_.head_dim * DTypeSize(out_dtype);
  for (int l = range.begin; l < end; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const SectionPlan& plan = plans_[2 * l + kv];
      const internal::GroupParams params = ParamsFor(plan, spec_.norm_correction);
      SectionJob job{
          plan.codec,      params,
          shape_.head_dim, vectors,
          shape_.dtype,    plan.lane_sign_masks.empty() ? nullptr : plan.lane_sign_masks.data(),
          plan.codebook};
      const uint8_t* src = packed.data() + plan.offset;
      uint8_t* dst = out.data() + (static_cast<size_t>(l - range.begin) * 2 + kv) * section_out;
      if (!(use_avx2 && internal::DecodeSectionAvx2(job, src, out_dtype, dst, use_avx512))) {
        internal::DecodeSectionScalar(job, src, out_dtype, dst);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status BlockCodec::ValidatePackedValues(absl::Span<const uint8_t> packed) const {
  if (packed.size() != packed_bytes_) {
    return absl::DataLossError(absl::StrCat("packed block is ", packed.size(),
                                            " bytes; this codec's blocks are ", packed_bytes_));
  }
  // Largest fp16 bit patterns allowed: 0x7BFF = 65504 (0x7C00..0x7FFF are Inf/NaN), 0x4000 =
  // 2.0. Scales with the sign bit set are wide (FORMAT.md, "Wide scales"): 0x8000 | bf16, valid
  // up to 0xFF7F (0xFF80.. are a bf16 Inf/NaN).
  constexpr uint16_t kMaxScaleBits = 0x7BFF;
  constexpr uint16_t kMaxWideScaleBits = 0xFF7F;
  constexpr uint16_t kMaxResidualBits = 0x4000;
  auto bad_scale = [](uint16_t h) {
    return internal::IsWideScale(h) ? h > kMaxWideScaleBits : h > kMaxScaleBits;
  };
  auto bad_residual = [](uint16_t h) { return h > kMaxResidualBits; };
  const size_t vectors = shape_.vectors_per_section();
  for (size_t s = 0; s < plans_.size(); ++s) {
    const SectionPlan& plan = plans_[s];
    const uint8_t* section = packed.data() + plan.offset;
    auto where = [&] {
      return absl::StrCat("packed block layer ", s / 2, " ", s % 2 == 0 ? "K" : "V");
    };
    if (!plan.codec.quantized()) {
      const DType stored = plan.codec.bits == 16 ? DType::kFloat16 : shape_.dtype;
      const size_t values = vectors * static_cast<size_t>(shape_.head_dim);
      const size_t bad = internal::FirstNonFinite(section, values, stored);
      if (bad < values) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), " token ", bad / shape_.head_dim / shape_.num_kv_heads, " head ",
            bad / shape_.head_dim % shape_.num_kv_heads, " coordinate ", bad % shape_.head_dim,
            ": non-finite ", std::string(DTypeName(stored)), " value; KV values must be finite"));
      }
      continue;
    }
    const internal::SectionLayout lay =
        internal::LayoutOf(plan.codec, vectors, shape_.head_dim, shape_.dtype);
    auto check = [&](size_t at, auto bad, const char* what, const char* why) -> absl::Status {
      bool any = false;
      for (size_t i = 0; i < lay.groups; ++i) {
        uint16_t h;
        std::memcpy(&h, section + at + 2 * i, 2);
        any |= bad(h);
      }
      if (!any) return absl::OkStatus();
      for (size_t i = 0; i < lay.groups; ++i) {
        uint16_t h;
        std::memcpy(&h, section + at + 2 * i, 2);
        if (bad(h)) {
          return absl::InvalidArgumentError(absl::StrCat(where(), " group ", i, ": ", what, " 0x",
                                                         absl::Hex(h, absl::kZeroPad4), why));
        }
      }
      return absl::OkStatus();
    };
    TURBOKV_RETURN_IF_ERROR(
        check(lay.scales, bad_scale, "scale",
              " is neither a finite non-negative fp16 nor a finite wide scale"));
    if (plan.codec.qjl) {
      TURBOKV_RETURN_IF_ERROR(check(lay.residuals, bad_residual, "QJL residual norm",
                                    " is not a finite fp16 in [0, 2]"));
    }
  }
  return absl::OkStatus();
}

absl::Status BlockCodec::EncodeBatch(absl::Span<const absl::Span<const uint8_t>> raws,
                                     absl::Span<const absl::Span<uint8_t>> packeds, int num_threads,
                                     CpuIsa isa) const {
  if (raws.size() != packeds.size()) {
    return absl::InvalidArgumentError(absl::StrCat("EncodeBatch got ", raws.size(),
                                                   " raw blocks but ", packeds.size(), " outputs"));
  }
  const size_t n = raws.size();
  const size_t threads = std::max<size_t>(1, std::min<size_t>(num_threads, n));
  std::vector<absl::Status> status(threads);
  auto work = [&](size_t t) {
    for (size_t i = t; i < n; i += threads) {
      status[t] = Encode(raws[i], packeds[i], isa);
      if (!status[t].ok()) {
        status[t] =
            absl::Status(status[t].code(), absl::StrCat("block ", i, ": ", status[t].message()));
        return;
      }
    }
  };
  if (threads == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
  }
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace turbokv::codec
