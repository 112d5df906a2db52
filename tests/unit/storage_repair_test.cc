// Damaged files in the data directory (issues 10 and 22, docs/faults.md): a flipped bit in an
// SST of any column family, in the MANIFEST, a value-log segment cut short, RocksDB's files
// lost: the open repairs what it finds and serves every block it could recover, byte for
// byte, never another block's bytes, an older value of a block, or a deleted block.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/table_properties.h"
#include "server/storage/block_store.h"
#include "storage_store_fixture.h"
#include "storage_test_util.h"

namespace turbokv::server {
namespace {

using testing::HashOf;
using testing::MakeValue;

constexpr uint64_t kNs = 0x0123456789abcdefULL;
constexpr size_t kBlobValueBytes = 10000;   // three pages of the value log
constexpr size_t kInlineValueBytes = 1000;  // one page

namespace fs = std::filesystem;

// The SST files whose table properties name column family `cf`.
std::vector<std::string> SstsOf(const std::string& dir, const std::string& cf) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".sst") continue;
    rocksdb::SstFileReader r{rocksdb::Options()};
    if (!r.Open(e.path().string()).ok()) continue;
    if (r.GetTableProperties()->column_family_name == cf) out.push_back(e.path().string());
  }
  return out;
}

std::vector<std::string> FilesStartingWith(const std::string& dir, const std::string& prefix,
                                           const std::string& ext = "") {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0 && (ext.empty() || e.path().extension() == ext)) {
      out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Flips one bit in each of `n` bytes spread over the file.
void Damage(const std::string& path, int n = 4) {
  const uint64_t size = fs::file_size(path);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  for (int i = 0; i < n; ++i) {
    const auto at = static_cast<std::streamoff>(size * (2 * i + 1) / (2 * n));
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(at);
    f.write(&c, 1);
  }
}

class RepairTest : public testing::StoreFixture {
 protected:
  RepairTest() : StoreFixture(7) {}
  absl::StatusOr<std::unique_ptr<BlockStore>> Open() { return OpenStore(Options()); }

  // Stores `blob` blocks in blob files and `inline_blocks` small ones, then closes the store
  // (memtables flushed: everything is in SST and blob files).
  void Fill(int blob, int inline_blocks) {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status();
    PutNamespace(**s, kNs);
    for (int i = 0; i < blob + inline_blocks; ++i) {
      values_[i] = MakeValue(i < blob ? kBlobValueBytes : kInlineValueBytes, rng_);
      ASSERT_TRUE(Put(**s, kNs, HashOf(i), values_[i]).ok());
    }
  }

  // Every block the store serves has exactly its bytes; returns how many it serves.
  size_t ServedExactly(BlockStore& s) {
    std::vector<std::string> hashes;
    for (const auto& [i, v] : values_) hashes.push_back(HashOf(i));
    std::vector<std::string_view> views(hashes.begin(), hashes.end());
    auto got = s.GetBlocks(kNs, views);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return 0;
    size_t served = 0;
    size_t j = 0;
    for (const auto& [i, v] : values_) {
      const std::optional<std::string>& b = (*got)[j++];
      if (!b.has_value()) continue;
      EXPECT_EQ(*b, v) << "block " << i << " served with wrong bytes";
      ++served;
    }
    EXPECT_EQ(s.Stats().blocks, served);
    return served;
  }

  std::map<int, std::string> values_;
};

TEST_F(RepairTest, DamagedAccessSstIsDroppedAndRecreated) {
  Fill(20, 5);
  const auto ssts = SstsOf(dir_.path(), "access");
  ASSERT_FALSE(ssts.empty());
  for (const std::string& f : ssts) Damage(f);
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status();
  const RepairReport r = (*s)->Stats().repair;
  EXPECT_TRUE(r.access_rebuilt);
  EXPECT_FALSE(r.salvaged);
  EXPECT_EQ(ServedExactly(**s), 25u);
}

TEST_F(RepairTest, DamagedNamespacesSstIsRebuiltFromItsCopy) {
  Fill(20, 5);
  const auto ssts = SstsOf(dir_.path(), "namespaces");
  ASSERT_FALSE(ssts.empty());
  for (const std::string& f : ssts) Damage(f);
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->Stats().repair.namespaces_rebuilt);
  EXPECT_TRUE((*s)->GetNamespace(kNs).has_value());
  EXPECT_EQ(ServedExactly(**s), 25u);
  s->reset();
  // The rebuilt copy is whole: a clean reopen repairs nothing.
  auto again = Open();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE((*again)->Stats().repair.namespaces_rebuilt);
  EXPECT_EQ(ServedExactly(**again), 25u);
}

