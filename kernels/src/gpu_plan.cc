#include "gpu_plan.h"

#include <algorithm>
#include <cstring>

#include "format.h"

namespace turbokv::codec::internal {

namespace {

int GroupsPerTile(int g) { return g <= 32 ? kWarpLanes : kWarpLanes / (g / 32); }

size_t Take(size_t* at, size_t bytes) {
  const size_t here = *at;
  *at = AlignUp(here + bytes, kDeviceAlign);
  return here;
}

}  // namespace

GpuPlan MakeGpuPlan(const BlockCodec& codec) {
  GpuPlan plan;
  const BlockShape& shape = codec.shape();
  const size_t vectors = shape.vectors_per_section();
  const size_t n = codec.plans().size();
  plan.sections.resize(n);
  plan.consts.resize(n);
  size_t at = 0;
  size_t blob = 0;
  for (size_t s = 0; s < n; ++s) {
    const BlockCodec::SectionPlan& sp = codec.plans()[s];
    AlignedSection& a = plan.sections[s];
    a.codec = sp.codec;
    a.packed = LayoutOf(sp.codec, vectors, shape.head_dim, shape.dtype);
    a.packed_offset = sp.offset;
    if (!sp.codec.quantized()) {
      plan.plain.push_back(static_cast<uint32_t>(s));  // placed after the quantized parts
      continue;
    }
    const size_t g = static_cast<size_t>(sp.codec.group_size);
    const size_t groups = a.packed.groups;
    a.scales = Take(&at, 2 * groups);
    if (sp.codec.qjl) a.residuals = Take(&at, 2 * groups);
    a.indices = Take(&at, groups * g * sp.codec.bits / 8);
    if (sp.codec.qjl) a.qjl_bits = Take(&at, groups * g / 8);
    plan.consts[s].signs = Take(&blob, static_cast<size_t>(shape.head_dim) / 8);
    if (sp.codec.qjl) plan.consts[s].qjl = Take(&blob, g * g * sizeof(float));

    auto it = std::find_if(plan.configs.begin(), plan.configs.end(), [&](const GroupConfig& c) {
      return c.g == sp.codec.group_size && c.bits == sp.codec.bits && c.qjl == sp.codec.qjl;
    });
    if (it == plan.configs.end()) {
      plan.configs.push_back({sp.codec.group_size, sp.codec.bits, sp.codec.qjl, {}, 0});
      it = plan.configs.end() - 1;
    }
    it->sections.push_back(static_cast<uint32_t>(s));
  }
  plan.quantized_bytes = at;
  for (uint32_t s : plan.plain) plan.sections[s].plain = Take(&at, plan.sections[s].packed.bytes);
  plan.aligned_block_bytes = std::max(at, kDeviceAlign);
  for (GroupConfig& c : plan.configs) {
    c.list_offset = Take(&blob, c.sections.size() * sizeof(DeviceSection));
  }
  plan.plain_list_offset = Take(&blob, plan.plain.size() * sizeof(DevicePlainSection));

  plan.blob.assign(std::max(blob, kDeviceAlign), 0);
  for (size_t s = 0; s < n; ++s) {
    const BlockCodec::SectionPlan& sp = codec.plans()[s];
    if (!sp.codec.quantized()) continue;
    uint8_t* signs = plan.blob.data() + plan.consts[s].signs;
    for (int c = 0; c < shape.head_dim / 8; ++c) {
      uint8_t byte = 0;
      for (int b = 0; b < 8; ++b) {
        if (SignNegative(sp.sign_key, 8 * c + b)) byte = static_cast<uint8_t>(byte | (1u << b));
      }
      signs[c] = byte;
    }
    if (sp.codec.qjl) {
      std::memcpy(plan.blob.data() + plan.consts[s].qjl, sp.qjl_matrix->data(),
                  sp.qjl_matrix->size() * sizeof(float));
    }
  }
  return plan;
}

std::vector<uint8_t> MaterializeBlob(const GpuPlan& plan, const BlockCodec& codec, uintptr_t base) {
  std::vector<uint8_t> blob = plan.blob;
  const int head_dim = codec.shape().head_dim;
  for (const GroupConfig& c : plan.configs) {
    for (size_t j = 0; j < c.sections.size(); ++j) {
      const uint32_t s = c.sections[j];
      const AlignedSection& a = plan.sections[s];
      DeviceSection ds;
      ds.args.signs = reinterpret_cast<const uint8_t*>(base + plan.consts[s].signs);
      if (c.qjl) {
        ds.args.qjl = reinterpret_cast<const float*>(base + plan.consts[s].qjl);
        ds.args.qjl_coef = static_cast<float>(kSqrtHalfPi / c.g);
      }
      ds.args.norm_correction = codec.spec().norm_correction;
      ds.args.groups_per_vector = head_dim / c.g;
      ds.index = s;
      ds.scales = a.scales;
      ds.residuals = a.residuals;
      ds.indices = a.indices;
      ds.qjl_bits = a.qjl_bits;
      std::memcpy(blob.data() + c.list_offset + j * sizeof(DeviceSection), &ds, sizeof(ds));
    }
  }
  for (size_t j = 0; j < plan.plain.size(); ++j) {
    const uint32_t s = plan.plain[j];
    DevicePlainSection ps;
    ps.index = s;
    ps.stored = plan.sections[s].codec.bits == 16 ? DType::kFloat16 : codec.shape().dtype;
    ps.aligned_offset = plan.sections[s].plain;
    std::memcpy(blob.data() + plan.plain_list_offset + j * sizeof(ps), &ps, sizeof(ps));
  }
  return blob;
}

std::vector<uint8_t> MakeCodebookBlob(const Codebook& cb, CodebookTables* tables) {
  size_t at = 0;
  const size_t levels = Take(&at, cb.levels.size() * sizeof(float));
  const size_t thresholds = Take(&at, cb.thresholds_padded.size() * sizeof(float));
  const bool buckets = cb.buckets > 0 && cb.buckets <= kMaxDeviceBuckets;
  const size_t bucket_base = buckets ? Take(&at, cb.bucket_base.size() * sizeof(int32_t)) : 0;
  std::vector<uint8_t> blob(at, 0);
  std::memcpy(blob.data() + levels, cb.levels.data(), cb.levels.size() * sizeof(float));
  std::memcpy(blob.data() + thresholds, cb.thresholds_padded.data(),
              cb.thresholds_padded.size() * sizeof(float));
  if (buckets) {
    std::memcpy(blob.data() + bucket_base, cb.bucket_base.data(),
                cb.bucket_base.size() * sizeof(int32_t));
  }
  tables->levels = reinterpret_cast<const float*>(levels);
  tables->thresholds_padded = reinterpret_cast<const float*>(thresholds);
  tables->bucket_base = reinterpret_cast<const int32_t*>(bucket_base);
  tables->buckets = buckets ? cb.buckets : 0;
  tables->bucket_lo = cb.bucket_lo;
  tables->bucket_scale = cb.bucket_scale;
  return blob;
}

CodebookTables RebaseCodebook(const CodebookTables& tables, uintptr_t base) {
  CodebookTables t = tables;
  t.levels = reinterpret_cast<const float*>(base + reinterpret_cast<uintptr_t>(tables.levels));
  t.thresholds_padded =
      reinterpret_cast<const float*>(base + reinterpret_cast<uintptr_t>(tables.thresholds_padded));
  t.bucket_base =
      reinterpret_cast<const int32_t*>(base + reinterpret_cast<uintptr_t>(tables.bucket_base));
  return t;
}

std::vector<GroupLaunch> MakeLaunches(const GpuPlan& plan, const BlockCodec& codec,
                                      uintptr_t blob_base, int layer_begin, int layer_end,
                                      uint32_t blocks, DType values_dtype) {
  std::vector<GroupLaunch> out;
  const BlockShape& shape = codec.shape();
  const uint64_t section_values =
      shape.vectors_per_section() * static_cast<uint64_t>(shape.head_dim);
  const uint64_t section_bytes = section_values * DTypeSize(values_dtype);
  const uint32_t first = 2 * static_cast<uint32_t>(layer_begin);
  const uint32_t last = 2 * static_cast<uint32_t>(layer_end);  // exclusive
  for (const GroupConfig& c : plan.configs) {
    const auto lo = std::lower_bound(c.sections.begin(), c.sections.end(), first);
    const auto hi = std::lower_bound(c.sections.begin(), c.sections.end(), last);
    if (lo == hi) continue;
    GroupLaunch a;
    a.group_size = c.g;
    a.bits = c.bits;
    a.qjl = c.qjl;
    a.sections = reinterpret_cast<const DeviceSection*>(blob_base + c.list_offset) +
                 (lo - c.sections.begin());
    a.num_sections = static_cast<uint32_t>(hi - lo);
    a.groups = section_values / static_cast<uint64_t>(c.g);
    const uint64_t per_tile = static_cast<uint64_t>(GroupsPerTile(c.g));
    a.tiles_per_section = static_cast<uint32_t>((a.groups + per_tile - 1) / per_tile);
    a.blocks = blocks;
    a.values_section_bytes = section_bytes;
    a.values_block_stride = static_cast<uint64_t>(last - first) * section_bytes;
    a.first_section = first;
    a.dtype = values_dtype;
    a.aligned_block_stride = plan.aligned_block_bytes;
    out.push_back(a);
  }
  return out;
}

void AlignedToPacked(const GpuPlan& plan, const uint8_t* aligned, uint8_t* packed) {
  for (const AlignedSection& a : plan.sections) {
    if (!a.codec.quantized()) continue;
    const size_t groups = a.packed.groups;
    const size_t g = static_cast<size_t>(a.codec.group_size);
    uint8_t* dst = packed + a.packed_offset;
    std::memcpy(dst + a.packed.scales, aligned + a.scales, 2 * groups);
    std::memcpy(dst + a.packed.indices, aligned + a.indices, groups * g * a.codec.bits / 8);
    if (a.codec.qjl) {
      std::memcpy(dst + a.packed.residuals, aligned + a.residuals, 2 * groups);
      std::memcpy(dst + a.packed.qjl_bits, aligned + a.qjl_bits, groups * g / 8);
    }
  }
}

void PackedToAligned(const GpuPlan& plan, const uint8_t* packed, int layer_begin, int layer_end,
                     uint8_t* aligned) {
  for (size_t s = 2 * static_cast<size_t>(layer_begin); s < 2 * static_cast<size_t>(layer_end);
       ++s) {
    const AlignedSection& a = plan.sections[s];
    const uint8_t* src = packed + a.packed_offset;
    if (!a.codec.quantized()) {
      std::memcpy(aligned + a.plain, src, a.packed.bytes);
      continue;
    }
    const size_t groups = a.packed.groups;
    const size_t g = static_cast<size_t>(a.codec.group_size);
    std::memcpy(aligned + a.scales, src + a.packed.scales, 2 * groups);
    std::memcpy(aligned + a.indices, src + a.packed.indices, groups * g * a.codec.bits / 8);
    if (a.codec.qjl) {
      std::memcpy(aligned + a.residuals, src + a.packed.residuals, 2 * groups);
      std::memcpy(aligned + a.qjl_bits, src + a.packed.qjl_bits, groups * g / 8);
    }
  }
}

absl::Status FinishPackedBlock(const BlockCodec& codec, absl::Span<const uint8_t> raw,
                               absl::Span<uint8_t> packed) {
  std::memcpy(packed.data(), codec.header().data(), codec.header().size());
  const BlockShape& shape = codec.shape();
  const size_t vectors = shape.vectors_per_section();
  const size_t section_raw = vectors * shape.head_dim * DTypeSize(shape.dtype);
  for (size_t s = 0; s < codec.plans().size(); ++s) {
    const BlockCodec::SectionPlan& plan = codec.plans()[s];
    if (plan.codec.quantized()) continue;
    SectionJob job{plan.codec, {}, shape.head_dim, vectors, shape.dtype, nullptr, nullptr};
    const EncodeError err =
        EncodeSectionScalar(job, raw.data() + s * section_raw, packed.data() + plan.offset);
    if (err.kind != EncodeError::kNone) {
      // The CPU encode names the layer, token, head and coordinate.
      const absl::Status cpu = codec.Encode(raw, packed, CpuIsa::kScalar);
      return cpu.ok() ? absl::InternalError("an unquantized section failed only on one path") : cpu;
    }
  }
  const size_t body = packed.size() - kChecksumBytes;
  const uint64_t sum = Checksum(packed.first(body));
  std::memcpy(packed.data() + body, &sum, kChecksumBytes);
  return absl::OkStatus();
}

PlainLaunch MakePlainLaunch(const GpuPlan& plan, const BlockCodec& codec, uintptr_t blob_base,
                            int layer_begin, int layer_end, uint32_t blocks, DType out_dtype) {
  PlainLaunch a;
  const uint32_t first = 2 * static_cast<uint32_t>(layer_begin);
  const uint32_t last = 2 * static_cast<uint32_t>(layer_end);
  const auto lo = std::lower_bound(plan.plain.begin(), plan.plain.end(), first);
  const auto hi = std::lower_bound(plan.plain.begin(), plan.plain.end(), last);
  const BlockShape& shape = codec.shape();
  const uint64_t section_values =
      shape.vectors_per_section() * static_cast<uint64_t>(shape.head_dim);
  a.sections = reinterpret_cast<const DevicePlainSection*>(blob_base + plan.plain_list_offset) +
               (lo - plan.plain.begin());
  a.num_sections = static_cast<uint32_t>(hi - lo);
  a.chunks_per_section = section_values / 8;
  a.blocks = blocks;
  a.aligned_block_stride = plan.aligned_block_bytes;
  a.values_section_bytes = section_values * DTypeSize(out_dtype);
  a.values_block_stride = static_cast<uint64_t>(last - first) * a.values_section_bytes;
  a.first_section = first;
  a.dtype = out_dtype;
  return a;
}

}  // namespace turbokv::codec::internal
