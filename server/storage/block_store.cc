#include "server/storage/block_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/sst_file_manager.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "server/storage/rocksdb_crc32c.h"
#include "server/storage/rocksdb_status.h"
#include "server/storage/store_format.h"
#include "server/storage/store_repair.h"
#include "spdlog/spdlog.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::server {
namespace {

using format::EncodeAccess;
using format::EncodeMeta;
using format::GetFixed64BE;
using format::GetFixed64LE;
using format::NamespaceKey;
using format::PutFixed64BE;
using format::PutFixed64LE;
using format::TrailerOf;
constexpr uint8_t kRecordVersion = 1;
// Preallocated bytes released when the disk fills (store_repair.h's neighbour, docs/faults.md).
constexpr char kReserveFile[] = "RESERVE";

void PutFixed32LE(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetFixed32LE(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string BlockKey(uint64_t namespace_id, std::string_view hash) {
  std::string key;
  key.reserve(8 + hash.size());
  PutFixed64BE(&key, namespace_id);
  key.append(hash);
  return key;
}

// Bytes a block is charged against the capacity: its value, its key in three column
// families, and the fixed metadata values.
uint64_t ChargeFor(size_t key_bytes, size_t value_bytes) {
  return value_bytes + 3 * key_bytes + 24;
}

std::string EncodeRecord(const NamespaceRecord& r) {
  std::string v;
  v.push_back(static_cast<char>(kRecordVersion));
  PutFixed32LE(&v, r.ttl_seconds);
  PutFixed64LE(&v, r.logical_block_bytes);
  v.append(r.descriptor);
  return v;
}

absl::StatusOr<NamespaceRecord> DecodeRecord(uint64_t id, std::string_view v) {
  if (v.size() < 13 || static_cast<uint8_t>(v[0]) != kRecordVersion) {
    return absl::DataLossError(absl::StrCat("namespace record ", absl::Hex(id, absl::kZeroPad16),
                                            " is malformed (", v.size(), " bytes)"));
  }
  NamespaceRecord r;
  r.id = id;
  r.ttl_seconds = GetFixed32LE(v.data() + 1);
  r.logical_block_bytes = GetFixed64LE(v.data() + 5);
  r.descriptor = std::string(v.substr(13));
  return r;
}

}  // namespace

absl::Status ValidateBlockHash(std::string_view hash) {
  if (hash.size() < kMinBlockHashBytes || hash.size() > kMaxBlockHashBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_hash has ", hash.size(), " bytes; expected 8 to 32 bytes"));
  }
  return absl::OkStatus();
}

BlockStore::BlockStore(const StorageOptions& options, ValueVerifier verifier, const Clock* clock)
    : options_(options),
      verifier_(std::move(verifier)),
      clock_(clock != nullptr ? clock : SystemClock()) {}

absl::StatusOr<std::unique_ptr<BlockStore>> BlockStore::Open(const StorageOptions& options,
                                                             ValueVerifier verifier,
                                                             const Clock* clock) {
  TURBOKV_RETURN_IF_ERROR(options.Validate());
  if (!verifier) return absl::InvalidArgumentError("BlockStore::Open needs a value verifier");
  spdlog::info("RocksDB's CRC32C (WAL and blob records) runs on {}",
               RocksDbCrc32cImplementation());
  std::unique_ptr<BlockStore> store(new BlockStore(options, std::move(verifier), clock));
  TURBOKV_RETURN_IF_ERROR(store->OpenDb());
  TURBOKV_RETURN_IF_ERROR(store->Recover());
  store->CreateReserve();
  if (options.maintenance_interval_ms > 0) {
    store->maintenance_ = std::thread([s = store.get()] { s->MaintenanceLoop(); });
  }
  return store;
}

absl::Status BlockStore::OpenDb() {
  std::error_code ec;
  std::filesystem::create_directories(options_.data_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data directory ", options_.data_dir, ": ", ec.message()));
  }
  TURBOKV_RETURN_IF_ERROR(LockDataDir());
  // The reserve is given back before RocksDB opens: replaying the WAL needs a new blob file
  // and SST, which a nearly full disk would refuse. It is taken again when there is room.
  ReleaseReserve(/*at_startup=*/true);
  // Damaged files cost cache misses, not the store (store_repair.h, docs/faults.md).
  TURBOKV_ASSIGN_OR_RETURN(repair_, RepairIfDamaged(options_, verifier_, clock_->NowSeconds()));
  for (const std::string& f : repair_.findings) {
    spdlog::error("data directory {} is damaged: {}", options_.data_dir, f);
  }
  if (repair_.access_rebuilt) {
    spdlog::warn("access column family dropped and recreated: recency falls back to put times");
  }
  if (repair_.namespaces_rebuilt) {
    spdlog::warn("namespace records rebuilt from their second copy");
  }
  if (repair_.salvaged) {
    spdlog::warn("data directory {} salvaged: {} blocks recovered, {} dropped",
                 options_.data_dir, repair_.salvaged_blocks, repair_.dropped_blocks);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DBOptions db_options = format::DbOptions(options_);
  sst_file_manager_ = db_options.sst_file_manager;
  blob_cache_ = format::NewBlobCache(options_);
  rocksdb::Status s = rocksdb::DB::Open(db_options, options_.data_dir,
                                        format::Descriptors(options_, blob_cache_), &handles, &db_);
  TURBOKV_RETURN_IF_ERROR(FromRocksDb(s, absl::StrCat("open ", options_.data_dir)));
  cf_default_ = handles[format::kDefault];
  cf_blocks_ = handles[format::kBlocks];
  cf_meta_ = handles[format::kMeta];
  cf_access_ = handles[format::kAccess];
  cf_namespaces_ = handles[format::kNamespaces];
  cf_namespaces_copy_ = handles[format::kNamespacesCopy];
  blocks_table_factory_ = db_->GetOptions(cf_blocks_).table_factory;
  return absl::OkStatus();
}

absl::Status BlockStore::Recover() {
  // Namespace records live in two column families (two sets of SST files); a record missing
  // from one (a store written before the copy existed, or a crash) is written back to it.
  absl::flat_hash_map<uint64_t, std::string> in_primary, in_copy;
  for (auto [cf, into] : {std::pair{cf_namespaces_, &in_primary}, std::pair{cf_namespaces_copy_,
                                                                             &in_copy}}) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != 8) continue;
      (*into)[GetFixed64BE(it->key().data())] = it->value().ToString();
    }
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(it->status(), "scan namespaces"));
  }
  {
    rocksdb::WriteBatch fix;
    for (auto [from, to, cf] : {std::tuple{&in_primary, &in_copy, cf_namespaces_copy_},
                                std::tuple{&in_copy, &in_primary, cf_namespaces_}}) {
      for (const auto& [id, v] : *from) {
        if (!to->contains(id)) {
          TURBOKV_RETURN_IF_ERROR(FromRocksDb(fix.Put(cf, NamespaceKey(id), v), "batch put"));
        }
      }
    }
    for (const auto& [id, v] : in_copy) in_primary.emplace(id, v);
    if (fix.Count() > 0) TURBOKV_RETURN_IF_ERROR(WriteSync(&fix));
  }
  for (const auto& [id, v] : in_primary) {
    TURBOKV_ASSIGN_OR_RETURN(NamespaceRecord r, DecodeRecord(id, v));
    namespaces_[id] = std::move(r);
  }
  // Merge-join block_meta with access (same keys, same order).
  std::vector<IndexEntry> entries;
  std::vector<std::string> orphans;
  {
    std::unique_ptr<rocksdb::Iterator> meta(db_->NewIterator(rocksdb::ReadOptions(), cf_meta_));
    std::unique_ptr<rocksdb::Iterator> access(db_->NewIterator(rocksdb::ReadOptions(), cf_access_));
    access->SeekToFirst();
    for (meta->SeekToFirst(); meta->Valid(); meta->Next()) {
      rocksdb::Slice key = meta->key();
      rocksdb::Slice value = meta->value();
      if (key.size() < 8 + kMinBlockHashBytes || (value.size() != 16 && value.size() != 24)) {
        orphans.push_back(key.ToString());
        continue;
      }
      IndexEntry e;
      e.key = key.ToString();
      e.namespace_id = GetFixed64BE(key.data());
      e.value_bytes = GetFixed64LE(value.data());
      e.last_access = static_cast<int64_t>(GetFixed64LE(value.data() + 8));
      e.charge = ChargeFor(e.key.size(), e.value_bytes);
      if (value.size() == 24) e.checksum = GetFixed64LE(value.data() + 16);
      while (access->Valid() && access->key().compare(key) < 0) access->Next();
      if (access->Valid() && access->key() == key &&
          (access->value().size() == 8 || access->value().size() == 16)) {
        e.last_access = std::max<int64_t>(
            e.last_access, static_cast<int64_t>(GetFixed64LE(access->value().data())));
        if (access->value().size() == 16) e.recency = GetFixed64LE(access->value().data() + 8);
      }
      // Written before the eviction order key existed: last use, one second per call.
      if (e.recency == 0) {
        e.recency = static_cast<uint64_t>(std::max<int64_t>(e.last_access, 0))
                    << kRecencyIndexBits;
      }
      if (!namespaces_.contains(e.namespace_id)) {
        orphans.push_back(std::move(e.key));
        continue;
      }
      entries.push_back(std::move(e));
    }
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(meta->status(), "scan block_meta"));
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(access->status(), "scan access"));
  }
  // Least recently used first, so the index's order is the one persisted. Calls numbered from
  // here on rank above every stored block (and above the legacy one-second-per-call keys).
  std::stable_sort(entries.begin(), entries.end(), [](const IndexEntry& a, const IndexEntry& b) {
    return a.recency < b.recency;
  });
  const auto now_seconds = static_cast<uint64_t>(std::max<int64_t>(clock_->NowSeconds(), 0));
  const uint64_t newest_call = entries.empty() ? 0 : RecencyCall(entries.back().recency);
  next_call_ = std::max(now_seconds, newest_call) + 2;
  for (IndexEntry& e : entries) {
    e.version = ++next_version_;
    e.expire_at = ExpiryOf(e);
    index_.Upsert(std::move(e));
  }
  if (!orphans.empty()) TURBOKV_RETURN_IF_ERROR(DeleteKeys(std::move(orphans)).status());
  return absl::OkStatus();
}

