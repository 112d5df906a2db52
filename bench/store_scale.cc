// turbokv-store-scale: the block store at N blocks (issue 21, "Scale"): index memory per
// block, restart time from BlockStore::Open to the first answered Lookup (split into its
// steps), and Lookup latency of a 1,000-block chain.
//
//   build/bin/turbokv-store-scale --blocks 10000000 --data-dir /work/scale-data --json out.json
//
// What is synthetic. N real blocks would take N x 4 KiB of value log (40 GiB at 10M), so the
// store's metadata is written directly, with the store's own encoders, and the values are
// never written nor read:
//   * namespaces: registered through BlockStore::PutNamespace (real records);
//   * block_meta and access: one entry per block (store_format.h: EncodeMeta, EncodeAccess,
//     keys namespace id BE || hash), written as sorted SST files with RocksDB's SstFileWriter
//     and ingested (the column families' own options), i.e. the files a fully compacted
//     store would hold, not the levels of a store that is being written to;
//   * the value log: each segment is started by ValueLog::Append of its first block's real
//     record (a real segment header and record header), then extended with ftruncate to the
//     length its records would take: every other record is a hole. Open checks only that a
//     block's record lies inside an existing segment (ValueLog::MarkLive), so recovery is
//     the real code path; a GetBlocks would find holes (misses), and this benchmark never
//     issues one.
// Blocks come in prefix chains of --chain blocks (block hashes 16..32 bytes, a deterministic
// function of (chain, position)); chains go round-robin to --namespaces namespaces; the
// restart order (access touch numbers) is the order the blocks were "put", chain by chain.
//
// Measured in this process (the build runs in a child process, so its memory is not counted):
//   * memory: the store's own accounting (DbStats: index, policy), and the process's RSS
//     before Open and after the first Lookup (the delta includes RocksDB's table readers and
//     block cache), and the peak RSS during Open;
//   * restart: --restarts opens, each timed from Open to the first answered Lookup of a whole
//     chain; the first after the data directory's files are dropped from the page cache
//     (posix_fadvise DONTNEED on each file: cold), the later ones warm;
//   * Lookup: --lookups Lookups of whole random chains (lease 0), after a warm-up, p50/p99.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "rocksdb/db.h"
#include "rocksdb/sst_file_writer.h"
#include "server/storage/block_store.h"
#include "server/storage/store_format.h"
#include "server/storage/value_log.h"

