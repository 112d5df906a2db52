// BlockStore's life cycle: opening (repair, recovery of the index, migration of a store
// written before the value log), the maintenance pass, closing.
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "server/storage/block_store.h"
#include "server/storage/meta_scan.h"
#include "server/storage/rocksdb_crc32c.h"
#include "server/storage/rocksdb_status.h"
#include "server/storage/store_format.h"
#include "server/storage/store_repair.h"
#include "spdlog/spdlog.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::server {
namespace {

namespace fs = std::filesystem;
using format::EncodeAccess;
using format::GetFixed64BE;
using format::GetFixed64LE;
using format::TrailerOf;

// The write-sequence high-water mark (default column family): fixed64 LE.
constexpr char kSequenceMarkKey[] = "turbokv.sequence_mark";
// How far past the sequences in use the mark is moved (one fsync'ed write per this many).
constexpr uint64_t kSequenceStep = uint64_t{1} << 20;
// Legacy values are migrated this many at a time (a block is at most a few MiB).
constexpr size_t kMigrationBatchKeys = 16;
// Threads the recovery scan of block_meta uses at most (one per core up to this).
constexpr unsigned kMaxScanThreads = 4;

// A stopwatch of wall time and of the calling thread's CPU time.
class Stopwatch {
 public:
  Stopwatch() : wall_(std::chrono::steady_clock::now()), cpu_(ThreadCpuSeconds()) {}
  // The time since the start or the last lap; the next lap starts now.
  OpenStep Lap() {
    const auto wall = std::chrono::steady_clock::now();
    const double cpu = ThreadCpuSeconds();
    OpenStep step{std::chrono::duration<double>(wall - wall_).count(), cpu - cpu_};
    wall_ = wall;
    cpu_ = cpu;
    return step;
  }

 private:
  static double ThreadCpuSeconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  std::chrono::steady_clock::time_point wall_;
  double cpu_;
};

}  // namespace

BlockStore::BlockStore(const StorageOptions& options, ValueVerifier verifier, const Clock* clock,
                       BlockEventSink* events)
    : options_(options),
      verifier_(std::move(verifier)),
      clock_(clock != nullptr ? clock : SystemClock()),
      events_(events),
      disk_(options),
      tenant_names_{""},
      tenant_reserved_(1) {
  tenant_numbers_[""] = 0;
}

absl::StatusOr<std::unique_ptr<BlockStore>> BlockStore::Open(const StorageOptions& options,
                                                             ValueVerifier verifier,
                                                             const Clock* clock,
                                                             BlockEventSink* events,
                                                             PeriodicTasks* tasks) {
  TURBOKV_RETURN_IF_ERROR(options.Validate());
  if (!verifier) return absl::InvalidArgumentError("BlockStore::Open needs a value verifier");
  spdlog::info("RocksDB's CRC32C (WAL records) runs on {}", RocksDbCrc32cImplementation());
  Stopwatch watch;
  std::unique_ptr<BlockStore> store(new BlockStore(options, std::move(verifier), clock, events));
  TURBOKV_RETURN_IF_ERROR(store->OpenDb());
  TURBOKV_RETURN_IF_ERROR(store->Recover());
  store->disk_.CreateReserve();
  store->MeasureDisk();
  OpenTimings& t = store->open_timings_;
  t.total = watch.Lap();
  spdlog::info(
      "store opened in {:.3f} s ({:.3f} s CPU): {} blocks; repair check {:.3f} s, "
      "RocksDB open {:.3f} s, index scan {:.3f} s, policy {:.3f} s, reclaim {:.3f} s",
      t.total.wall_s, t.total.cpu_s, store->Stats().blocks, t.repair_check.wall_s,
      t.rocksdb_open.wall_s, t.scan.wall_s, t.policy.wall_s, t.reclaim.wall_s);
  if (options.maintenance_interval_ms > 0) {
    if (tasks == nullptr) {
      store->own_tasks_ = std::make_unique<PeriodicTasks>("tkv-store-maint");
      tasks = store->own_tasks_.get();
    }
    store->maintenance_ =
        tasks->Add("store maintenance", std::chrono::milliseconds(options.maintenance_interval_ms),
                   [s = store.get()] { return s->RunMaintenance(); });
  }
  return store;
}

