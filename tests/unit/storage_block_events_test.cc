// What BlockStore reports to its BlockEventSink (server/storage/block_events.h): a recording
// sink (the seam's fake) next to a real store (value log + RocksDB metadata). Stored blocks
// once per put, never a refused one; evictions, deletions, expiries (by the maintenance pass
// and by a read) and blocks dropped as corrupt, with their reason and only for blocks that
// existed; a dropped namespace as one OnNamespaceCleared.
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/block_events.h"
#include "server/storage/block_store.h"
#include "storage_store_fixture.h"
#include "storage_test_util.h"

namespace turbokv::server {
namespace {

using testing::HashOf;
using testing::MakeValue;

constexpr uint64_t kNs = 0x0123456789abcdefULL;
constexpr uint64_t kNs2 = 0x00000000000000a1ULL;
constexpr size_t kValueBytes = 10000;

class RecordingSink : public BlockEventSink {
 public:
  struct Call {
    std::string what;  // "stored", "evicted", "expired", "deleted", "corrupt", "cleared"
    uint64_t ns = 0;
    std::vector<std::string> hashes;
  };
  void OnBlocksStored(uint64_t ns, absl::Span<const std::string_view> hashes) override {
    Add("stored", ns, hashes);
  }
  void OnBlocksRemoved(uint64_t ns, absl::Span<const std::string_view> hashes,
                       RemovalReason reason) override {
    Add(RemovalReasonName(reason), ns, hashes);
  }
  void OnNamespaceCleared(uint64_t ns) override { Add("cleared", ns, {}); }

  std::vector<Call> Take() {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<Call> out;
    out.swap(calls_);
    return out;
  }

 private:
  void Add(std::string what, uint64_t ns, absl::Span<const std::string_view> hashes) {
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back({std::move(what), ns, {hashes.begin(), hashes.end()}});
  }
  std::mutex mu_;
  std::vector<Call> calls_;
};

class BlockEventsTest : public testing::StoreFixture {
 protected:
  BlockEventsTest() : StoreFixture(7) {}
  std::unique_ptr<BlockStore> Open(uint64_t capacity = uint64_t{1} << 30) {
    StorageOptions o = Options();
    o.capacity_bytes = capacity;
    auto s = BlockStore::Open(o, testing::VerifyTrailer, &clock_, &sink_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::vector<absl::Status> PutMany(BlockStore& s, uint64_t ns, const std::vector<int>& ids,
                                    const std::vector<std::string>& hashes = {}) {
    std::vector<std::string> keys = hashes, values;
    if (keys.empty()) {
      for (int i : ids) keys.push_back(HashOf(i));
    }
    std::vector<BlockStore::BlockWrite> w;
    for (size_t i = 0; i < keys.size(); ++i) values.push_back(MakeValue(kValueBytes, rng_));
    for (size_t i = 0; i < keys.size(); ++i) w.push_back({keys[i], values[i]});
    return s.PutBlocks(ns, w);
  }
  RecordingSink sink_;
};

std::vector<std::string> Hashes(std::initializer_list<int> ids) {
  std::vector<std::string> out;
  for (int i : ids) out.push_back(HashOf(i));
  return out;
}

TEST_F(BlockEventsTest, PutsReportTheStoredBlocksOnlyAndOncePerPut) {
  auto s = Open();
  PutNamespace(*s, kNs);
  // A bad hash is refused (InvalidArgument): not reported. A hash twice in one call: once.
  std::vector<absl::Status> r = PutMany(*s, kNs, {}, {HashOf(0), "short", HashOf(1), HashOf(0)});
  ASSERT_TRUE(r[0].ok() && r[2].ok() && r[3].ok());
  ASSERT_EQ(r[1].code(), absl::StatusCode::kInvalidArgument);
  std::vector<RecordingSink::Call> calls = sink_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, "stored");
  EXPECT_EQ(calls[0].ns, kNs);
  EXPECT_EQ(calls[0].hashes, Hashes({1, 0}));  // in put order, the later duplicate kept
  // A put again reports again (the block was refreshed); an unknown namespace reports nothing.
  ASSERT_TRUE(Put(*s, kNs, HashOf(1), MakeValue(kValueBytes, rng_)).ok());
  EXPECT_EQ(Put(*s, kNs2, HashOf(1), MakeValue(kValueBytes, rng_)).code(),
            absl::StatusCode::kNotFound);
  calls = sink_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].hashes, Hashes({1}));
}

TEST_F(BlockEventsTest, EvictionsAndRefusalsReportWhatReallyHappened) {
  uint64_t charge = 0;
  {
    testing::TempDir d;
    StorageOptions o = Options();
    o.data_dir = d.path();
    auto probe = BlockStore::Open(o, testing::VerifyTrailer, &clock_);
    ASSERT_TRUE(probe.ok());
    PutNamespace(**probe, kNs);
    ASSERT_TRUE(Put(**probe, kNs, HashOf(0), MakeValue(kValueBytes, rng_)).ok());
    charge = (*probe)->Stats().used_bytes;
  }
  auto s = Open(10 * charge + charge / 2);  // high 10.45 blocks, low 10.4
  PutNamespace(*s, kNs);
  // One request of 12 blocks: it never evicts its own head, so its last blocks are refused.
  std::vector<absl::Status> r = PutMany(*s, kNs, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  std::vector<std::string> stored, refused;
  for (int i = 0; i < 12; ++i) (r[i].ok() ? stored : refused).push_back(HashOf(i));
  ASSERT_FALSE(refused.empty());
  std::vector<RecordingSink::Call> calls = sink_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].hashes, stored);
  // Other requests evict the first one's blocks (the policy's choice): exactly those are
  // reported, each before the block that replaced it.
  const uint64_t evicted_before = s->Stats().evicted_blocks;
  ASSERT_TRUE(PutMany(*s, kNs, {100})[0].ok());
  ASSERT_TRUE(PutMany(*s, kNs, {101})[0].ok());
  const uint64_t evicted = s->Stats().evicted_blocks - evicted_before;
  ASSERT_GT(evicted, 0u);
  calls = sink_.Take();
  std::set<std::string> removed;
  for (const RecordingSink::Call& c : calls) {
    if (c.what == "evicted") removed.insert(c.hashes.begin(), c.hashes.end());
  }
  EXPECT_EQ(removed.size(), evicted);
  for (const std::string& h : stored) {
    std::string_view v = h;
    auto found = s->Lookup(kNs, absl::MakeConstSpan(&v, 1), 0);
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(*found == 0, removed.count(h) == 1) << "block reported and store disagree";
  }
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].what, "evicted");
  EXPECT_EQ(calls[1].what, "stored");
  EXPECT_EQ(calls[1].hashes, Hashes({100}));
  EXPECT_EQ(calls[2].what, "evicted");
  EXPECT_EQ(calls[3].what, "stored");
  EXPECT_EQ(calls[3].hashes, Hashes({101}));
}