BlockStore::~BlockStore() {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (maintenance_.joinable()) maintenance_.join();
  if (db_ != nullptr) CloseDb();
  if (dir_lock_fd_ >= 0) ::close(dir_lock_fd_);  // the lock goes with the descriptor
}

void BlockStore::CloseDb() {
  (void)FlushAccessTimes();
  rocksdb::FlushOptions flush;
  flush.wait = true;
  (void)db_->Flush(flush, {cf_default_, cf_blocks_, cf_meta_, cf_access_, cf_namespaces_, cf_namespaces_copy_});
  for (rocksdb::ColumnFamilyHandle* h :
       {cf_default_, cf_blocks_, cf_meta_, cf_access_, cf_namespaces_, cf_namespaces_copy_}) {
    if (h != nullptr) (void)db_->DestroyColumnFamilyHandle(h);
  }
  (void)db_->Close();
  delete db_;
  db_ = nullptr;
}

absl::Status BlockStore::WriteSync(rocksdb::WriteBatch* batch) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, batch);
  if (s.IsIOError()) needs_resume_.store(true);
  return FromRocksDb(s, "write batch");
}

absl::Status BlockStore::Write(rocksdb::WriteBatch* batch, bool durable) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.durability == Durability::kNone || !durable;
  wo.sync = durable && options_.durability == Durability::kFsync;
  rocksdb::Status s = db_->Write(wo, batch);
  // A failed write (a full disk) leaves RocksDB in a background-error state that fails every
  // later write until it is resumed: the maintenance pass resumes it (TryResume).
  if (s.IsIOError()) needs_resume_.store(true);
  return FromRocksDb(s, "write batch");
}