absl::Status BlockStore::OpenDb() {
  std::error_code ec;
  fs::create_directories(options_.data_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data directory ", options_.data_dir, ": ", ec.message()));
  }
  TURBOKV_RETURN_IF_ERROR(LockDataDir());
  // The reserve is given back before RocksDB opens: replaying the WAL needs a new SST, which a
  // nearly full disk would refuse. It is taken again when there is room.
  disk_.ReleaseReserve(/*at_startup=*/true);
  Stopwatch watch;
  // Damaged files cost cache misses, not the store (store_repair.h, docs/faults.md).
  TURBOKV_ASSIGN_OR_RETURN(repair_, RepairIfDamaged(options_, clock_->NowSeconds()));
  open_timings_.repair_check = watch.Lap();
  for (const std::string& f : repair_.findings) {
    spdlog::error("data directory {} is damaged: {}", options_.data_dir, f);
  }
  if (repair_.access_rebuilt) {
    spdlog::warn("access column family dropped and recreated: recency falls back to put times");
  }
  if (repair_.namespaces_rebuilt) spdlog::warn("namespace records rebuilt from their second copy");
  if (repair_.salvaged) {
    spdlog::warn("data directory {} salvaged from its value log: {} blocks recovered, {} dropped",
                 options_.data_dir, repair_.salvaged_blocks, repair_.dropped_blocks);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(format::DbOptions(options_), options_.data_dir,
                                        format::Descriptors(options_), &handles, &db_);
  TURBOKV_RETURN_IF_ERROR(FromRocksDb(s, absl::StrCat("open ", options_.data_dir)));
  cf_default_ = handles[format::kDefault];
  cf_blocks_ = handles[format::kBlocks];
  cf_meta_ = handles[format::kMeta];
  cf_access_ = handles[format::kAccess];
  cf_namespaces_ = handles[format::kNamespaces];
  cf_namespaces_copy_ = handles[format::kNamespacesCopy];
  ValueLogOptions log_options;
  log_options.dir = (fs::path(options_.data_dir) / format::kValuesDir).string();
  log_options.segment_bytes = options_.segment_bytes;
  log_options.sync = options_.durability == Durability::kFsync;
  log_options.cache_bytes = std::min(options_.read_cache_bytes, options_.capacity_bytes);
  TURBOKV_ASSIGN_OR_RETURN(log_, ValueLog::Open(log_options));
  has_read_cache_ = log_options.cache_bytes > 0;
  namespaces_ =
      std::make_unique<NamespaceTable>(db_, cf_namespaces_, cf_namespaces_copy_, log_.get(),
                                       [this] { return AllocateSequences(1); });
  TURBOKV_ASSIGN_OR_RETURN(policy_,
                           MakeEvictionPolicy(options_.eviction_policy, options_.capacity_bytes));
  open_timings_.rocksdb_open = watch.Lap();
  return absl::OkStatus();
}

absl::Status BlockStore::LoadSequenceMark() {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf_default_, kSequenceMarkKey, &v);
  if (!s.ok() && !s.IsNotFound()) return FromRocksDb(s, "read the sequence mark");
  const uint64_t mark = s.ok() && v.size() == 8 ? GetFixed64LE(v.data()) : 0;
  sequence_mark_.store(mark);
  next_sequence_.store(std::max<uint64_t>(mark, 1));
  return absl::OkStatus();
}

uint64_t BlockStore::AllocateSequences(uint64_t n) {
  const uint64_t first = next_sequence_.fetch_add(n);
  if (first + n <= sequence_mark_.load()) return first;
  std::lock_guard<std::mutex> l(sequence_mu_);
  if (first + n <= sequence_mark_.load()) return first;
  const uint64_t mark = first + n + kSequenceStep;
  std::string v;
  format::PutFixed64LE(&v, mark);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Put(wo, cf_default_, kSequenceMarkKey, v);
  if (!s.ok()) {
    // Only a crash before the next successful move could reuse sequences past the old mark;
    // the records a crash leaves uncommitted are deallocated at the next open anyway.
    spdlog::warn("cannot persist the write-sequence mark: {}", s.ToString());
  }
  sequence_mark_.store(mark);
  return first;
}