TEST_F(RepairTest, DamagedBlockMetaSstIsRebuiltFromTheValueLog) {
  Fill(25, 5);
  const auto ssts = SstsOf(dir_.path(), "block_meta");
  ASSERT_FALSE(ssts.empty());
  for (const std::string& f : ssts) Damage(f);
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status();
  const RepairReport r = (*s)->Stats().repair;
  EXPECT_TRUE(r.salvaged);
  EXPECT_EQ(r.salvaged_blocks, 30u);
  EXPECT_EQ(r.dropped_blocks, 0u);
  EXPECT_EQ(ServedExactly(**s), 30u);
}

TEST_F(RepairTest, DamagedManifestIsSalvaged) {
  Fill(20, 5);
  const auto manifests = FilesStartingWith(dir_.path(), "MANIFEST-");
  ASSERT_FALSE(manifests.empty());
  for (const std::string& f : manifests) Damage(f, 8);
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status();
  const RepairReport r = (*s)->Stats().repair;
  EXPECT_TRUE(r.salvaged);
  EXPECT_EQ(ServedExactly(**s), 25u);
  EXPECT_EQ(r.dropped_blocks, 0u);
  EXPECT_FALSE(fs::exists(dir_.path() + "/salvage-new"));
  s->reset();
  auto again = Open();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE((*again)->Stats().repair.salvaged);
  EXPECT_EQ(ServedExactly(**again), 25u);
}

TEST_F(RepairTest, ValueLogSegmentCutShortKeepsTheBlocksBeforeTheCut) {
  Fill(40, 0);
  const auto segments = FilesStartingWith(dir_.path() + "/values", "", ".tkv");
  ASSERT_EQ(segments.size(), 1u);
  fs::resize_file(segments[0], fs::file_size(segments[0]) / 2);
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status();
  const RepairReport r = (*s)->Stats().repair;
  const size_t served = ServedExactly(**s);
  // About half the records lie before the cut; the metadata of the others is dropped.
  EXPECT_GE(served, 15u);
  EXPECT_LE(served, 25u);
  EXPECT_EQ(served + r.dropped_blocks, 40u);
  EXPECT_EQ((*s)->Stats().blocks, served);
}

// The RocksDB files are all gone (or beyond RepairDB): the store starts from its value log
// alone, namespaces included, and keeps nothing it cannot verify.
TEST_F(RepairTest, LostRocksDbIsRebuiltFromTheValueLogAlone) {
  Fill(20, 5);
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    const std::string n = e.path().filename().string();
    if (n == "values" || n == "turbokv.lock") continue;
    fs::remove_all(e.path());
  }
  std::ofstream(dir_.path() + "/CURRENT") << "MANIFEST-000099\n";  // names a missing file
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status();
  const RepairReport r = (*s)->Stats().repair;
  EXPECT_TRUE(r.salvaged);
  EXPECT_TRUE((*s)->GetNamespace(kNs).has_value());
  EXPECT_EQ(ServedExactly(**s), 25u);
}

// Issue 22's reproductions: a store with two flushed generations (gen0: 300 blocks; gen1:
// overwrites 50 of them, deletes 50 others, adds 300), then gen1's block_meta SST damaged,
// removed, cut to nothing, or replaced by an access SST. Whatever the damage, the store never
// serves a deleted block or an overwritten block's gen0 bytes.
struct Gen1Damage {
  const char* name;
  void (*apply)(const std::string& newest_meta_sst, const std::string& an_access_sst);
};

class SalvageTest : public RepairTest, public ::testing::WithParamInterface<Gen1Damage> {};

