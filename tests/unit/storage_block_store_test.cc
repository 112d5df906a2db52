// BlockStore on a real RocksDB in a temporary directory, with random values that carry the
// packed-block checksum trailer and a fake clock for leases and TTL.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "server/storage/block_store.h"
#include "server/storage/store_format.h"
#include "storage_store_fixture.h"
#include "storage_test_util.h"

namespace turbokv::server {
namespace {

using testing::HashOf;
using testing::MakeValue;
using testing::TempDir;

constexpr uint64_t kNs = 0x0123456789abcdefULL;
constexpr uint64_t kNs2 = 0xfedcba9876543210ULL;
constexpr size_t kValueBytes = 10000;

class BlockStoreTest : public testing::StoreFixture {
 protected:
  BlockStoreTest() : StoreFixture(42) {}
  // The eviction tests count in blocks with the watermarks 0.95 / 0.90 and plain LRU; the
  // chain tests ask for the chain policy themselves.
  StorageOptions Options(uint64_t capacity = uint64_t{1} << 30) const {
    StorageOptions o = StoreFixture::Options();
    o.capacity_bytes = capacity;
    o.high_watermark = 0.95;
    o.low_watermark = 0.90;
    o.eviction_policy = "lru";
    return o;
  }
  StorageOptions ChainOptions(uint64_t capacity) const {
    StorageOptions o = Options(capacity);
    o.eviction_policy = "lrfu";
    return o;
  }
  std::unique_ptr<BlockStore> Open(const StorageOptions& o) {
    auto s = OpenStore(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static void Register(BlockStore& s, uint64_t id, uint32_t ttl = 0) {
    PutNamespace(s, id, ttl, 4 * kValueBytes);
  }
  static size_t Lookup(BlockStore& s, uint64_t ns, const std::vector<std::string>& chain,
                       uint32_t lease = 0) {
    std::vector<std::string_view> views(chain.begin(), chain.end());
    auto r = s.Lookup(ns, views, lease);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : 0;
  }
  bool Has(BlockStore& s, uint64_t i) { return Lookup(s, kNs, {HashOf(i)}) == 1; }

  // Charged bytes of one block of kValueBytes with a 16-byte hash, measured.
  uint64_t ChargeOfOneBlock() {
    TempDir d;
    StorageOptions o = Options();
    o.data_dir = d.path();
    auto s = Open(o);
    Register(*s, kNs);
    EXPECT_TRUE(Put(*s, kNs, HashOf(0), MakeValue(kValueBytes, rng_)).ok());
    return s->Stats().used_bytes;
  }
};

TEST_F(BlockStoreTest, PutGetLookupDelete) {
  auto s = Open(Options());
  Register(*s, kNs);
  std::vector<std::string> values;
  for (int i = 0; i < 3; ++i) {
    values.push_back(MakeValue(kValueBytes + i, rng_));
    ASSERT_TRUE(Put(*s, kNs, HashOf(i), values[i]).ok());
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Get(*s, kNs, HashOf(i)), values[i]);
  EXPECT_EQ(Get(*s, kNs, HashOf(99)), std::nullopt);
  EXPECT_EQ(Lookup(*s, kNs, {HashOf(0), HashOf(1), HashOf(99), HashOf(2)}), 2u);
  EXPECT_EQ(Lookup(*s, kNs, {HashOf(99), HashOf(0)}), 0u);
  // The same hash in another namespace is another block.
  Register(*s, kNs2);
  EXPECT_EQ(Lookup(*s, kNs2, {HashOf(0)}), 0u);

  StoreStats st = s->Stats();
  EXPECT_EQ(st.blocks, 3u);
  EXPECT_EQ(st.value_bytes, 3 * kValueBytes + 3);
  EXPECT_EQ(st.logical_bytes, 3 * 4 * kValueBytes);

  std::vector<std::string> del = {HashOf(1), HashOf(99)};
  std::vector<std::string_view> views(del.begin(), del.end());
  auto deleted = s->DeleteBlocks(kNs, views);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 1u);
  EXPECT_EQ(Get(*s, kNs, HashOf(1)), std::nullopt);
  EXPECT_EQ(Lookup(*s, kNs, {HashOf(0), HashOf(1)}), 1u);
  EXPECT_EQ(s->Stats().blocks, 2u);
}

TEST_F(BlockStoreTest, ASecondOpenOfTheSameDirectoryIsRefusedBeforeTouchingIt) {
  auto first = Open(Options());
  ASSERT_NE(first, nullptr);
  Register(*first, kNs);
  ASSERT_TRUE(Put(*first, kNs, HashOf(1), MakeValue(kValueBytes, rng_)).ok());
  auto second = OpenStore(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
  EXPECT_NE(second.status().message().find(
                absl::StrCat("is in use by another turbokv-server (pid ", getpid(), ")")),
            std::string::npos)
      << second.status();
  EXPECT_TRUE(Has(*first, 1));  // the first store is untouched
  first.reset();
  auto again = Open(Options());  // the lock went with the first store
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(Has(*again, 1));
}

TEST_F(BlockStoreTest, UnknownNamespaceAndBadHashes) {
  auto s = Open(Options());
  std::string v = MakeValue(kValueBytes, rng_);
  EXPECT_EQ(Put(*s, kNs, HashOf(0), v).code(), absl::StatusCode::kNotFound);
  std::string_view h = "01234567";
  EXPECT_EQ(s->GetBlocks(kNs, absl::MakeConstSpan(&h, 1)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Lookup(kNs, absl::MakeConstSpan(&h, 1), 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(s->DropNamespace(kNs).status().code(), absl::StatusCode::kNotFound);

  Register(*s, kNs);
  std::string h7(7, 'a'), h8(8, 'b'), h32(32, 'c'), h33(33, 'd');
  std::vector<BlockStore::BlockWrite> writes = {{h7, v}, {h8, v}, {h32, v}, {h33, v}};
  std::vector<absl::Status> r = s->PutBlocks(kNs, writes);
  EXPECT_EQ(r[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r[0].message().find("7 bytes"), std::string::npos) << r[0];
  EXPECT_TRUE(r[1].ok());
  EXPECT_TRUE(r[2].ok());
  EXPECT_EQ(r[3].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Stats().blocks, 2u);
}

// GetPinnedBlocks hands out the buffers the values were read into: they stay valid and
// unchanged after the blocks are overwritten or deleted (their records deallocated, their
// segments removed) and after the store is closed.
TEST_F(BlockStoreTest, PinnedValuesOutliveTheirBlocksAndTheStore) {
  StorageOptions o = Options();
  std::vector<std::string> values = {MakeValue(1000, rng_), MakeValue(kValueBytes, rng_),
                                     MakeValue(size_t{300} << 10, rng_)};
  std::vector<std::string> hashes;
  for (size_t i = 0; i < values.size(); ++i) hashes.push_back(HashOf(i));
  std::vector<std::string_view> views(hashes.begin(), hashes.end());
  {
    auto s = Open(o);
    Register(*s, kNs);
    for (size_t i = 0; i < values.size(); ++i) ASSERT_TRUE(Put(*s, kNs, hashes[i], values[i]).ok());
  }
  auto s = Open(o);
  std::vector<std::vector<std::optional<PinnedValue>>> reads;
  for (int pass = 0; pass < 3; ++pass) {
    auto r = s->GetPinnedBlocks(kNs, views);
    ASSERT_TRUE(r.ok()) << r.status();
    reads.push_back(*std::move(r));
  }
  bool would_block = false;
  auto cached = s->GetPinnedBlocks(kNs, views, &would_block);
  ASSERT_TRUE(cached.ok()) << cached.status();
  if (!would_block) reads.push_back(*std::move(cached));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_TRUE(Put(*s, kNs, hashes[i], MakeValue(values[i].size(), rng_)).ok());
  }
  ASSERT_TRUE(s->DeleteBlocks(kNs, views).ok());
  ASSERT_TRUE(s->RunMaintenance().ok());
  s.reset();
  for (const auto& r : reads) {
    ASSERT_EQ(r.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_TRUE(r[i].has_value()) << i;
      EXPECT_EQ(r[i]->bytes, values[i]) << i;
    }
  }
}

TEST_F(BlockStoreTest, ConcurrentReadersSeeOnlyWholeBlocks) {
  auto s = Open(Options());
  Register(*s, kNs);
  constexpr int kBlocks = 8;
  std::atomic<bool> stop{false};
  std::atomic<int> found{0};
  std::thread reader([&] {
    std::vector<std::string> hashes;
    for (int i = 0; i < kBlocks; ++i) hashes.push_back(HashOf(i));
    std::vector<std::string_view> views(hashes.begin(), hashes.end());
    while (!stop.load()) {
      auto r = s->GetBlocks(kNs, views);
      ASSERT_TRUE(r.ok());
      for (const auto& v : *r) {
        if (!v.has_value()) continue;
        ASSERT_EQ(v->size(), size_t{256} << 10);
        ++found;
      }
    }
  });
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> values;
    for (int i = 0; i < kBlocks; ++i) values.push_back(MakeValue(size_t{256} << 10, rng));
    std::vector<std::string> hashes;
    for (int i = 0; i < kBlocks; ++i) hashes.push_back(HashOf(i));
    std::vector<BlockStore::BlockWrite> writes;
    for (int i = 0; i < kBlocks; ++i) writes.push_back({hashes[i], values[i]});
    for (const absl::Status& st : s->PutBlocks(kNs, writes)) ASSERT_TRUE(st.ok()) << st;
  }
  stop = true;
  reader.join();
  EXPECT_GT(found.load(), 0);
  EXPECT_EQ(s->Stats().checksum_failures, 0u);  // every value read was whole
  EXPECT_EQ(s->Stats().blocks, static_cast<uint64_t>(kBlocks));
}

TEST_F(BlockStoreTest, CorruptValueIsDeletedCountedAndReportedMissing) {
  std::string v0 = MakeValue(kValueBytes, rng_);
  std::string v1 = MakeValue(kValueBytes, rng_);
  {
    auto s = Open(Options());
    Register(*s, kNs);
    ASSERT_TRUE(Put(*s, kNs, HashOf(0), v0).ok());
    ASSERT_TRUE(Put(*s, kNs, HashOf(1), v1).ok());
  }
  // Flip one byte of block 0's stored value, behind the store's back: in its value-log
  // record (values/<segment>.tkv), found by its bytes.
  ASSERT_TRUE(testing::FlipByteOfStoredValue(dir_.path(), v0, kValueBytes / 2));
  {
    auto s = Open(Options());
    EXPECT_EQ(s->Stats().blocks, 2u);
    std::vector<std::string> hashes = {HashOf(0), HashOf(1)};
    std::vector<std::string_view> views(hashes.begin(), hashes.end());
    auto r = s->GetBlocks(kNs, views);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)[0], std::nullopt);  // never the corrupt bytes
    EXPECT_EQ((*r)[1], v1);
    StoreStats st = s->Stats();
    EXPECT_EQ(st.checksum_failures, 1u);
    EXPECT_EQ(st.blocks, 1u);
    EXPECT_EQ(Lookup(*s, kNs, {HashOf(0)}), 0u);
  }
  {
    auto s = Open(Options());  // deleted on disk too
    EXPECT_EQ(s->Stats().blocks, 1u);
    EXPECT_EQ(Get(*s, kNs, HashOf(0)), std::nullopt);
  }
}

TEST_F(BlockStoreTest, EvictsLeastRecentlyUsedDownToLowWatermark) {
  const uint64_t c = ChargeOfOneBlock();
  // high = 0.95 * 20.5c = 19.475c, low = 18.45c: the 20th block evicts two.
  auto s = Open(Options(20 * c + c / 2));
  Register(*s, kNs);
  for (int i = 0; i < 19; ++i)
    ASSERT_TRUE(Put(*s, kNs, HashOf(i), MakeValue(kValueBytes, rng_)).ok());
  EXPECT_EQ(s->Stats().evicted_blocks, 0u);
  ASSERT_TRUE(Get(*s, kNs, HashOf(0)).has_value());  // uses: 0, 1 by get, 2 by lookup
  ASSERT_TRUE(Get(*s, kNs, HashOf(1)).has_value());
  ASSERT_EQ(Lookup(*s, kNs, {HashOf(2)}), 1u);

  ASSERT_TRUE(Put(*s, kNs, HashOf(19), MakeValue(kValueBytes, rng_)).ok());
  EXPECT_EQ(s->Stats().evicted_blocks, 2u);
  EXPECT_FALSE(Has(*s, 3));
  EXPECT_FALSE(Has(*s, 4));
  // (Has() is a Lookup, which counts as a use: check only blocks that are recent anyway.)
  for (int i : {0, 1, 2, 18, 19}) EXPECT_TRUE(Has(*s, i)) << i;

  ASSERT_TRUE(Put(*s, kNs, HashOf(20), MakeValue(kValueBytes, rng_)).ok());
  EXPECT_EQ(s->Stats().evicted_blocks, 2u);
  ASSERT_TRUE(Put(*s, kNs, HashOf(21), MakeValue(kValueBytes, rng_)).ok());
  EXPECT_EQ(s->Stats().evicted_blocks, 4u);
  EXPECT_FALSE(Has(*s, 5));
  EXPECT_FALSE(Has(*s, 6));
  EXPECT_TRUE(Has(*s, 7));
  EXPECT_LE(s->Stats().used_bytes, s->Stats().capacity_bytes);
  EXPECT_EQ(s->Stats().evicted_bytes, 4 * c);
}

TEST_F(BlockStoreTest, EvictionTakesChainTailsBeforeTheirHeads) {
  // A request's blocks form a prefix chain in request order; losing the head makes the rest
  // unreachable by Lookup. Whatever the policy values, it evicts a chain from its tail: as more
  // of other requests' blocks push the chain out, its survivors are always a prefix. One fresh
  // store per count of other blocks (looking at the chain would make it recent again).
  const uint64_t c = ChargeOfOneBlock();
  const std::vector<std::string> chain = {HashOf(0), HashOf(1), HashOf(2)};
  std::vector<size_t> survivors_after;  // by count of other blocks
  for (uint64_t others = 0; others <= 12; ++others) {
    StorageOptions o = ChainOptions(4 * c + c / 2);  // high 4.275c, low 4.05c
    o.data_dir = dir_.path() + "/n" + std::to_string(others);
    auto s = Open(o);
    ASSERT_NE(s, nullptr);
    Register(*s, kNs);
    std::vector<std::string> values;
    for (int i = 0; i < 3; ++i) values.push_back(MakeValue(kValueBytes, rng_));
    std::vector<BlockStore::BlockWrite> writes;
    for (int i = 0; i < 3; ++i) writes.push_back({chain[i], values[i]});
    for (const absl::Status& st : s->PutBlocks(kNs, writes)) ASSERT_TRUE(st.ok()) << st;
    std::vector<std::string_view> views(chain.begin(), chain.end());
    ASSERT_TRUE(s->GetBlocks(kNs, views).ok());
    for (uint64_t i = 0; i < others; ++i) {
      // Another request's block, read back once: as valuable as the chain's, and newer.
      ASSERT_TRUE(Put(*s, kNs, HashOf(100 + i), MakeValue(kValueBytes, rng_)).ok());
      ASSERT_TRUE(Get(*s, kNs, HashOf(100 + i)).has_value());
    }
    size_t survivors = 0;
    for (const std::string& h : chain) survivors += Lookup(*s, kNs, {h});
    EXPECT_EQ(Lookup(*s, kNs, chain), survivors) << others << " other blocks";
    survivors_after.push_back(survivors);
  }
  // The chain shrinks one block at a time from its tail and is gone in the end.
  EXPECT_EQ(survivors_after.front(), 3u);
  EXPECT_EQ(survivors_after.back(), 0u);
  EXPECT_TRUE(std::is_sorted(survivors_after.rbegin(), survivors_after.rend()));
  EXPECT_NE(std::find(survivors_after.begin(), survivors_after.end(), 2u), survivors_after.end());
  EXPECT_NE(std::find(survivors_after.begin(), survivors_after.end(), 1u), survivors_after.end());
}

TEST_F(BlockStoreTest, ACallWhoseChainContinuesKeepsItsLastBlockValued) {
  // LRFU starts a call's last block as the least valuable (the request's partly filled last
  // block). A call whose chain continues elsewhere (ChainCursor::call_ends_request = false:
  // another node of a cluster holds the rest) keeps its last block valued like the others.
  // Two chains of two blocks, X then Y; a fifth block makes room for itself by evicting one
  // leaf: X's (the older) when both calls ended their requests, Y's when X's did not.
  const uint64_t c = ChargeOfOneBlock();
  for (bool x_ends : {true, false}) {
    StorageOptions o = ChainOptions(4 * c + c / 2);  // high 4.275c, low 4.05c
    o.data_dir = dir_.path() + (x_ends ? "/ends" : "/continues");
    auto s = Open(o);
    ASSERT_NE(s, nullptr);
    Register(*s, kNs);
    const std::vector<std::string> x = {HashOf(0), HashOf(1)}, y = {HashOf(2), HashOf(3)};
    for (const auto* chain : {&x, &y}) {
      std::vector<std::string> values = {MakeValue(kValueBytes, rng_),
                                         MakeValue(kValueBytes, rng_)};
      std::vector<BlockStore::BlockWrite> writes = {{(*chain)[0], values[0]},
                                                    {(*chain)[1], values[1]}};
      BlockStore::ChainCursor cursor;
      cursor.call_ends_request = chain == &y || x_ends;
      for (const absl::Status& st : s->PutBlocks(kNs, writes, &cursor)) ASSERT_TRUE(st.ok()) << st;
    }
    ASSERT_TRUE(Put(*s, kNs, HashOf(4), MakeValue(kValueBytes, rng_)).ok());
    EXPECT_EQ(s->Stats().evicted_blocks, 1u);
    EXPECT_EQ(Lookup(*s, kNs, x), x_ends ? 1u : 2u) << x_ends;
    EXPECT_EQ(Lookup(*s, kNs, y), x_ends ? 2u : 1u) << x_ends;
  }
}

// Puts `chain` in calls of `per_call` blocks that share one cursor, as the put reactor
// commits a streamed request in pieces.
// Returns how many were refused with RESOURCE_EXHAUSTED (any other failure fails the test).
size_t PutChainInPieces(BlockStore& s, uint64_t ns, const std::vector<std::string>& chain,
                        size_t per_call, std::mt19937_64& rng) {
  size_t refused = 0;
  BlockStore::ChainCursor cursor;
  for (size_t begin = 0; begin < chain.size(); begin += per_call) {
    std::vector<std::string> values;
    std::vector<BlockStore::BlockWrite> writes;
    for (size_t i = begin; i < std::min(chain.size(), begin + per_call); ++i) {
      values.push_back(MakeValue(kValueBytes, rng));
    }
    for (size_t i = begin; i < std::min(chain.size(), begin + per_call); ++i) {
      writes.push_back({chain[i], values[i - begin]});
    }
    for (const absl::Status& st : s.PutBlocks(ns, writes, &cursor)) {
      if (absl::IsResourceExhausted(st)) {
        ++refused;
      } else {
        EXPECT_TRUE(st.ok()) << st;
      }
    }
  }
  return refused;
}

std::vector<std::string> ChainOf(uint64_t first, size_t n) {
  std::vector<std::string> chain;
  for (size_t i = 0; i < n; ++i) chain.push_back(HashOf(first + i));
  return chain;
}

TEST_F(BlockStoreTest, EvictionNeverStrandsAChainTailAcrossCallsGetsAndLookups) {
  // Each request's chain arrives in several store calls (the reactors commit and read in
  // pieces). However eviction proceeds, every surviving block of a chain must be reachable by
  // Lookup from the chain's start: Lookup's match counts every survivor.
  const uint64_t c = ChargeOfOneBlock();
  auto s = Open(ChainOptions(20 * c + c / 2));
  Register(*s, kNs);
  std::vector<std::vector<std::string>> chains;
  for (uint64_t k = 0; k < 6; ++k) chains.push_back(ChainOf(100 * k, 8));
  for (size_t k = 0; k < chains.size(); ++k) {
    EXPECT_EQ(PutChainInPieces(*s, kNs, chains[k], /*per_call=*/2, rng_), 0u);
    if (k == 2) {  // chain 0 is read again, in pieces, then chain 1 looked up: both recent
      BlockStore::ChainCursor cursor;
      std::vector<std::string_view> views(chains[0].begin(), chains[0].end());
      for (size_t b = 0; b < views.size(); b += 3) {
        auto got = s->GetPinnedBlocks(
            kNs, absl::MakeSpan(views).subspan(b, std::min<size_t>(3, views.size() - b)), nullptr,
            &cursor);
        ASSERT_TRUE(got.ok()) << got.status();
      }
      // Chain 1 may have lost its tail already (a request's last block is the least valuable).
      ASSERT_GE(Lookup(*s, kNs, chains[1]), 1u);
    }
  }
  const StoreStats stats = s->Stats();
  ASSERT_GE(stats.evicted_blocks, 20u);  // 48 blocks put into room for 20
  uint64_t survivors_total = 0;
  for (size_t k = 0; k < chains.size(); ++k) {
    // Survivors first (a one-hash Lookup per block), then the chain's match from its start.
    size_t survivors = 0;
    for (const std::string& h : chains[k]) survivors += Lookup(*s, kNs, {h});
    EXPECT_EQ(Lookup(*s, kNs, chains[k]), survivors) << "chain " << k;
    survivors_total += survivors;
  }
  EXPECT_EQ(survivors_total, s->Stats().blocks);
  EXPECT_EQ(Lookup(*s, kNs, chains[5]), 8u);  // the newest chain is whole
}

TEST_F(BlockStoreTest, AChainLongerThanTheCapacityKeepsItsHead) {
  // The new user's case: one request's chain is longer than the store, after another
  // request's blocks. The other request's blocks make room; the request never evicts its own
  // earlier blocks (its later ones hang below them), so the blocks that do not fit are
  // refused and every stored block of the chain is matched from its start.
  const uint64_t c = ChargeOfOneBlock();
  auto s = Open(ChainOptions(10 * c + c / 2));
  Register(*s, kNs);
  EXPECT_EQ(PutChainInPieces(*s, kNs, ChainOf(500, 4), /*per_call=*/2, rng_), 0u);
  const std::vector<std::string> chain = ChainOf(0, 24);
  const size_t refused = PutChainInPieces(*s, kNs, chain, /*per_call=*/2, rng_);
  size_t survivors = 0;
  for (const std::string& h : chain) survivors += Lookup(*s, kNs, {h});
  EXPECT_EQ(Lookup(*s, kNs, chain), survivors);
  EXPECT_EQ(survivors, 10u);  // 10c fits the 10.5c capacity once the rest is gone
  EXPECT_EQ(refused, chain.size() - survivors);
  EXPECT_EQ(Lookup(*s, kNs, ChainOf(500, 4)), 0u);  // the other request's blocks made room
}

TEST_F(BlockStoreTest, ChainLinksAreRelearnedAfterARestart) {
  // The store does not persist prefix links: after a restart the policy starts from the
  // recency order (the access column family) and learns a chain's links again from its first
  // Lookup; from then on eviction takes the chain's tail first.
  const uint64_t c = ChargeOfOneBlock();
  const std::vector<std::string> chain = ChainOf(0, 12);
  {
    auto s = Open(ChainOptions(20 * c + c / 2));
    Register(*s, kNs);
    PutChainInPieces(*s, kNs, chain, /*per_call=*/3, rng_);
    // Read back in pieces (persisted by the access-time flush on close).
    BlockStore::ChainCursor cursor;
    std::vector<std::string_view> views(chain.begin(), chain.end());
    for (size_t b = 0; b < views.size(); b += 5) {
      auto piece = absl::MakeSpan(views).subspan(b, std::min<size_t>(5, views.size() - b));
      ASSERT_TRUE(s->GetPinnedBlocks(kNs, piece, nullptr, &cursor).ok());
    }
  }
  auto s = Open(ChainOptions(20 * c + c / 2));
  ASSERT_EQ(s->Stats().blocks, chain.size());
  ASSERT_EQ(Lookup(*s, kNs, chain), chain.size());  // relinks the chain
  for (uint64_t i = 0; i < 16; ++i) {
    // Newer blocks, each read back once: they push the chain out.
    ASSERT_TRUE(Put(*s, kNs, HashOf(1000 + i), MakeValue(kValueBytes, rng_)).ok());
    ASSERT_TRUE(Get(*s, kNs, HashOf(1000 + i)).has_value());
  }
  ASSERT_GE(s->Stats().evicted_blocks, 4u);
  size_t survivors = 0;
  for (const std::string& h : chain) survivors += Lookup(*s, kNs, {h});
  EXPECT_LT(survivors, chain.size());
  EXPECT_GT(survivors, 0u);
  EXPECT_EQ(Lookup(*s, kNs, chain), survivors);
}

TEST_F(BlockStoreTest, LeasesProtectBlocksUntilGetOrExpiry) {
  const uint64_t c = ChargeOfOneBlock();
  auto s = Open(Options(20 * c + c / 2));
  Register(*s, kNs);
  std::vector<std::string> chain;
  for (int i = 0; i < 19; ++i) {
    chain.push_back(HashOf(i));
    ASSERT_TRUE(Put(*s, kNs, HashOf(i), MakeValue(kValueBytes, rng_)).ok());
  }
  // One Lookup per block: 19 unrelated blocks (a chain's head could not go before its tail).
  for (const std::string& h : chain) ASSERT_EQ(Lookup(*s, kNs, {h}, /*lease=*/60), 1u);

  // Nothing evictable: the 20th block still fits under the hard capacity (above the high
  // watermark), the 21st does not.
  ASSERT_TRUE(Put(*s, kNs, HashOf(19), MakeValue(kValueBytes, rng_)).ok());
  ASSERT_EQ(Lookup(*s, kNs, {HashOf(19)}, /*lease=*/60), 1u);
  absl::Status full = Put(*s, kNs, HashOf(20), MakeValue(kValueBytes, rng_));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("leased"), std::string::npos) << full;
  EXPECT_FALSE(Has(*s, 20));
  EXPECT_EQ(s->Stats().evicted_blocks, 0u);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(Has(*s, i));

  // A get releases block 0's lease: it is the one evicted for block 20.
  ASSERT_TRUE(Get(*s, kNs, HashOf(0)).has_value());
  ASSERT_TRUE(Put(*s, kNs, HashOf(20), MakeValue(kValueBytes, rng_)).ok());
  EXPECT_EQ(s->Stats().evicted_blocks, 1u);
  EXPECT_FALSE(Has(*s, 0));
  EXPECT_EQ(s->Stats().blocks, 20u);
  EXPECT_LE(s->Stats().used_bytes, s->Stats().capacity_bytes);

  // Leases end: eviction goes back to plain LRU (1, 2, 3 are the oldest uses).
  clock_.now += 61;
  ASSERT_TRUE(Put(*s, kNs, HashOf(21), MakeValue(kValueBytes, rng_)).ok());
  EXPECT_EQ(s->Stats().evicted_blocks, 4u);
  EXPECT_FALSE(Has(*s, 1));
  EXPECT_FALSE(Has(*s, 2));
  EXPECT_FALSE(Has(*s, 3));
  EXPECT_TRUE(Has(*s, 4));
  EXPECT_LE(s->Stats().used_bytes, s->Stats().capacity_bytes);

  // A block larger than the whole capacity never fits, and evicts nothing on its way out.
  const StoreStats before_huge = s->Stats();
  absl::Status huge = Put(*s, kNs, HashOf(99), MakeValue(21 * c, rng_));
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s->Stats().evicted_blocks, before_huge.evicted_blocks);
  EXPECT_EQ(s->Stats().blocks, before_huge.blocks);
  EXPECT_EQ(s->Stats().used_bytes, before_huge.used_bytes);
}

TEST_F(BlockStoreTest, CapacityHoldsUnderThreeTimesItsSizeOfConcurrentWrites) {
  constexpr uint64_t kCapacity = uint64_t{2} << 20;
  auto s = Open(Options(kCapacity));
  Register(*s, kNs);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> max_used{0};
  std::thread monitor([&] {
    while (!stop.load()) {
      uint64_t used = s->Stats().used_bytes;
      uint64_t prev = max_used.load();
      while (used > prev && !max_used.compare_exchange_weak(prev, used)) {
      }
      std::this_thread::yield();
    }
  });
  std::atomic<uint64_t> written{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      uint64_t mine = 0;
      int n = 0;
      while (mine < 3 * kCapacity / 4) {
        std::vector<std::string> hashes, values;
        for (int k = 0; k < 3; ++k) {
          hashes.push_back(HashOf((uint64_t{1} << 40) * (t + 1) + n, 8 + (n % 25)));
          ++n;
          values.push_back(MakeValue(8192 + rng() % 57344, rng));
          mine += values.back().size();
        }
        std::vector<BlockStore::BlockWrite> w;
        for (int k = 0; k < 3; ++k) w.push_back({hashes[k], values[k]});
        for (const absl::Status& st : s->PutBlocks(kNs, w)) ASSERT_TRUE(st.ok()) << st;
      }
      written += mine;
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  monitor.join();
  StoreStats st = s->Stats();
  EXPECT_GE(written.load(), 3 * kCapacity);
  EXPECT_LE(max_used.load(), kCapacity);
  EXPECT_LE(st.used_bytes, kCapacity);
  EXPECT_GT(st.evicted_blocks, 0u);
  EXPECT_GT(st.blocks, 0u);
  EXPECT_EQ(st.checksum_failures, 0u);
}

TEST_F(BlockStoreTest, RestartRecoversNamespacesAccountingAndRecency) {
  const uint64_t c = ChargeOfOneBlock();
  std::vector<std::string> values;
  StoreStats before;
  {
    auto s = Open(Options(20 * c + c / 2));
    Register(*s, kNs);
    Register(*s, kNs2, /*ttl=*/3600);
    for (int i = 0; i < 19; ++i) {
      values.push_back(MakeValue(kValueBytes, rng_));
      ASSERT_TRUE(Put(*s, i < 16 ? kNs : kNs2, HashOf(i), values[i]).ok());
      clock_.now += 1;
    }
    clock_.now += 1;
    ASSERT_TRUE(Get(*s, kNs, HashOf(0)).has_value());  // block 0 becomes the most recent
    before = s->Stats();
  }
  auto s = Open(Options(20 * c + c / 2));
  StoreStats after = s->Stats();
  EXPECT_EQ(after.blocks, before.blocks);
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.value_bytes, before.value_bytes);
  EXPECT_EQ(after.logical_bytes, before.logical_bytes);
  ASSERT_EQ(after.namespaces.size(), 2u);
  EXPECT_EQ(after.namespaces[0].record.id, kNs);
  EXPECT_EQ(after.namespaces[0].blocks, 16u);
  EXPECT_EQ(after.namespaces[1].record.id, kNs2);
  EXPECT_EQ(after.namespaces[1].record.ttl_seconds, 3600u);
  EXPECT_EQ(after.namespaces[1].record.descriptor, "descriptor of " + std::to_string(kNs2));
  EXPECT_EQ(after.namespaces[1].blocks, 3u);
  // Recency survived the restart (persisted access times): block 0 was used last, so the
  // oldest are blocks 1, 2, 3, ... What a put evicts is a prefix of that order (how long a
  // prefix depends on RocksDB's files, which the capacity counts too).
  ASSERT_TRUE(Put(*s, kNs, HashOf(19), MakeValue(kValueBytes, rng_)).ok());
  const uint64_t evicted = s->Stats().evicted_blocks;
  EXPECT_GE(evicted, 2u);
  EXPECT_LE(evicted, 6u);
  std::vector<int> order;
  for (int i = 1; i < 19; ++i) order.push_back(i);
  order.push_back(0);
  std::vector<uint64_t> present;
  for (int i : order) present.push_back(Lookup(*s, i < 16 ? kNs : kNs2, {HashOf(i)}));
  for (size_t k = 0; k < order.size(); ++k) {
    EXPECT_EQ(present[k], k < evicted ? 0u : 1u) << "block " << order[k];
  }
  for (size_t k = evicted; k < order.size(); ++k) {
    const int i = order[k];
    EXPECT_EQ(Get(*s, i < 16 ? kNs : kNs2, HashOf(i)), values[i]) << i;
  }
}

TEST_F(BlockStoreTest, TtlExpiresBlocksAfterLastPutOrGet) {
  auto s = Open(Options());
  Register(*s, kNs, /*ttl=*/10);
  Register(*s, kNs2);  // no ttl
  std::string v = MakeValue(kValueBytes, rng_);
  ASSERT_TRUE(Put(*s, kNs, HashOf(0), v).ok());
  ASSERT_TRUE(Put(*s, kNs, HashOf(1), v).ok());
  ASSERT_TRUE(Put(*s, kNs2, HashOf(0), v).ok());
  clock_.now += 5;
  ASSERT_EQ(Get(*s, kNs, HashOf(0)), v);  // refreshes block 0 only
  clock_.now += 5;                        // block 1: 10 s since its put
  EXPECT_EQ(Lookup(*s, kNs, {HashOf(0), HashOf(1)}), 1u);
  EXPECT_EQ(Get(*s, kNs, HashOf(1)), std::nullopt);
  clock_.now += 4;
  EXPECT_EQ(Get(*s, kNs, HashOf(0)), v);  // 9 s since its get
  clock_.now += 100;
  ASSERT_TRUE(s->RunMaintenance().ok());
  StoreStats st = s->Stats();
  EXPECT_EQ(st.expired_blocks, 2u);
  EXPECT_EQ(st.blocks, 1u);  // only the namespace without ttl keeps its block
  EXPECT_EQ(Get(*s, kNs2, HashOf(0)), v);
}

// GetBlocks with would_block serves only what the read cache holds (the GetBlocks pipeline
// runs it on gRPC's threads: no read, no checksum) and, when that is not enough, changes
// nothing. The cache keeps a value verified by a read, sharing its memory, until the record
// is erased; it is empty after a restart.
TEST_F(BlockStoreTest, CacheOnlyGetNeverDoesIoAndChangesNothingWhenItWouldBlock) {
  auto cache_only = [](BlockStore& s, uint64_t ns, const std::string& hash, bool* would_block) {
    std::string_view h = hash;
    auto r = s.GetPinnedBlocks(ns, absl::MakeConstSpan(&h, 1), would_block);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0] : std::nullopt;
  };
  auto bytes = [](const std::optional<PinnedValue>& v) {
    return v.has_value() ? std::optional<std::string>(std::string(v->bytes)) : std::nullopt;
  };
  const std::string v = MakeValue(kValueBytes, rng_);
  {
    auto s = Open(Options());
    Register(*s, kNs);
    Register(*s, kNs2, /*ttl=*/10);
    ASSERT_TRUE(Put(*s, kNs, HashOf(0), v).ok());
    ASSERT_TRUE(Put(*s, kNs2, HashOf(1), v).ok());
    bool would_block = false;
    EXPECT_EQ(cache_only(*s, kNs, HashOf(0), &would_block), std::nullopt);  // never read yet
    EXPECT_TRUE(would_block);
    EXPECT_EQ(s->GetDbStats().read_cache_hits, 0u);
    // A read that may block verifies the value and keeps it: from memory now, the same bytes.
    const std::string k0 = HashOf(0);
    std::string_view h0 = k0;
    auto read = s->GetPinnedBlocks(kNs, absl::MakeConstSpan(&h0, 1));
    ASSERT_TRUE(read.ok() && (*read)[0].has_value());
    std::optional<PinnedValue> hit = cache_only(*s, kNs, HashOf(0), &would_block);
    EXPECT_FALSE(would_block);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->bytes, v);
    EXPECT_EQ(hit->bytes.data(), (*read)[0]->bytes.data());
    EXPECT_EQ(s->GetDbStats().read_cache_hits, 1u);
    EXPECT_EQ(s->GetDbStats().read_cache_misses, 1u);  // the read, not the call that returned
    EXPECT_GE(s->GetDbStats().read_cache.bytes, v.size());
    would_block = true;
    EXPECT_EQ(bytes(cache_only(*s, kNs, HashOf(99), &would_block)), std::nullopt);  // a miss
    EXPECT_FALSE(would_block);
    // Overwritten: the cached value is not the block any more.
    const std::string v2 = MakeValue(kValueBytes, rng_);
    ASSERT_TRUE(Put(*s, kNs, HashOf(0), v2).ok());
    EXPECT_EQ(bytes(cache_only(*s, kNs, HashOf(0), &would_block)), std::nullopt);
    EXPECT_TRUE(would_block);
    EXPECT_EQ(Get(*s, kNs, HashOf(0)), v2);
    ASSERT_TRUE(Put(*s, kNs, HashOf(0), v).ok());
    EXPECT_EQ(Get(*s, kNs, HashOf(0)), v);
    // Expired: deleting it writes, so the cache-only read leaves it to a blocking one.
    EXPECT_EQ(Get(*s, kNs2, HashOf(1)), v);  // cached
    clock_.now += 11;
    cache_only(*s, kNs2, HashOf(1), &would_block);
    EXPECT_TRUE(would_block);
    EXPECT_EQ(s->Stats().blocks, 2u);
    EXPECT_EQ(Get(*s, kNs2, HashOf(1)), std::nullopt);
    EXPECT_EQ(s->Stats().blocks, 1u);
    EXPECT_EQ(s->Stats().expired_blocks, 1u);
  }
  // After a restart the cache is empty: the first read needs the value log.
  auto s = Open(Options());
  bool would_block = false;
  cache_only(*s, kNs, HashOf(0), &would_block);
  EXPECT_TRUE(would_block);
  EXPECT_EQ(s->Stats().blocks, 1u);  // changed nothing
  EXPECT_EQ(Get(*s, kNs, HashOf(0)), v);
  would_block = true;
  EXPECT_EQ(bytes(cache_only(*s, kNs, HashOf(0), &would_block)), v);
  EXPECT_FALSE(would_block);
}

