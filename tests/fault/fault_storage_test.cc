// The real server under crashes and damaged files (issue 10, docs/faults.md):
//   * one damaged file of each kind (an SST of each column family, the MANIFEST, the WAL, a
//     value-log segment cut short or with flipped bits) no longer stops the server from
//     starting (it exited with DATA_LOSS); it serves every block it kept, byte for byte, and
//     never other bytes;
//   * namespace registrations survive kill -9 with --durability none;
//   * kill -9 loops under concurrent puts and gets lose nothing acknowledged with `wal` and
//     never serve wrong bytes;
//   * random bit flips and truncations of random files: the server always starts, never
//     serves wrong bytes.
// Block i is RawOf(i) in a "raw" namespace, so every block read back is checked byte for byte.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

#include "fault_util.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/table_properties.h"

namespace turbokv::fault {
namespace {

namespace fs = std::filesystem;

// SST files of the data directory whose table properties name column family `cf`.
std::vector<std::string> SstsOf(const std::string& dir, const std::string& cf) {
  std::vector<std::string> out;
  for (const std::string& f : FilesOf(dir, ".sst")) {
    rocksdb::SstFileReader r{rocksdb::Options()};
    if (r.Open(f).ok() && r.GetTableProperties()->column_family_name == cf) out.push_back(f);
  }
  return out;
}

// What a check of stored blocks found.
struct Tally {
  uint64_t served = 0, missing = 0, wrong = 0;
};

// A server with one "raw" namespace; block i is RawOf(i, raw_block_bytes) under HashOf(i).
class Store {
 public:
  explicit Store(std::vector<std::string> flags, std::string data_dir = "")
      : server_(std::move(flags), std::move(data_dir)) {}

  absl::Status Start() {
    if (absl::Status s = server_.Start(); !s.ok()) return s;
    auto ns = server_.client().RegisterNamespace(SmallNamespace("raw"));
    if (!ns.ok()) return ns.status();
    ns_ = ns->namespace_id;
    raw_bytes_ = ns->raw_block_bytes;
    return absl::OkStatus();
  }
  Server& server() { return server_; }
  uint64_t ns() const { return ns_; }

  // Puts blocks [begin, end) in batches of `batch`; returns the indices acknowledged.
  std::vector<uint64_t> Put(uint64_t begin, uint64_t end, client::Client& c, size_t batch = 8) {
    std::vector<uint64_t> acked;
    for (uint64_t i = begin; i < end; i += batch) {
      std::vector<std::string> hashes, raws;
      for (uint64_t k = i; k < std::min(end, i + batch); ++k) {
        hashes.push_back(HashOf(k));
        raws.push_back(RawOf(k, raw_bytes_));
      }
      std::vector<absl::Span<const uint8_t>> blocks;
      for (const std::string& r : raws) blocks.push_back(Bytes(r));
      auto put = c.PutBlocks(ns_, hashes, blocks);
      if (!put.ok()) continue;
      for (size_t k = 0; k < put->size(); ++k) {
        if ((*put)[k].status.ok()) acked.push_back(i + k);
      }
    }
    return acked;
  }
  std::vector<uint64_t> Put(uint64_t begin, uint64_t end) {
    return Put(begin, end, server_.client());
  }

  // Puts block i with the bytes of RawOf(i + generation * 1'000'000): a later generation of
  // block i, under the same hash. Returns whether it was acknowledged.
  bool Overwrite(uint64_t i, uint64_t generation) {
    const std::string raw = RawOf(i + generation * 1'000'000, raw_bytes_);
    const std::vector<std::string> hashes = {HashOf(i)};
    const std::vector<absl::Span<const uint8_t>> blocks = {Bytes(raw)};
    auto put = server_.client().PutBlocks(ns_, hashes, blocks);
    return put.ok() && (*put)[0].status.ok();
  }
  // Deletes the blocks; returns how many existed.
  uint64_t Delete(const std::vector<uint64_t>& ids) {
    std::vector<std::string> hashes;
    for (uint64_t i : ids) hashes.push_back(HashOf(i));
    auto deleted = server_.client().DeleteBlocks(ns_, hashes);
    return deleted.ok() ? *deleted : 0;
  }
  // Gets block `i`: its bytes, nullopt when missing or the call failed.
  std::optional<std::string> Get(uint64_t i) {
    const std::vector<std::string> hashes = {HashOf(i)};
    auto got = server_.client().GetBlocks(ns_, hashes);
    if (!got.ok()) return std::nullopt;
    return got->blocks[0];
  }
  std::string Expected(uint64_t i, uint64_t generation) const {
    return RawOf(i + generation * 1'000'000, raw_bytes_);
  }