namespace {

namespace fs = std::filesystem;
using turbokv::server::BlockStore;
using turbokv::server::StorageOptions;
namespace format = turbokv::server::format;

struct Config {
  uint64_t blocks = 10'000'000;
  uint32_t chain = 1000;
  uint32_t namespaces = 1;
  uint32_t value_bytes = 4000;  // with a 16..32-byte hash, one 4 KiB record page
  uint64_t segment_bytes = uint64_t{256} << 20;
  std::string data_dir = "./store-scale-data";
  std::string json_out;
  std::string policy = "lrfu";
  int restarts = 2;
  int lookups = 2000;
  bool reuse = false;
  bool keep = false;
};

// splitmix64's finalizer: a bijection of 64-bit integers.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Block `id` = chain * chain_len + position. Its hash: 16..32 bytes, the first 8 a bijection
// of the id (big-endian, so distinct ids differ in their first 8 bytes), the rest filler.
size_t HashOf(uint64_t id, char* out /* 32 bytes */) {
  const uint64_t head = Mix64(id);
  const size_t len = 16 + Mix64(id ^ 0x5bd1e9955bd1e995ULL) % 17;
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(head >> (56 - 8 * i));
  uint64_t filler = head;
  for (size_t i = 8; i < len; ++i) {
    if ((i & 7) == 0) filler = Mix64(filler + 1);
    out[i] = static_cast<char>(filler >> (8 * (i & 7)));
  }
  return len;
}

uint64_t NamespaceOf(const Config& c, uint64_t id) {
  return 0x1000 + (id / c.chain) % c.namespaces;
}

StorageOptions Options(const Config& c) {
  StorageOptions o;
  o.data_dir = c.data_dir;
  o.eviction_policy = c.policy;
  o.segment_bytes = c.segment_bytes;
  o.maintenance_interval_ms = 0;  // no background pass during the measurement
  // Room for every block with a margin (nothing is evicted).
  o.capacity_bytes =
      c.blocks * (turbokv::server::RecordBytes(32, c.value_bytes) + 200) + (uint64_t{1} << 30);
  return o;
}

absl::Status AcceptAll(absl::Span<const uint8_t>) { return absl::OkStatus(); }

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "store-scale: %s\n", what.c_str());
  std::exit(1);
}
void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(absl::StrFormat("%s: %s", what, s.ToString()));
}
void Check(const rocksdb::Status& s, const char* what) {
  if (!s.ok()) Die(absl::StrFormat("%s: %s", what, s.ToString()));
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// ---- building the data directory (a child process) ----------------------------------------

// Writes one column family's entries (sorted keys) as SST files of about 64 MiB and ingests
// them. `value(id)` is the entry of block id.
template <typename ValueFn>
void IngestSorted(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, const rocksdb::Options& opts,
                  const Config& c, const std::vector<std::pair<uint64_t, uint32_t>>& sorted,
                  const std::string& tag, ValueFn value) {
  std::vector<std::string> files;
  std::unique_ptr<rocksdb::SstFileWriter> w;
  char hash[32];
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (!w || w->FileSize() >= (uint64_t{64} << 20)) {
      if (w) Check(w->Finish(), "finish SST");
      files.push_back(absl::StrFormat("%s/ingest-%s-%06d.sst", c.data_dir, tag, files.size()));
      w = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), opts, cf);
      Check(w->Open(files.back()), "open SST writer");
    }
    const uint64_t id = sorted[i].second;
    std::string key = format::NamespaceKey(NamespaceOf(c, id));
    key.append(hash, HashOf(id, hash));
    Check(w->Put(key, value(id)), "SST put");
  }
  if (w) Check(w->Finish(), "finish SST");
  rocksdb::IngestExternalFileOptions ingest;
  ingest.move_files = true;
  Check(db->IngestExternalFile(cf, files, ingest), "ingest");
}