bool BlockStore::Expired(const IndexEntry& e, int64_t now) const {
  return e.expire_at != 0 && now >= e.expire_at;
}

int64_t BlockStore::ExpiryOf(const IndexEntry& e) const {
  auto it = namespaces_.find(e.namespace_id);
  if (it == namespaces_.end() || it->second.ttl_seconds == 0) return 0;
  return std::max<int64_t>(e.last_access + it->second.ttl_seconds, e.lease_until);
}

void BlockStore::AcquireKeys(std::unique_lock<std::mutex>& l,
                             const std::vector<std::string_view>& keys) {
  auto any_busy = [&] {
    for (std::string_view k : keys) {
      if (busy_.contains(absl::string_view(k.data(), k.size()))) return true;
    }
    return false;
  };
  busy_cv_.wait(l, [&] { return !any_busy(); });
  for (std::string_view k : keys) busy_.emplace(k);
}

void BlockStore::ReleaseKeys(const std::vector<std::string_view>& keys) {
  for (std::string_view k : keys) busy_.erase(absl::string_view(k.data(), k.size()));
  busy_cv_.notify_all();
}

absl::Status BlockStore::PutNamespace(const NamespaceRecord& record) {
  std::lock_guard<std::mutex> wl(namespace_mu_);
  rocksdb::WriteBatch batch;
  for (rocksdb::ColumnFamilyHandle* cf : {cf_namespaces_, cf_namespaces_copy_}) {
    TURBOKV_RETURN_IF_ERROR(
        FromRocksDb(batch.Put(cf, NamespaceKey(record.id), EncodeRecord(record)), "batch put"));
  }
  // A registration is rare and everything else depends on it: WAL on and fsync'ed whatever
  // the durability option says (with `none`, blocks may be lost in a crash, their namespace
  // never).
  TURBOKV_RETURN_IF_ERROR(WriteSync(&batch));
  std::lock_guard<std::mutex> l(mu_);
  auto old = namespaces_.find(record.id);
  const bool ttl_changed = old != namespaces_.end() && old->second.ttl_seconds != record.ttl_seconds;
  namespaces_[record.id] = record;
  if (ttl_changed) {
    // Rare (a re-registration with another ttl_seconds): requeue the namespace's blocks.
    for (const IndexEntry& copy : index_.EntriesOf(record.id)) {
      IndexEntry* e = index_.Find(copy.key);
      if (e != nullptr) index_.SetExpiry(e, ExpiryOf(*e));
    }
  }
  return absl::OkStatus();
}

std::optional<NamespaceRecord> BlockStore::GetNamespace(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = namespaces_.find(id);
  if (it == namespaces_.end()) return std::nullopt;
  return it->second;
}

std::vector<NamespaceRecord> BlockStore::ListNamespaces() const {
  std::vector<NamespaceRecord> out;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, r] : namespaces_) out.push_back(r);
  }
  std::sort(out.begin(), out.end(),
            [](const NamespaceRecord& a, const NamespaceRecord& b) { return a.id < b.id; });
  return out;
}

absl::StatusOr<uint64_t> BlockStore::DropNamespace(uint64_t id) {
  std::lock_guard<std::mutex> wl(namespace_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!namespaces_.contains(id)) {
      return absl::NotFoundError(
          absl::StrCat("namespace ", absl::Hex(id, absl::kZeroPad16), " is not registered"));
    }
  }
  std::string begin = NamespaceKey(id);
  std::string end = begin + std::string(kMaxBlockHashBytes + 1, '\xff');
  rocksdb::WriteBatch batch;
  for (rocksdb::ColumnFamilyHandle* cf : {cf_blocks_, cf_meta_, cf_access_}) {
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.DeleteRange(cf, begin, end), "batch delete range"));
  }
  for (rocksdb::ColumnFamilyHandle* cf : {cf_namespaces_, cf_namespaces_copy_}) {
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Delete(cf, begin), "batch delete"));
  }
  TURBOKV_RETURN_IF_ERROR(Write(&batch, /*durable=*/true));
  std::lock_guard<std::mutex> l(mu_);
  std::vector<IndexEntry> entries = index_.EntriesOf(id);
  for (const IndexEntry& e : entries) {
    index_.Erase(e.key);
    dirty_access_.erase(e.key);
  }
  namespaces_.erase(id);
  return entries.size();
}

uint64_t BlockStore::NextRecency(ChainCursor* chain) {
  if (chain->call == 0) chain->call = next_call_++;
  const uint64_t position =
      std::min<uint64_t>(chain->next++, (uint64_t{1} << kRecencyIndexBits) - 1);
  return (chain->call << kRecencyIndexBits) - position;
}