TEST_F(BlockStoreTest, DropNamespaceDeletesEverythingDurably) {
  {
    auto s = Open(Options());
    Register(*s, kNs);
    Register(*s, kNs2);
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(Put(*s, kNs, HashOf(i), MakeValue(kValueBytes, rng_)).ok());
      ASSERT_TRUE(Put(*s, kNs2, HashOf(i), MakeValue(kValueBytes, rng_)).ok());
    }
    auto dropped = s->DropNamespace(kNs);
    ASSERT_TRUE(dropped.ok());
    EXPECT_EQ(*dropped, 5u);
    EXPECT_EQ(s->Stats().blocks, 5u);
    EXPECT_FALSE(s->GetNamespace(kNs).has_value());
  }
  auto s = Open(Options());
  EXPECT_EQ(s->ListNamespaces().size(), 1u);
  EXPECT_EQ(s->Stats().blocks, 5u);
  Register(*s, kNs);
  EXPECT_EQ(Lookup(*s, kNs, {HashOf(0)}), 0u);
}

TEST_F(BlockStoreTest, DurabilityNoneKeepsDataAcrossACleanClose) {
  StorageOptions o = Options();
  o.durability = Durability::kNone;
  std::string v = MakeValue(kValueBytes, rng_);
  {
    auto s = Open(o);
    Register(*s, kNs);
    ASSERT_TRUE(Put(*s, kNs, HashOf(0), v).ok());
  }
  auto s = Open(o);
  EXPECT_EQ(Get(*s, kNs, HashOf(0)), v);
}

