// Namespaces: validation, the canonical descriptor, the namespace id, and one BlockCodec per
// namespace (docs/api.md).
//
// Canonical form (format "turbokv/ns/v1"). A descriptor is canonicalized by:
//   * resolving the codec: explicit `key` and `value` sections when both are set, else the
//     preset (empty = the server's default preset) through codec::PresetSpec(preset, head_dim);
//     then protected_first/last_layers, protected_bits (0 -> 8), disable_norm_correction and
//     the seeds (unset -> codec defaults) are applied on top;
//   * writing the result back as explicit fields: codec.preset = "", key/value set, group_size
//     0 for non-quantized sections (bits 0 or 16), protected_bits 8 when no layer is
//     protected, qjl_seed = the default when no section uses QJL, both seeds present;
//     tp_size 0 -> 1.
// The namespace id is XXH3-64 (seed 0) of this byte string (all integers little-endian,
// strings as u32 length + bytes):
//   "turbokv/ns/v1" | str model | str model_revision | u32 dtype | u32 num_layers |
//   u32 num_kv_heads | u32 head_dim | u32 block_tokens | u32 tp_rank | u32 tp_size |
//   str cache_salt | key: u32 bits, u32 group_size, u32 qjl | value: same |
//   u32 protected_first_layers | u32 protected_last_layers | u32 protected_bits |
//   u32 norm_correction | u64 rotation_seed | u64 qjl_seed [| str tenant]
// The tenant (server/auth: who registered it) closes the string when it is not "" (a server
// without authentication keeps the ids it always had): two tenants registering the same
// descriptor get different namespace ids, so their blocks have different keys and a probe
// of one tenant's prefix from another is a true miss in the store, not a refused hit. A
// namespace of another tenant is answered exactly like an unregistered one (NotFound,
// UnknownNamespace's message); only an admin sees and uses every tenant's namespaces.
// The stored record (NamespaceRecord) carries the tenant and the serialized descriptor; the
// store owns their encoding (namespace_table.h) and counts the namespace's blocks against the
// tenant's quota and share of the capacity (block_store.h, "Tenants").
// ttl_seconds is a storage policy, not part of the identity: it is excluded, registering an
// existing namespace with another ttl_seconds updates the ttl, and registering it without
// ttl_seconds keeps the ttl it has. Clients never need to
// reproduce the id; RegisterNamespace returns it.
//
// Thread safety: all methods are thread-safe.
#ifndef TURBOKV_SERVER_SERVICE_NAMESPACE_REGISTRY_H_
#define TURBOKV_SERVER_SERVICE_NAMESPACE_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/auth/principal.h"
#include "server/server_options.h"
#include "server/storage/block_store.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// A registered namespace. Immutable; shared by the requests using it.
struct Namespace {
  uint64_t id = 0;
  std::string tenant;                  // who registered it ("" without authentication)
  v1::NamespaceDescriptor descriptor;  // canonical, including ttl_seconds
  codec::BlockCodec codec;             // encodes with namespace_id = id
};

// The canonical descriptor of `in` (see above) and its codec spec and shape.
// InvalidArgument naming the field (namespace_descriptor.head_dim, ...codec.key.group_size).
struct CanonicalNamespace {
  v1::NamespaceDescriptor descriptor;
  codec::BlockShape shape;
  codec::CodecSpec spec;
};
[[nodiscard]] absl::StatusOr<CanonicalNamespace> Canonicalize(const v1::NamespaceDescriptor& in,
                                                              std::string_view default_preset);
// The canonical byte string above (ttl_seconds ignored) and its XXH3-64.
std::string CanonicalBytes(const v1::NamespaceDescriptor& canonical, std::string_view tenant = "");
uint64_t NamespaceId(const v1::NamespaceDescriptor& canonical, std::string_view tenant = "");

class NamespaceRegistry {
 public:
  // `store` must outlive the registry. `limits` bound what a registration may cost
  // (max_namespaces, max_descriptor_string_bytes, max_block_bytes, max_codec_setup_bytes).
  NamespaceRegistry(BlockStore* store, std::string default_preset, LimitOptions limits = {});

  // Rebuilds every namespace the store knows (at start-up). DataLoss when a stored descriptor
  // no longer parses or no longer hashes to its id. A stored namespace over the block or
  // codec set-up limits is skipped with a warning (its blocks stay, unreachable until the
  // limits allow it again).
  [[nodiscard]] absl::Status Load();

  struct Registered {
    std::shared_ptr<const Namespace> ns;
    bool created = false;
  };
  // Idempotent: the same canonical descriptor always gives the same namespace.
  // InvalidArgument: bad descriptor, a string over max_descriptor_string_bytes, a raw or
  // packed block over max_block_bytes, codec set-up over max_codec_setup_bytes (the message
  // names both numbers). ResourceExhausted: max_namespaces, or the tenant's
  // max_namespaces_per_tenant, reached.
  // The namespace belongs to `tenant`.
  [[nodiscard]] absl::StatusOr<Registered> Register(const v1::NamespaceDescriptor& descriptor,
                                                    std::string_view tenant = "");
  // NotFound when the id is not registered.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Namespace>> Get(uint64_t id) const;
  // The same for `caller`: NotFound, with the same message, also when the namespace belongs
  // to another tenant and the caller is not an admin.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Namespace>> Get(uint64_t id,
                                                                     const Principal& caller) const;
  // Drops the namespace and its blocks; returns the number of blocks deleted. NotFound as
  // Get(id, caller).
  [[nodiscard]] absl::StatusOr<uint64_t> Drop(uint64_t id, const Principal& caller = {"", true});
  // Packed bytes stored in the namespaces of `tenant` (the quota's measure). O(the tenant's
  // namespaces).
  uint64_t TenantStoredBytes(std::string_view tenant) const;
  // Namespaces `tenant` holds.
  size_t TenantNamespaces(std::string_view tenant) const;
  size_t size() const;

 private:
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Namespace>> Build(
      const CanonicalNamespace& canonical, uint64_t id, std::string_view tenant) const;

  // InvalidArgument when the namespace would cost more than the limits allow (before any of
  // it is built).
  [[nodiscard]] absl::Status CheckCost(const CanonicalNamespace& canonical) const;

  BlockStore* const store_;
  const std::string default_preset_;
  const LimitOptions limits_;
  std::mutex register_mu_;  // serializes Register/Drop against each other
  mutable std::mutex mu_;   // guards namespaces_
  absl::flat_hash_map<uint64_t, std::shared_ptr<const Namespace>> namespaces_;
  // The ids of each tenant's namespaces (guarded by mu_).
  absl::flat_hash_map<std::string, absl::flat_hash_set<uint64_t>> tenant_namespaces_;
};

// NotFound message used for unknown namespaces, e.g. "namespace 0123456789abcdef is not
// registered".
absl::Status UnknownNamespace(uint64_t id);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_NAMESPACE_REGISTRY_H_