std::vector<absl::Status> BlockStore::PutBlocks(uint64_t namespace_id,
                                                absl::Span<const BlockWrite> blocks,
                                                ChainCursor* chain) {
  ChainCursor whole_call;  // no cursor: this call is the whole request
  if (chain == nullptr) chain = &whole_call;
  std::vector<absl::Status> results(blocks.size());
  std::vector<std::string> keys(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    results[i] = ValidateBlockHash(blocks[i].hash);
    if (results[i].ok()) keys[i] = BlockKey(namespace_id, blocks[i].hash);
  }
  absl::flat_hash_set<std::string_view> batch_keys;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (results[i].ok()) batch_keys.insert(keys[i]);
  }
  std::vector<std::string_view> locked(batch_keys.begin(), batch_keys.end());

  // 1. Under the index lock: claim the keys (a concurrent writer of one of them waits, so the
  //    index sees the writes of a key in the order RocksDB commits them), reserve capacity and
  //    take victims (claimed too, so nobody re-puts one while its deletion is in flight).
  std::unique_lock<std::mutex> l(mu_);
  if (!namespaces_.contains(namespace_id)) {
    absl::Status nf = absl::NotFoundError(absl::StrCat(
        "namespace ", absl::Hex(namespace_id, absl::kZeroPad16), " is not registered"));
    std::fill(results.begin(), results.end(), nf);
    return results;
  }
  const int64_t now = clock_->NowSeconds();
  l.unlock();
  if (absl::Status room = CheckDiskRoom(blocks, now); !room.ok()) {
    for (absl::Status& r : results) {
      if (r.ok()) r = room;
    }
    return results;
  }
  l.lock();
  AcquireKeys(l, locked);
  std::vector<size_t> accepted;
  std::vector<IndexEntry> victims;
  uint64_t reserved = 0;  // net growth reserved for this call
  {
    const uint64_t capacity = options_.capacity_bytes;
    const auto high =
        static_cast<uint64_t>(static_cast<double>(capacity) * options_.high_watermark);
    const auto low = static_cast<uint64_t>(static_cast<double>(capacity) * options_.low_watermark);
    absl::flat_hash_map<std::string_view, uint64_t> accepted_charge;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (!results[i].ok()) continue;
      const uint64_t charge = ChargeFor(keys[i].size(), blocks[i].value.size());
      uint64_t credit = 0;  // the charge of the block this one replaces
      if (auto it = accepted_charge.find(keys[i]); it != accepted_charge.end()) {
        credit = it->second;
      } else if (const IndexEntry* old = index_.Find(keys[i]); old != nullptr) {
        credit = old->charge;
      }
      auto projected = [&] { return index_.used_bytes() + reserved_bytes_ - credit + charge; };
      // Eviction also counts what RocksDB holds on disk beyond the charged bytes (WAL, blob
      // garbage not yet collected, SST overhead; measured by the maintenance pass), so the
      // budget is reached before the disk is.
      auto on_disk = [&] { return projected() + disk_overhead_bytes_; };
      std::vector<IndexEntry> taken;
      if (on_disk() > high) {
        const uint64_t target = std::min(low, high);
        const uint64_t need = on_disk() > target ? on_disk() - target : 0;
        // Never an earlier block of this same request: the block being put hangs below it
        // in the chain, so evicting it would strand the block that made room.
        taken = index_.TakeVictims(need, now, busy_, chain->call);
      }
      if (projected() > capacity) {
        // Does not fit even with everything evictable gone: evict nothing for it.
        index_.Restore(std::move(taken));
        const uint64_t used = index_.used_bytes() + reserved_bytes_;
        results[i] = absl::ResourceExhaustedError(absl::StrCat(
            "block of ", blocks[i].value.size(), " bytes does not fit: ", used, " of ", capacity,
            " capacity bytes are in use or reserved by writes in flight, and none of them is "
            "evictable (leased, written by a request in flight, or an earlier block of this "
            "request's prefix chain)"));
        if (refused_log_.Due(now)) {
          spdlog::warn("put refused (RESOURCE_EXHAUSTED, {} since the last such line): {}",
                       refused_log_.TakeCount(), std::string(results[i].message()));
        }
        continue;
      }
      for (IndexEntry& v : taken) {
        busy_.emplace(v.key);
        dirty_access_.erase(v.key);
        victims.push_back(std::move(v));
      }
      const uint64_t growth = charge - credit;  // may wrap: unsigned modular sums stay exact
      reserved += growth;
      reserved_bytes_ += growth;
      accepted_charge[keys[i]] = charge;
      accepted.push_back(i);
    }
  }
  // Eviction order keys, numbered under the lock in chain order (persisted with the blocks).
  std::vector<uint64_t> recency(blocks.size());
  for (size_t i : accepted) recency[i] = NextRecency(chain);
  std::vector<std::string_view> victim_keys;
  for (const IndexEntry& v : victims) victim_keys.push_back(v.key);
  if (accepted.empty() && victims.empty()) {
    ReleaseKeys(locked);
    return results;
  }
  l.unlock();

  // 2. No turbokv lock held: concurrent PutBlocks calls reach RocksDB together and its write
  //    group commit batches them into one WAL write. The batch's buffer is sized up front:
  //    grown by appends it was reallocated (and copied) about twice per 2 MiB value.
  size_t batch_bytes = 12;  // WriteBatch header
  constexpr size_t kRecordOverhead = 16;  // tag, column family id and two varint lengths
  for (const IndexEntry& v : victims) batch_bytes += 3 * (v.key.size() + kRecordOverhead);
  for (size_t i : accepted) {
    batch_bytes += blocks[i].value.size() + 3 * (keys[i].size() + kRecordOverhead) + 24 + 8;
  }
  rocksdb::WriteBatch batch(batch_bytes);
  absl::Status s;
  for (const IndexEntry& v : victims) {
    for (rocksdb::ColumnFamilyHandle* cf : {cf_blocks_, cf_meta_, cf_access_}) {
      if (s.ok()) s = FromRocksDb(batch.Delete(cf, v.key), "batch delete");
    }
  }
  for (size_t i : accepted) {
    if (!s.ok()) break;
    s = FromRocksDb(batch.Put(cf_blocks_, keys[i], blocks[i].value), "batch put");
    if (s.ok()) {
      s = FromRocksDb(
          batch.Put(cf_meta_, keys[i],
                    EncodeMeta(blocks[i].value.size(), now, TrailerOf(blocks[i].value))),
          "batch put");
    }
    if (s.ok()) {
      s = FromRocksDb(batch.Put(cf_access_, keys[i], EncodeAccess(now, recency[i])), "batch put");
    }
  }
  if (s.ok()) s = Write(&batch, /*durable=*/true);

  // 3. Under the index lock again: publish (or roll back), release the claims.
  l.lock();
  reserved_bytes_ -= reserved;
  if (!s.ok()) {
    index_.Restore(std::move(victims));
    for (size_t i : accepted) results[i] = s;
    if (write_failure_log_.Due(now)) {
      spdlog::warn("put of {} blocks failed ({} such failures since the last line): {}",
                   accepted.size(), write_failure_log_.TakeCount(), s.ToString());
    }
  } else {
    for (const IndexEntry& v : victims) {
      evicted_blocks_ += 1;
      evicted_bytes_ += v.charge;
    }
    // Blocks of a request usually form a prefix chain in request order. Each goes immediately
    // below the request's previous block in the eviction order (the first at the most
    // recently used end), so eviction takes chain tails before the blocks every later block
    // depends on (a lost head makes the chain unreachable), also across the several calls a
    // long request is committed in. A hash put twice in one call: RocksDB keeps the later
    // value, and so does the index.
    absl::flat_hash_map<std::string_view, size_t> last_of;
    for (size_t i : accepted) last_of[keys[i]] = i;
    for (size_t i : accepted) {
      if (last_of[keys[i]] != i) continue;
      IndexEntry e;
      e.key = keys[i];
      e.namespace_id = namespace_id;
      e.value_bytes = blocks[i].value.size();
      e.charge = ChargeFor(keys[i].size(), blocks[i].value.size());
      e.last_access = now;
      e.checksum = TrailerOf(blocks[i].value);
      e.version = ++next_version_;
      e.recency = recency[i];
      dirty_access_.erase(e.key);
      e.expire_at = 0;
      index_.Upsert(std::move(e), chain->anchor);
      chain->anchor = keys[i];
      IndexEntry* in = index_.Find(keys[i]);
      index_.SetExpiry(in, ExpiryOf(*in));
    }
  }
  ReleaseKeys(locked);
  ReleaseKeys(victim_keys);
  return results;
}