TEST_F(BlockStoreTest, AHashPutTwiceInOneCallKeepsTheLaterValue) {
  auto s = Open(Options());
  Register(*s, kNs);
  const std::string first = MakeValue(kValueBytes, rng_), second = MakeValue(kValueBytes, rng_);
  const std::string h0 = HashOf(0), h1 = HashOf(1);
  std::vector<BlockStore::BlockWrite> writes = {{h0, first}, {h1, first}, {h0, second}};
  for (const absl::Status& st : s->PutBlocks(kNs, writes)) ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(Get(*s, kNs, HashOf(0)) == second);
  EXPECT_EQ(s->Stats().blocks, 2u);
}

TEST_F(BlockStoreTest, ConcurrentWritersOfOneKeyLeaveOneWholeValueAndExactAccounting) {
  auto s = Open(Options());
  Register(*s, kNs);
  std::vector<std::string> values;
  for (int i = 0; i < 4; ++i) values.push_back(MakeValue(kValueBytes, rng_));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        if (i % 10 == 9) {
          const std::string hash = HashOf(t == 0 ? 0 : 100 + t);
          std::string_view h = hash;
          ASSERT_TRUE(s->DeleteBlocks(kNs, absl::MakeConstSpan(&h, 1)).ok());
        }
        ASSERT_TRUE(Put(*s, kNs, HashOf(0), values[t]).ok());
        ASSERT_TRUE(Put(*s, kNs, HashOf(100 + t), values[t]).ok());
      }
    });
  }
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      std::optional<std::string> v = Get(*s, kNs, HashOf(0));
      if (v.has_value()) {
        EXPECT_TRUE(std::find(values.begin(), values.end(), *v) != values.end());
      }
    }
  });
  for (auto& t : threads) t.join();
  stop = true;
  reader.join();
  // The index agrees with RocksDB: every indexed block reads back, and the charge of 5 blocks.
  StoreStats st = s->Stats();
  EXPECT_EQ(st.blocks, 5u);
  EXPECT_EQ(st.value_bytes, 5 * kValueBytes);
  for (uint64_t h : {0, 101, 102, 103, 100}) EXPECT_TRUE(Get(*s, kNs, HashOf(h)).has_value()) << h;
  auto reopened = [&] {
    s.reset();
    return Open(Options());
  }();
  EXPECT_EQ(reopened->Stats().used_bytes, st.used_bytes);
}

