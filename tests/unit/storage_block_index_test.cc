#include <string>

#include "gtest/gtest.h"
#include "server/storage/block_index.h"

namespace turbokv::server {
namespace {

IndexEntry Entry(const std::string& key, uint64_t ns, uint64_t bytes, int64_t lease_until = 0) {
  IndexEntry e;
  e.key = key;
  e.namespace_id = ns;
  e.value_bytes = bytes;
  e.charge = bytes + 10;
  e.lease_until = lease_until;
  return e;
}

TEST(BlockIndexTest, AccountingAndReplacement) {
  BlockIndex index;
  index.Upsert(Entry("a", 1, 100));
  index.Upsert(Entry("b", 1, 200));
  index.Upsert(Entry("c", 2, 300));
  EXPECT_EQ(index.blocks(), 3u);
  EXPECT_EQ(index.value_bytes(), 600u);
  EXPECT_EQ(index.used_bytes(), 630u);
  EXPECT_EQ(index.usage().at(1).blocks, 2u);
  EXPECT_EQ(index.usage().at(2).value_bytes, 300u);

  index.Upsert(Entry("a", 1, 50));  // replaces, does not add
  EXPECT_EQ(index.blocks(), 3u);
  EXPECT_EQ(index.value_bytes(), 550u);
  EXPECT_TRUE(index.Erase("c"));
  EXPECT_FALSE(index.Erase("c"));
  EXPECT_EQ(index.usage().count(2), 0u);
  EXPECT_EQ(index.used_bytes(), 270u);
}

TEST(BlockIndexTest, VictimsAreLeastRecentlyUsedAndSkipLeasesAndExclusions) {
  BlockIndex index;
  for (const char* k : {"a", "b", "c", "d", "e"}) index.Upsert(Entry(k, 1, 90));  // charge 100
  index.Find("b")->lease_until = 50;  // leased until t = 50
  index.Touch(index.Find("a"));       // order now: b c d e a
  EXPECT_EQ(index.EvictableBytes(10), 400u);
  EXPECT_EQ(index.EvictableBytes(50), 500u);

  absl::flat_hash_set<std::string> exclude = {"c"};
  std::vector<IndexEntry> v = index.TakeVictims(150, /*now=*/10, exclude);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].key, "d");
  EXPECT_EQ(v[1].key, "e");
  EXPECT_EQ(index.blocks(), 3u);

  v = index.TakeVictims(1000, /*now=*/60, {});  // lease over: everything goes, in order
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].key, "b");
  EXPECT_EQ(v[1].key, "c");
  EXPECT_EQ(v[2].key, "a");
  EXPECT_EQ(index.used_bytes(), 0u);
}

TEST(BlockIndexTest, RestorePutsVictimsBackAtTheOldEnd) {
  BlockIndex index;
  for (const char* k : {"a", "b", "c", "d"}) index.Upsert(Entry(k, 1, 90));
  std::vector<IndexEntry> v = index.TakeVictims(200, 0, {});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(index.used_bytes(), 200u);
  index.Restore(std::move(v));
  EXPECT_EQ(index.used_bytes(), 400u);
  EXPECT_EQ(index.blocks(), 4u);
  v = index.TakeVictims(1, 0, {});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].key, "a");  // order kept
}

TEST(BlockIndexTest, BelowPlacesAnEntryNextToItsChainPredecessor) {
  BlockIndex index;
  index.Upsert(Entry("x", 1, 1));
  index.Upsert(Entry("h", 1, 1));        // a chain's head: the most recently used end
  index.Upsert(Entry("t1", 1, 1), "h");   // each next block just below the previous one
  index.Upsert(Entry("t2", 1, 1), "t1");
  index.Upsert(Entry("y", 1, 1));
  auto order = [&] {
    std::string o;
    for (const IndexEntry& e : index.Select([](const IndexEntry&) { return true; })) {
      o += e.key + " ";
    }
    return o;
  };
  EXPECT_EQ(order(), "x t2 t1 h y ");
  index.Touch(index.Find("x"), "t1");  // moved just below t1
  EXPECT_EQ(order(), "t2 x t1 h y ");
  index.Touch(index.Find("h"));
  index.Touch(index.Find("t1"), "h");
  EXPECT_EQ(order(), "t2 x y t1 h ");
  ASSERT_TRUE(index.Erase("t2"));
  index.Upsert(Entry("t3", 1, 1), "t2");  // predecessor gone: least recently used end
  EXPECT_EQ(order(), "t3 x y t1 h ");
  index.Touch(index.Find("h"), "h");  // below itself: unchanged
  EXPECT_EQ(order(), "t3 x y t1 h ");
}

TEST(BlockIndexTest, ReplacementKeepsTheLease) {
  BlockIndex index;
  index.Upsert(Entry("a", 1, 10, /*lease_until=*/100));
  index.Upsert(Entry("a", 1, 20));
  EXPECT_EQ(index.Find("a")->lease_until, 100);
  EXPECT_EQ(index.EntriesOf(1).size(), 1u);
  EXPECT_TRUE(index.EntriesOf(2).empty());
}

}  // namespace
}  // namespace turbokv::server