TEST_F(BlockEventsTest, DeletesExpiriesAndDropsAreReportedWithTheirReason) {
  auto s = Open();
  PutNamespace(*s, kNs);
  PutNamespace(*s, kNs2, /*ttl_seconds=*/10);
  ASSERT_TRUE(PutMany(*s, kNs, {0, 1, 2})[0].ok());
  ASSERT_TRUE(PutMany(*s, kNs2, {0, 1})[0].ok());
  sink_.Take();
  // Delete: only the block that existed.
  std::vector<std::string> del = {HashOf(1), HashOf(50)};
  std::vector<std::string_view> views(del.begin(), del.end());
  ASSERT_EQ(*s->DeleteBlocks(kNs, views), 1u);
  std::vector<RecordingSink::Call> calls = sink_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, "deleted");
  EXPECT_EQ(calls[0].hashes, Hashes({1}));
  // TTL: the maintenance pass expires kNs2's blocks, one call for the namespace.
  clock_.now += 11;
  ASSERT_TRUE(s->RunMaintenance().ok());
  calls = sink_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, "expired");
  EXPECT_EQ(calls[0].ns, kNs2);
  EXPECT_EQ(std::set<std::string>(calls[0].hashes.begin(), calls[0].hashes.end()),
            std::set<std::string>({HashOf(0), HashOf(1)}));
  // Drop: one OnNamespaceCleared, no per-block removals.
  ASSERT_EQ(*s->DropNamespace(kNs), 2u);
  calls = sink_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, "cleared");
  EXPECT_EQ(calls[0].ns, kNs);
}

TEST_F(BlockEventsTest, ABlockFoundExpiredOrCorruptByAReadIsReported) {
  std::string v0 = MakeValue(kValueBytes, rng_);
  {
    auto s = Open();
    PutNamespace(*s, kNs);
    PutNamespace(*s, kNs2, /*ttl_seconds=*/10);
    ASSERT_TRUE(Put(*s, kNs, HashOf(0), v0).ok());
    ASSERT_TRUE(Put(*s, kNs, HashOf(1), MakeValue(kValueBytes, rng_)).ok());
    ASSERT_TRUE(Put(*s, kNs2, HashOf(7), MakeValue(kValueBytes, rng_)).ok());
    // Expired when read (before any maintenance pass): removed by the read, once.
    clock_.now += 11;
    sink_.Take();
    EXPECT_EQ(Get(*s, kNs2, HashOf(7)), std::nullopt);
    std::vector<RecordingSink::Call> calls = sink_.Take();
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].what, "expired");
    EXPECT_EQ(calls[0].ns, kNs2);
    EXPECT_EQ(calls[0].hashes, Hashes({7}));
  }
  // Block 0's value damaged behind the store's back: the read drops it and reports it.
  ASSERT_TRUE(testing::FlipByteOfStoredValue(dir_.path(), v0, kValueBytes / 2));
  auto s = Open();
  sink_.Take();
  EXPECT_EQ(Get(*s, kNs, HashOf(0)), std::nullopt);
  EXPECT_TRUE(Get(*s, kNs, HashOf(1)).has_value());
  std::vector<RecordingSink::Call> calls = sink_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, "corrupt");
  EXPECT_EQ(calls[0].hashes, Hashes({0}));
}

}  // namespace
}  // namespace turbokv::server