void Build(const Config& c) {
  const auto t0 = std::chrono::steady_clock::now();
  const StorageOptions options = Options(c);
  {
    // The namespaces, through the store (a real record each, in the value log and both CFs).
    absl::StatusOr<std::unique_ptr<BlockStore>> store = BlockStore::Open(options, AcceptAll);
    Check(store.status(), "open (namespaces)");
    for (uint32_t k = 0; k < c.namespaces; ++k) {
      turbokv::server::NamespaceRecord r;
      r.id = 0x1000 + k;
      r.descriptor = absl::StrFormat("store-scale namespace %u", k);
      r.logical_block_bytes = 512 * 64 * 2;
      Check((*store)->PutNamespace(r), "PutNamespace");
    }
  }
  // Write sequences: from the store's high-water mark (docs/server.md, "default" CF), which
  // is then moved past them, as AllocateSequences would have.
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  Check(rocksdb::DB::Open(format::DbOptions(options), c.data_dir, format::Descriptors(options),
                          &cfs, &db),
        "open RocksDB");
  std::string mark_value;
  Check(
      db->Get(rocksdb::ReadOptions(), cfs[format::kDefault], "turbokv.sequence_mark", &mark_value),
      "read the sequence mark");
  const uint64_t first_sequence = format::GetFixed64LE(mark_value.data());

  // The value log: segments in put order, each started by its first record (ValueLog::Append)
  // and extended to its records' length.
  const uint64_t record = turbokv::server::RecordBytes(32, c.value_bytes);  // <= 32-byte hash
  const uint64_t per_segment =
      std::max<uint64_t>(1, (c.segment_bytes - turbokv::server::kPageBytes) / record);
  const std::string values_dir = (fs::path(c.data_dir) / format::kValuesDir).string();
  std::vector<uint32_t> segment_numbers;
  const std::string value(c.value_bytes, '\0');
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (uint64_t first = 0; first < c.blocks; first += per_segment) {
    turbokv::server::ValueLogOptions lo;
    lo.dir = values_dir;
    lo.segment_bytes = c.segment_bytes;
    absl::StatusOr<std::unique_ptr<turbokv::server::ValueLog>> log =
        turbokv::server::ValueLog::Open(lo);
    Check(log.status(), "open value log");
    char hash[32];
    turbokv::server::RecordWrite w;
    w.namespace_id = NamespaceOf(c, first);
    w.hash = std::string_view(hash, HashOf(first, hash));
    w.value = value;
    w.sequence = first_sequence + first;
    w.put_time = now;
    absl::StatusOr<std::vector<turbokv::server::RecordLocation>> placed =
        (*log)->Append(absl::MakeConstSpan(&w, 1));
    Check(placed.status(), "append");
    if ((*placed)[0].page != 1) Die("a new segment's first record is not on page 1");
    segment_numbers.push_back((*placed)[0].segment);
    log->reset();
    const uint64_t records = std::min(per_segment, c.blocks - first);
    const std::string path =
        (fs::path(values_dir) / absl::StrFormat("%08u.tkv", segment_numbers.back())).string();
    if (::truncate(path.c_str(),
                   static_cast<off_t>(turbokv::server::kPageBytes + records * record)) != 0) {
      Die("truncate " + path);
    }
  }
  std::printf("  value log: %zu sparse segments (%.1f s)\n", segment_numbers.size(), Since(t0));

  // Keys in RocksDB's order: namespace, then the hash's first 8 bytes (distinct per block).
  std::vector<std::pair<uint64_t, uint32_t>> sorted(c.blocks);
  for (uint64_t id = 0; id < c.blocks; ++id) {
    sorted[id] = {Mix64(id), static_cast<uint32_t>(id)};
  }
  std::sort(sorted.begin(), sorted.end(), [&](const auto& a, const auto& b) {
    const uint64_t na = NamespaceOf(c, a.second), nb = NamespaceOf(c, b.second);
    return na != nb ? na < nb : a.first < b.first;
  });
  rocksdb::Options meta_opts(format::DbOptions(options),
                             format::CfOptions(format::kCfMeta, options));
  IngestSorted(db, cfs[format::kMeta], meta_opts, c, sorted, "meta", [&](uint64_t id) {
    format::MetaValue m;
    m.value_bytes = c.value_bytes;
    m.put_time = now - static_cast<int64_t>((c.blocks - id) / 1000);
    m.checksum = Mix64(id ^ 0xc0ffee);
    m.in_log = true;
    m.segment = segment_numbers[id / per_segment];
    m.page = static_cast<uint32_t>(1 + (id % per_segment) * (record / turbokv::server::kPageBytes));
    m.sequence = first_sequence + id;
    return format::EncodeMeta(m);
  });
  std::printf("  block_meta: %llu entries ingested (%.1f s)\n",
              static_cast<unsigned long long>(c.blocks), Since(t0));
  rocksdb::Options access_opts(format::DbOptions(options),
                               format::CfOptions(format::kCfAccess, options));
  IngestSorted(db, cfs[format::kAccess], access_opts, c, sorted, "access", [&](uint64_t id) {
    return format::EncodeAccess(now - static_cast<int64_t>((c.blocks - id) / 1000), id + 1);
  });
  std::printf("  access: %llu entries ingested (%.1f s)\n",
              static_cast<unsigned long long>(c.blocks), Since(t0));
  std::string mark;
  format::PutFixed64LE(&mark, first_sequence + c.blocks + (uint64_t{1} << 20));
  rocksdb::WriteOptions sync;
  sync.sync = true;
  Check(db->Put(sync, cfs[format::kDefault], "turbokv.sequence_mark", mark), "move the mark");
  for (rocksdb::ColumnFamilyHandle* h : cfs) Check(db->DestroyColumnFamilyHandle(h), "handle");
  Check(db->Close(), "close RocksDB");
  delete db;
}

// ---- measuring -----------------------------------------------------------------------------