absl::Status BlockStore::Recover() {
  Stopwatch watch;
  TURBOKV_RETURN_IF_ERROR(LoadSequenceMark());
  const int64_t now = clock_->NowSeconds();
  TURBOKV_RETURN_IF_ERROR(namespaces_->Load(now));
  // Merge-join block_meta with access (same keys, same order; ScanBlockMeta decodes on several
  // threads), straight into the index: a block costs its index entry and 24 bytes of restart
  // order here, nothing more. The restart order carries what the policy is told about each block
  // (fingerprint, charge), computed while the block's entry is in the cache: handing blocks over in
  // touch order visits the index at random.
  std::vector<RestartRecord> order;
  // Sized once from RocksDB's estimate of block_meta's entries (exact for compacted files; an
  // overestimate, counting deleted or overwritten entries, is given back after the scan).
  uint64_t estimate = 0;
  if (!db_->GetIntProperty(cf_meta_, "rocksdb.estimate-num-keys", &estimate)) estimate = 0;
  estimate = std::min<uint64_t>(estimate, UINT32_MAX);
  order.reserve(estimate);
  std::vector<std::string> orphans;
  std::vector<std::string> legacy;
  uint64_t max_sequence = 0, lost = 0;
  {
    uint64_t cached_ns = 0;
    bool cached_known = false;
    uint32_t cached_ttl = 0;
    std::lock_guard<std::mutex> l(mu_);
    // Tenants first: a block's usage is counted to its namespace's tenant as it is inserted.
    for (const NamespaceRecord& r : namespaces_->List()) {
      index_.SetNamespaceTenant(r.id, TenantNumber(r.tenant));
    }
    index_.Reserve(estimate);
    // The scanning threads decode; this one inserts (the index is not thread-safe).
    const int threads =
        static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, kMaxScanThreads));
    MetaScanStats scan_stats;
    TURBOKV_RETURN_IF_ERROR(ScanBlockMeta(
        db_, cf_meta_, cf_access_, threads,
        [&](MetaScanChunk& chunk) {
          for (std::string& k : chunk.malformed) orphans.push_back(std::move(k));
          // The key set's probe of a block a few ahead is loaded while this one is inserted.
          constexpr size_t kPrefetchAhead = 8;
          for (size_t i = 0; i < chunk.blocks.size(); ++i) {
            if (i + kPrefetchAhead < chunk.blocks.size()) {
              const ScannedBlock& next = chunk.blocks[i + kPrefetchAhead];
              index_.Prefetch(next.namespace_id, std::string_view(next.hash, next.hash_bytes));
            }
            const ScannedBlock& b = chunk.blocks[i];
            const uint64_t ns = b.namespace_id;
            if (ns != cached_ns || !cached_known) {
              cached_ns = ns;
              cached_known = namespaces_->Contains(ns);
              cached_ttl = namespaces_->TtlSeconds(ns);
            }
            if (!cached_known) {
              orphans.push_back(b.Key());
              continue;
            }
            const format::MetaValue& m = b.meta;
            // Written before the touch number existed: last use, one step per second.
            const uint64_t touch =
                b.touch != 0 ? b.touch
                             : static_cast<uint64_t>(std::max<int64_t>(b.last_access, 0)) << 20;
            if (!m.in_log) {
              legacy.push_back(b.Key());
              continue;
            }
            RecordLocation where;
            where.segment = m.segment;
            where.page = m.page;
            where.value_bytes = static_cast<uint32_t>(m.value_bytes);
            where.hash_bytes = b.hash_bytes;
            if (m.value_bytes > UINT32_MAX || !log_->MarkLive(where)) {
              orphans.push_back(b.Key());  // its value-log record is gone
              ++lost;
              continue;
            }
            max_sequence = std::max(max_sequence, m.sequence);
            const uint32_t slot =
                index_.Insert(ns, std::string_view(b.hash, b.hash_bytes), m.sequence, where,
                              static_cast<uint32_t>(std::max<int64_t>(b.last_access, 0)));
            order.push_back(RestartRecord{touch, Fingerprint(slot), slot, PolicyCharge(slot)});
            if (cached_ttl != 0) {
              ++ttl_blocks_;
              QueueExpiry(slot);
            }
          }
        },
        &scan_stats));
    index_.ShrinkToFit();
    open_timings_.scan = watch.Lap();
    open_timings_.scan.cpu_s += scan_stats.scanners_cpu_s;
    open_timings_.scan_threads = scan_stats.threads;
    open_timings_.scan_threads_cpu_s = scan_stats.scanners_cpu_s;
    // Least recently used first: the policy is handed the blocks in the order they were last
    // used, so it starts from the order the store had.
    // (A radix sort: touch numbers, then ties by fingerprint; std::sort's order.)
    SortRestartOrder(order);
    open_timings_.policy_sort = watch.Lap();
    policy_->Reserve(index_.slot_limit());
    // With one tenant every block's is 0 (no visit of its index entry).
    const bool tenants = tenant_names_.size() > 1;
    // The slots come in random order: the policy's per-slot state of a block a few ahead is
    // loaded while this one is inserted.
    constexpr size_t kPolicyPrefetchAhead = 8;
    for (size_t i = 0; i < order.size(); ++i) {
      if (i + kPolicyPrefetchAhead < order.size()) {
        policy_->Prefetch(order[i + kPolicyPrefetchAhead].slot);
      }
      const RestartRecord& r = order[i];
      policy_->OnInsert(r.slot, kNoSlot, r.fingerprint, r.charge,
                        tenants ? index_.tenant(r.slot) : 0, RequestInfo{});
    }
    next_touch_ = order.empty() ? 1 : order.back().touch + 1;
    open_timings_.policy = watch.Lap();
    open_timings_.policy.wall_s += open_timings_.policy_sort.wall_s;
    open_timings_.policy.cpu_s += open_timings_.policy_sort.cpu_s;
  }
  if (next_sequence_.load() <= max_sequence) next_sequence_.store(max_sequence + 1);
  if (lost > 0) {
    repair_.dropped_blocks += lost;
    repair_.findings.push_back(absl::StrCat(lost,
                                            " blocks have no value-log record (a "
                                            "segment cut short or removed): dropped"));
    spdlog::error("data directory {} is damaged: {}", options_.data_dir, repair_.findings.back());
  }
  if (!orphans.empty()) {
    rocksdb::WriteBatch batch;
    for (const std::string& k : orphans) {
      for (rocksdb::ColumnFamilyHandle* cf : {cf_meta_, cf_access_, cf_blocks_}) {
        TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Delete(cf, k), "batch delete"));
      }
    }
    TURBOKV_RETURN_IF_ERROR(Write(&batch, /*durable=*/true));
  }
  if (const uint64_t freed = log_->ReclaimGarbage(); freed > 0) {
    spdlog::info(
        "value log: {} bytes no block references deallocated (writes a crash left "
        "uncommitted, deallocations it interrupted)",
        freed);
  }
  open_timings_.reclaim = watch.Lap();
  return MigrateLegacyValues(std::move(legacy));
}

