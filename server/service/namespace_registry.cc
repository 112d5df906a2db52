#include "server/service/namespace_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "turbokv/codec/status_macros.h"
#include "xxhash.h"

namespace turbokv::server {
namespace {

constexpr char kCanonicalTag[] = "turbokv/ns/v1";

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutStr(std::string* out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}
void PutSection(std::string* out, const v1::SectionCodec& s) {
  PutU32(out, s.bits());
  PutU32(out, s.group_size());
  PutU32(out, s.qjl() ? 1 : 0);
}

absl::Status FieldError(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("namespace_descriptor.", std::string(field), " ", std::string(what)));
}

// Prefixes a codec error with the descriptor path so the client knows where to look.
absl::Status InDescriptor(const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("namespace_descriptor: ", s.message()));
}

v1::SectionCodec ToProto(const codec::SectionCodec& s) {
  v1::SectionCodec out;
  out.set_bits(static_cast<uint32_t>(s.bits));
  out.set_group_size(s.quantized() ? static_cast<uint32_t>(s.group_size) : 0);
  out.set_qjl(s.quantized() && s.qjl);
  return out;
}

absl::StatusOr<codec::SectionCodec> FromProto(const v1::SectionCodec& s, std::string_view field) {
  const uint32_t b = s.bits();
  if (!(b <= 6 || b == 8 || b == 16)) {
    return FieldError(absl::StrCat("codec.", std::string(field), ".bits"),
                      absl::StrCat(b, " is not one of 0 (raw), 1..6, 8, 16"));
  }
  codec::SectionCodec out;
  out.bits = static_cast<int>(b);
  out.group_size = static_cast<int>(s.group_size());
  out.qjl = s.qjl();
  if (!out.quantized() && out.qjl) {
    return FieldError(absl::StrCat("codec.", std::string(field), ".qjl"),
                      absl::StrCat("is only allowed with bits 1..8, not ", b));
  }
  return out;
}

}  // namespace

absl::Status UnknownNamespace(uint64_t id) {
  return absl::NotFoundError(
      absl::StrCat("namespace ", absl::Hex(id, absl::kZeroPad16), " is not registered"));
}

