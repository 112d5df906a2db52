// BlockStore's tenants (block_store.h, "Tenants"): quotas kept at commit time by evicting the
// tenant's own blocks, capacity evictions from the tenants above their share first, and the
// namespace's tenant kept across a restart.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/block_store.h"
#include "storage_store_fixture.h"
#include "storage_test_util.h"

namespace turbokv::server {
namespace {

using testing::HashOf;
using testing::MakeValue;

constexpr uint64_t kA1 = 0xa1, kA2 = 0xa2, kB = 0xb0;
constexpr size_t kValueBytes = 10000;

class TenantsTest : public testing::StoreFixture {
 protected:
  TenantsTest() : StoreFixture(7) {}
  // Plain LRU (deterministic victims), watermarks 0.95 / 0.90.
  StorageOptions Options(uint64_t capacity = uint64_t{1} << 30) const {
    StorageOptions o = StoreFixture::Options();
    o.capacity_bytes = capacity;
    o.high_watermark = 0.95;
    o.low_watermark = 0.90;
    o.eviction_policy = "lru";
    return o;
  }
  std::unique_ptr<BlockStore> Open(const StorageOptions& o) {
    auto s = OpenStore(o);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    // Tenant "a" may store 5 blocks' packed bytes (or quota_a_ bytes); "b" has no quota.
    (*s)->SetTenantQuotas([this](std::string_view t) { return t == "a" ? quota_a_.load() : 0; });
    return std::move(*s);
  }
  static void Register(BlockStore& s, uint64_t id, const std::string& tenant) {
    NamespaceRecord r;
    r.id = id;
    r.tenant = tenant;
    r.descriptor = "descriptor of " + std::to_string(id);
    ASSERT_TRUE(s.PutNamespace(r).ok());
  }
  static bool Has(BlockStore& s, uint64_t ns, uint64_t i) {
    const std::string h = HashOf(i);
    std::string_view v = h;
    auto r = s.Lookup(ns, absl::MakeConstSpan(&v, 1), 0);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r == 1;
  }
  std::string Value() { return MakeValue(kValueBytes, rng_); }
  static uint64_t ChargeOfOneBlock() {
    RecordLocation l;
    l.hash_bytes = 16;
    l.value_bytes = kValueBytes;
    return BlockCharge(l);
  }

  std::atomic<uint64_t> quota_a_{5 * kValueBytes};
};

TEST_F(TenantsTest, AQuotaEvictsTheTenantsOwnLeastValuableBlocksOnly) {
  auto s = Open(Options());
  Register(*s, kA1, "a");
  Register(*s, kA2, "a");
  Register(*s, kB, "b");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Put(*s, kB, HashOf(i), Value()).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Put(*s, kA1, HashOf(i), Value()).ok());
  EXPECT_EQ(s->Stats().evicted_blocks, 0u);
  // Three more of tenant a, in its other namespace: its three least recently used go.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put(*s, kA2, HashOf(i), Value()).ok());
  const StoreStats st = s->Stats();
  EXPECT_EQ(st.evicted_blocks, 3u);
  EXPECT_EQ(st.quota_evicted_blocks, 3u);
  EXPECT_EQ(st.quota_evicted_bytes, 3 * ChargeOfOneBlock());
  EXPECT_EQ(s->TenantUsage("a").value_bytes, 5 * kValueBytes);
  EXPECT_EQ(s->TenantUsage("a").blocks, 5u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Has(*s, kA1, i)) << i;
  for (int i = 3; i < 5; ++i) EXPECT_TRUE(Has(*s, kA1, i)) << i;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Has(*s, kA2, i)) << i;
  EXPECT_EQ(s->TenantUsage("b").blocks, 5u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Has(*s, kB, i)) << i;
  EXPECT_EQ(s->TenantUsage("nobody").blocks, 0u);
  // An overwrite replaces its own bytes: nothing else goes.
  ASSERT_TRUE(Put(*s, kA2, HashOf(0), Value()).ok());
  EXPECT_EQ(s->Stats().quota_evicted_blocks, 3u);
}

