// BlockIndex: slots, keys, accounting, memory per entry.
#include <string>

#include "gtest/gtest.h"
#include "server/storage/block_index.h"

namespace turbokv::server {
namespace {

RecordLocation At(uint32_t segment, uint32_t page, uint32_t value_bytes) {
  RecordLocation l;
  l.segment = segment;
  l.page = page;
  l.value_bytes = value_bytes;
  return l;
}

TEST(BlockIndexTest, KeysAreNamespaceAndHash) {
  BlockIndex index;
  const uint32_t a = index.Insert(1, "hash-aaa", 10, At(1, 1, 5000), 100);
  const uint32_t b = index.Insert(2, "hash-aaa", 11, At(1, 3, 5000), 100);
  const uint32_t c = index.Insert(1, std::string(32, 'z'), 12, At(2, 1, 100), 100);
  EXPECT_NE(a, b);
  EXPECT_EQ(index.Find(1, "hash-aaa"), a);
  EXPECT_EQ(index.Find(2, "hash-aaa"), b);
  EXPECT_EQ(index.Find(1, std::string(32, 'z')), c);
  EXPECT_EQ(index.Find(3, "hash-aaa"), kNoSlot);
  EXPECT_EQ(index.Find(1, "hash-aab"), kNoSlot);
  EXPECT_EQ(index.Find(1, std::string(33, 'z')), kNoSlot);
  EXPECT_EQ(index.namespace_id(b), 2u);
  EXPECT_EQ(index.at(c).hash_view(), std::string(32, 'z'));
  EXPECT_EQ(index.at(c).hash_bytes(), 32);
  EXPECT_EQ(index.at(a).sequence(), 10u);
  EXPECT_EQ(index.at(b).page, 3u);
}

// The 60-byte entry packs the hash length with the sequence's high bits: neither disturbs the
// other, up to the largest sequence an entry holds.
TEST(BlockIndexTest, SequenceAndHashLengthShareAWord) {
  BlockIndex index;
  const uint64_t big = BlockEntry::kSequenceLimit - 1;
  const uint32_t a = index.Insert(1, std::string(32, 'a'), big, At(7, 9, 4000), 100);
  const uint32_t b = index.Insert(1, std::string(8, 'b'), (uint64_t{1} << 40) + 5, At(7, 10, 1), 5);
  EXPECT_EQ(index.at(a).sequence(), big);
  EXPECT_EQ(index.at(a).hash_bytes(), 32);
  EXPECT_EQ(index.at(a).hash_view(), std::string(32, 'a'));
  EXPECT_EQ(index.at(b).sequence(), (uint64_t{1} << 40) + 5);
  EXPECT_EQ(index.at(b).hash_bytes(), 8);
  const RecordLocation l = index.at(a).location();
  EXPECT_EQ(l.segment, 7u);
  EXPECT_EQ(l.page, 9u);
  EXPECT_EQ(l.value_bytes, 4000u);
  EXPECT_EQ(l.hash_bytes, 32);
  EXPECT_EQ(index.Find(1, std::string(8, 'b')), b);
  index.Erase(a);
  EXPECT_EQ(index.Find(1, std::string(32, 'a')), kNoSlot);
  EXPECT_EQ(index.Find(1, std::string(8, 'b')), b);
}

TEST(BlockIndexTest, AccountingFollowsInsertAndErase) {
  BlockIndex index;
  const uint32_t a = index.Insert(1, "block-00", 1, At(1, 1, 5000), 100);
  const uint32_t b = index.Insert(1, "block-01", 2, At(1, 3, 10000), 100);
  index.Insert(2, "block-00", 3, At(1, 7, 1), 100);
  // A record is its header, hash and value in whole 4 KiB pages; the charge adds metadata.
  EXPECT_EQ(RecordBytes(8, 5000), 8192u);
  EXPECT_EQ(RecordBytes(8, 10000), 12288u);
  EXPECT_EQ(RecordBytes(8, 1), 4096u);
  EXPECT_EQ(index.charge(a), 8192u + 2 * 16 + 96);
  EXPECT_EQ(index.used_bytes(), 8192u + 12288u + 4096u + 3 * (2 * 16 + 96));
  EXPECT_EQ(index.value_bytes(), 15001u);
  EXPECT_EQ(index.blocks(), 3u);
  EXPECT_EQ(index.usage().at(1).blocks, 2u);
  EXPECT_EQ(index.usage().at(1).value_bytes, 15000u);
  index.Erase(b);
  EXPECT_EQ(index.blocks(), 2u);
  EXPECT_EQ(index.usage().at(1).blocks, 1u);
  EXPECT_EQ(index.Find(1, "block-01"), kNoSlot);
  index.Erase(a);
  EXPECT_FALSE(index.usage().contains(1));
  EXPECT_EQ(index.used_bytes(), 4096u + 2 * 16 + 96);
  EXPECT_EQ(index.SlotsOf(2).size(), 1u);
  EXPECT_TRUE(index.SlotsOf(1).empty());
}

TEST(BlockIndexTest, ErasedSlotsAreReusedAndKeysStayFindable) {
  BlockIndex index;
  std::vector<uint32_t> slots;
  for (int i = 0; i < 1000; ++i) {
    slots.push_back(
        index.Insert(7, "key-" + std::to_string(100000 + i), i + 1, At(1, i + 1, 10), 0));
  }
  for (int i = 0; i < 1000; i += 2) index.Erase(slots[i]);
  for (int i = 0; i < 500; ++i) {
    const uint32_t s =
        index.Insert(7, "new-" + std::to_string(100000 + i), 5000 + i, At(2, i + 1, 10), 0);
    EXPECT_LT(s, 1000u) << "a freed slot is taken before a new one";
  }
  EXPECT_EQ(index.slot_limit(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t s = index.Find(7, "key-" + std::to_string(100000 + i));
    if (i % 2 == 0) {
      EXPECT_EQ(s, kNoSlot);
    } else {
      ASSERT_NE(s, kNoSlot);
      EXPECT_EQ(index.at(s).sequence(), static_cast<uint64_t>(i + 1));
    }
  }
  for (int i = 0; i < 500; ++i) {
    EXPECT_NE(index.Find(7, "new-" + std::to_string(100000 + i)), kNoSlot);
  }
}

TEST(BlockIndexTest, MemoryPerEntryStaysSmall) {
  BlockIndex index;
  constexpr int kBlocks = 4 << 16;  // whole chunks of entries
  std::string hash(32, 'h');
  for (int i = 0; i < kBlocks; ++i) {
    std::memcpy(hash.data(), &i, sizeof(i));
    index.Insert(1, hash, i + 1, At(1, i + 1, 40000), 0);
  }
  // 60 bytes an entry and the key set's slot numbers and control bytes, at most about 76.
  const double per_block = static_cast<double>(index.MemoryBytes()) / kBlocks;
  EXPECT_LE(per_block, 76.0);
  EXPECT_GE(per_block, 60.0);
}

TEST(BlockIndexTest, ReserveThenShrinkToFitGivesBackAnOverestimate) {
  // Recovery reserves from RocksDB's estimate of the entries (which counts deleted ones too),
  // then gives back what was not needed.
  BlockIndex index;
  index.Reserve(1 << 20);
  const uint64_t reserved = index.MemoryBytes();
  std::string hash(20, 'r');
  for (int i = 0; i < 1000; ++i) {
    std::memcpy(hash.data(), &i, sizeof(i));
    index.Insert(3, hash, i + 1, At(1, i + 1, 4000), 0);
  }
  index.ShrinkToFit();
  // One chunk of entries (64 Ki x 60 bytes) and a key set for 1,000, not for 1 Mi.
  EXPECT_LT(index.MemoryBytes(), reserved);
  EXPECT_LE(index.MemoryBytes(), (uint64_t{64} << 16) + (uint64_t{64} << 10));
  for (int i = 0; i < 1000; ++i) {
    std::memcpy(hash.data(), &i, sizeof(i));
    const uint32_t s = index.Find(3, hash);
    ASSERT_NE(s, kNoSlot);
    EXPECT_EQ(index.at(s).sequence(), static_cast<uint64_t>(i + 1));
  }
  // A set already the size it would have grown to is left alone (no rehash).
  const uint64_t fitted = index.MemoryBytes();
  index.ShrinkToFit();
  EXPECT_EQ(index.MemoryBytes(), fitted);
}

}  // namespace
}  // namespace turbokv::server