absl::Status BlockStore::MigrateLegacyValues(std::vector<std::string> keys) {
  if (keys.empty()) return absl::OkStatus();
  spdlog::info("migrating {} blocks of a store written before the value log into {}/{}",
               keys.size(), options_.data_dir, format::kValuesDir);
  const int64_t now = clock_->NowSeconds();
  uint64_t moved = 0, dropped = 0;
  for (size_t begin = 0; begin < keys.size(); begin += kMigrationBatchKeys) {
    // One batch: read the values, append them, commit their new metadata.
    std::vector<rocksdb::Slice> slices;
    for (size_t i = begin; i < std::min(keys.size(), begin + kMigrationBatchKeys); ++i) {
      slices.emplace_back(keys[i]);
    }
    std::vector<rocksdb::PinnableSlice> values(slices.size());
    std::vector<rocksdb::Status> statuses(slices.size());
    db_->MultiGet(rocksdb::ReadOptions(), cf_blocks_, slices.size(), slices.data(), values.data(),
                  statuses.data());
    std::vector<RecordWrite> records;
    std::vector<size_t> of;  // records[k] is slices[of[k]]
    rocksdb::WriteBatch batch;
    for (size_t j = 0; j < slices.size(); ++j) {
      const std::string_view v = values[j].ToStringView();
      std::string meta_value;
      format::MetaValue m;
      const bool ok =
          statuses[j].ok() &&
          db_->Get(rocksdb::ReadOptions(), cf_meta_, slices[j], &meta_value).ok() &&
          format::DecodeMeta(meta_value, &m) &&
          verifier_(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size()))
              .ok() &&
          (m.checksum == 0 || TrailerOf(v) == m.checksum);
      if (!ok) {
        for (rocksdb::ColumnFamilyHandle* cf : {cf_meta_, cf_access_, cf_blocks_}) {
          TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Delete(cf, slices[j]), "batch delete"));
        }
        ++dropped;
        continue;
      }
      RecordWrite w;
      w.namespace_id = GetFixed64BE(slices[j].data());
      w.hash = std::string_view(slices[j].data() + 8, slices[j].size() - 8);
      w.value = v;
      w.put_time = m.put_time;
      w.checksum = TrailerOf(v);
      records.push_back(w);
      of.push_back(j);
    }
    const uint64_t first = AllocateSequences(records.size());
    for (size_t k = 0; k < records.size(); ++k) records[k].sequence = first + k;
    TURBOKV_ASSIGN_OR_RETURN(std::vector<RecordLocation> placed, log_->Append(records));
    for (size_t k = 0; k < records.size(); ++k) {
      format::MetaValue m;
      m.value_bytes = records[k].value.size();
      m.put_time = records[k].put_time;
      m.checksum = records[k].checksum;
      m.in_log = true;
      m.segment = placed[k].segment;
      m.page = placed[k].page;
      m.sequence = records[k].sequence;
      TURBOKV_RETURN_IF_ERROR(
          FromRocksDb(batch.Put(cf_meta_, slices[of[k]], format::EncodeMeta(m)), "batch put"));
      TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Delete(cf_blocks_, slices[of[k]]), "delete"));
    }
    if (absl::Status s = Write(&batch, /*durable=*/true); !s.ok()) {
      for (const RecordLocation& p : placed) log_->Erase(p);
      return s;
    }
    std::lock_guard<std::mutex> l(mu_);
    for (size_t k = 0; k < records.size(); ++k) {
      const uint32_t slot =
          index_.Insert(records[k].namespace_id, records[k].hash, records[k].sequence, placed[k],
                        static_cast<uint32_t>(std::max<int64_t>(now, 0)));
      policy_->OnInsert(slot, kNoSlot, Fingerprint(slot), PolicyCharge(slot), index_.tenant(slot),
                        RequestInfo{});
      if (namespaces_->TtlSeconds(records[k].namespace_id) != 0) {
        ++ttl_blocks_;
        QueueExpiry(slot);
      }
    }
    moved += records.size();
  }
  // The legacy blob files hold only garbage now: a compaction lets RocksDB delete them.
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  (void)db_->CompactRange(compact, cf_blocks_, nullptr, nullptr);
  spdlog::info("migrated {} blocks into the value log ({} failed verification and were dropped)",
               moved, dropped);
  return absl::OkStatus();
}