absl::StatusOr<std::vector<std::optional<std::string>>> BlockStore::GetBlocks(
    uint64_t namespace_id, absl::Span<const std::string_view> hashes, bool* would_block) {
  TURBOKV_ASSIGN_OR_RETURN(std::vector<std::optional<PinnedValue>> pinned,
                           GetPinnedBlocks(namespace_id, hashes, would_block));
  std::vector<std::optional<std::string>> out(pinned.size());
  for (size_t i = 0; i < pinned.size(); ++i) {
    if (pinned[i].has_value()) out[i] = std::string(pinned[i]->bytes);
  }
  return out;
}

namespace {

// What a PinnedValue owns. The slice goes first (members are destroyed in reverse order): its
// cleanup releases an entry of one of the caches held below it.
struct Pin {
  std::shared_ptr<rocksdb::Cache> blob_cache;
  std::shared_ptr<rocksdb::TableFactory> table_factory;
  rocksdb::PinnableSlice slice;
};

}  // namespace

absl::StatusOr<std::vector<std::optional<PinnedValue>>> BlockStore::GetPinnedBlocks(
    uint64_t namespace_id, absl::Span<const std::string_view> hashes, bool* would_block,
    ChainCursor* chain) {
  const bool cache_only = would_block != nullptr;
  if (cache_only) *would_block = false;
  std::vector<std::optional<PinnedValue>> out(hashes.size());
  std::vector<std::string> keys(hashes.size());
  std::vector<size_t> to_read;
  std::vector<uint64_t> checksums;  // per to_read: the checksum the index expects
  std::vector<uint64_t> versions;   // per to_read: the index entry's version at that time
  std::vector<std::string> expired;
  const int64_t now = clock_->NowSeconds();
  bool all_bound = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!namespaces_.contains(namespace_id)) {
      return absl::NotFoundError(absl::StrCat(
          "namespace ", absl::Hex(namespace_id, absl::kZeroPad16), " is not registered"));
    }
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (!ValidateBlockHash(hashes[i]).ok()) continue;
      keys[i] = BlockKey(namespace_id, hashes[i]);
      const IndexEntry* e = index_.Find(keys[i]);
      if (e == nullptr) continue;
      if (Expired(*e, now)) {
        expired.push_back(keys[i]);
        continue;
      }
      to_read.push_back(i);
      checksums.push_back(e->checksum);
      versions.push_back(e->version);
      all_bound &= e->checksum != 0;
    }
  }
  if (cache_only && !expired.empty()) {
    *would_block = true;  // deleting the expired blocks writes
    return out;
  }
  std::vector<std::string> corrupt;
  if (!to_read.empty()) {
    std::vector<rocksdb::Slice> slices;
    slices.reserve(to_read.size());
    for (size_t i : to_read) slices.emplace_back(keys[i]);
    std::vector<rocksdb::PinnableSlice> values(to_read.size());
    std::vector<rocksdb::Status> statuses(to_read.size());
    rocksdb::ReadOptions ro;
    // RocksDB's own read checksums (the blob record's CRC32C over key and value, the SST
    // block CRCs) duplicate turbokv's check once the index knows each block's checksum: the
    // value's xxHash3-64 trailer must verify AND equal the checksum recorded for this key at
    // put time, which binds the bytes to their key as RocksDB's check did. Blocks whose
    // metadata predates the recorded checksum keep RocksDB's check.
    ro.verify_checksums = !all_bound;
    if (cache_only) ro.read_tier = rocksdb::kBlockCacheTier;
    db_->MultiGet(ro, cf_blocks_, slices.size(), slices.data(), values.data(), statuses.data());
    for (size_t j = 0; j < to_read.size(); ++j) {
      const size_t i = to_read[j];
      // Deleted between the index check and the read: the deleter updates the index.
      if (statuses[j].IsNotFound()) continue;
      if (cache_only && statuses[j].IsIncomplete()) {  // not in memory: needs I/O
        *would_block = true;
        return out;
      }
      if (statuses[j].IsCorruption()) {
        corrupt.push_back(keys[i]);
        continue;
      }
      TURBOKV_RETURN_IF_ERROR(FromRocksDb(statuses[j], "multiget blocks"));
      const std::string_view value(values[j].data(), values[j].size());
      absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(value.data()),
                                      value.size());
      if (!verifier_(bytes).ok()) {
        corrupt.push_back(keys[i]);
        continue;
      }
      if (checksums[j] != 0 && TrailerOf(value) != checksums[j]) {
        // Either a put of this key reached RocksDB between the index check and the read, or
        // RocksDB returned another key's value. A put writes RocksDB with its key claimed and
        // publishes the new checksum (and version) to the index afterwards, so a claimed key or
        // a changed version means a concurrent overwrite: the bytes read are some whole put's,
        // but not provably this key's as the index knew it — a miss, never a deletion.
        std::lock_guard<std::mutex> l(mu_);
        const IndexEntry* e = index_.Find(keys[i]);
        if (e == nullptr || e->checksum != TrailerOf(value)) {
          const bool overwritten =
              busy_.contains(absl::string_view(keys[i])) || e == nullptr ||
              e->version != versions[j];
          if (!overwritten) corrupt.push_back(keys[i]);
          continue;
        }
      }
      // No copy: the pinned cache entry (or RocksDB's read buffer) moves into the owner.
      auto pin = std::make_shared<Pin>();
      pin->blob_cache = blob_cache_;
      pin->table_factory = blocks_table_factory_;
      pin->slice = std::move(values[j]);
      const std::string_view pinned(pin->slice.data(), pin->slice.size());
      out[i] = PinnedValue{std::move(pin), pinned};
    }
  }
  if (cache_only && !corrupt.empty()) {  // deleting the damaged blocks writes
    *would_block = true;
    return out;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    // In chain order, as in PutBlocks: each block just below the request's previous one.
    ChainCursor whole_call;
    if (chain == nullptr) chain = &whole_call;
    for (size_t i : to_read) {
      if (!out[i].has_value()) continue;
      IndexEntry* e = index_.Find(keys[i]);
      if (e == nullptr) continue;
      e->last_access = now;
      e->lease_until = 0;
      e->recency = NextRecency(chain);
      index_.SetExpiry(e, ExpiryOf(*e));
      index_.Touch(e, chain->anchor);
      chain->anchor = e->key;
      dirty_access_.insert(keys[i]);
    }
    checksum_failures_ += corrupt.size();
  }
  if (!corrupt.empty()) {
    checksum_log_.Add(corrupt.size() - 1);
    if (checksum_log_.Due(now)) {
      spdlog::warn("deleting stored blocks that failed verification: key {} ({} since the last "
                   "such line)", absl::BytesToHexString(corrupt.front()),
                   checksum_log_.TakeCount());
    }
  }
  if (!expired.empty()) {
    TURBOKV_ASSIGN_OR_RETURN(uint64_t n, DeleteKeys(expired, /*only_expired_at=*/now));
    std::lock_guard<std::mutex> l(mu_);
    expired_blocks_ += n;
  }
  if (!corrupt.empty()) TURBOKV_RETURN_IF_ERROR(DeleteKeys(corrupt).status());
  return out;
}