absl::StatusOr<CanonicalNamespace> Canonicalize(const v1::NamespaceDescriptor& in,
                                                std::string_view default_preset) {
  CanonicalNamespace out;
  v1::NamespaceDescriptor& d = out.descriptor;
  d = in;
  if (d.model().empty()) return FieldError("model", "must not be empty");
  switch (d.dtype()) {
    case v1::DTYPE_FP16:
    case v1::DTYPE_BF16:
    case v1::DTYPE_FP32:
      break;
    default:
      return FieldError("dtype", absl::StrCat("must be DTYPE_FP16, DTYPE_BF16 or DTYPE_FP32, got ",
                                              static_cast<int>(d.dtype())));
  }
  if (d.tp_size() == 0) d.set_tp_size(1);
  if (d.tp_rank() >= d.tp_size()) {
    return FieldError("tp_rank",
                      absl::StrCat(d.tp_rank(), " must be less than tp_size ", d.tp_size()));
  }
  // Range checks before the int conversions below; ValidateShape names the field.
  for (auto [name, v] : {std::pair<const char*, uint32_t>{"num_layers", d.num_layers()},
                         {"num_kv_heads", d.num_kv_heads()},
                         {"head_dim", d.head_dim()},
                         {"block_tokens", d.block_tokens()}}) {
    if (v == 0 || v > 65535) return FieldError(name, absl::StrCat(v, " is outside 1..65535"));
  }
  codec::BlockShape& shape = out.shape;
  shape.num_layers = static_cast<int>(d.num_layers());
  shape.num_kv_heads = static_cast<int>(d.num_kv_heads());
  shape.head_dim = static_cast<int>(d.head_dim());
  shape.block_tokens = static_cast<int>(d.block_tokens());
  shape.dtype = static_cast<codec::DType>(d.dtype());
  TURBOKV_RETURN_IF_ERROR(InDescriptor(codec::ValidateShape(shape)));

  const v1::CodecConfig& c = in.codec();
  codec::CodecSpec& spec = out.spec;
  if (c.has_key() != c.has_value()) {
    return FieldError("codec", "key and value must be set together (or neither, for a preset)");
  }
  if (c.has_key()) {
    TURBOKV_ASSIGN_OR_RETURN(spec.key, FromProto(c.key(), "key"));
    TURBOKV_ASSIGN_OR_RETURN(spec.value, FromProto(c.value(), "value"));
  } else {
    const std::string preset = c.preset().empty() ? std::string(default_preset) : c.preset();
    absl::StatusOr<codec::CodecSpec> preset_spec = codec::PresetSpec(preset, shape.head_dim);
    if (!preset_spec.ok()) {
      return absl::Status(
          preset_spec.status().code(),
          absl::StrCat("namespace_descriptor.codec.preset: ", preset_spec.status().message()));
    }
    spec = *preset_spec;
  }
  if (c.protected_bits() != 0 && c.protected_bits() != 8 && c.protected_bits() != 16) {
    return FieldError("codec.protected_bits",
                      absl::StrCat(c.protected_bits(), " is not 8 or 16 (0 means 8)"));
  }
  if (c.protected_first_layers() > d.num_layers() || c.protected_last_layers() > d.num_layers()) {
    return FieldError("codec.protected_first_layers",
                      absl::StrCat("/ protected_last_layers exceed num_layers ", d.num_layers()));
  }
  if (c.protected_first_layers() != 0 || c.protected_last_layers() != 0 || c.has_key()) {
    spec.protected_first_layers = static_cast<int>(c.protected_first_layers());
    spec.protected_last_layers = static_cast<int>(c.protected_last_layers());
  }
  if (c.protected_bits() != 0) spec.protected_bits = static_cast<int>(c.protected_bits());
  if (c.disable_norm_correction()) spec.norm_correction = false;
  if (c.has_rotation_seed()) spec.rotation_seed = c.rotation_seed();
  if (c.has_qjl_seed()) spec.qjl_seed = c.qjl_seed();
  if (spec.protected_first_layers == 0 && spec.protected_last_layers == 0) {
    spec.protected_bits = 8;
  }
  if (!(spec.key.quantized() && spec.key.qjl) && !(spec.value.quantized() && spec.value.qjl)) {
    spec.qjl_seed = codec::kDefaultQjlSeed;
  }
  TURBOKV_RETURN_IF_ERROR(InDescriptor(codec::ResolveLayerCodecs(spec, shape).status()));

  v1::CodecConfig* cc = d.mutable_codec();
  cc->Clear();
  *cc->mutable_key() = ToProto(spec.key);
  *cc->mutable_value() = ToProto(spec.value);
  cc->set_protected_first_layers(static_cast<uint32_t>(spec.protected_first_layers));
  cc->set_protected_last_layers(static_cast<uint32_t>(spec.protected_last_layers));
  cc->set_protected_bits(static_cast<uint32_t>(spec.protected_bits));
  cc->set_disable_norm_correction(!spec.norm_correction);
  cc->set_rotation_seed(spec.rotation_seed);
  cc->set_qjl_seed(spec.qjl_seed);
  return out;
}

std::string CanonicalBytes(const v1::NamespaceDescriptor& d, std::string_view tenant) {
  std::string b;
  b.append(kCanonicalTag);
  PutStr(&b, d.model());
  PutStr(&b, d.model_revision());
  PutU32(&b, static_cast<uint32_t>(d.dtype()));
  PutU32(&b, d.num_layers());
  PutU32(&b, d.num_kv_heads());
  PutU32(&b, d.head_dim());
  PutU32(&b, d.block_tokens());
  PutU32(&b, d.tp_rank());
  PutU32(&b, d.tp_size());
  PutStr(&b, d.cache_salt());
  const v1::CodecConfig& c = d.codec();
  PutSection(&b, c.key());
  PutSection(&b, c.value());
  PutU32(&b, c.protected_first_layers());
  PutU32(&b, c.protected_last_layers());
  PutU32(&b, c.protected_bits());
  PutU32(&b, c.disable_norm_correction() ? 0 : 1);
  PutU64(&b, c.rotation_seed());
  PutU64(&b, c.qjl_seed());
  if (!tenant.empty()) PutStr(&b, tenant);
  return b;
}

uint64_t NamespaceId(const v1::NamespaceDescriptor& canonical, std::string_view tenant) {
  const std::string bytes = CanonicalBytes(canonical, tenant);
  return XXH3_64bits(bytes.data(), bytes.size());
}

NamespaceRegistry::NamespaceRegistry(BlockStore* store, std::string default_preset,
                                     LimitOptions limits)
    : store_(store), default_preset_(std::move(default_preset)), limits_(limits) {}