BlockStore::~BlockStore() {
  maintenance_.Cancel();  // waits for a pass in progress
  own_tasks_.reset();
  if (db_ != nullptr) CloseDb();
  if (dir_lock_fd_ >= 0) ::close(dir_lock_fd_);  // the lock goes with the descriptor
}

void BlockStore::CloseDb() {
  if (namespaces_ != nullptr) (void)FlushAccessTimes();
  rocksdb::FlushOptions flush;
  flush.wait = true;
  std::vector<rocksdb::ColumnFamilyHandle*> all = {
      cf_default_, cf_blocks_, cf_meta_, cf_access_, cf_namespaces_, cf_namespaces_copy_};
  all.erase(std::remove(all.begin(), all.end(), nullptr), all.end());
  (void)db_->Flush(flush, all);
  for (rocksdb::ColumnFamilyHandle* h : all) (void)db_->DestroyColumnFamilyHandle(h);
  namespaces_.reset();
  (void)db_->Close();
  delete db_;
  db_ = nullptr;
  log_.reset();
}

absl::Status BlockStore::FlushAccessTimes() {
  rocksdb::WriteBatch batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (dirty_access_.empty()) return absl::OkStatus();
    for (const auto& [slot, d] : dirty_access_) {
      const BlockEntry& e = index_.at(slot);
      if (e.sequence() != d.sequence) continue;  // gone (and its slot reused) since
      std::string key;
      format::PutFixed64BE(&key, index_.NamespaceId(e.namespace_slot));
      key.append(e.hash_view());
      TURBOKV_RETURN_IF_ERROR(FromRocksDb(
          batch.Put(cf_access_, key, EncodeAccess(e.last_access, d.touch)), "batch put"));
    }
    dirty_access_.clear();
  }
  return Write(&batch, /*durable=*/false);
}