// VmRSS or VmHWM of this process, bytes.
uint64_t ProcStatus(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::strlen(field) + 1)) * 1024;
  }
  return 0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// Drops the data directory's files from the page cache (written back first).
void DropFromPageCache(const std::string& dir) {
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Bytes of the data directory's RocksDB table files (*.sst).
uint64_t SstBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".sst") bytes += e.file_size();
  }
  return bytes;
}

// CPU seconds of this process, all threads (user + system).
double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

nlohmann::json StepJson(const turbokv::server::OpenStep& s) {
  return {{"wall_s", s.wall_s}, {"cpu_s", s.cpu_s}};
}

// The hashes of chain `chain` (storage for the views in `buf`).
std::vector<std::string_view> Chain(const Config& c, uint64_t chain, std::vector<char>* buf) {
  const uint64_t first = chain * c.chain;
  const uint64_t n = std::min<uint64_t>(c.chain, c.blocks - first);
  buf->assign(n * 32, 0);
  std::vector<std::string_view> out;
  for (uint64_t i = 0; i < n; ++i) {
    char* p = buf->data() + i * 32;
    out.emplace_back(p, HashOf(first + i, p));
  }
  return out;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model;
  bool avx512f = false;
  while (std::getline(in, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0 && line.find(" avx512f") != std::string::npos) avx512f = true;
  }
  return model + (avx512f ? " (avx512f)" : " (no avx512f)");
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{
      "The block store at N blocks: index memory, restart time, Lookup latency "
      "(synthetic metadata, values never read: see the file's header)"};
  app.add_option("--blocks", c.blocks, "blocks in the store")
      ->check(CLI::Range(1000ull, 4000000000ull));
  app.add_option("--data-dir", c.data_dir, "data directory (removed first unless --reuse)");
  app.add_option("--json", c.json_out, "also write the figures as JSON here");
  app.add_option("--chain", c.chain, "blocks per prefix chain")->check(CLI::Range(1u, 100000u));
  app.add_option("--namespaces", c.namespaces, "namespaces (chains round-robin)")
      ->check(CLI::Range(1u, 1000u));
  app.add_option("--value-bytes", c.value_bytes, "packed bytes a block (its record's size)")
      ->check(CLI::Range(8u, 1u << 26));
  app.add_option("--policy", c.policy, "eviction policy: lrfu, lru");
  app.add_option("--restarts", c.restarts, "opens measured (the first cold)")
      ->check(CLI::Range(1, 10));
  app.add_option("--lookups", c.lookups, "timed Lookups of whole chains")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--reuse", c.reuse, "reuse the data directory a previous run built (same flags)");
  app.add_flag("--keep", c.keep, "keep the data directory afterwards");
  CLI11_PARSE(app, argc, argv);
  const uint64_t chains = (c.blocks + c.chain - 1) / c.chain;

  const auto t_build = std::chrono::steady_clock::now();
  if (!c.reuse || !fs::exists(fs::path(c.data_dir) / "CURRENT")) {
    std::error_code ec;
    fs::remove_all(c.data_dir, ec);
    std::printf("building %llu blocks (synthetic metadata, sparse value log) in %s\n",
                static_cast<unsigned long long>(c.blocks), c.data_dir.c_str());
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid == 0) {
      Build(c);
      std::fflush(stdout);
      std::_Exit(0);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      Die("building the data directory failed");
    }
  }
  const double build_s = Since(t_build);
  const uint64_t sst_bytes = SstBytes(c.data_dir);
  std::printf("built in %.1f s: RocksDB SST files %.1f MiB (%.1f B a block)\n", build_s,
              static_cast<double>(sst_bytes) / (1 << 20),
              static_cast<double>(sst_bytes) / static_cast<double>(c.blocks));

  nlohmann::json report;
  report["synthetic"] =
      "block_meta/access written with the store's encoders and ingested as SST files; value-log "
      "segments sparse (one real record each); values never written or read";
  report["config"] = {{"blocks", c.blocks},
                      {"chain", c.chain},
                      {"chains", chains},
                      {"namespaces", c.namespaces},
                      {"value_bytes", c.value_bytes},
                      {"policy", c.policy},
                      {"segment_bytes", c.segment_bytes}};
  report["sst_bytes"] = sst_bytes;
  report["cpu"] = CpuModel();
  std::printf("CPU: %s\n", CpuModel().c_str());
  const double per_m = static_cast<double>(c.blocks) / 1e6;
  const StorageOptions options = Options(c);
  std::unique_ptr<BlockStore> store;
  std::vector<char> buf;
  for (int r = 0; r < c.restarts; ++r) {
    store.reset();  // closes the previous open
    const bool cold = r == 0;
    if (cold) DropFromPageCache(c.data_dir);
    const uint64_t rss_before = ProcStatus("VmRSS:");
    ResetPeakRss();
    const double cpu0 = ProcessCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<BlockStore>> opened = BlockStore::Open(options, AcceptAll);
    Check(opened.status(), "open");
    store = std::move(*opened);
    const double open_s = Since(t0);
    const std::vector<std::string_view> first = Chain(c, 0, &buf);
    absl::StatusOr<size_t> matched = store->Lookup(NamespaceOf(c, 0), first, 0);
    const double restart_s = Since(t0);
    const double restart_cpu_s = ProcessCpuSeconds() - cpu0;
    Check(matched.status(), "first Lookup");
    if (*matched != first.size()) Die("the first Lookup did not match the whole chain");
    const uint64_t rss_after = ProcStatus("VmRSS:");
    const uint64_t rss_peak = ProcStatus("VmHWM:");
    const turbokv::server::DbStats db = store->GetDbStats();
    const turbokv::server::StoreStats st = store->Stats();
    if (st.blocks != c.blocks) {
      Die(absl::StrFormat("the store holds %llu blocks, expected %llu",
                          static_cast<unsigned long long>(st.blocks),
                          static_cast<unsigned long long>(c.blocks)));
    }
    const turbokv::server::OpenTimings& t = store->open_timings();
    const double n = static_cast<double>(c.blocks);
    nlohmann::json j = {
        {"cold", cold},
        {"restart_s", restart_s},
        {"restart_s_per_1m", restart_s / per_m},
        {"restart_process_cpu_s", restart_cpu_s},
        {"restart_process_cpu_s_per_1m", restart_cpu_s / per_m},
        {"open", StepJson(t.total)},
        {"repair_check", StepJson(t.repair_check)},
        {"rocksdb_open", StepJson(t.rocksdb_open)},
        {"index_scan", StepJson(t.scan)},
        {"index_scan_threads", t.scan_threads},
        {"index_scan_threads_cpu_s", t.scan_threads_cpu_s},
        {"policy", StepJson(t.policy)},
        {"policy_sort", StepJson(t.policy_sort)},
        {"reclaim", StepJson(t.reclaim)},
        {"first_lookup_s", restart_s - open_s},
        {"index_memory_bytes", db.index_memory_bytes},
        {"block_index_memory_bytes", db.block_index_memory_bytes},
        {"policy_memory_bytes", db.policy_memory_bytes},
        {"index_bytes_per_block", static_cast<double>(db.index_memory_bytes) / n},
        {"rss_delta_bytes", static_cast<int64_t>(rss_after) - static_cast<int64_t>(rss_before)},
        {"rss_delta_per_block",
         (static_cast<double>(rss_after) - static_cast<double>(rss_before)) / n},
        {"rss_peak_delta_per_block",
         (static_cast<double>(rss_peak) - static_cast<double>(rss_before)) / n},
    };
    report["restarts"].push_back(j);
    // "RocksDB open" of the issue: the repair check and DB::Open; "recovery": the rest.
    const double rocks_wall = t.repair_check.wall_s + t.rocksdb_open.wall_s;
    const double rocks_cpu = t.repair_check.cpu_s + t.rocksdb_open.cpu_s;
    std::printf(
        "%s restart: %.2f s to the first Lookup = %.2f s per 1M blocks (process CPU %.2f s = "
        "%.2f s per 1M)\n"
        "  RocksDB open %.2f s (CPU %.2f): repair check %.2f (%.2f), DB::Open %.2f (%.2f)\n"
        "  recovery %.2f s (CPU %.2f): index scan %.2f (%.2f: %d threads %.2f, inserts %.2f), "
        "policy %.2f (%.2f: sort %.2f), reclaim %.2f (%.2f); first Lookup %.4f s\n"
        "  memory: store's accounting %.1f B/block (index %.1f, policy %.1f); RSS delta "
        "%.1f B/block, peak %.1f B/block\n",
        cold ? "cold" : "warm", restart_s, restart_s / per_m, restart_cpu_s, restart_cpu_s / per_m,
        rocks_wall, rocks_cpu, t.repair_check.wall_s, t.repair_check.cpu_s, t.rocksdb_open.wall_s,
        t.rocksdb_open.cpu_s, t.scan.wall_s + t.policy.wall_s + t.reclaim.wall_s,
        t.scan.cpu_s + t.policy.cpu_s + t.reclaim.cpu_s, t.scan.wall_s, t.scan.cpu_s,
        t.scan_threads, t.scan_threads_cpu_s, t.scan.cpu_s - t.scan_threads_cpu_s, t.policy.wall_s,
        t.policy.cpu_s, t.policy_sort.cpu_s, t.reclaim.wall_s, t.reclaim.cpu_s, restart_s - open_s,
        static_cast<double>(db.index_memory_bytes) / n,
        static_cast<double>(db.block_index_memory_bytes) / n,
        static_cast<double>(db.policy_memory_bytes) / n,
        (static_cast<double>(rss_after) - static_cast<double>(rss_before)) / n,
        (static_cast<double>(rss_peak) - static_cast<double>(rss_before)) / n);
    std::fflush(stdout);
  }

  // Lookup of whole chains: a warm-up over some chains, then the timed ones (random chains).
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> pick(0, chains - 1);
  for (int i = 0; i < std::min(c.lookups, 200); ++i) {
    const uint64_t ch = pick(rng);
    Check(store->Lookup(NamespaceOf(c, ch * c.chain), Chain(c, ch, &buf), 0).status(), "Lookup");
  }
  std::vector<double> us, cpu_us;  // wall, and this thread's CPU time
  for (int i = 0; i < c.lookups; ++i) {
    const uint64_t ch = pick(rng);
    const std::vector<std::string_view> hs = Chain(c, ch, &buf);
    const double cpu0 = ThreadCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<size_t> m = store->Lookup(NamespaceOf(c, ch * c.chain), hs, 0);
    us.push_back(Since(t0) * 1e6);
    cpu_us.push_back((ThreadCpuSeconds() - cpu0) * 1e6);
    Check(m.status(), "Lookup");
    if (*m != hs.size()) Die("a Lookup did not match its whole chain");
  }
  const double p50 = Percentile(us, 0.5), p99 = Percentile(us, 0.99);
  report["lookup"] = {{"chain_blocks", c.chain},
                      {"lookups", c.lookups},
                      {"p50_us", p50},
                      {"p99_us", p99},
                      {"max_us", Percentile(us, 1.0)},
                      {"cpu_p50_us", Percentile(cpu_us, 0.5)},
                      {"cpu_p99_us", Percentile(cpu_us, 0.99)},
                      {"ns_per_block_p50", p50 * 1e3 / c.chain}};
  std::printf(
      "Lookup of a %u-block chain (%d chains, warm): p50 %.1f us, p99 %.1f us, max %.1f "
      "us (%.0f ns a block at p50); thread CPU p50 %.1f us, p99 %.1f us\n",
      c.chain, c.lookups, p50, p99, Percentile(us, 1.0), p50 * 1e3 / c.chain,
      Percentile(cpu_us, 0.5), Percentile(cpu_us, 0.99));
  store.reset();
  if (!c.json_out.empty()) {
    std::ofstream out(c.json_out);
    out << report.dump(2) << "\n";
    if (!out) Die("cannot write " + c.json_out);
  }
  if (!c.keep) {
    std::error_code ec;
    fs::remove_all(c.data_dir, ec);
  }
  return 0;
}
