// ScanBlockMeta: the recovery scan of block_meta joined with access, on several threads over key
// ranges. Every entry is handed over exactly once, decoded and joined, whatever the threads.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "server/storage/meta_scan.h"
#include "server/storage/store_format.h"
#include "storage_test_util.h"

namespace turbokv::server {
namespace {

using testing::TempDir;

struct Expected {
  uint64_t sequence;
  int64_t last_access;
  uint64_t touch;
};

class MetaScanTest : public ::testing::Test {
 protected:
  // `blocks` entries in block_meta (random hashes of 16..32 bytes in two namespaces), an access
  // entry for most of them, and two malformed block_meta entries; flushed to SST files.
  void Build(int blocks) {
    rocksdb::Options o;
    o.create_if_missing = true;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_.path(), &db_raw_).ok());
    db_.reset(db_raw_);
    ASSERT_TRUE(
        db_->CreateColumnFamily(rocksdb::ColumnFamilyOptions(), format::kCfMeta, &meta_).ok());
    ASSERT_TRUE(
        db_->CreateColumnFamily(rocksdb::ColumnFamilyOptions(), format::kCfAccess, &access_).ok());
    std::mt19937_64 rng(7);
    for (int i = 0; i < blocks; ++i) {
      std::string key;
      format::PutFixed64BE(&key, i % 3 == 0 ? 11 : 22);
      const size_t hash_bytes = 16 + rng() % 17;
      for (size_t k = 0; k < hash_bytes; ++k) key.push_back(static_cast<char>(rng()));
      format::MetaValue m;
      m.value_bytes = 4000;
      m.put_time = 1000 + i;
      m.in_log = true;
      m.segment = 1 + i / 1000;
      m.page = 1 + i % 1000;
      m.sequence = 100 + i;
      ASSERT_TRUE(db_->Put(wo_, meta_, key, format::EncodeMeta(m)).ok());
      Expected e{m.sequence, m.put_time, 0};
      if (i % 5 == 1) {  // an 8-byte access value (no touch number): last access only
        std::string v;
        format::PutFixed64LE(&v, 5000 + i);
        ASSERT_TRUE(db_->Put(wo_, access_, key, v).ok());
        e.last_access = 5000 + i;
      } else if (i % 5 != 0) {
        ASSERT_TRUE(db_->Put(wo_, access_, key, format::EncodeAccess(6000 + i, 7 + i)).ok());
        e.last_access = 6000 + i;
        e.touch = 7 + i;
      }
      expected_[key] = e;
    }
    // An access entry without a block, a key too short, and a value of the wrong length.
    ASSERT_TRUE(db_->Put(wo_, access_, std::string(20, 'a'), format::EncodeAccess(1, 1)).ok());
    ASSERT_TRUE(db_->Put(wo_, meta_, std::string(12, 'b'), "x").ok());
    ASSERT_TRUE(db_->Put(wo_, meta_, std::string(24, 'c'), "short").ok());
    ASSERT_TRUE(db_->Flush(rocksdb::FlushOptions(), {meta_, access_}).ok());
  }

  void TearDown() override {
    if (db_ != nullptr) {
      for (rocksdb::ColumnFamilyHandle* h : {meta_, access_}) {
        if (h != nullptr) (void)db_->DestroyColumnFamilyHandle(h);
      }
      (void)db_->Close();
    }
  }

  // Scans with `threads` and checks every block against what Build wrote.
  void ScanAndCheck(int threads, int min_ranges) {
    std::map<std::string, int> seen;
    std::vector<std::string> malformed;
    MetaScanStats stats;
    ASSERT_TRUE(ScanBlockMeta(
                    db_.get(), meta_, access_, threads,
                    [&](MetaScanChunk& chunk) {
                      for (const ScannedBlock& b : chunk.blocks) {
                        const std::string key = b.Key();
                        ++seen[key];
                        auto it = expected_.find(key);
                        ASSERT_NE(it, expected_.end());
                        EXPECT_EQ(b.meta.sequence, it->second.sequence);
                        EXPECT_EQ(b.last_access, it->second.last_access);
                        EXPECT_EQ(b.touch, it->second.touch);
                        EXPECT_TRUE(b.meta.in_log);
                        EXPECT_EQ(b.meta.value_bytes, 4000u);
                      }
                      for (std::string& k : chunk.malformed) malformed.push_back(std::move(k));
                    },
                    &stats)
                    .ok());
    EXPECT_GE(stats.threads, min_ranges);
    EXPECT_LE(stats.threads, std::max(threads, 1));
    EXPECT_EQ(seen.size(), expected_.size());
    for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << "a block handed over " << n << " times";
    std::sort(malformed.begin(), malformed.end());
    EXPECT_EQ(malformed, (std::vector<std::string>{std::string(12, 'b'), std::string(24, 'c')}));
  }

  rocksdb::WriteOptions wo_ = [] {
    rocksdb::WriteOptions o;
    o.disableWAL = true;  // flushed before the scan
    return o;
  }();
  TempDir dir_;
  rocksdb::DB* db_raw_ = nullptr;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  rocksdb::ColumnFamilyHandle* access_ = nullptr;
  std::map<std::string, Expected> expected_;
};

TEST_F(MetaScanTest, OneThreadAndFourSeeTheSameBlocksOnce) {
  Build(60000);  // about 4 MiB of block_meta: worth cutting into ranges
  ScanAndCheck(1, 1);
  ScanAndCheck(4, 2);
}

TEST_F(MetaScanTest, ASmallColumnFamilyIsOneRange) {
  Build(100);
  ScanAndCheck(4, 1);
}

// The radix sort gives std::sort's order: touch numbers spread over all 8 bytes, dense ones
// (the digits above the lowest few shared), and many ties (put-time touch numbers), below and
// above the 4,096-record cutoff.
TEST(SortRestartOrderTest, EqualsStdSort) {
  std::mt19937_64 rng(21);
  for (const size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{4096}, size_t{50000}}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<RestartRecord> order(n);
      for (size_t i = 0; i < n; ++i) {
        RestartRecord& r = order[i];
        r.touch = kind == 0   ? rng()
                  : kind == 1 ? (uint64_t{1} << 40) + rng() % (4 * n + 1)
                              : (uint64_t{1700000000} + rng() % 50) << 20;
        r.fingerprint = rng() % 64;  // ties of touch and fingerprint too, broken by slot
        r.slot = static_cast<uint32_t>(i);
        r.charge = static_cast<uint32_t>(rng());
      }
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<RestartRecord> expected = order;
      std::sort(expected.begin(), expected.end());
      SortRestartOrder(order);
      ASSERT_EQ(order.size(), expected.size());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(order[i].slot, expected[i].slot) << "n " << n << " kind " << kind << " at " << i;
        ASSERT_EQ(order[i].charge, expected[i].charge);
      }
    }
  }
}

}  // namespace
}  // namespace turbokv::server