absl::StatusOr<size_t> BlockStore::Lookup(uint64_t namespace_id,
                                          absl::Span<const std::string_view> hashes,
                                          uint32_t lease_seconds) {
  const int64_t now = clock_->NowSeconds();
  // The chain is walked in slices, the index lock released between them, so one long chain
  // never holds up other calls for long.
  constexpr size_t kSlice = 256;
  // The storage key is built in place (namespace id, then the hash): no allocation per hash.
  char key[8 + kMaxBlockHashBytes];
  for (int b = 0; b < 8; ++b) key[b] = static_cast<char>(namespace_id >> (56 - 8 * b));
  size_t matched = 0;
  std::vector<IndexEntry*> chain;
  ChainCursor cursor;
  for (size_t begin = 0; begin < hashes.size() || begin == 0; begin += kSlice) {
    std::lock_guard<std::mutex> l(mu_);
    if (begin == 0 && !namespaces_.contains(namespace_id)) {
      return absl::NotFoundError(absl::StrCat(
          "namespace ", absl::Hex(namespace_id, absl::kZeroPad16), " is not registered"));
    }
    chain.clear();
    bool stop = false;
    for (size_t i = begin; i < std::min(hashes.size(), begin + kSlice); ++i) {
      if (!ValidateBlockHash(hashes[i]).ok()) {
        stop = true;
        break;
      }
      std::memcpy(key + 8, hashes[i].data(), hashes[i].size());
      IndexEntry* e = index_.Find(std::string_view(key, 8 + hashes[i].size()));
      if (e == nullptr || Expired(*e, now)) {
        stop = true;
        break;
      }
      if (lease_seconds > 0) {
        e->lease_until = std::max<int64_t>(e->lease_until, now + lease_seconds);
        if (e->expire_at != 0) index_.SetExpiry(e, ExpiryOf(*e));
      }
      chain.push_back(e);
    }
    // In chain order, each block just below the previous one (see PutBlocks); the slices of
    // one call continue one chain. (Not persisted: Lookup leaves last_access as it is.)
    for (IndexEntry* e : chain) {
      e->recency = NextRecency(&cursor);
      index_.Touch(e, cursor.anchor);
      cursor.anchor = e->key;
    }
    matched += chain.size();
    if (stop || hashes.empty()) break;
  }
  return matched;
}

absl::StatusOr<uint64_t> BlockStore::DeleteBlocks(uint64_t namespace_id,
                                                  absl::Span<const std::string_view> hashes) {
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!namespaces_.contains(namespace_id)) {
      return absl::NotFoundError(absl::StrCat(
          "namespace ", absl::Hex(namespace_id, absl::kZeroPad16), " is not registered"));
    }
    for (std::string_view hash : hashes) {
      if (!ValidateBlockHash(hash).ok()) continue;
      std::string key = BlockKey(namespace_id, hash);
      if (index_.Find(key) != nullptr) keys.push_back(std::move(key));
    }
  }
  return DeleteKeys(keys);
}

