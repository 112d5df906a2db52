// ValueLog on a real filesystem in a temporary directory: records written once and read back
// byte for byte, pages deallocated at once on erase, dead segments unlinked, garbage a crash
// left reclaimed at open, the log scanned for salvage.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/storage/value_log.h"
#include "storage_test_util.h"

namespace turbokv::server {
namespace {

using testing::HashOf;
using testing::MakeValue;
using testing::TempDir;
namespace fs = std::filesystem;

class ValueLogTest : public ::testing::Test {
 protected:
  std::unique_ptr<ValueLog> OpenLog(uint64_t segment_bytes = uint64_t{256} << 20,
                                    uint64_t cache_bytes = 0) {
    ValueLogOptions o;
    o.dir = dir_.path() + "/values";
    o.segment_bytes = segment_bytes;
    o.cache_bytes = cache_bytes;
    auto log = ValueLog::Open(o);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }
  // Appends one block record; returns its location.
  RecordLocation Append(ValueLog& log, uint64_t ns, const std::string& hash,
                        const std::string& value, uint64_t sequence) {
    RecordWrite w;
    w.namespace_id = ns;
    w.hash = hash;
    w.value = value;
    w.sequence = sequence;
    w.put_time = 1'700'000'000;
    w.checksum = value.size() >= 8 ? TrailerOf(value) : 0;
    auto at = log.Append(absl::MakeConstSpan(&w, 1));
    EXPECT_TRUE(at.ok()) << at.status();
    return at.ok() ? (*at)[0] : RecordLocation{};
  }
  static uint64_t TrailerOf(const std::string& v) {
    uint64_t t = 0;
    for (int i = 7; i >= 0; --i) t = (t << 8) | static_cast<uint8_t>(v[v.size() - 8 + i]);
    return t;
  }
  std::vector<std::string> Segments() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_.path() + "/values")) {
      if (e.path().extension() == ".tkv") out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  TempDir dir_;
  std::mt19937_64 rng_{3};
};

TEST_F(ValueLogTest, RecordsReadBackByteForByteAndOnlyAsTheIndexNamesThem) {
  auto log = OpenLog();
  const std::string a = MakeValue(40012, rng_), b = MakeValue(16, rng_);
  const std::string hash32(32, 'k');
  const RecordLocation la = Append(*log, 7, HashOf(1, 8), a, 100);
  const RecordLocation lb = Append(*log, 7, hash32, b, 101);
  EXPECT_EQ(la.segment, lb.segment);
  EXPECT_EQ(la.page, 1u);  // page 0 is the segment header
  EXPECT_EQ(lb.page, la.page + RecordBytes(la) / kPageBytes);
  EXPECT_EQ(RecordBytes(la), 40960u);  // 64 + 8 + 40012 bytes in whole pages
  auto ra = log->Read(la, 7, HashOf(1, 8), 100);
  ASSERT_TRUE(ra.ok()) << ra.status();
  EXPECT_EQ(ra->bytes, a);
  auto rb = log->Read(lb, 7, hash32, 101);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(rb->bytes, b);
  // Another sequence, namespace or key at that place: not the record the index names.
  EXPECT_EQ(log->Read(la, 7, HashOf(1, 8), 99).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(log->Read(la, 8, HashOf(1, 8), 100).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(log->Read(la, 7, HashOf(2, 8), 100).status().code(), absl::StatusCode::kDataLoss);
  RecordLocation gone = la;
  gone.segment = 99;
  EXPECT_EQ(log->Read(gone, 7, HashOf(1, 8), 100).status().code(), absl::StatusCode::kNotFound);
  // The value outlives the log.
  log.reset();
  EXPECT_EQ(ra->bytes, a);
}

TEST_F(ValueLogTest, ADamagedValueOrHeaderIsDataLoss) {
  auto log = OpenLog();
  const std::string v = MakeValue(10000, rng_);
  const RecordLocation l = Append(*log, 1, HashOf(5), v, 7);
  ASSERT_TRUE(testing::FlipByteOfStoredValue(dir_.path(), v, v.size() - 3));  // its checksum
  EXPECT_EQ(log->Read(l, 1, HashOf(5), 7).status().code(), absl::StatusCode::kDataLoss);
  // A flipped header byte: the header checksum fails.
  std::fstream f(Segments()[0], std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(uint64_t{l.page} * kPageBytes + 20));
  f.put('\x55');
  f.close();
  auto r = log->Read(l, 1, HashOf(5), 7);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status();
}

TEST_F(ValueLogTest, EraseDeallocatesTheRecordsPagesAtOnce) {
  auto log = OpenLog();
  std::vector<RecordLocation> at;
  for (int i = 0; i < 20; ++i)
    at.push_back(Append(*log, 1, HashOf(i), MakeValue(40000, rng_), i + 1));
  const uint64_t full = log->AllocatedBytes();
  EXPECT_GE(full, 20 * 40960u);
  EXPECT_LE(full, 20 * 40960u + 2 * kPageBytes);
  for (int i = 0; i < 20; i += 2) log->Erase(at[i]);
  // (Allow the filesystem a block or two of its own for the file's extents.)
  EXPECT_GE(full - log->AllocatedBytes(), 10 * 40960u - 2 * kPageBytes);
  EXPECT_LE(full - log->AllocatedBytes(), 10 * 40960u);
  EXPECT_EQ(log->LiveBytes(), 10 * 40960u + kPageBytes);
  EXPECT_EQ(log->Read(at[0], 1, HashOf(0), 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(log->Read(at[1], 1, HashOf(1), 2).ok());
}

TEST_F(ValueLogTest, TheCacheServesARememberedValueOnlyForItsSequenceAndUntilErased) {
  auto log = OpenLog(uint64_t{256} << 20, /*cache_bytes=*/uint64_t{1} << 20);
  const std::string a = MakeValue(40012, rng_), b = MakeValue(40012, rng_);
  const RecordLocation la = Append(*log, 7, HashOf(1), a, 100);
  const RecordLocation lb = Append(*log, 7, HashOf(2), b, 101);
  EXPECT_FALSE(log->Cached(la, 100).has_value());  // read, not yet remembered
  auto ra = log->Read(la, 7, HashOf(1), 100);
  ASSERT_TRUE(ra.ok()) << ra.status();
  log->Remember(la, 100, *ra);
  std::optional<LogValue> hit = log->Cached(la, 100);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->bytes, a);
  EXPECT_EQ(hit->bytes.data(), ra->bytes.data());  // the same memory: no copy
  // Another sequence at that place (a later record there) or another place: a miss.
  EXPECT_FALSE(log->Cached(la, 101).has_value());
  EXPECT_FALSE(log->Cached(lb, 101).has_value());
  ValueCacheStats stats = log->CacheStats();
  EXPECT_EQ(stats.capacity_bytes, uint64_t{1} << 20);
  EXPECT_GE(stats.bytes, a.size());  // and the entry's bookkeeping
  EXPECT_LE(stats.bytes, a.size() + 256);
  // An erased record is never served from the cache, and its memory goes with the last reader.
  log->Erase(la);
  EXPECT_FALSE(log->Cached(la, 100).has_value());
  EXPECT_EQ(log->CacheStats().bytes, 0u);
  EXPECT_EQ(hit->bytes, a);
  // The cache holds at most its capacity: 40 values of 40,012 bytes into 1 MiB (4 shards).
  for (int i = 0; i < 40; ++i) {
    const std::string v = MakeValue(40012, rng_);
    const RecordLocation l = Append(*log, 7, HashOf(100 + i), v, 200 + i);
    auto r = log->Read(l, 7, HashOf(100 + i), 200 + i);
    ASSERT_TRUE(r.ok()) << r.status();
    log->Remember(l, 200 + i, *r);
  }
  EXPECT_LE(log->CacheStats().bytes, uint64_t{1} << 20);
  EXPECT_GE(log->CacheStats().bytes, uint64_t{12} * 40012);
}

TEST_F(ValueLogTest, WithoutACacheNothingIsRemembered) {
  auto log = OpenLog();
  const std::string a = MakeValue(4000, rng_);
  const RecordLocation la = Append(*log, 7, HashOf(1), a, 100);
  auto ra = log->Read(la, 7, HashOf(1), 100);
  ASSERT_TRUE(ra.ok()) << ra.status();
  log->Remember(la, 100, *ra);
  EXPECT_FALSE(log->Cached(la, 100).has_value());
  EXPECT_EQ(log->CacheStats().bytes, 0u);
  EXPECT_EQ(log->CacheStats().capacity_bytes, 0u);
}

TEST_F(ValueLogTest, SegmentsRollAndASegmentWithNoLiveRecordIsRemoved) {
  auto log = OpenLog(/*segment_bytes=*/uint64_t{1} << 20);
  std::vector<RecordLocation> at;
  for (int i = 0; i < 100; ++i)
    at.push_back(Append(*log, 1, HashOf(i), MakeValue(40000, rng_), i + 1));
  const size_t segments = log->SegmentCount();
  EXPECT_GE(segments, 4u);  // 25 records of 40 KiB to a 1 MiB segment
  EXPECT_EQ(Segments().size(), segments);
  // Every record of the first segment goes: its file goes too.
  const uint32_t first = at[0].segment;
  for (const RecordLocation& l : at) {
    if (l.segment == first) log->Erase(l);
  }
  EXPECT_EQ(log->SegmentCount(), segments - 1);
  EXPECT_FALSE(fs::exists(dir_.path() + "/values/00000001.tkv"));
  // The active segment stays even when empty.
  for (const RecordLocation& l : at) {
    if (l.segment != first) log->Erase(l);
  }
  EXPECT_EQ(log->SegmentCount(), 1u);
  EXPECT_LE(log->AllocatedBytes(), kPageBytes);
}

TEST_F(ValueLogTest, ReclaimGarbageFreesWhatNoLiveRecordCoversAndDropsDeadSegments) {
  std::vector<RecordLocation> at;
  std::vector<std::string> values;
  {
    auto log = OpenLog(/*segment_bytes=*/uint64_t{1} << 20);
    for (int i = 0; i < 40; ++i) {
      values.push_back(MakeValue(30000, rng_));
      at.push_back(Append(*log, 1, HashOf(i), values.back(), i + 1));
    }
  }  // as after a crash: nothing knows which records committed
  auto log = OpenLog(/*segment_bytes=*/uint64_t{1} << 20);
  const size_t segments = log->SegmentCount();
  ASSERT_GE(segments, 2u);
  // Only the odd records of every segment but the first committed.
  uint64_t live = 0;
  for (int i = 1; i < 40; i += 2) {
    if (at[i].segment == at[0].segment) continue;
    ASSERT_TRUE(log->MarkLive(at[i]));
    live += RecordBytes(at[i]);
  }
  RecordLocation beyond = at[39];
  beyond.page += 1000;
  EXPECT_FALSE(log->MarkLive(beyond));  // past the end of its segment
  EXPECT_GT(log->ReclaimGarbage(), 0u);
  EXPECT_EQ(log->SegmentCount(), segments - 1);
  EXPECT_GE(log->AllocatedBytes(), live + (segments - 1) * kPageBytes);
  EXPECT_LE(log->AllocatedBytes(), live + (segments + 1) * kPageBytes);
  for (int i = 0; i < 40; ++i) {
    auto r = log->Read(at[i], 1, HashOf(i), i + 1);
    if (i % 2 == 1 && at[i].segment != at[0].segment) {
      ASSERT_TRUE(r.ok()) << i << ": " << r.status();
      EXPECT_EQ(r->bytes, values[i]);
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << i;
    }
  }
  // New appends go to a new segment, never into an old one.
  const RecordLocation fresh = Append(*log, 1, HashOf(99), MakeValue(100, rng_), 1000);
  EXPECT_GT(fresh.segment, at.back().segment);
}

TEST_F(ValueLogTest, ScanFindsEveryIntactRecordAndSkipsHolesAndDamage) {
  auto log = OpenLog();
  std::vector<RecordLocation> at;
  for (int i = 0; i < 30; ++i) {
    at.push_back(Append(*log, 100 + i % 3, HashOf(i, 8 + i % 25), MakeValue(5000 + 999 * i, rng_),
                        1000 + i));
  }
  RecordWrite ns;
  ns.kind = RecordKind::kNamespace;
  ns.namespace_id = 42;
  const std::string id(8, '\x2a');
  ns.hash = id;
  const std::string ns_value = MakeValue(64, rng_);
  ns.value = ns_value;
  ns.sequence = 2000;
  ns.checksum = TrailerOf(ns_value);
  ASSERT_TRUE(log->Append(absl::MakeConstSpan(&ns, 1)).ok());
  for (int i = 0; i < 30; i += 5) log->Erase(at[i]);
  {  // damage record 7's header
    std::fstream f(Segments()[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(uint64_t{at[7].page} * kPageBytes + 9));
    f.put('\x01');
  }
  std::vector<RecordInfo> found;
  ASSERT_TRUE(log->ScanRecords([&](const RecordInfo& r) {
                   found.push_back(r);
                   return absl::OkStatus();
                 })
                  .ok());
  size_t k = 0;
  for (int i = 0; i < 30; ++i) {
    if (i % 5 == 0 || i == 7) continue;
    ASSERT_LT(k, found.size());
    const RecordInfo& r = found[k++];
    EXPECT_EQ(r.kind, RecordKind::kBlock);
    EXPECT_EQ(r.sequence, 1000u + i);
    EXPECT_EQ(r.namespace_id, 100u + i % 3);
    EXPECT_EQ(r.hash, HashOf(i, 8 + i % 25));
    EXPECT_EQ(r.location.page, at[i].page);
    EXPECT_EQ(r.location.value_bytes, at[i].value_bytes);
  }
  ASSERT_EQ(found.size(), k + 1);
  EXPECT_EQ(found.back().kind, RecordKind::kNamespace);
  EXPECT_EQ(found.back().namespace_id, 42u);
}

TEST_F(ValueLogTest, ConcurrentAppendersNeverOverlap) {
  auto log = OpenLog(/*segment_bytes=*/uint64_t{2} << 20);
  constexpr int kThreads = 4, kPerThread = 100;
  std::vector<std::vector<std::pair<RecordLocation, std::string>>> done(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < kPerThread; ++i) {
        std::string v = MakeValue(1000 + rng() % 50000, rng);
        const uint64_t seq = uint64_t(t) * 1000 + i + 1;
        done[t].emplace_back(Append(*log, t, HashOf(seq), v, seq), std::move(v));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      const uint64_t seq = uint64_t(t) * 1000 + i + 1;
      auto r = log->Read(done[t][i].first, t, HashOf(seq), seq);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->bytes, done[t][i].second);
    }
  }
}

TEST_F(ValueLogTest, ASegmentCutShortFailsOnlyTheRecordsPastTheCut) {
  std::vector<RecordLocation> at;
  std::vector<std::string> values;
  {
    auto log = OpenLog();
    for (int i = 0; i < 10; ++i) {
      values.push_back(MakeValue(20000, rng_));
      at.push_back(Append(*log, 1, HashOf(i), values.back(), i + 1));
    }
  }
  fs::resize_file(Segments()[0], uint64_t{at[5].page} * kPageBytes + 100);
  auto log = OpenLog();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(log->MarkLive(at[i]), i < 5) << i;
  }
  EXPECT_EQ(log->Read(at[5], 1, HashOf(5), 6).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(log->Read(at[4], 1, HashOf(4), 5)->bytes, values[4]);
}

}  // namespace
}  // namespace turbokv::server