// A data directory written before the value log (values in the `blocks` column family's blob
// files, 24-byte block_meta, version-1 namespace records) is migrated at open: every block is
// served byte for byte from the value log, and the legacy column family is emptied.
TEST_F(BlockStoreTest, ALegacyBlobStoreIsMigratedIntoTheValueLog) {
  const StorageOptions o = Options();
  std::map<std::string, std::string> values;
  {
    rocksdb::DBOptions db_options = format::DbOptions(o);
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(db_options, o.data_dir, format::Descriptors(o), &h, &db).ok());
    std::string ns_key = format::NamespaceKey(kNs);
    std::string record(1, '\x01');
    for (int i = 0; i < 4; ++i) record.push_back(0);  // ttl 0
    format::PutFixed64LE(&record, 4 * kValueBytes);   // logical block bytes
    record += "descriptor of legacy";
    rocksdb::WriteBatch batch;
    ASSERT_TRUE(batch.Put(h[format::kNamespaces], ns_key, record).ok());
    ASSERT_TRUE(batch.Put(h[format::kNamespacesCopy], ns_key, record).ok());
    for (int i = 0; i < 40; ++i) {
      std::string key = ns_key + HashOf(i);
      values[HashOf(i)] = MakeValue(kValueBytes, rng_);
      std::string meta;
      format::PutFixed64LE(&meta, kValueBytes);
      format::PutFixed64LE(&meta, 1'700'000'000);
      format::PutFixed64LE(&meta, format::TrailerOf(values[HashOf(i)]));
      ASSERT_TRUE(batch.Put(h[format::kBlocks], key, values[HashOf(i)]).ok());
      ASSERT_TRUE(batch.Put(h[format::kMeta], key, meta).ok());
      ASSERT_TRUE(batch
                      .Put(h[format::kAccess], key,
                           format::EncodeAccess(1'700'000'000 + i, uint64_t(i) << 20))
                      .ok());
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    ASSERT_TRUE(db->Write(wo, &batch).ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions(), h).ok());
    for (auto* c : h) ASSERT_TRUE(db->DestroyColumnFamilyHandle(c).ok());
    delete db;
  }
  {
    auto s = Open(o);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->Stats().blocks, 40u);
    ASSERT_TRUE(s->GetNamespace(kNs).has_value());
    EXPECT_EQ(s->GetNamespace(kNs)->descriptor, "descriptor of legacy");
    for (const auto& [hash, v] : values) EXPECT_EQ(Get(*s, kNs, hash), v);
    EXPECT_GE(s->GetDbStats().value_log_bytes, 40 * kValueBytes);
  }
  // Migrated for good: the next open reads the value log, and the blocks family is empty.
  auto s = Open(o);
  EXPECT_EQ(s->Stats().blocks, 40u);
  for (const auto& [hash, v] : values) EXPECT_EQ(Get(*s, kNs, hash), v);
  s.reset();
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> h;
  ASSERT_TRUE(
      rocksdb::DB::Open(format::DbOptions(o), o.data_dir, format::Descriptors(o), &h, &db).ok());
  std::unique_ptr<rocksdb::Iterator> it(
      db->NewIterator(rocksdb::ReadOptions(), h[format::kBlocks]));
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid()) << "the legacy blocks family still has entries";
  it.reset();
  for (auto* c : h) ASSERT_TRUE(db->DestroyColumnFamilyHandle(c).ok());
  delete db;
}

