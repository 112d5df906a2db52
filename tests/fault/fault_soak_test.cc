// RSS bounded under a soak (issue 10, item 5): the real server under concurrent puts, gets,
// lookups (with leases) and deletes of two namespaces (raw and k4v4-g32) with a capacity small
// enough that it evicts all the time. The server's VmRSS (/proc/<pid>/status) and the data
// directory's size are sampled every second (every 250 ms in short mode); RSS must stop growing
// and stay under a bound derived from the configured budgets (kRssBound below).
//
// Long mode (TURBOKV_FAULT_MODE=long): 10 minutes. Short mode (CI): 20 s, which already shows a
// per-request leak (tens of thousands of requests) and a budget that is not enforced.
// TURBOKV_SOAK_SECONDS=N overrides the duration.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "fault_util.h"

namespace turbokv::fault {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The budgets the server runs with.
constexpr uint64_t kCapacity = 16 * kMiB;
constexpr uint64_t kInFlight = 32 * kMiB;
// The RSS bound, from those budgets:
//   64 MiB  process baseline (code, gRPC, RocksDB and allocator arenas of ~20 threads)
// + kInFlight (request bytes in flight: put chunks not yet stored, get responses not yet sent)
// + 48 MiB  RocksDB block caches (8 MiB default per column family, 6 column families)
// + 4 x write buffer (blocks memtable capacity/16, 2 per family while flushing, and the small
//           families' memtables, which the WAL limit of 2 x write buffer flushes)
// + kCapacity (the in-memory index is smaller than the charged bytes it describes)
// + 64 MiB  slack (codec scratch per worker, fragmentation)
// (The value log's pages are in the page cache, not in the process.)
constexpr uint64_t kRssBound =
    64 * kMiB + kInFlight + 48 * kMiB + 4 * (kCapacity / 16) + kCapacity + 64 * kMiB;

uint64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

// The data directory's allocated bytes by kind: "sst=.. values=.. wal=.. other=..".
std::string DirBreakdown(const std::string& dir) {
  std::map<std::string, uint64_t> by;
  std::map<std::string, int> files;
  std::error_code ec;
  for (const auto& f : fs::recursive_directory_iterator(dir, ec)) {
    if (!f.is_regular_file(ec) || f.path().filename() == "RESERVE") continue;
    const std::string ext = f.path().extension().string();
    const std::string name = f.path().filename().string();
    const std::string kind = ext == ".sst"               ? "sst"
                             : ext == ".tkv"             ? "values"
                             : ext == ".log"             ? "wal"
                             : name.rfind("LOG", 0) == 0 ? "rocksdb_LOG"
                                                         : "other";
    by[kind] += AllocatedBytes(f.path());
    ++files[kind];
  }
  std::string out;
  for (const auto& [kind, bytes] : by) {
    absl::StrAppend(&out, " ", kind, "=", bytes >> 10, "KiB/", files[kind], "files");
  }
  return out;
}

int SoakSeconds() {
  if (const char* s = std::getenv("TURBOKV_SOAK_SECONDS"); s != nullptr && *s) return std::atoi(s);
  return LongMode() ? 600 : 20;
}

struct Counts {
  std::atomic<uint64_t> put_acked{0}, put_failed{0}, served{0}, missing{0}, wrong{0}, lookups{0},
      matched{0}, deleted{0}, call_errors{0};
};

TEST(Soak, RssStopsGrowingAndStaysUnderTheBudgetBound) {
  if (access(testing::ClusterNode::BinaryPath().c_str(), X_OK) != 0) GTEST_SKIP();
  Server server({"--capacity", "16MiB", "--max-in-flight-bytes", "32MiB", "--io-threads", "4",
                 "--admission-timeout-ms", "2000"});
  ASSERT_TRUE(server.Start().ok()) << server.Log();
  const pid_t pid = server.node().pid();
  auto raw_ns = server.client().RegisterNamespace(SmallNamespace("raw", "soak/raw"));
  auto tq_ns = server.client().RegisterNamespace(SmallNamespace("k4v4-g32", "soak/tq"));
  ASSERT_TRUE(raw_ns.ok() && tq_ns.ok());
  const uint64_t raw_bytes = raw_ns->raw_block_bytes;
  const int seconds = SoakSeconds();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  auto running = [&] { return std::chrono::steady_clock::now() < end; };
  Counts n;
  std::atomic<uint64_t> next{0};  // blocks [0, next) were put at least once (raw and tq)

  auto connect = [&] {
    client::ClientOptions o;
    o.max_attempts = 1;
    o.timeout = absl::Seconds(30);
    auto c = client::Client::Connect(server.address(), o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  };
  // A recent block index (eviction keeps roughly the newest capacity's worth).
  auto recent = [&](std::mt19937_64& r) {
    const uint64_t top = next.load();
    const uint64_t window = std::min<uint64_t>(top, 512);
    return window == 0 ? 0 : top - 1 - r() % window;
  };
  auto writer = [&](uint64_t ns, int seed) {
    auto c = connect();
    if (c == nullptr) return;
    std::mt19937_64 r(seed);
    while (running()) {
      // Mostly new blocks (eviction), sometimes a re-put of a recent one.
      const uint64_t i = r() % 8 == 0 ? recent(r) : next.fetch_add(8);
      std::vector<std::string> hashes, raws;
      for (uint64_t k = i; k < i + 8; ++k) {
        hashes.push_back(HashOf(k));
        raws.push_back(RawOf(k, raw_bytes));
      }
      std::vector<absl::Span<const uint8_t>> blocks;
      for (const std::string& s : raws) blocks.push_back(Bytes(s));
      auto put = c->PutBlocks(ns, hashes, blocks);
      if (!put.ok()) {
        ++n.call_errors;
        continue;
      }
      for (const auto& p : *put) ++(p.status.ok() ? n.put_acked : n.put_failed);
    }
  };
  auto getter = [&](int seed) {
    auto c = connect();
    if (c == nullptr) return;
    std::mt19937_64 r(seed);
    while (running()) {
      std::vector<uint64_t> ids;
      std::vector<std::string> hashes;
      for (int k = 0; k < 16; ++k) {
        ids.push_back(recent(r));
        hashes.push_back(HashOf(ids.back()));
      }
      const bool raw = r() % 2 == 0;
      auto got = c->GetBlocks(raw ? raw_ns->namespace_id : tq_ns->namespace_id, hashes);
      if (!got.ok()) {
        ++n.call_errors;
        continue;
      }
      for (size_t k = 0; k < ids.size(); ++k) {
        if (!got->blocks[k].has_value()) {
          ++n.missing;
        } else if (raw && *got->blocks[k] != RawOf(ids[k], raw_bytes)) {
          ++n.wrong;
        } else if (!raw && got->blocks[k]->size() != raw_bytes) {
          ++n.wrong;
        } else {
          ++n.served;
        }
      }
    }
  };
  auto looker = [&] {
    auto c = connect();
    if (c == nullptr) return;
    std::mt19937_64 r(7);
    while (running()) {
      const uint64_t i = recent(r) & ~uint64_t{7};
      std::vector<std::string> chain;
      for (uint64_t k = i; k < i + 8; ++k) chain.push_back(HashOf(k));
      auto l = c->Lookup(r() % 2 ? raw_ns->namespace_id : tq_ns->namespace_id, chain,
                         r() % 4 == 0 ? 2 : 0);
      if (!l.ok()) {
        ++n.call_errors;
        continue;
      }
      ++n.lookups;
      n.matched += l->matched_blocks;
    }
  };
  auto deleter = [&] {
    auto c = connect();
    if (c == nullptr) return;
    std::mt19937_64 r(8);
    while (running()) {
      std::vector<std::string> doomed;
      for (int k = 0; k < 4; ++k) doomed.push_back(HashOf(recent(r)));
      auto d = c->DeleteBlocks(r() % 2 ? raw_ns->namespace_id : tq_ns->namespace_id, doomed);
      if (!d.ok()) {
        ++n.call_errors;
      } else {
        n.deleted += *d;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };

  std::vector<std::thread> load;
  load.emplace_back(writer, raw_ns->namespace_id, 1);
  load.emplace_back(writer, tq_ns->namespace_id, 2);
  load.emplace_back(getter, 3);
  load.emplace_back(getter, 4);
  load.emplace_back(looker);
  load.emplace_back(deleter);

  struct Sample {
    double t;
    uint64_t rss, dir;
  };
  std::vector<Sample> samples;
  const auto start = std::chrono::steady_clock::now();
  const auto period = std::chrono::milliseconds(LongMode() ? 1000 : 250);
  bool exited = false;
  while (running()) {
    std::this_thread::sleep_for(period);
    if (server.node().Exited()) {
      exited = true;
      break;
    }
    samples.push_back(
        {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
         RssBytes(pid), DirBytes(server.data_dir())});
  }
  for (std::thread& t : load) t.join();
  ASSERT_FALSE(exited) << "the server exited under the soak (wait status "
                       << server.node().exit_status() << ")\n"
                       << server.Log();
  ASSERT_GE(samples.size(), 8u);
  auto stats = server.client().Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();

  // The first 10% is warm-up (memtables, caches and arenas filling); then the first and the
  // second half of the rest are compared.
  const size_t warm = samples.size() / 10;
  const size_t mid = warm + (samples.size() - warm) / 2;
  uint64_t first_max = 0, second_max = 0, rss_max = 0, dir_max = 0, dir_first_max = 0,
           dir_second_max = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i >= warm && i < mid) first_max = std::max(first_max, samples[i].rss);
    if (i >= mid) second_max = std::max(second_max, samples[i].rss);
    if (i >= warm && i < mid) dir_first_max = std::max(dir_first_max, samples[i].dir);
    if (i >= mid) dir_second_max = std::max(dir_second_max, samples[i].dir);
    rss_max = std::max(rss_max, samples[i].rss);
    dir_max = std::max(dir_max, samples[i].dir);
  }
  auto mib = [](uint64_t b) { return static_cast<double>(b) / kMiB; };
  std::printf(
      "[fault] soak %ds: samples=%zu rss_first=%.1fMiB rss_first_half_max=%.1fMiB "
      "rss_second_half_max=%.1fMiB rss_final=%.1fMiB rss_bound=%.1fMiB dir_max=%.1fMiB "
      "dir_final=%.1fMiB\n",
      seconds, samples.size(), mib(samples.front().rss), mib(first_max), mib(second_max),
      mib(samples.back().rss), mib(kRssBound), mib(dir_max), mib(samples.back().dir));
  std::printf(
      "[fault] soak load: put_acked=%llu put_failed=%llu served=%llu missing=%llu wrong=%llu "
      "lookups=%llu matched=%llu deleted=%llu call_errors=%llu used=%llu evicted=%llu\n",
      static_cast<unsigned long long>(n.put_acked.load()),
      static_cast<unsigned long long>(n.put_failed.load()),
      static_cast<unsigned long long>(n.served.load()),
      static_cast<unsigned long long>(n.missing.load()),
      static_cast<unsigned long long>(n.wrong.load()),
      static_cast<unsigned long long>(n.lookups.load()),
      static_cast<unsigned long long>(n.matched.load()),
      static_cast<unsigned long long>(n.deleted.load()),
      static_cast<unsigned long long>(n.call_errors.load()),
      static_cast<unsigned long long>(stats->used_bytes),
      static_cast<unsigned long long>(stats->evicted_blocks));
  // RSS every 10% of the run, for the note.
  std::string curve;
  for (size_t i = 0; i < samples.size(); i += std::max<size_t>(1, samples.size() / 10)) {
    absl::StrAppend(&curve, " ", static_cast<int>(samples[i].t),
                    "s:", static_cast<int>(mib(samples[i].rss)), "MiB/",
                    static_cast<int>(mib(samples[i].dir)), "MiB");
  }
  std::printf("[fault] soak rss/dir:%s\n", curve.c_str());
  std::printf("[fault] soak data directory at the end:%s\n",
              DirBreakdown(server.data_dir()).c_str());

  EXPECT_GT(n.put_acked.load(), 0u);
  EXPECT_GT(n.served.load(), 0u);
  EXPECT_EQ(n.wrong.load(), 0u);
  EXPECT_GT(stats->evicted_blocks, 0u) << "the soak must run with eviction";
  EXPECT_LE(stats->used_bytes, kCapacity);
  EXPECT_LE(second_max, first_max + first_max / 5 + 16 * kMiB)
      << "RSS still grows: the second half's peak is beyond the first half's + 20% + 16 MiB";
  EXPECT_LE(rss_max, kRssBound);
  // The directory: within the capacity (the value log's live pages, RocksDB's SSTs and WAL)
  // plus RocksDB's bounded bookkeeping (info LOG at most 5 MiB, MANIFEST at most 8 MiB), and
  // not growing either (its LOG once grew without bound).
  EXPECT_LE(dir_max, kCapacity + 13 * kMiB);
  EXPECT_LE(dir_second_max, dir_first_max + dir_first_max / 5 + 16 * kMiB)
      << "the data directory still grows";
}

}  // namespace
}  // namespace turbokv::fault