  // Gets `ids` and checks every block served against RawOf. A failed call counts its blocks
  // missing.
  Tally Check(const std::vector<uint64_t>& ids, client::Client& c) {
    Tally t;
    constexpr size_t kBatch = 64;
    for (size_t i = 0; i < ids.size(); i += kBatch) {
      std::vector<std::string> hashes;
      for (size_t k = i; k < std::min(ids.size(), i + kBatch); ++k)
        hashes.push_back(HashOf(ids[k]));
      auto got = c.GetBlocks(ns_, hashes);
      if (!got.ok()) {
        t.missing += hashes.size();
        continue;
      }
      for (size_t k = 0; k < hashes.size(); ++k) {
        const std::optional<std::string>& b = got->blocks[k];
        if (!b.has_value()) {
          ++t.missing;
        } else if (*b != RawOf(ids[i + k], raw_bytes_)) {
          ++t.wrong;
        } else {
          ++t.served;
        }
      }
    }
    return t;
  }
  Tally Check(const std::vector<uint64_t>& ids) { return Check(ids, server_.client()); }

 private:
  Server server_;
  uint64_t ns_ = 0;
  uint64_t raw_bytes_ = 0;
};

std::vector<uint64_t> Range(uint64_t n) {
  std::vector<uint64_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// ---- one damaged file of each kind --------------------------------------------------------

struct DamageCase {
  const char* name;
  // Damages the stopped server's data directory; false when there was nothing to damage.
  bool (*damage)(const std::string& dir, std::mt19937_64& rng);
  bool all_served;  // every block comes back
  bool kill;        // kill -9 before the damage (the WAL holds the blocks) instead of SIGTERM
};

bool FlipSstOf(const std::string& dir, const char* cf, std::mt19937_64& rng) {
  const auto ssts = SstsOf(dir, cf);
  for (const std::string& f : ssts) FlipBits(f, 4, rng);
  return !ssts.empty();
}

const DamageCase kDamageCases[] = {
    {"access_sst",
     [](const std::string& d, std::mt19937_64& r) { return FlipSstOf(d, "access", r); }, true,
     false},
    {"block_meta_sst",
     [](const std::string& d, std::mt19937_64& r) { return FlipSstOf(d, "block_meta", r); }, true,
     false},
    {"namespaces_sst",
     [](const std::string& d, std::mt19937_64& r) { return FlipSstOf(d, "namespaces", r); }, true,
     false},
    // Issue 22: a file in the wrong place made RepairDB fail for good (force_consistency_checks).
    {"access_sst_over_block_meta_sst",
     [](const std::string& d, std::mt19937_64&) {
       const auto access = SstsOf(d, "access"), meta = SstsOf(d, "block_meta");
       if (access.empty() || meta.empty()) return false;
       fs::copy_file(access.front(), meta.front(), fs::copy_options::overwrite_existing);
       return true;
     },
     true, false},
    {"manifest",
     [](const std::string& d, std::mt19937_64& r) {
       const auto m = FilesOf(d, "MANIFEST");
       for (const std::string& f : m) FlipBits(f, 8, r);
       return !m.empty();
     },
     true, false},
    {"segment_cut_short",
     [](const std::string& d, std::mt19937_64&) {
       const auto b = FilesOf(d + "/values", ".tkv");
       for (const std::string& f : b) {
         if (truncate(f.c_str(), static_cast<off_t>(fs::file_size(f) / 2)) != 0) return false;
       }
       return !b.empty();
     },
     false, false},
    {"segment_bit_flips",
     [](const std::string& d, std::mt19937_64& r) {
       const auto b = FilesOf(d + "/values", ".tkv");
       for (const std::string& f : b) FlipBits(f, 4, r, 4096);
       return !b.empty();
     },
     false, false},
    {"wal",
     [](const std::string& d, std::mt19937_64& r) {
       const auto w = FilesOf(d, ".log");
       for (const std::string& f : w) FlipBits(f, 4, r, fs::file_size(f) / 2);
       return !w.empty();
     },
     false, true},
};

class DamagedFile : public ::testing::TestWithParam<DamageCase> {};

TEST_P(DamagedFile, ServerStartsAndServesOnlyIntactBytes) {
  const DamageCase& c = GetParam();
  Store store({});
  absl::Status s = store.Start();
  if (absl::IsNotFound(s)) GTEST_SKIP() << s;
  ASSERT_TRUE(s.ok()) << s;
  constexpr uint64_t kBlocks = 48;
  ASSERT_EQ(store.Put(0, kBlocks).size(), kBlocks);
  if (c.kill) {
    store.server().Kill();
  } else {
    store.server().Stop();  // memtables flushed: the blocks are in SST and blob files
  }
  std::mt19937_64 rng(11);
  ASSERT_TRUE(c.damage(store.server().data_dir(), rng)) << "nothing to damage for " << c.name;
  s = store.Start();
  ASSERT_TRUE(s.ok()) << c.name << ": the server did not start: " << s << "\n"
                      << store.server().Log();
  const Tally t = store.Check(Range(kBlocks));
  std::printf("[fault] damaged %s: %llu of %llu blocks served, %llu wrong\n", c.name,
              static_cast<unsigned long long>(t.served), static_cast<unsigned long long>(kBlocks),
              static_cast<unsigned long long>(t.wrong));
  EXPECT_EQ(t.wrong, 0u);
  if (c.all_served) {
    EXPECT_EQ(t.served, kBlocks) << store.server().Log();
  } else if (std::string(c.name) == "segment_cut_short") {
    EXPECT_GT(t.served, 0u) << "blocks before the cut must still be served";
    EXPECT_LT(t.served, kBlocks);
  } else if (std::string(c.name) == "segment_bit_flips") {
    EXPECT_GE(t.served, kBlocks - 4) << "4 flipped bits cost at most 4 blocks";
  }
  // A new put and a restart work on the repaired store.
  EXPECT_EQ(store.Put(1000, 1008).size(), 8u);
  store.server().Stop();
  ASSERT_TRUE(store.Start().ok()) << store.server().Log();
  EXPECT_EQ(store.Check({1000, 1001, 1007}).served, 3u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, DamagedFile, ::testing::ValuesIn(kDamageCases),
                         [](const ::testing::TestParamInfo<DamageCase>& i) {
                           return std::string(i.param.name);
                         });

// ---- registrations are durable whatever --durability says ---------------------------------

TEST(Durability, NamespaceRegistrationSurvivesKill9WithDurabilityNone) {
  Server server({"--durability", "none"});
  absl::Status s = server.Start();
  if (absl::IsNotFound(s)) GTEST_SKIP() << s;
  ASSERT_TRUE(s.ok()) << s;
  for (int round = 0; round < 5; ++round) {
    auto ns = server.client().RegisterNamespace(
        SmallNamespace("k4v4-g32", "fault/durable-" + std::to_string(round)));
    ASSERT_TRUE(ns.ok()) << ns.status();
    server.Kill();
    ASSERT_TRUE(server.Start().ok()) << server.Log();
    // Every namespace registered so far is known after the crash.
    for (int r = 0; r <= round; ++r) {
      auto again = server.client().RegisterNamespace(
          SmallNamespace("k4v4-g32", "fault/durable-" + std::to_string(r)));
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_FALSE(again->created)
          << "registration " << r << " was lost by kill -9 in round " << round;
    }
  }
}

// ---- kill -9 loops under load --------------------------------------------------------------

struct LoopFigures {
  uint64_t cycles = 0, acknowledged = 0, lost = 0, wrong = 0, crashes = 0, recoveries = 0;
};

LoopFigures KillLoop(const std::string& durability, int cycles) {
  LoopFigures f;
  Store store({"--durability", durability});
  absl::Status s = store.Start();
  if (!s.ok()) {
    ADD_FAILURE() << s;
    return f;
  }
  std::vector<uint64_t> acked;  // every block acknowledged so far
  size_t checked = 0;           // acked[0, checked) were checked after an earlier restart
  std::atomic<uint64_t> next{0};
  std::mt19937_64 rng(5);
  for (int cycle = 0; cycle < cycles; ++cycle) {
    // What the last cycle acknowledged, and a sample of the older blocks, is there byte for
    // byte (all of it is checked at the end).
    {
      std::vector<uint64_t> ids(acked.begin() + static_cast<std::ptrdiff_t>(checked), acked.end());
      for (size_t k = 0; k < 256 && checked > 0; ++k) ids.push_back(acked[rng() % checked]);
      const Tally t = store.Check(ids);
      f.wrong += t.wrong;
      checked = acked.size();
    }
    // Load: two writers and one reader for a random time, then kill -9 mid-flight.
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<uint64_t> new_acked;
    std::atomic<uint64_t> wrong_under_load{0};
    auto writer = [&] {
      client::ClientOptions o;
      o.max_attempts = 1;
      auto c = client::Client::Connect(store.server().address(), o);
      if (!c.ok()) return;
      while (!stop.load()) {
        const uint64_t i = next.fetch_add(4);
        std::vector<uint64_t> got = store.Put(i, i + 4, **c, 4);
        std::lock_guard<std::mutex> l(mu);
        new_acked.insert(new_acked.end(), got.begin(), got.end());
      }
    };
    auto reader = [&] {
      client::ClientOptions o;
      o.max_attempts = 1;
      auto c = client::Client::Connect(store.server().address(), o);
      if (!c.ok() || acked.empty()) return;
      std::mt19937_64 r(cycle);
      while (!stop.load()) {
        std::vector<uint64_t> ids;
        for (int k = 0; k < 8; ++k) ids.push_back(acked[r() % acked.size()]);
        wrong_under_load += store.Check(ids, **c).wrong;
      }
    };
    std::thread w1(writer), w2(writer), rd(reader);
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
    if (store.server().node().Exited()) {
      ++f.crashes;
      ADD_FAILURE() << "the server exited by itself in cycle " << cycle << " (wait status "
                    << store.server().node().exit_status() << ")\n"
                    << store.server().Log();
    }
    store.server().Kill();
    stop = true;
    w1.join();
    w2.join();
    rd.join();
    f.wrong += wrong_under_load.load();
    acked.insert(acked.end(), new_acked.begin(), new_acked.end());
    ++f.cycles;
    if (!store.Start().ok()) {
      ++f.crashes;
      ADD_FAILURE() << "restart " << cycle << " failed:\n" << store.server().Log();
      break;
    }
    ++f.recoveries;
  }
  // Every acknowledged block, byte for byte. A block acknowledged twice (never: indices are
  // unique) would count once.
  const Tally t = store.Check(acked);
  f.lost = t.missing;
  f.wrong += t.wrong;
  f.acknowledged = acked.size();
  return f;
}

void Print(const char* what, const LoopFigures& f) {
  std::printf(
      "[fault] kill -9 loop %s: cycles=%llu acknowledged=%llu lost=%llu wrong=%llu crashes=%llu "
      "recoveries=%llu\n",
      what, static_cast<unsigned long long>(f.cycles),
      static_cast<unsigned long long>(f.acknowledged), static_cast<unsigned long long>(f.lost),
      static_cast<unsigned long long>(f.wrong), static_cast<unsigned long long>(f.crashes),
      static_cast<unsigned long long>(f.recoveries));
}

TEST(KillLoop, WalLosesNothingAcknowledgedAndNeverServesWrongBytes) {
  if (access(testing::ClusterNode::BinaryPath().c_str(), X_OK) != 0) GTEST_SKIP();
  const LoopFigures f = KillLoop("wal", LongMode() ? 100 : 20);
  Print("wal", f);
  EXPECT_GT(f.acknowledged, 0u);
  EXPECT_EQ(f.lost, 0u);
  EXPECT_EQ(f.wrong, 0u);
  EXPECT_EQ(f.crashes, 0u);
}

TEST(KillLoop, FsyncLosesNothingAcknowledgedAndNeverServesWrongBytes) {
  if (access(testing::ClusterNode::BinaryPath().c_str(), X_OK) != 0) GTEST_SKIP();
  const LoopFigures f = KillLoop("fsync", LongMode() ? 30 : 3);
  Print("fsync", f);
  EXPECT_GT(f.acknowledged, 0u);
  EXPECT_EQ(f.lost, 0u);
  EXPECT_EQ(f.wrong, 0u);
  EXPECT_EQ(f.crashes, 0u);
}

TEST(KillLoop, DurabilityNoneMayLoseButNeverServesWrongBytes) {
  if (access(testing::ClusterNode::BinaryPath().c_str(), X_OK) != 0) GTEST_SKIP();
  const LoopFigures f = KillLoop("none", LongMode() ? 40 : 5);
  Print("none", f);
  EXPECT_EQ(f.wrong, 0u);
  EXPECT_EQ(f.crashes, 0u);
}

// ---- random damage -------------------------------------------------------------------------

TEST(RandomDamage, BitFlipsAndTruncationsNeverServeWrongBytesOrStopTheServer) {
  if (access(testing::ClusterNode::BinaryPath().c_str(), X_OK) != 0) GTEST_SKIP();
  const int rounds = LongMode() ? 60 : 8;
  std::mt19937_64 rng(99);
  uint64_t served = 0, total = 0, wrong = 0, failed_starts = 0, older = 0, resurrected = 0;
  for (int round = 0; round < rounds; ++round) {
    Store store({});
    ASSERT_TRUE(store.Start().ok());
    constexpr uint64_t kBlocks = 40;
    // Generation 0: blocks 0..39. Then, after a restart (so that both generations reach
    // separate files), generation 1 overwrites blocks 0..9 and deletes blocks 10..19.
    std::vector<uint64_t> acked = store.Put(0, kBlocks);
    store.server().Stop();
    ASSERT_TRUE(store.Start().ok());
    std::map<uint64_t, uint64_t> generation;  // acknowledged block -> its generation
    for (uint64_t i : acked) generation[i] = 0;
    for (uint64_t i = 0; i < 10; ++i) {
      if (store.Overwrite(i, 1)) generation[i] = 1;
    }
    std::vector<uint64_t> deleted;
    for (uint64_t i = 10; i < 20; ++i) deleted.push_back(i);
    ASSERT_EQ(store.Delete(deleted), deleted.size());
    for (uint64_t i : deleted) generation.erase(i);
    // Half the rounds leave the last changes in the WAL only.
    if (round % 2 == 0) {
      store.server().Stop();
    } else {
      store.server().Kill();
    }
    const std::string dir = store.server().data_dir();
    std::string what = "nothing";
    const int kind = static_cast<int>(rng() % 5);
    if (kind == 4) {
      // A misplaced file: one SST copied over another.
      const auto ssts = FilesOf(dir, ".sst");
      if (ssts.size() >= 2) {
        // Two different files (a file copied over itself is an error, not damage).
        const size_t a = rng() % ssts.size();
        const size_t b = (a + 1 + rng() % (ssts.size() - 1)) % ssts.size();
        const std::string from = ssts[a], to = ssts[b];
        fs::copy_file(from, to, fs::copy_options::overwrite_existing);
        what = absl::StrCat(fs::path(from).filename().string(), " copied over ",
                            fs::path(to).filename().string());
      }
    } else {
      static const char* kKinds[] = {".sst", ".tkv", ".log", "MANIFEST"};
      const auto files = FilesOf(kind == 1 ? dir + "/values" : dir, kKinds[kind]);
      if (!files.empty()) {
        const std::string f = files[rng() % files.size()];
        const uint64_t size = fs::file_size(f);
        if (rng() % 3 == 0 && size > 0) {
          const uint64_t cut = rng() % size;
          Truncate(f, cut);
          what = absl::StrCat("cut ", fs::path(f).filename().string(), " to ", cut, " of ", size);
        } else {
          const int bits = 1 + static_cast<int>(rng() % 8);
          FlipBits(f, bits, rng);
          what = absl::StrCat(bits, " bits of ", fs::path(f).filename().string());
        }
      }
    }
    absl::Status s = store.Start();
    if (!s.ok()) {
      ++failed_starts;
      ADD_FAILURE() << "round " << round << " (" << what << "): no start\n" << store.server().Log();
      continue;
    }
    // Never an older generation of a block, never a deleted block, never other bytes.
    for (uint64_t i = 0; i < kBlocks; ++i) {
      const std::optional<std::string> b = store.Get(i);
      if (!b.has_value()) continue;
      auto g = generation.find(i);
      if (g == generation.end()) {
        ++resurrected;
        ADD_FAILURE() << "round " << round << " (" << what << "): deleted block " << i
                      << " came back";
      } else if (*b == store.Expected(i, g->second)) {
        ++served;
      } else if (g->second == 1 && *b == store.Expected(i, 0)) {
        ++older;
        ADD_FAILURE() << "round " << round << " (" << what << "): block " << i
                      << " served its older bytes";
      } else {
        ++wrong;
        ADD_FAILURE() << "round " << round << " (" << what << "): block " << i << " wrong";
      }
    }
    total += generation.size();
  }
  std::printf("[fault] random damage with overwrites and deletes: older=%llu resurrected=%llu\n",
              static_cast<unsigned long long>(older), static_cast<unsigned long long>(resurrected));
  std::printf(
      "[fault] random damage: rounds=%d blocks=%llu served=%llu wrong=%llu failed_starts=%llu\n",
      rounds, static_cast<unsigned long long>(total), static_cast<unsigned long long>(served),
      static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(failed_starts));
}

}  // namespace
}  // namespace turbokv::fault