absl::Status NamespaceRegistry::CheckCost(const CanonicalNamespace& canonical) const {
  const codec::BlockShape& sh = canonical.shape;
  // In floating point: the product of four 16-bit dimensions can overflow 64 bits.
  const double raw = 2.0 * sh.num_layers * sh.block_tokens * sh.num_kv_heads * sh.head_dim *
                     static_cast<double>(codec::DTypeSize(sh.dtype));
  if (raw > static_cast<double>(limits_.max_block_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "namespace_descriptor: a raw block of this shape is ", static_cast<uint64_t>(raw),
        " bytes; the server allows at most ", limits_.max_block_bytes,
        " (--max-block-bytes): use fewer tokens per block or a tensor-parallel slice"));
  }
  TURBOKV_ASSIGN_OR_RETURN(std::vector<codec::LayerCodec> layers,
                           codec::ResolveLayerCodecs(canonical.spec, sh));
  const size_t setup = codec::BlockCodec::SetupBytes(sh, layers);
  if (setup > limits_.max_codec_setup_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "namespace_descriptor: the codec of this namespace needs ", setup,
        " bytes of tables (per-layer sign masks and QJL matrices); the server allows at most ",
        limits_.max_codec_setup_bytes, " (--max-codec-setup-bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Namespace>> NamespaceRegistry::Build(
    const CanonicalNamespace& canonical, uint64_t id, std::string_view tenant) const {
  TURBOKV_ASSIGN_OR_RETURN(codec::BlockCodec block_codec,
                           codec::BlockCodec::Create(canonical.shape, canonical.spec, id));
  return std::shared_ptr<const Namespace>(
      new Namespace{id, std::string(tenant), canonical.descriptor, std::move(block_codec)});
}

absl::Status NamespaceRegistry::Load() {
  for (const NamespaceRecord& r : store_->ListNamespaces()) {
    v1::NamespaceDescriptor d;
    const std::string& tenant = r.tenant;
    if (!d.ParseFromArray(r.descriptor.data(), static_cast<int>(r.descriptor.size()))) {
      return absl::DataLossError(absl::StrCat(
          "stored descriptor of namespace ", absl::Hex(r.id, absl::kZeroPad16), " does not parse"));
    }
    // The stored descriptor is canonical already; canonicalizing again must be a no-op, which
    // also catches a codec whose presets or defaults changed under stored data.
    auto canonical = Canonicalize(d, default_preset_);
    if (!canonical.ok() || NamespaceId(canonical->descriptor, tenant) != r.id) {
      return absl::DataLossError(
          absl::StrCat("stored namespace ", absl::Hex(r.id, absl::kZeroPad16),
                       " no longer canonicalizes to its id (codec configuration changed?): ",
                       canonical.ok() ? std::string("different id")
                                      : std::string(canonical.status().message())));
    }
    canonical->descriptor.set_ttl_seconds(r.ttl_seconds);
    if (absl::Status cost = CheckCost(*canonical); !cost.ok()) {
      spdlog::warn("stored namespace {:016x} is not loaded: {}", r.id, std::string(cost.message()));
      continue;
    }
    TURBOKV_ASSIGN_OR_RETURN(auto ns, Build(*canonical, r.id, tenant));
    if (ns->codec.packed_bytes() > limits_.max_block_bytes) {
      spdlog::warn(
          "stored namespace {:016x} is not loaded: packed blocks of {} bytes are over "
          "--max-block-bytes {}",
          r.id, ns->codec.packed_bytes(), limits_.max_block_bytes);
      continue;
    }
    std::lock_guard<std::mutex> l(mu_);
    tenant_namespaces_[ns->tenant].insert(r.id);
    namespaces_[r.id] = std::move(ns);
  }
  return absl::OkStatus();
}