TEST_F(TenantsTest, ARequestLongerThanTheQuotaStoresWhatFitsAndRefusesTheRest) {
  auto s = Open(Options());
  Register(*s, kA1, "a");
  std::vector<std::string> hashes, values;
  for (int i = 0; i < 8; ++i) {
    hashes.push_back(HashOf(i));
    values.push_back(Value());
  }
  std::vector<BlockStore::BlockWrite> writes;
  for (int i = 0; i < 8; ++i) writes.push_back({hashes[i], values[i]});
  // One request: its own earlier blocks are never evicted for its later ones.
  const std::vector<absl::Status> r = s->PutBlocks(kA1, writes);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(r[i].ok()) << i << r[i];
  for (int i = 5; i < 8; ++i) EXPECT_TRUE(absl::IsResourceExhausted(r[i])) << i << r[i];
  EXPECT_NE(r[5].message().find("quota of 50000 bytes"), std::string::npos) << r[5];
  EXPECT_EQ(s->TenantUsage("a").value_bytes, 5 * kValueBytes);
  // The next request evicts the first one's least valuable blocks.
  for (int i = 10; i < 12; ++i) ASSERT_TRUE(Put(*s, kA1, HashOf(i), Value()).ok());
  EXPECT_EQ(s->TenantUsage("a").blocks, 5u);
  EXPECT_EQ(s->Stats().quota_evicted_blocks, 2u);
  // A lowered quota: the next put evicts down to it (one block's bytes).
  quota_a_ = kValueBytes;
  ASSERT_TRUE(Put(*s, kA1, HashOf(20), Value()).ok());
  EXPECT_EQ(s->TenantUsage("a").blocks, 1u);
  EXPECT_TRUE(Has(*s, kA1, 20));
  // A block larger than the whole quota never fits.
  const absl::Status big = Put(*s, kA1, HashOf(21), MakeValue(kValueBytes + 1, rng_));
  EXPECT_TRUE(absl::IsResourceExhausted(big)) << big;
  EXPECT_TRUE(Has(*s, kA1, 20));
}

TEST_F(TenantsTest, ALoweredQuotaEvictsWholeChainsFromTheirTails) {
  // The prefix-tree policy lists a chain's blocks tail first, and a parent only once all its
  // children are listed: freeing most of the quota takes whole chains in one selection.
  quota_a_ = 12 * kValueBytes;
  StorageOptions o = Options();
  o.eviction_policy = "lrfu";
  auto s = Open(o);
  Register(*s, kA1, "a");
  Register(*s, kB, "b");
  std::vector<std::string> values;
  for (int i = 0; i < 16; ++i) values.push_back(Value());
  for (uint64_t ns : {kA1, kB}) {
    for (int c = 0; c < (ns == kA1 ? 3 : 1); ++c) {  // chains of 4 blocks, one request each
      std::vector<std::string> hashes;
      std::vector<BlockStore::BlockWrite> writes;
      for (int i = 0; i < 4; ++i) hashes.push_back(HashOf(c * 4 + i));
      for (int i = 0; i < 4; ++i) writes.push_back({hashes[i], values[c * 4 + i]});
      for (const absl::Status& r : s->PutBlocks(ns, writes)) ASSERT_TRUE(r.ok()) << r;
    }
  }
  ASSERT_EQ(s->TenantUsage("a").blocks, 12u);
  quota_a_ = 2 * kValueBytes;
  ASSERT_TRUE(Put(*s, kA1, HashOf(100), Value()).ok());
  EXPECT_EQ(s->TenantUsage("a").blocks, 2u);
  EXPECT_EQ(s->Stats().quota_evicted_blocks, 11u);
  EXPECT_TRUE(Has(*s, kA1, 100));
  EXPECT_EQ(s->TenantUsage("b").blocks, 4u);
}

