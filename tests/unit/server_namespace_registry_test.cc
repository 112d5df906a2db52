// Namespace canonicalization, ids and registration (server/service/namespace_registry.h).
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/service/codec_backend.h"
#include "server/service/namespace_registry.h"
#include "storage_test_util.h"
#include "turbokv/codec/block_codec.h"

namespace turbokv::server {
namespace {

v1::NamespaceDescriptor Descriptor() {
  v1::NamespaceDescriptor d;
  d.set_model("HuggingFaceTB/SmolLM2-135M-Instruct");
  d.set_model_revision("main");
  d.set_dtype(v1::DTYPE_FP16);
  d.set_num_layers(30);
  d.set_num_kv_heads(3);
  d.set_head_dim(64);
  d.set_block_tokens(16);
  return d;
}

TEST(CanonicalizeTest, PresetAndEquivalentExplicitCodecShareTheId) {
  auto a = Canonicalize(Descriptor(), "k4v4-g32");
  ASSERT_TRUE(a.ok()) << a.status();
  const v1::CodecConfig& c = a->descriptor.codec();
  EXPECT_TRUE(c.preset().empty());
  EXPECT_EQ(c.key().bits(), 4u);
  EXPECT_EQ(c.key().group_size(), 32u);
  EXPECT_EQ(c.value().bits(), 4u);
  EXPECT_TRUE(c.has_rotation_seed());
  EXPECT_EQ(c.rotation_seed(), codec::kDefaultRotationSeed);
  EXPECT_EQ(a->descriptor.tp_size(), 1u);

  v1::NamespaceDescriptor named = Descriptor();
  named.mutable_codec()->set_preset("k4v4-g32");
  v1::NamespaceDescriptor expl = Descriptor();
  expl.mutable_codec()->mutable_key()->set_bits(4);
  expl.mutable_codec()->mutable_key()->set_group_size(32);
  expl.mutable_codec()->mutable_value()->set_bits(4);
  expl.mutable_codec()->mutable_value()->set_group_size(32);
  expl.set_tp_size(1);
  expl.set_ttl_seconds(600);  // not part of the identity
  auto b = Canonicalize(named, "k3v3-g32");
  auto e = Canonicalize(expl, "k3v3-g32");
  ASSERT_TRUE(b.ok() && e.ok());
  const uint64_t id = NamespaceId(a->descriptor);
  EXPECT_EQ(NamespaceId(b->descriptor), id);
  EXPECT_EQ(NamespaceId(e->descriptor), id);
  // Canonicalizing the canonical form is a no-op.
  auto again = Canonicalize(a->descriptor, "raw");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(NamespaceId(again->descriptor), id);
  EXPECT_EQ(CanonicalBytes(again->descriptor), CanonicalBytes(a->descriptor));
  EXPECT_EQ(CanonicalBytes(a->descriptor).rfind("turbokv/ns/v1", 0), 0u);
}

TEST(CanonicalizeTest, EveryIdentityFieldChangesTheId) {
  const uint64_t base = NamespaceId(Canonicalize(Descriptor(), "k4v4-g32")->descriptor);
  auto id_with = [](auto mutate) {
    v1::NamespaceDescriptor d = Descriptor();
    mutate(d);
    auto c = Canonicalize(d, "k4v4-g32");
    EXPECT_TRUE(c.ok()) << c.status();
    return NamespaceId(c->descriptor);
  };
  EXPECT_NE(id_with([](auto& d) { d.set_cache_salt("tenant-a"); }), base);
  EXPECT_NE(id_with([](auto& d) { d.set_model_revision("v2"); }), base);
  EXPECT_NE(id_with([](auto& d) { d.set_dtype(v1::DTYPE_BF16); }), base);
  EXPECT_NE(id_with([](auto& d) {
              d.set_tp_size(2);
              d.set_tp_rank(1);
            }),
            base);
  EXPECT_NE(id_with([](auto& d) { d.set_block_tokens(256); }), base);
  EXPECT_NE(id_with([](auto& d) { d.mutable_codec()->set_preset("k3v3-g32"); }), base);
  EXPECT_NE(id_with([](auto& d) { d.mutable_codec()->set_rotation_seed(1); }), base);
  EXPECT_EQ(id_with([](auto& d) { d.set_tp_size(0); }), base);  // 0 and 1 both mean unsharded
  // The QJL seed is irrelevant without QJL.
  EXPECT_EQ(id_with([](auto& d) { d.mutable_codec()->set_qjl_seed(5); }), base);
}

TEST(CanonicalizeTest, InvalidDescriptorsNameTheField) {
  auto expect_bad = [](auto mutate, const std::string& field) {
    v1::NamespaceDescriptor d = Descriptor();
    mutate(d);
    auto c = Canonicalize(d, "k4v4-g32");
    ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status();
  };
  expect_bad([](auto& d) { d.set_model(""); }, "model");
  expect_bad([](auto& d) { d.set_dtype(v1::DTYPE_UNSPECIFIED); }, "dtype");
  expect_bad([](auto& d) { d.set_head_dim(0); }, "head_dim");
  expect_bad([](auto& d) { d.set_head_dim(12); }, "head_dim");
  expect_bad([](auto& d) { d.set_num_layers(0); }, "num_layers");
  expect_bad([](auto& d) { d.set_tp_rank(1); }, "tp_rank");
  expect_bad([](auto& d) { d.mutable_codec()->set_preset("k9"); }, "preset");
  expect_bad([](auto& d) { d.mutable_codec()->mutable_key()->set_bits(4); }, "codec");
  expect_bad(
      [](auto& d) {
        d.mutable_codec()->mutable_key()->set_bits(7);
        d.mutable_codec()->mutable_value()->set_bits(4);
      },
      "key.bits");
  expect_bad(
      [](auto& d) {
        d.mutable_codec()->mutable_key()->set_bits(4);
        d.mutable_codec()->mutable_key()->set_group_size(128);  // > head_dim 64
        d.mutable_codec()->mutable_value()->set_bits(4);
        d.mutable_codec()->mutable_value()->set_group_size(32);
      },
      "group");
  expect_bad([](auto& d) { d.mutable_codec()->set_protected_bits(4); }, "protected_bits");
}

TEST(NamespaceRegistryTest, RegisterIsIdempotentAndSurvivesReopen) {
  testing::TempDir dir;
  StorageOptions o;
  o.data_dir = dir.path();
  o.maintenance_interval_ms = 0;
  auto verify = [](absl::Span<const uint8_t> v) { return codec::VerifyPackedChecksum(v); };
  uint64_t id = 0;
  size_t packed = 0;
  {
    auto store = BlockStore::Open(o, verify);
    ASSERT_TRUE(store.ok()) << store.status();
    NamespaceRegistry registry(store->get(), "k4v4-g32");
    auto r1 = registry.Register(Descriptor());
    ASSERT_TRUE(r1.ok()) << r1.status();
    EXPECT_TRUE(r1->created);
    id = r1->ns->id;
    packed = r1->ns->codec.packed_bytes();
    EXPECT_EQ(r1->ns->codec.namespace_id(), id);
    EXPECT_EQ(r1->ns->codec.raw_bytes(), 30u * 2 * 16 * 3 * 64 * 2);
    auto r2 = registry.Register(Descriptor());
    ASSERT_TRUE(r2.ok());
    EXPECT_FALSE(r2->created);
    EXPECT_EQ(r2->ns->id, id);

    v1::NamespaceDescriptor with_ttl = Descriptor();
    with_ttl.set_ttl_seconds(60);
    auto r3 = registry.Register(with_ttl);  // same id, ttl updated
    ASSERT_TRUE(r3.ok());
    EXPECT_FALSE(r3->created);
    EXPECT_EQ(r3->ns->id, id);
    EXPECT_EQ((*store)->GetNamespace(id)->ttl_seconds, 60u);
    auto r4 = registry.Register(Descriptor());  // no ttl_seconds: the ttl stays
    ASSERT_TRUE(r4.ok());
    EXPECT_FALSE(r4->created);
    EXPECT_EQ(r4->ns->descriptor.ttl_seconds(), 60u);
    EXPECT_EQ((*store)->GetNamespace(id)->ttl_seconds, 60u);
    v1::NamespaceDescriptor no_ttl = Descriptor();
    no_ttl.set_ttl_seconds(0);  // explicitly 0: never expire
    auto r5 = registry.Register(no_ttl);
    ASSERT_TRUE(r5.ok());
    EXPECT_EQ(r5->ns->descriptor.ttl_seconds(), 0u);
    EXPECT_EQ((*store)->GetNamespace(id)->ttl_seconds, 0u);
    ASSERT_TRUE(registry.Register(with_ttl).ok());
    EXPECT_EQ(registry.Get(id + 1).status().code(), absl::StatusCode::kNotFound);
  }
  {
    auto store = BlockStore::Open(o, verify);
    ASSERT_TRUE(store.ok());
    NamespaceRegistry registry(store->get(), "raw");  // the default preset does not matter now
    ASSERT_TRUE(registry.Load().ok());
    auto ns = registry.Get(id);
    ASSERT_TRUE(ns.ok());
    EXPECT_EQ((*ns)->codec.packed_bytes(), packed);
    EXPECT_EQ((*ns)->descriptor.ttl_seconds(), 60u);
    auto dropped = registry.Drop(id);
    ASSERT_TRUE(dropped.ok());
    EXPECT_EQ(registry.Get(id).status().code(), absl::StatusCode::kNotFound);
  }
}

TEST(NamespaceRegistryTest, EachTenantHasItsOwnNamespaceLimitAndStoredBytes) {
  // A tenant filling its own limit leaves the others room (issue 22: one tenant used to fill
  // --max-namespaces for everyone); stored bytes are per tenant and follow drops and reopens.
  testing::TempDir dir;
  StorageOptions o;
  o.data_dir = dir.path();
  o.maintenance_interval_ms = 0;
  auto verify = [](absl::Span<const uint8_t> v) { return codec::VerifyPackedChecksum(v); };
  LimitOptions limits;
  limits.max_namespaces = 5;
  limits.max_namespaces_per_tenant = 2;
  auto salted = [](int i) {
    v1::NamespaceDescriptor d = Descriptor();
    d.set_cache_salt("s" + std::to_string(i));
    return d;
  };
  auto store = BlockStore::Open(o, verify);
  ASSERT_TRUE(store.ok()) << store.status();
  NamespaceRegistry registry(store->get(), "raw", limits);
  auto a0 = registry.Register(salted(0), "a");
  auto a1 = registry.Register(salted(1), "a");
  ASSERT_TRUE(a0.ok() && a1.ok());
  auto a2 = registry.Register(salted(2), "a");
  EXPECT_EQ(a2.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(a2.status().message().find("--max-namespaces-per-tenant"), std::string::npos)
      << a2.status();
  EXPECT_TRUE(registry.Register(salted(0), "a").ok());  // an existing one is not new
  auto b0 = registry.Register(salted(0), "b");          // same descriptor, another tenant: its own
  ASSERT_TRUE(b0.ok()) << b0.status();
  EXPECT_NE(b0->ns->id, a0->ns->id);
  EXPECT_EQ(registry.TenantNamespaces("a"), 2u);
  EXPECT_EQ(registry.TenantNamespaces("b"), 1u);

  // Stored bytes per tenant.
  std::vector<uint8_t> raw(a0->ns->codec.raw_bytes(), 0);
  std::string packed(a0->ns->codec.packed_bytes(), '\0');
  ASSERT_TRUE(a0->ns->codec
                  .Encode(absl::MakeConstSpan(raw),
                          absl::MakeSpan(reinterpret_cast<uint8_t*>(packed.data()), packed.size()))
                  .ok());
  std::vector<BlockStore::BlockWrite> writes = {{std::string(16, 'x'), packed},
                                                {std::string(16, 'y'), packed}};
  for (const absl::Status& st : (*store)->PutBlocks(a0->ns->id, writes)) ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(registry.TenantStoredBytes("a"), 2 * packed.size());
  EXPECT_EQ(registry.TenantStoredBytes("b"), 0u);
  EXPECT_EQ(registry.TenantStoredBytes("nobody"), 0u);
  ASSERT_TRUE(registry.Drop(a0->ns->id).ok());
  EXPECT_EQ(registry.TenantStoredBytes("a"), 0u);
  EXPECT_EQ(registry.TenantNamespaces("a"), 1u);
  EXPECT_TRUE(registry.Register(salted(2), "a").ok());  // room again
}

TEST(CodecBackendTest, CpuIsNamedAndCudaFailsClearly) {
  auto cpu = SelectCodecBackend(CodecBackendKind::kCpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->name.rfind("cpu-", 0), 0u) << cpu->name;
  auto cuda = SelectCodecBackend(CodecBackendKind::kCuda);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cuda.status().message().find("cuda"), std::string::npos);
}

}  // namespace
}  // namespace turbokv::server