// An evicted or deleted block's pages go back to the filesystem at once (value_log.h).
TEST_F(BlockStoreTest, DeletedBlocksGiveTheirDiskSpaceBackAtOnce) {
  auto s = Open(Options());
  Register(*s, kNs);
  constexpr size_t kBytes = 40000;  // a 40,960-byte record
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(Put(*s, kNs, HashOf(i), MakeValue(kBytes, rng_)).ok());
  const uint64_t before = s->GetDbStats().value_log_bytes;
  EXPECT_GE(before, 30 * 40960u);
  std::vector<std::string> del;
  for (int i = 0; i < 10; ++i) del.push_back(HashOf(i));
  std::vector<std::string_view> views(del.begin(), del.end());
  ASSERT_EQ(*s->DeleteBlocks(kNs, views), 10u);
  const uint64_t after = s->GetDbStats().value_log_bytes;
  EXPECT_GE(before - after, 10 * 40960u - 2 * kPageBytes);  // (the file's own extent blocks)
}

// Steady churn through a full store: what --capacity buys is live blocks. Once the store has
// filled, at least 90% of the capacity holds packed bytes of live blocks (the rest: the
// records' page rounding, 2.4% here, the metadata, the watermark gap), and the directory
// stays within the capacity (RocksDB's LOG and MANIFEST aside).
TEST_F(BlockStoreTest, UnderChurnTheCapacityHoldsLiveBlocks) {
  constexpr uint64_t kCapacity = uint64_t{32} << 20;
  StorageOptions o = Options(kCapacity);
  o.high_watermark = 0.98;
  o.low_watermark = 0.97;
  auto s = Open(o);
  Register(*s, kNs);
  constexpr size_t kBytes = 40012;  // the block: 1 layer x 1 head x 64 x 512 at k5v4
  double live_sum = 0;
  int samples = 0;
  uint64_t max_counted = 0;
  bool full = false;
  for (int i = 0; i < 2400; i += 8) {
    std::vector<std::string> hashes, vals;
    std::vector<BlockStore::BlockWrite> w;
    for (int k = 0; k < 8; ++k) {
      hashes.push_back(HashOf(uint64_t(i + k)));
      vals.push_back(MakeValue(kBytes, rng_));
    }
    for (int k = 0; k < 8; ++k) w.push_back({hashes[k], vals[k]});
    for (const absl::Status& st : s->PutBlocks(kNs, w)) ASSERT_TRUE(st.ok()) << st;
    full = full || s->Stats().evicted_blocks > 0;
    if (full && i % 40 == 0) {
      ASSERT_TRUE(s->RunMaintenance().ok());
      const StoreStats st = s->Stats();
      live_sum += static_cast<double>(st.value_bytes) / kCapacity;
      ++samples;
      const DbStats db = s->GetDbStats();
      max_counted = std::max(max_counted, db.value_log_bytes + db.sst_bytes);
    }
  }
  ASSERT_GT(samples, 20);
  const double live_mean = live_sum / samples;
  std::printf(
      "[store] churn of 3x a 32 MiB store: live bytes %.1f%% of the capacity (mean of %d "
      "samples), value log + SSTs at most %.1f%%\n",
      100 * live_mean, samples, 100.0 * max_counted / kCapacity);
  EXPECT_GE(live_mean, 0.90);
  EXPECT_LE(max_counted, kCapacity);
}

TEST(StorageOptionsTest, ValidateAndParse) {
  StorageOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.eviction_policy = "fifo";
  // The message names the field and its flag (StorageOptionTable()).
  EXPECT_EQ(o.Validate().message(),
            "storage.eviction_policy \"fifo\" (--eviction-policy) is not one of lrfu, lru");
  o = StorageOptions();
  o.segment_bytes = 4096;
  EXPECT_NE(o.Validate().message().find("segment_bytes"), std::string::npos);
  o = StorageOptions();
  o.low_watermark = 0.999;  // above the high watermark (0.995)
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = StorageOptions();
  o.capacity_bytes = 0;
  EXPECT_NE(o.Validate().message().find("capacity_bytes"), std::string::npos);
  EXPECT_EQ(*ParseDurability("fsync"), Durability::kFsync);
  EXPECT_EQ(ParseDurability("sometimes").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DurabilityName(Durability::kWal), "wal");
}

}  // namespace
}  // namespace turbokv::server