TEST_F(TenantsTest, OnePutCallTakesChainsFromTheirTailsAcrossItsBlocks) {
  // One call of 10 blocks into a store of four 4-block chains: its blocks need 8 victims,
  // more than there are chain tails. A block's selection goes on from the blocks the call's
  // earlier blocks picked (their parents follow), so every block fits. (Each selection used to
  // start afresh, where a picked tail's parent still had a child: the 6th block was refused.)
  for (const char* policy : {"lrfu", "lru"}) {
    SCOPED_TRACE(policy);
    testing::TempDir dir;
    const uint64_t c = ChargeOfOneBlock();
    StorageOptions o = Options(20 * c + c / 2);  // high 19.475c, low 18.45c
    o.data_dir = dir.path();
    o.eviction_policy = policy;
    auto s = Open(o);
    Register(*s, kA1, "");
    std::vector<std::string> values;
    for (int i = 0; i < 26; ++i) values.push_back(Value());
    auto put_chain = [&](int first, int n) {
      std::vector<std::string> hashes;
      for (int i = 0; i < n; ++i) hashes.push_back(HashOf(first + i));
      std::vector<BlockStore::BlockWrite> writes;
      for (int i = 0; i < n; ++i) writes.push_back({hashes[i], values[first + i]});
      return s->PutBlocks(kA1, writes);
    };
    for (int c4 = 0; c4 < 4; ++c4) {
      for (const absl::Status& r : put_chain(4 * c4, 4)) ASSERT_TRUE(r.ok()) << r;
    }
    const std::vector<absl::Status> r = put_chain(16, 10);
    for (size_t i = 0; i < r.size(); ++i) EXPECT_TRUE(r[i].ok()) << i << ": " << r[i];
    EXPECT_GE(s->Stats().evicted_blocks, 7u);
    EXPECT_LE(s->Stats().used_bytes, s->Stats().capacity_bytes);
  }
}

TEST_F(TenantsTest, TheQuotaHoldsUnderConcurrentPuts) {
  quota_a_ = 10 * kValueBytes;
  auto s = Open(Options());
  Register(*s, kA1, "a");
  Register(*s, kA2, "a");
  Register(*s, kB, "b");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Put(*s, kB, HashOf(i), Value()).ok());
  constexpr int kThreads = 8, kPuts = 40;
  std::vector<std::string> values;
  for (int i = 0; i < kThreads * kPuts; ++i) values.push_back(Value());
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  uint64_t most = 0;
  std::thread watcher([&] {
    while (!done.load()) most = std::max(most, s->TenantUsage("a").value_bytes);
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPuts; ++i) {
        const int k = t * kPuts + i;
        if (!Put(*s, t % 2 == 0 ? kA1 : kA2, HashOf(k), values[k]).ok()) ++failures;
      }
    });
  }
  for (std::thread& w : writers) w.join();
  done = true;
  watcher.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(most, 10 * kValueBytes);
  EXPECT_EQ(s->TenantUsage("a").value_bytes, 10 * kValueBytes);
  EXPECT_EQ(s->Stats().quota_evicted_blocks, uint64_t{kThreads * kPuts - 10});
  EXPECT_EQ(s->TenantUsage("b").blocks, 10u);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(Has(*s, kB, i)) << i;
}