absl::StatusOr<uint64_t> BlockStore::DeleteKeys(std::vector<std::string> keys,
                                                int64_t only_expired_at) {
  if (keys.empty()) return 0;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<std::string_view> locked(keys.begin(), keys.end());
  std::unique_lock<std::mutex> l(mu_);
  AcquireKeys(l, locked);
  // Re-check under the claim: an expiry candidate may have been refreshed or re-put meanwhile.
  if (only_expired_at != 0) {
    std::vector<std::string_view> keep;
    for (std::string_view k : locked) {
      const IndexEntry* e = index_.Find(k);
      if (e != nullptr && Expired(*e, only_expired_at)) keep.push_back(k);
    }
    ReleaseKeys(locked);
    for (std::string_view k : keep) busy_.emplace(k);
    locked = std::move(keep);
    if (locked.empty()) return 0;
  }
  l.unlock();
  rocksdb::WriteBatch batch;
  absl::Status s;
  for (std::string_view k : locked) {
    for (rocksdb::ColumnFamilyHandle* cf : {cf_blocks_, cf_meta_, cf_access_}) {
      if (s.ok()) s = FromRocksDb(batch.Delete(cf, k), "batch delete");
    }
  }
  if (s.ok()) s = Write(&batch, /*durable=*/true);
  l.lock();
  uint64_t erased = 0;
  if (s.ok()) {
    for (std::string_view k : locked) {
      if (index_.Erase(k)) ++erased;
      dirty_access_.erase(std::string(k));
    }
  }
  ReleaseKeys(locked);
  if (!s.ok()) return s;
  return erased;
}

absl::Status BlockStore::FlushAccessTimes() {
  rocksdb::WriteBatch batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (dirty_access_.empty()) return absl::OkStatus();
    for (const std::string& k : dirty_access_) {
      const IndexEntry* e = index_.Find(k);
      if (e == nullptr) continue;
      TURBOKV_RETURN_IF_ERROR(
          FromRocksDb(batch.Put(cf_access_, k, EncodeAccess(e->last_access, e->recency)),
                      "batch put"));
    }
    dirty_access_.clear();
  }
  return Write(&batch, /*durable=*/false);
}

absl::Status BlockStore::RunMaintenance() {
  const int64_t now = clock_->NowSeconds();
  TryResume();
  MeasureDisk();
  // The expiry queue hands out what is due, a slice at a time: no scan of the index, and the
  // index lock is held only to take a slice.
  constexpr size_t kSlice = 1024;
  for (;;) {
    std::vector<std::string> due;
    {
      std::lock_guard<std::mutex> l(mu_);
      due = index_.DueForExpiry(now, kSlice);
    }
    if (due.empty()) break;
    const size_t taken = due.size();
    TURBOKV_ASSIGN_OR_RETURN(uint64_t n, DeleteKeys(std::move(due), /*only_expired_at=*/now));
    {
      std::lock_guard<std::mutex> l(mu_);
      expired_blocks_ += n;
    }
    if (taken < kSlice) break;
  }
  return FlushAccessTimes();
}

absl::Status BlockStore::LockDataDir() {
  const std::string path =
      (std::filesystem::path(options_.data_dir) / format::kDirLockFile).string();
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
      return absl::FailedPreconditionError(absl::StrCat(
          "data directory ", options_.data_dir, " is in use by another turbokv-server",
          pid.empty() ? std::string() : absl::StrCat(" (pid ", pid, ")"),
          "; stop it or choose another --data-dir"));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot lock ", path, ": ", std::strerror(err)));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    spdlog::warn("cannot write this process's pid into {}: {}", path, std::strerror(errno));
  }
  dir_lock_fd_ = fd;
  return absl::OkStatus();
}

std::string BlockStore::ReservePath() const {
  return (std::filesystem::path(options_.data_dir) / kReserveFile).string();
}

void BlockStore::ReleaseReserve(bool at_startup) {
  std::error_code ec;
  if (!std::filesystem::remove(ReservePath(), ec)) return;
  if (at_startup) {
    spdlog::info("released the disk reserve {} for the start-up (taken again once open)",
                 ReservePath());
  } else {
    spdlog::warn("released the disk reserve {}: the disk is nearly full", ReservePath());
  }
}

void BlockStore::CreateReserve() {
  if (options_.disk_reserve_bytes == 0) return;
  std::error_code ec;
  if (std::filesystem::exists(ReservePath(), ec)) return;
  struct statvfs fs {};
  if (statvfs(options_.data_dir.c_str(), &fs) != 0) return;
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  const uint64_t disk_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  // At most 1/8 of the filesystem, and only with room to spare: the reserve must not be what
  // fills the disk.
  const uint64_t reserve = std::min(options_.disk_reserve_bytes, disk_bytes / 8);
  if (reserve == 0 || free_bytes < 4 * reserve + 2 * format::WriteBufferBytes(options_)) return;
  const int fd = ::open(ReservePath().c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(reserve));
  if (rc == 0) (void)fsync(fd);
  ::close(fd);
  if (rc != 0) std::filesystem::remove(ReservePath(), ec);
}