TEST_P(SalvageTest, NeverServesOlderBytesOrDeletedBlocks) {
  constexpr int kGen0 = 300;
  std::map<int, std::string> gen0;
  std::set<int> deleted, overwritten;
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status();
    PutNamespace(**s, kNs);
    for (int i = 0; i < kGen0; ++i) {
      gen0[i] = MakeValue(16 << 10, rng_);
      ASSERT_TRUE(Put(**s, kNs, HashOf(i), gen0[i]).ok());
    }
  }  // closed: gen0 flushed
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < 50; ++i) {
      values_[i] = MakeValue(16 << 10, rng_);
      ASSERT_TRUE(Put(**s, kNs, HashOf(i), values_[i]).ok());
      overwritten.insert(i);
    }
    std::vector<std::string> del;
    for (int i = 50; i < 100; ++i) {
      del.push_back(HashOf(i));
      deleted.insert(i);
    }
    std::vector<std::string_view> views(del.begin(), del.end());
    ASSERT_EQ(*(*s)->DeleteBlocks(kNs, views), 50u);
    for (int i = 100; i < kGen0; ++i) values_[i] = gen0[i];
    for (int i = kGen0; i < kGen0 + 300; ++i) {
      values_[i] = MakeValue(16 << 10, rng_);
      ASSERT_TRUE(Put(**s, kNs, HashOf(i), values_[i]).ok());
    }
  }  // closed: gen1 flushed
  auto metas = SstsOf(dir_.path(), "block_meta");
  const auto accesses = SstsOf(dir_.path(), "access");
  ASSERT_GE(metas.size(), 2u);
  ASSERT_FALSE(accesses.empty());
  std::sort(metas.begin(), metas.end());
  GetParam().apply(metas.back(), accesses.front());
  auto s = Open();
  ASSERT_TRUE(s.ok()) << GetParam().name << ": " << s.status();
  std::vector<std::string> hashes;
  for (int i = 0; i < kGen0 + 300; ++i) hashes.push_back(HashOf(i));
  std::vector<std::string_view> views(hashes.begin(), hashes.end());
  auto got = (*s)->GetBlocks(kNs, views);
  ASSERT_TRUE(got.ok()) << got.status();
  size_t served = 0;
  for (int i = 0; i < kGen0 + 300; ++i) {
    const std::optional<std::string>& b = (*got)[i];
    if (deleted.count(i)) {
      EXPECT_FALSE(b.has_value()) << GetParam().name << ": deleted block " << i << " came back";
      continue;
    }
    if (!b.has_value()) continue;
    ++served;
    if (overwritten.count(i)) {
      EXPECT_NE(*b, gen0[i]) << GetParam().name << ": block " << i << " served its gen0 bytes";
    }
    EXPECT_EQ(*b, values_[i]) << GetParam().name << ": block " << i;
  }
  // The value log holds every live block: all of them come back.
  EXPECT_EQ(served, values_.size()) << GetParam().name;
}

void FlipBytes(const std::string& f) { Damage(f, 20); }

INSTANTIATE_TEST_SUITE_P(
    Gen1BlockMeta, SalvageTest,
    ::testing::Values(
        Gen1Damage{"flipped", [](const std::string& m, const std::string&) { FlipBytes(m); }},
        Gen1Damage{"removed", [](const std::string& m, const std::string&) { fs::remove(m); }},
        Gen1Damage{"truncated",
                   [](const std::string& m, const std::string&) { fs::resize_file(m, 0); }},
        Gen1Damage{"misplaced_access_sst",
                   [](const std::string& m, const std::string& a) {
                     fs::copy_file(a, m, fs::copy_options::overwrite_existing);
                   }}),
    [](const ::testing::TestParamInfo<Gen1Damage>& i) { return std::string(i.param.name); });

TEST_F(RepairTest, IntactStoreRepairsNothing) {
  Fill(5, 5);
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status();
  const RepairReport r = (*s)->Stats().repair;
  EXPECT_FALSE(r.access_rebuilt || r.namespaces_rebuilt || r.salvaged);
  EXPECT_TRUE(r.findings.empty());
  EXPECT_EQ(ServedExactly(**s), 10u);
}

}  // namespace
}  // namespace turbokv::server