TEST_F(TenantsTest, CapacityEvictionTakesFromTenantsAboveTheirShareFirst) {
  quota_a_ = 0;  // no quotas: each of two tenants' share is half the capacity
  const uint64_t c = ChargeOfOneBlock();
  auto s = Open(Options(20 * c + c / 2));  // high 19.475c, low 18.45c
  Register(*s, kA1, "a");
  Register(*s, kB, "b");
  for (int i = 0; i < 19; ++i) ASSERT_TRUE(Put(*s, kA1, HashOf(i), Value()).ok());
  // b's puts take a's blocks (a is above its half); b's own stay.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Put(*s, kB, HashOf(i), Value()).ok());
  EXPECT_EQ(s->TenantUsage("b").blocks, 8u);
  EXPECT_GT(s->Stats().evicted_blocks, 0u);
  EXPECT_EQ(s->Stats().quota_evicted_blocks, 0u);
  // a's puts while b is within its half: only a's blocks go, however many a puts.
  for (int i = 100; i < 130; ++i) ASSERT_TRUE(Put(*s, kA1, HashOf(i), Value()).ok());
  EXPECT_EQ(s->TenantUsage("b").blocks, 8u);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(Has(*s, kB, i)) << i;
  EXPECT_TRUE(Has(*s, kA1, 129));
  EXPECT_LE(s->Stats().used_bytes, s->Stats().capacity_bytes);
  // b grows past its half: then b's puts take b's own blocks.
  for (int i = 8; i < 30; ++i) ASSERT_TRUE(Put(*s, kB, HashOf(i), Value()).ok());
  EXPECT_LE(s->TenantUsage("b").charge, (20 * c + c / 2) / 2 + c);
  EXPECT_GE(s->TenantUsage("a").blocks, 8u);
  EXPECT_FALSE(Has(*s, kB, 0));
  EXPECT_TRUE(Has(*s, kB, 29));
}

TEST_F(TenantsTest, AQuotaCapsTheTenantsShareAndTheRestGoesToTheOthers) {
  quota_a_ = 4 * kValueBytes;  // a's share: 4 blocks; b's: the rest
  const uint64_t c = ChargeOfOneBlock();
  auto s = Open(Options(20 * c + c / 2));
  Register(*s, kA1, "a");
  Register(*s, kB, "b");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put(*s, kA1, HashOf(i), Value()).ok());
  // b fills the store: from its 16th block on it is above its share and evicts its own.
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Put(*s, kB, HashOf(i), Value()).ok());
  EXPECT_EQ(s->TenantUsage("a").blocks, 4u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Has(*s, kA1, i)) << i;
  EXPECT_GE(s->TenantUsage("b").blocks, 13u);
  EXPECT_EQ(s->Stats().quota_evicted_blocks, 0u);
}

TEST_F(TenantsTest, TheNamespacesTenantIsKeptAcrossARestart) {
  quota_a_ = 3 * kValueBytes;
  {
    auto s = Open(Options());
    Register(*s, kA1, "a");
    Register(*s, kB, "b");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put(*s, kB, HashOf(i), Value()).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put(*s, kA1, HashOf(i), Value()).ok());
    NamespaceRecord other;
    other.id = kA1;
    other.tenant = "b";
    other.descriptor = "descriptor of " + std::to_string(kA1);
    const absl::Status moved = s->PutNamespace(other);
    EXPECT_TRUE(absl::IsInvalidArgument(moved)) << moved;
    EXPECT_NE(moved.message().find("belongs to tenant \"a\""), std::string::npos) << moved;
  }
  auto s = Open(Options());
  ASSERT_TRUE(s->GetNamespace(kA1).has_value());
  EXPECT_EQ(s->GetNamespace(kA1)->tenant, "a");
  EXPECT_EQ(s->GetNamespace(kA1)->descriptor, "descriptor of " + std::to_string(kA1));
  EXPECT_EQ(s->GetNamespace(kB)->tenant, "b");
  EXPECT_EQ(s->TenantUsage("a").blocks, 3u);
  EXPECT_EQ(s->TenantUsage("b").blocks, 3u);
  // The recovered blocks carry their tenant to the policy: a's put evicts a's oldest.
  ASSERT_TRUE(Put(*s, kA1, HashOf(10), Value()).ok());
  EXPECT_EQ(s->TenantUsage("a").blocks, 3u);
  EXPECT_FALSE(Has(*s, kA1, 0));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Has(*s, kB, i)) << i;
}

}  // namespace
}  // namespace turbokv::server