uint64_t BlockStore::FreeDiskBytes() const {
  struct statvfs fs {};
  if (statvfs(options_.data_dir.c_str(), &fs) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

absl::Status BlockStore::CheckDiskRoom(absl::Span<const BlockWrite> blocks, int64_t now) {
  // A write RocksDB cannot append to its WAL stops all writes until it is resumed (and Debian's
  // RocksDB 7.8 can abort on the retry): stop puts while the filesystem still has room for
  // RocksDB's flushes, releasing the reserve first. Room for the value twice: in the WAL now,
  // in a blob file at the flush.
  uint64_t incoming = 0;
  for (const BlockWrite& b : blocks) incoming += 2 * b.value.size();
  const uint64_t headroom = 2 * format::WriteBufferBytes(options_) + incoming;
  uint64_t free_bytes = FreeDiskBytes();
  if (free_bytes >= headroom) return absl::OkStatus();
  ReleaseReserve();
  free_bytes = FreeDiskBytes();
  if (free_bytes >= headroom) return absl::OkStatus();
  absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
      "the data directory's filesystem has ", free_bytes, " bytes free; puts stop below ",
      headroom, " so RocksDB can still flush (free disk space, or lower --capacity)"));
  if (refused_log_.Due(now)) {
    spdlog::warn("put refused (RESOURCE_EXHAUSTED, {} since the last such line): {}",
                 refused_log_.TakeCount(), std::string(full.message()));
  }
  return full;
}

void BlockStore::TryResume() {
  if (!needs_resume_.load()) {
    CreateReserve();  // again, once a full disk has room
    return;
  }
  rocksdb::Status s = db_->Resume();
  if (!s.ok() && s.IsNoSpace()) {
    // Nothing else frees space while writes are stopped (deletions are writes too): give
    // RocksDB the reserve so it can flush and take deletions again.
    ReleaseReserve();
    s = db_->Resume();
  }
  if (s.ok()) {
    needs_resume_.store(false);
    std::lock_guard<std::mutex> l(mu_);
    ++write_resumes_;
    spdlog::info("RocksDB writes resumed after a background error");
  } else if (resume_log_.Due(clock_->NowSeconds())) {
    spdlog::warn("RocksDB writes stopped (reads are served): {}; retrying", s.ToString());
  }
}

void BlockStore::MeasureDisk() {
  // SST and blob bytes as RocksDB's SstFileManager tracks them; every other file of the data
  // directory by its size, from the one listing of this pass (a few dozen entries besides the
  // SST and blob files, whose sizes are not read again).
  uint64_t data = sst_file_manager_ != nullptr ? sst_file_manager_->GetTotalSize() : 0;
  uint64_t other = 0;
  // Never throws (the non-throwing increment): a listing that fails part way, e.g. the
  // directory removed under a running server, counts what it saw.
  std::error_code ec;
  for (std::filesystem::directory_iterator it(options_.data_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::filesystem::directory_entry& f = *it;
    const std::filesystem::path ext = f.path().extension();
    std::error_code file_ec;
    if (ext == ".sst" || ext == ".blob" || !f.is_regular_file(file_ec)) continue;
    const uintmax_t size = f.file_size(file_ec);
    if (file_ec) continue;  // removed since the listing (an obsolete WAL, a rolled LOG)
    (ext == ".log" ? data : other) += size;
  }
  std::lock_guard<std::mutex> l(mu_);
  disk_bytes_ = data + other;
  // Eviction counts the SST, blob and WAL bytes only: the rest is bounded (the info LOG at
  // 20 MiB, the MANIFEST at 8 MiB; store_format.cc) or is the RESERVE, which is given back
  // when the disk fills; counting them would shrink the capacity by a constant.
  const uint64_t used = index_.used_bytes() + reserved_bytes_;
  disk_overhead_bytes_ = data > used ? data - used : 0;
}

void BlockStore::MaintenanceLoop() {
  std::unique_lock<std::mutex> l(stop_mu_);
  while (!stop_) {
    stop_cv_.wait_for(l, std::chrono::milliseconds(options_.maintenance_interval_ms));
    if (stop_) break;
    l.unlock();
    (void)RunMaintenance();  // errors surface again on the next request's write
    l.lock();
  }
}

StoreStats BlockStore::Stats() const {
  StoreStats s;
  s.capacity_bytes = options_.capacity_bytes;
  std::lock_guard<std::mutex> l(mu_);
  s.used_bytes = index_.used_bytes();
  s.value_bytes = index_.value_bytes();
  s.blocks = index_.blocks();
  s.evicted_blocks = evicted_blocks_;
  s.evicted_bytes = evicted_bytes_;
  s.expired_blocks = expired_blocks_;
  s.checksum_failures = checksum_failures_;
  s.repair = repair_;
  s.disk_bytes = disk_bytes_;
  s.write_resumes = write_resumes_;
  for (const auto& [id, r] : namespaces_) {
    NamespaceStatsEntry n;
    n.record = r;
    if (auto it = index_.usage().find(id); it != index_.usage().end()) {
      n.blocks = it->second.blocks;
      n.value_bytes = it->second.value_bytes;
    }
    n.logical_bytes = n.blocks * r.logical_block_bytes;
    s.logical_bytes += n.logical_bytes;
    s.namespaces.push_back(std::move(n));
  }
  std::sort(s.namespaces.begin(), s.namespaces.end(),
            [](const NamespaceStatsEntry& a, const NamespaceStatsEntry& b) {
              return a.record.id < b.record.id;
            });
  return s;
}

DbStats BlockStore::GetDbStats() const {
  DbStats d;
  for (rocksdb::ColumnFamilyHandle* cf :
       {cf_default_, cf_blocks_, cf_meta_, cf_access_, cf_namespaces_, cf_namespaces_copy_}) {
    uint64_t v = 0;
    if (db_->GetIntProperty(cf, "rocksdb.total-sst-files-size", &v)) d.sst_bytes += v;
    if (db_->GetIntProperty(cf, "rocksdb.total-blob-file-size", &v)) d.blob_bytes += v;
    if (db_->GetIntProperty(cf, "rocksdb.estimate-pending-compaction-bytes", &v)) {
      d.pending_compaction_bytes += v;
    }
  }
  if (blob_cache_ != nullptr) d.blob_cache_bytes = blob_cache_->GetUsage();
  return d;
}

}  // namespace turbokv::server