void BlockStore::MeasureDisk() {
  const DiskUsage usage = disk_.Measure(*log_);
  std::lock_guard<std::mutex> l(mu_);
  disk_usage_ = usage;
  // The value log and RocksDB's data files count against the capacity; the charges estimate
  // the metadata, and what RocksDB holds beyond the estimates (its WAL, SSTs not yet
  // compacted) is counted here.
  const uint64_t allocated = usage.counted();
  const uint64_t charged = index_.used_bytes() + std::max<int64_t>(reserved_bytes_, 0);
  disk_overhead_bytes_ = allocated > charged ? allocated - charged : 0;
}

absl::Status BlockStore::RunMaintenance() {
  const int64_t now = clock_->NowSeconds();
  if (disk_.TryResume(db_, now)) {
    std::lock_guard<std::mutex> l(mu_);
    ++write_resumes_;
  }
  MeasureDisk();
  // The expiry queue hands out what is due, a slice at a time: no scan of the index, and the
  // index lock is held only to take a slice.
  constexpr size_t kSlice = 1024;
  for (;;) {
    std::vector<std::string> due;
    size_t taken = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      const std::vector<ExpiryQueue::Item> items = expiry_.PopDue(now, kSlice);
      taken = items.size();
      for (const ExpiryQueue::Item& it : items) {
        if (it.slot >= index_.slot_limit()) continue;
        const BlockEntry& e = index_.at(it.slot);
        if (e.sequence() != it.sequence || !Expired(it.slot, now)) continue;
        std::string key;
        format::PutFixed64BE(&key, index_.NamespaceId(e.namespace_slot));
        key.append(e.hash_view());
        due.push_back(std::move(key));
      }
    }
    if (!due.empty()) {
      TURBOKV_ASSIGN_OR_RETURN(
          uint64_t n, DeleteKeys(std::move(due), RemovalReason::kExpired, /*only_expired_at=*/now));
      std::lock_guard<std::mutex> l(mu_);
      expired_blocks_ += n;
    }
    if (taken < kSlice) break;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (expiry_.size() > 2 * ttl_blocks_ + 1024) {
      expiry_.Compact([&](const ExpiryQueue::Item& it) {
        return it.slot < index_.slot_limit() && index_.at(it.slot).sequence() == it.sequence &&
               ExpiryOf(it.slot) == it.expire_at;
      });
    }
  }
  return FlushAccessTimes();
}

absl::Status BlockStore::LockDataDir() {
  const std::string path = (fs::path(options_.data_dir) / format::kDirLockFile).string();
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open the lock file ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid(holder, n > 0 ? static_cast<size_t>(n) : 0);
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return absl::FailedPreconditionError(
          absl::StrCat("data directory ", options_.data_dir, " is in use by another turbokv-server",
                       pid.empty() ? std::string() : absl::StrCat(" (pid ", pid, ")"),
                       "; stop it or choose another --data-dir"));
    }
    return absl::UnavailableError(absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    spdlog::warn("cannot write this process's pid into {}: {}", path, std::strerror(errno));
  }
  dir_lock_fd_ = fd;
  return absl::OkStatus();
}

}  // namespace turbokv::server