absl::StatusOr<NamespaceRegistry::Registered> NamespaceRegistry::Register(
    const v1::NamespaceDescriptor& descriptor, std::string_view tenant) {
  for (auto [field, value] :
       {std::pair<const char*, const std::string*>{"model", &descriptor.model()},
        {"model_revision", &descriptor.model_revision()},
        {"cache_salt", &descriptor.cache_salt()}}) {
    if (value->size() > limits_.max_descriptor_string_bytes) {
      return FieldError(field, absl::StrCat("has ", value->size(), " bytes; at most ",
                                            limits_.max_descriptor_string_bytes,
                                            " are allowed (--max-descriptor-string-bytes)"));
    }
  }
  TURBOKV_ASSIGN_OR_RETURN(CanonicalNamespace canonical, Canonicalize(descriptor, default_preset_));
  TURBOKV_RETURN_IF_ERROR(CheckCost(canonical));
  const uint64_t id = NamespaceId(canonical.descriptor, tenant);
  std::lock_guard<std::mutex> rl(register_mu_);
  std::shared_ptr<const Namespace> existing;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = namespaces_.find(id); it != namespaces_.end()) existing = it->second;
  }
  if (existing != nullptr && existing->tenant != tenant) {
    // Only a 64-bit hash collision between two tenants' namespaces gets here.
    return absl::AlreadyExistsError(
        "namespace_descriptor: its namespace id collides with another namespace; change "
        "cache_salt");
  }
  // A request without ttl_seconds keeps the TTL of an existing namespace.
  if (existing != nullptr &&
      (!descriptor.has_ttl_seconds() ||
       existing->descriptor.ttl_seconds() == canonical.descriptor.ttl_seconds())) {
    return Registered{existing, false};
  }
  if (existing == nullptr && size() >= limits_.max_namespaces) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server holds ", limits_.max_namespaces,
                     " namespaces, its limit (--max-namespaces); drop unused ones first"));
  }
  if (existing == nullptr && TenantNamespaces(tenant) >= limits_.max_namespaces_per_tenant) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this tenant holds ", limits_.max_namespaces_per_tenant,
        " namespaces, its limit (--max-namespaces-per-tenant); drop unused ones first"));
  }
  TURBOKV_ASSIGN_OR_RETURN(auto ns, Build(canonical, id, tenant));
  if (ns->codec.packed_bytes() > limits_.max_block_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "namespace_descriptor: a packed block of this namespace is ", ns->codec.packed_bytes(),
        " bytes; the server allows at most ", limits_.max_block_bytes, " (--max-block-bytes)"));
  }
  NamespaceRecord record;
  record.id = id;
  record.tenant = std::string(tenant);
  record.descriptor = ns->descriptor.SerializeAsString();
  record.ttl_seconds = ns->descriptor.ttl_seconds();
  record.logical_block_bytes = ns->codec.raw_bytes();
  TURBOKV_RETURN_IF_ERROR(store_->PutNamespace(record));
  std::lock_guard<std::mutex> l(mu_);
  tenant_namespaces_[ns->tenant].insert(id);
  namespaces_[id] = ns;
  return Registered{ns, existing == nullptr};
}

absl::StatusOr<std::shared_ptr<const Namespace>> NamespaceRegistry::Get(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = namespaces_.find(id);
  if (it == namespaces_.end()) return UnknownNamespace(id);
  return it->second;
}

absl::StatusOr<std::shared_ptr<const Namespace>> NamespaceRegistry::Get(
    uint64_t id, const Principal& caller) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = namespaces_.find(id);
  // Another tenant's namespace takes the path of an unknown one: same status, same message.
  if (it == namespaces_.end() || (!caller.admin && it->second->tenant != caller.tenant)) {
    return UnknownNamespace(id);
  }
  return it->second;
}

absl::StatusOr<uint64_t> NamespaceRegistry::Drop(uint64_t id, const Principal& caller) {
  std::lock_guard<std::mutex> rl(register_mu_);
  TURBOKV_RETURN_IF_ERROR(Get(id, caller).status());
  TURBOKV_ASSIGN_OR_RETURN(uint64_t deleted, store_->DropNamespace(id));
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = namespaces_.find(id); it != namespaces_.end()) {
    auto t = tenant_namespaces_.find(it->second->tenant);
    if (t != tenant_namespaces_.end()) {
      t->second.erase(id);
      if (t->second.empty()) tenant_namespaces_.erase(t);
    }
    namespaces_.erase(it);
  }
  return deleted;
}

uint64_t NamespaceRegistry::TenantStoredBytes(std::string_view tenant) const {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tenant_namespaces_.find(std::string(tenant));
    if (it == tenant_namespaces_.end()) return 0;
    ids.assign(it->second.begin(), it->second.end());
  }
  return store_->StoredValueBytes(ids);
}

size_t NamespaceRegistry::TenantNamespaces(std::string_view tenant) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tenant_namespaces_.find(std::string(tenant));
  return it == tenant_namespaces_.end() ? 0 : it->second.size();
}

size_t NamespaceRegistry::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return namespaces_.size();
}

}  // namespace turbokv::server
