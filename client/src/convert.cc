#include "convert.h"

namespace turbokv::client::internal {
namespace {

void ToProto(const SectionCodec& in, turbokv::v1::SectionCodec* out) {
  out->set_bits(in.bits);
  out->set_group_size(in.group_size);
  out->set_qjl(in.qjl);
}

SectionCodec FromProto(const turbokv::v1::SectionCodec& in) {
  SectionCodec out;
  out.bits = in.bits();
  out.group_size = in.group_size();
  out.qjl = in.qjl();
  return out;
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void ToProto(const NamespaceDescriptor& in, turbokv::v1::NamespaceDescriptor* out) {
  out->set_model(in.model);
  out->set_model_revision(in.model_revision);
  out->set_dtype(static_cast<turbokv::v1::DType>(in.dtype));
  out->set_num_layers(in.num_layers);
  out->set_num_kv_heads(in.num_kv_heads);
  out->set_head_dim(in.head_dim);
  out->set_block_tokens(in.block_tokens);
  out->set_tp_rank(in.tp_rank);
  out->set_tp_size(in.tp_size);
  out->set_cache_salt(in.cache_salt);
  if (in.ttl_seconds.has_value()) out->set_ttl_seconds(*in.ttl_seconds);
  turbokv::v1::CodecConfig* c = out->mutable_codec();
  c->set_preset(in.codec.preset);
  if (in.codec.key) ToProto(*in.codec.key, c->mutable_key());
  if (in.codec.value) ToProto(*in.codec.value, c->mutable_value());
  c->set_protected_first_layers(in.codec.protected_first_layers);
  c->set_protected_last_layers(in.codec.protected_last_layers);
  c->set_protected_bits(in.codec.protected_bits);
  c->set_disable_norm_correction(in.codec.disable_norm_correction);
  if (in.codec.rotation_seed) c->set_rotation_seed(*in.codec.rotation_seed);
  if (in.codec.qjl_seed) c->set_qjl_seed(*in.codec.qjl_seed);
}

NamespaceDescriptor FromProto(const turbokv::v1::NamespaceDescriptor& in) {
  NamespaceDescriptor out;
  out.model = in.model();
  out.model_revision = in.model_revision();
  out.dtype = static_cast<DType>(in.dtype());
  out.num_layers = in.num_layers();
  out.num_kv_heads = in.num_kv_heads();
  out.head_dim = in.head_dim();
  out.block_tokens = in.block_tokens();
  out.tp_rank = in.tp_rank();
  out.tp_size = in.tp_size();
  out.cache_salt = in.cache_salt();
  out.ttl_seconds = in.ttl_seconds();
  const turbokv::v1::CodecConfig& c = in.codec();
  out.codec.preset = c.preset();
  if (c.has_key()) out.codec.key = FromProto(c.key());
  if (c.has_value()) out.codec.value = FromProto(c.value());
  out.codec.protected_first_layers = c.protected_first_layers();
  out.codec.protected_last_layers = c.protected_last_layers();
  out.codec.protected_bits = c.protected_bits();
  out.codec.disable_norm_correction = c.disable_norm_correction();
  if (c.has_rotation_seed()) out.codec.rotation_seed = c.rotation_seed();
  if (c.has_qjl_seed()) out.codec.qjl_seed = c.qjl_seed();
  return out;
}

ServerStats FromProto(const turbokv::v1::StatsResponse& in) {
  ServerStats out;
  out.capacity_bytes = in.capacity_bytes();
  out.used_bytes = in.used_bytes();
  out.stored_bytes = in.stored_bytes();
  out.blocks = in.blocks();
  out.logical_bytes = in.logical_bytes();
  out.evicted_blocks = in.evicted_blocks();
  out.checksum_failures = in.checksum_failures();
  out.codec_backend = in.codec_backend();
  out.durability = in.durability();
  out.version = in.version();
  for (const auto& ns : in.namespaces()) {
    NamespaceStats s;
    s.namespace_id = ns.namespace_id();
    s.descriptor = FromProto(ns.namespace_descriptor());
    s.blocks = ns.blocks();
    s.stored_bytes = ns.stored_bytes();
    s.logical_bytes = ns.logical_bytes();
    out.namespaces.push_back(std::move(s));
  }
  return out;
}

}  // namespace turbokv::client::internal
