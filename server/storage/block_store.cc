// BlockStore's request operations: puts, reads, lookups, deletions, namespaces, statistics.
// Opening, recovery, migration and the maintenance pass are in block_store_open.cc.
#include "server/storage/block_store.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "server/storage/rocksdb_status.h"
#include "server/storage/store_format.h"
#include "spdlog/spdlog.h"
#include "turbokv/codec/status_macros.h"
#include "xxhash.h"

namespace turbokv::server {
namespace {

using format::EncodeAccess;
using format::NamespaceKey;
using format::PutFixed64BE;
using format::TrailerOf;

std::string BlockKey(uint64_t namespace_id, std::string_view hash) {
  std::string key;
  key.reserve(8 + hash.size());
  PutFixed64BE(&key, namespace_id);
  key.append(hash);
  return key;
}

// The storage key of an index entry, built in `buf` (no allocation).
std::string_view KeyOf(const BlockIndex& index, uint32_t slot, char (&buf)[8 + 32]) {
  const BlockEntry& e = index.at(slot);
  const uint64_t ns = index.NamespaceId(e.namespace_slot);
  for (int b = 0; b < 8; ++b) buf[b] = static_cast<char>(ns >> (56 - 8 * b));
  std::memcpy(buf + 8, e.hash, e.hash_bytes());
  return std::string_view(buf, 8 + e.hash_bytes());
}

absl::Status UnknownNamespace(uint64_t id) {
  return absl::NotFoundError(
      absl::StrCat("namespace ", absl::Hex(id, absl::kZeroPad16), " is not registered"));
}

// What a read of one block took from the index.
struct ReadPlan {
  size_t index;  // position in the request
  uint32_t slot;
  uint64_t sequence;
  RecordLocation location;
};

// A block the index holds whose record a put or delete replaces or removes.
struct Superseded {
  uint32_t slot;
  uint64_t sequence;
  RecordLocation location;
  bool for_quota = false;  // a victim evicted to keep its tenant within its quota
};

}  // namespace

absl::Status ValidateBlockHash(std::string_view hash) {
  if (hash.size() < kMinBlockHashBytes || hash.size() > kMaxBlockHashBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_hash has ", hash.size(), " bytes; expected 8 to 32 bytes"));
  }
  return absl::OkStatus();
}

absl::Status BlockStore::Write(rocksdb::WriteBatch* batch, bool durable) {
  rocksdb::WriteOptions wo;
  wo.disableWAL = options_.durability == Durability::kNone || !durable;
  wo.sync = durable && options_.durability == Durability::kFsync;
  rocksdb::Status s = db_->Write(wo, batch);
  // A failed write (a full disk) leaves RocksDB in a background-error state that fails every
  // later write until it is resumed: the maintenance pass resumes it (DiskGuard::TryResume).
  if (s.IsIOError()) disk_.NoteWriteFailure();
  return FromRocksDb(s, "write batch");
}

int64_t BlockStore::ExpiryOf(uint32_t slot) const {
  const BlockEntry& e = index_.at(slot);
  const uint32_t ttl = namespaces_->TtlSeconds(index_.NamespaceId(e.namespace_slot));
  if (ttl == 0) return 0;
  int64_t at = int64_t{e.last_access} + ttl;
  if (auto it = leases_.find(slot); it != leases_.end()) at = std::max(at, it->second);
  return at;
}

void BlockStore::QueueExpiry(uint32_t slot) {
  const int64_t at = ExpiryOf(slot);
  if (at != 0) expiry_.Push({at, slot, index_.at(slot).sequence()});
}

void BlockStore::Touched(uint32_t slot, int64_t now, bool refresh_access_time) {
  BlockEntry& e = index_.at(slot);
  if (refresh_access_time) e.last_access = static_cast<uint32_t>(std::max<int64_t>(now, 0));
  dirty_access_[slot] = Dirty{e.sequence(), next_touch_++};
}

uint64_t BlockStore::Fingerprint(uint32_t slot) const {
  const std::string_view hash = index_.at(slot).hash_view();
  return XXH3_64bits_withSeed(hash.data(), hash.size(), index_.namespace_id(slot));
}

void BlockStore::Forget(uint32_t slot, EraseReason reason) {
  if (namespaces_->TtlSeconds(index_.namespace_id(slot)) != 0 && ttl_blocks_ > 0) --ttl_blocks_;
  policy_->OnErase(slot, Fingerprint(slot), PolicyCharge(slot), reason);
  leases_.erase(slot);
  dirty_access_.erase(slot);
  index_.Erase(slot);
}

void BlockStore::AcquireKeys(std::unique_lock<std::mutex>& l,
                             const std::vector<std::string>& keys) {
  auto any_busy = [&] {
    for (const std::string& k : keys) {
      if (busy_.contains(k)) return true;
    }
    return false;
  };
  busy_cv_.wait(l, [&] { return !any_busy(); });
  for (const std::string& k : keys) busy_.insert(k);
}

void BlockStore::ReleaseKeys(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) busy_.erase(k);
  busy_cv_.notify_all();
}

bool BlockStore::Busy(uint32_t slot) const {
  char buf[8 + 32];
  const std::string_view key = KeyOf(index_, slot, buf);
  return busy_.contains(absl::string_view(key.data(), key.size()));
}

uint64_t BlockStore::NumberRequest(ChainCursor* chain) {
  if (chain->request == 0) chain->request = next_request_++;
  return chain->request;
}

RequestInfo BlockStore::InfoFor(const ChainCursor& chain, int64_t now) const {
  RequestInfo info;
  info.request = chain.request;
  info.now_ms = now * 1000;
  return info;
}

// ---- namespaces ----------------------------------------------------------------------------

absl::Status BlockStore::PutNamespace(const NamespaceRecord& record) {
  const uint32_t old_ttl = namespaces_->TtlSeconds(record.id);
  if (std::optional<NamespaceRecord> old = namespaces_->Get(record.id);
      old.has_value() && old->tenant != record.tenant) {
    return absl::InvalidArgumentError(absl::StrCat(
        "namespace ", absl::Hex(record.id, absl::kZeroPad16), " belongs to tenant \"", old->tenant,
        "\", not \"", record.tenant, "\" (a namespace's tenant is fixed)"));
  }
  {
    // Before the record is visible: a put to the namespace counts to its tenant.
    std::lock_guard<std::mutex> l(mu_);
    index_.SetNamespaceTenant(record.id, TenantNumber(record.tenant));
  }
  TURBOKV_RETURN_IF_ERROR(namespaces_->Put(record, clock_->NowSeconds()));
  if (old_ttl != record.ttl_seconds) {
    // Rare (a re-registration with another ttl_seconds): requeue the namespace's blocks.
    std::lock_guard<std::mutex> l(mu_);
    for (uint32_t slot : index_.SlotsOf(record.id)) {
      if (old_ttl == 0) ++ttl_blocks_;
      if (record.ttl_seconds == 0 && ttl_blocks_ > 0) --ttl_blocks_;
      QueueExpiry(slot);
    }
  }
  return absl::OkStatus();
}

std::optional<NamespaceRecord> BlockStore::GetNamespace(uint64_t id) const {
  return namespaces_->Get(id);
}

std::vector<NamespaceRecord> BlockStore::ListNamespaces() const { return namespaces_->List(); }

absl::StatusOr<uint64_t> BlockStore::DropNamespace(uint64_t id) {
  uint64_t dropped = 0;
  TURBOKV_RETURN_IF_ERROR(namespaces_->Delete(id, [&](rocksdb::WriteBatch* batch) {
    std::vector<Superseded> blocks;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (uint32_t slot : index_.SlotsOf(id)) {
        blocks.push_back({slot, index_.at(slot).sequence(), index_.at(slot).location()});
      }
    }
    // Records first: once the drop is acknowledged no salvage can find its blocks.
    for (const Superseded& b : blocks) log_->Erase(b.location);
    const std::string begin = NamespaceKey(id);
    const std::string end = begin + std::string(kMaxBlockHashBytes + 1, '\xff');
    for (rocksdb::ColumnFamilyHandle* cf : {cf_blocks_, cf_meta_, cf_access_}) {
      TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch->DeleteRange(cf, begin, end), "delete range"));
    }
    absl::Status written = Write(batch, /*durable=*/true);
    // The records are gone whether the write went through or not.
    std::lock_guard<std::mutex> l(mu_);
    std::vector<uint32_t> live;
    for (const Superseded& b : blocks) {
      if (index_.at(b.slot).sequence() == b.sequence) live.push_back(b.slot);
    }
    if (events_ != nullptr) {
      // Dropped: one event for the namespace. A failed write leaves the namespace, without
      // these blocks.
      if (written.ok()) {
        events_->OnNamespaceCleared(id);
      } else {
        ReportRemoved(live, RemovalReason::kDeleted);
      }
    }
    for (uint32_t slot : live) {
      Forget(slot, EraseReason::kDeleted);
      ++dropped;
    }
    return written;
  }));
  return dropped;
}

// ---- puts ----------------------------------------------------------------------------------

std::vector<absl::Status> BlockStore::PutBlocks(uint64_t namespace_id,
                                                absl::Span<const BlockWrite> blocks,
                                                ChainCursor* chain) {
  ChainCursor whole_call;  // no cursor: this call is the whole request
  if (chain == nullptr) chain = &whole_call;
  std::vector<absl::Status> results(blocks.size());
  std::vector<std::string> keys(blocks.size());
  uint64_t incoming = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    results[i] = ValidateBlockHash(blocks[i].hash);
    if (results[i].ok() && blocks[i].value.size() > UINT32_MAX - (uint64_t{1} << 20)) {
      results[i] = absl::InvalidArgumentError(absl::StrCat(
          "block of ", blocks[i].value.size(), " bytes: the store takes blocks below 4 GiB"));
    }
    if (!results[i].ok()) continue;
    keys[i] = BlockKey(namespace_id, blocks[i].hash);
    incoming += RecordBytes(blocks[i].hash.size(), blocks[i].value.size());
  }
  std::vector<std::string> locked;
  {
    absl::flat_hash_set<std::string_view> seen;
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (results[i].ok() && seen.insert(keys[i]).second) locked.push_back(keys[i]);
    }
  }
  if (!namespaces_->Contains(namespace_id)) {
    std::fill(results.begin(), results.end(), UnknownNamespace(namespace_id));
    return results;
  }
  const int64_t now = clock_->NowSeconds();
  if (absl::Status room = disk_.CheckRoom(incoming, now); !room.ok()) {
    for (absl::Status& r : results) {
      if (r.ok()) r = room;
    }
    return results;
  }

  // 1. Under the index lock: claim the keys (a concurrent writer of one of them waits, so the
  //    index sees the writes of a key in the order RocksDB commits them), reserve capacity and
  //    the tenant's quota, and pick victims (claimed too, so nobody re-puts or reads one as
  //    damaged meanwhile).
  std::unique_lock<std::mutex> l(mu_);
  AcquireKeys(l, locked);
  NumberRequest(chain);
  const uint32_t tenant = index_.NamespaceTenant(namespace_id);
  const uint64_t quota = QuotaOf(tenant);
  std::vector<size_t> accepted;
  std::vector<Superseded> victims;
  std::vector<std::string> victim_keys;
  absl::flat_hash_set<uint32_t> victim_set;
  int64_t reserved = 0;  // net growth reserved for this call
  // What this call added to tenant_reserved_ (taken back when it publishes or gives up).
  absl::flat_hash_map<uint32_t, InFlight> tenant_reserved;
  auto reserve_for = [&](uint32_t t, int64_t value_bytes, int64_t charge) {
    InFlight& all = ReservedOf(t);
    all.value_bytes += value_bytes;
    all.charge += charge;
    InFlight& mine = tenant_reserved[t];
    mine.value_bytes += value_bytes;
    mine.charge += charge;
  };
  {
    const uint64_t capacity = options_.capacity_bytes;
    const auto high =
        static_cast<uint64_t>(static_cast<double>(capacity) * options_.high_watermark);
    const auto low = static_cast<uint64_t>(static_cast<double>(capacity) * options_.low_watermark);
    uint64_t freeing = 0;  // charges of the victims picked so far
    absl::flat_hash_map<std::string_view, std::pair<uint64_t, uint64_t>> accepted_size;
    auto evictable = [&](uint32_t slot) {
      if (victim_set.contains(slot) || chain->own.contains(slot) || Busy(slot)) return false;
      auto lease = leases_.find(slot);
      return lease == leases_.end() || lease->second <= now;
    };
    // The victims picked so far: later blocks' selections go on from them (a chain whose
    // tail is picked can lose its next block too).
    auto victim_slots = [&] {
      std::vector<uint32_t> slots;
      slots.reserve(victims.size());
      for (const Superseded& v : victims) slots.push_back(v.slot);
      return slots;
    };
    auto take = [&](const std::vector<uint32_t>& picked, bool for_quota) {
      for (uint32_t v : picked) {
        victim_set.insert(v);
        victims.push_back({v, index_.at(v).sequence(), index_.at(v).location(), for_quota});
        freeing += index_.charge(v);
        reserve_for(index_.tenant(v), -int64_t{index_.at(v).value_bytes},
                    -static_cast<int64_t>(index_.charge(v)));
      }
    };
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (!results[i].ok()) continue;
      if (chain->refused_room) {
        // A block after a gap in the chain could never be matched: refuse it too.
        results[i] = absl::ResourceExhaustedError(
            "an earlier block of this request's prefix chain did not fit, so this one could "
            "never be matched");
        continue;
      }
      RecordLocation shape;
      shape.hash_bytes = static_cast<uint8_t>(blocks[i].hash.size());
      shape.value_bytes = static_cast<uint32_t>(blocks[i].value.size());
      const uint64_t charge = BlockCharge(shape);
      uint64_t credit = 0;        // the charge of the block this one replaces
      uint64_t credit_value = 0;  // ... and its packed bytes
      if (auto it = accepted_size.find(keys[i]); it != accepted_size.end()) {
        std::tie(credit, credit_value) = it->second;
      } else if (uint32_t old = index_.Find(namespace_id, blocks[i].hash); old != kNoSlot) {
        credit = index_.charge(old);
        credit_value = index_.at(old).value_bytes;
      }
      auto projected = [&] {
        return static_cast<int64_t>(index_.used_bytes()) + reserved_bytes_ -
               static_cast<int64_t>(freeing) - static_cast<int64_t>(credit) +
               static_cast<int64_t>(charge);
      };
      // Eviction also counts what the directory holds beyond the charges (RocksDB's files
      // beyond their estimates; measured by the maintenance pass), so the capacity bounds
      // the disk.
      auto on_disk = [&] { return projected() + static_cast<int64_t>(disk_overhead_bytes_); };
      // The tenant's packed bytes with this block, and what its puts in flight add.
      auto tenant_projected = [&] {
        return static_cast<int64_t>(index_.TenantUsage(tenant).value_bytes) +
               ReservedOf(tenant).value_bytes - static_cast<int64_t>(credit_value) +
               static_cast<int64_t>(shape.value_bytes);
      };
      const size_t victims_before = victims.size();
      const uint64_t freeing_before = freeing;
      auto refuse = [&](absl::Status why) {
        // Evict nothing for a block that does not fit.
        for (size_t k = victims_before; k < victims.size(); ++k) {
          const uint32_t v = victims[k].slot;
          victim_set.erase(v);
          reserve_for(index_.tenant(v), int64_t{index_.at(v).value_bytes},
                      static_cast<int64_t>(index_.charge(v)));
        }
        victims.resize(victims_before);
        freeing = freeing_before;
        results[i] = std::move(why);
        if (refused_log_.Due(now)) {
          spdlog::warn("put refused (RESOURCE_EXHAUSTED, {} since the last such line): {}",
                       refused_log_.TakeCount(), std::string(results[i].message()));
        }
        chain->refused_room = true;
      };
      if (quota != 0 && tenant_projected() > static_cast<int64_t>(quota)) {
        take(PickQuotaVictims(tenant, static_cast<uint64_t>(tenant_projected()) - quota,
                              victim_slots(), evictable),
             /*for_quota=*/true);
        if (tenant_projected() > static_cast<int64_t>(quota)) {
          refuse(absl::ResourceExhaustedError(absl::StrCat(
              "block of ", blocks[i].value.size(), " bytes does not fit in this tenant's quota of ",
              quota, " bytes: it stores ", index_.TenantUsage(tenant).value_bytes, " bytes (",
              std::max<int64_t>(ReservedOf(tenant).value_bytes, 0),
              " more being written) and none of them is evictable (leased, being written, or "
              "an earlier block of this request's prefix chain)")));
          continue;
        }
      }
      const auto growth = static_cast<int64_t>(charge) - static_cast<int64_t>(credit);
      if (on_disk() > static_cast<int64_t>(high)) {
        take(PickCapacityVictims(static_cast<uint64_t>(on_disk() - static_cast<int64_t>(low)),
                                 tenant, growth, victim_slots(), evictable),
             /*for_quota=*/false);
      }
      if (projected() > static_cast<int64_t>(capacity)) {
        // Does not fit even with everything evictable gone.
        const uint64_t used = index_.used_bytes() + std::max<int64_t>(reserved_bytes_, 0);
        refuse(absl::ResourceExhaustedError(absl::StrCat(
            "block of ", blocks[i].value.size(), " bytes does not fit: ", used, " of ", capacity,
            " capacity bytes are in use or reserved by writes in flight, and none of them is "
            "evictable (leased, written by a request in flight, an earlier block of this "
            "request's prefix chain, or another tenant's within its share)")));
        continue;
      }
      reserved += growth;
      reserved_bytes_ += growth;
      reserve_for(tenant,
                  static_cast<int64_t>(shape.value_bytes) - static_cast<int64_t>(credit_value),
                  growth);
      accepted_size[keys[i]] = {charge, shape.value_bytes};
      accepted.push_back(i);
    }
  }
  // Victims are claimed like the keys being written: a reader that finds one's record gone
  // takes it for a miss, not for damage.
  for (const Superseded& v : victims) {
    char buf[8 + 32];
    victim_keys.emplace_back(KeyOf(index_, v.slot, buf));
    busy_.insert(victim_keys.back());
  }
  // The blocks the accepted ones replace (their keys are claimed: nobody else changes them).
  std::vector<Superseded> overwritten;
  for (size_t i : accepted) {
    const uint32_t old = index_.Find(namespace_id, blocks[i].hash);
    if (old != kNoSlot && !victim_set.contains(old)) {
      overwritten.push_back({old, index_.at(old).sequence(), index_.at(old).location()});
      victim_set.insert(old);  // listed once however often the call repeats the key
    }
  }
  std::vector<uint64_t> touches(blocks.size());
  for (size_t i : accepted) touches[i] = next_touch_++;
  l.unlock();
  auto give_back = [&](const absl::Status& s) {
    l.lock();
    reserved_bytes_ -= reserved;
    ReleaseTenantReservations(tenant_reserved);
    for (size_t i : accepted) results[i] = s;
    ReleaseKeys(locked);
    ReleaseKeys(victim_keys);
    l.unlock();
    if (!s.ok() && write_failure_log_.Due(now)) {
      spdlog::warn("put of {} blocks failed ({} such failures since the last line): {}",
                   accepted.size(), write_failure_log_.TakeCount(), s.ToString());
    }
    return results;
  };
  if (accepted.empty() && victims.empty()) return give_back(absl::OkStatus());

  // 2. No turbokv lock held. The values go to the value log first (written once, not copied
  //    again); then the records they supersede are deallocated; then one WriteBatch commits
  //    the metadata (concurrent puts reach RocksDB together and its group commit batches
  //    them into one WAL write).
  std::vector<RecordWrite> records;
  records.reserve(accepted.size());
  const uint64_t first_sequence = AllocateSequences(accepted.size());
  for (size_t k = 0; k < accepted.size(); ++k) {
    const size_t i = accepted[k];
    RecordWrite w;
    w.namespace_id = namespace_id;
    w.hash = blocks[i].hash;
    w.value = blocks[i].value;
    w.sequence = first_sequence + k;
    w.put_time = now;
    w.checksum = TrailerOf(blocks[i].value);
    records.push_back(w);
  }
  absl::StatusOr<std::vector<RecordLocation>> placed = log_->Append(records);
  if (!placed.ok()) return give_back(placed.status());
  for (const Superseded& v : victims) log_->Erase(v.location);
  for (const Superseded& o : overwritten) log_->Erase(o.location);

  constexpr size_t kRecordOverhead = 16;  // tag, column family id and two varint lengths
  size_t batch_bytes = 12;                // WriteBatch header
  for (const std::string& k : victim_keys) batch_bytes += 2 * (k.size() + kRecordOverhead);
  for (size_t i : accepted) {
    batch_bytes += 2 * (keys[i].size() + kRecordOverhead) + format::kMetaBytes + 16;
  }
  rocksdb::WriteBatch batch(batch_bytes);
  absl::Status s;
  for (const std::string& k : victim_keys) {
    for (rocksdb::ColumnFamilyHandle* cf : {cf_meta_, cf_access_}) {
      if (s.ok()) s = FromRocksDb(batch.Delete(cf, k), "batch delete");
    }
  }
  for (size_t k = 0; k < accepted.size() && s.ok(); ++k) {
    const size_t i = accepted[k];
    format::MetaValue m;
    m.value_bytes = blocks[i].value.size();
    m.put_time = now;
    m.checksum = records[k].checksum;
    m.in_log = true;
    m.segment = (*placed)[k].segment;
    m.page = (*placed)[k].page;
    m.sequence = records[k].sequence;
    s = FromRocksDb(batch.Put(cf_meta_, keys[i], format::EncodeMeta(m)), "batch put");
    if (s.ok()) {
      s = FromRocksDb(batch.Put(cf_access_, keys[i], EncodeAccess(now, touches[i])), "batch put");
    }
  }
  if (s.ok()) s = Write(&batch, /*durable=*/true);

  // 3. Under the index lock again: publish, release the claims. The victims' and overwritten
  //    blocks' records are gone whatever the write did.
  std::vector<RecordLocation> garbage;  // records appended but not published
  l.lock();
  reserved_bytes_ -= reserved;
  ReleaseTenantReservations(tenant_reserved);
  if (events_ != nullptr) {
    // Gone whatever the write did: the victims, and with a failed write the blocks the put
    // was replacing (a successful one reports them stored below).
    std::vector<uint32_t> evicted, lost;
    for (const Superseded& v : victims) {
      if (index_.at(v.slot).sequence() == v.sequence) evicted.push_back(v.slot);
    }
    for (const Superseded& o : overwritten) {
      if (!s.ok() && index_.at(o.slot).sequence() == o.sequence) lost.push_back(o.slot);
    }
    ReportRemoved(std::move(evicted), RemovalReason::kEvicted);
    ReportRemoved(std::move(lost), RemovalReason::kLost);
  }
  for (const Superseded& v : victims) {
    if (index_.at(v.slot).sequence() != v.sequence) continue;
    Forget(v.slot, EraseReason::kEvicted);
    if (s.ok()) {
      evicted_blocks_ += 1;
      evicted_bytes_ += BlockCharge(v.location);
      if (v.for_quota) {
        quota_evicted_blocks_ += 1;
        quota_evicted_bytes_ += BlockCharge(v.location);
      }
    }
  }
  for (const Superseded& o : overwritten) {
    if (index_.at(o.slot).sequence() == o.sequence) Forget(o.slot, EraseReason::kDeleted);
  }
  if (!s.ok()) {
    for (size_t i : accepted) results[i] = s;
    for (const RecordLocation& p : *placed) garbage.push_back(p);
    if (write_failure_log_.Due(now)) {
      spdlog::warn("put of {} blocks failed ({} such failures since the last line): {}",
                   accepted.size(), write_failure_log_.TakeCount(), s.ToString());
    }
  } else {
    // A hash put twice in one call: RocksDB keeps the later value, and so does the index.
    absl::flat_hash_map<std::string_view, size_t> last_of;
    for (size_t k = 0; k < accepted.size(); ++k) last_of[keys[accepted[k]]] = k;
    const bool namespace_alive = namespaces_->Contains(namespace_id);
    const bool has_ttl = namespaces_->TtlSeconds(namespace_id) != 0;
    std::vector<std::string_view> stored;  // for events_: in put order, each hash once
    for (size_t k = 0; k < accepted.size(); ++k) {
      const size_t i = accepted[k];
      if (last_of[keys[i]] != k || !namespace_alive) {
        garbage.push_back((*placed)[k]);
        continue;
      }
      if (events_ != nullptr) stored.push_back(blocks[i].hash);
      // Dropped meanwhile? Then its metadata went with the namespace's range deletion.
      const uint32_t slot =
          index_.Insert(namespace_id, blocks[i].hash, records[k].sequence, (*placed)[k],
                        static_cast<uint32_t>(std::max<int64_t>(now, 0)));
      uint32_t parent = kNoSlot;
      if (chain->last_slot != kNoSlot && chain->last_slot != slot &&
          index_.at(chain->last_slot).sequence() == chain->last_sequence) {
        parent = chain->last_slot;
      }
      RequestInfo info = InfoFor(*chain, now);
      info.last_in_call = k + 1 == accepted.size() && chain->call_ends_request;
      policy_->OnInsert(slot, parent, Fingerprint(slot), PolicyCharge(slot), tenant, info);
      chain->own.insert(slot);
      chain->last_slot = slot;
      chain->last_sequence = records[k].sequence;
      if (has_ttl) {
        ++ttl_blocks_;
        QueueExpiry(slot);
      }
    }
    if (!stored.empty()) events_->OnBlocksStored(namespace_id, stored);
  }
  ReleaseKeys(locked);
  ReleaseKeys(victim_keys);
  l.unlock();
  for (const RecordLocation& g : garbage) log_->Erase(g);
  return results;
}

// ---- reads ---------------------------------------------------------------------------------

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

absl::StatusOr<std::vector<std::optional<PinnedValue>>> BlockStore::GetPinnedBlocks(
    uint64_t namespace_id, absl::Span<const std::string_view> hashes, bool* would_block,
    ChainCursor* chain) {
  const bool cache_only = would_block != nullptr;
  if (cache_only) *would_block = false;
  if (!namespaces_->Contains(namespace_id)) return UnknownNamespace(namespace_id);
  std::vector<std::optional<PinnedValue>> out(hashes.size());
  std::vector<ReadPlan> plan;
  std::vector<std::string> expired;
  const int64_t now = clock_->NowSeconds();
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (!ValidateBlockHash(hashes[i]).ok()) continue;
      const uint32_t slot = index_.Find(namespace_id, hashes[i]);
      if (slot == kNoSlot) continue;
      if (Expired(slot, now)) {
        expired.push_back(BlockKey(namespace_id, hashes[i]));
        continue;
      }
      plan.push_back({i, slot, index_.at(slot).sequence(), index_.at(slot).location()});
    }
  }
  if (cache_only && !expired.empty()) {
    *would_block = true;  // deleting the expired blocks writes
    return out;
  }
  // Values that did not read back as the index says: damaged, unless a writer changed the
  // block meanwhile (then it is a miss).
  std::vector<const ReadPlan*> suspect;
  uint64_t cache_hits = 0;
  for (const ReadPlan& p : plan) {
    // A value verified when it was read before: no read, copy or checksum.
    if (std::optional<LogValue> hit = log_->Cached(p.location, p.sequence); hit.has_value()) {
      out[p.index] = PinnedValue{std::move(hit->owner), hit->bytes};
      ++cache_hits;
      continue;
    }
    if (cache_only) {
      // Not in the read cache: needs a read (the retry counts this call's hits and misses).
      *would_block = true;
      return std::vector<std::optional<PinnedValue>>(hashes.size());
    }
    absl::StatusOr<LogValue> v = log_->Read(p.location, namespace_id, hashes[p.index], p.sequence);
    if (!v.ok()) {
      if (!absl::IsNotFound(v.status()) && !absl::IsDataLoss(v.status())) return v.status();
      suspect.push_back(&p);
      continue;
    }
    if (!verifier_(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(v->bytes.data()),
                                             v->bytes.size()))
             .ok()) {
      suspect.push_back(&p);
      continue;
    }
    log_->Remember(p.location, p.sequence, *v);
    out[p.index] = PinnedValue{std::move(v->owner), v->bytes};
  }
  if (has_read_cache_) {
    read_cache_hits_.fetch_add(cache_hits, std::memory_order_relaxed);
    read_cache_misses_.fetch_add(plan.size() - cache_hits, std::memory_order_relaxed);
  }
  std::vector<std::string> corrupt;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const ReadPlan* p : suspect) {
      if (index_.at(p->slot).sequence() != p->sequence || Busy(p->slot)) continue;  // changed
      corrupt.push_back(BlockKey(namespace_id, hashes[p->index]));
    }
    // In request order, each block the child of the request's previous one.
    ChainCursor whole_call;
    if (chain == nullptr) chain = &whole_call;
    NumberRequest(chain);
    for (const ReadPlan& p : plan) {
      if (!out[p.index].has_value() || index_.at(p.slot).sequence() != p.sequence) continue;
      uint32_t parent = kNoSlot;
      if (chain->last_slot != kNoSlot && chain->last_slot != p.slot &&
          index_.at(chain->last_slot).sequence() == chain->last_sequence) {
        parent = chain->last_slot;
      }
      leases_.erase(p.slot);
      Touched(p.slot, now, /*refresh_access_time=*/true);
      QueueExpiry(p.slot);
      policy_->OnHit(p.slot, parent, Fingerprint(p.slot), PolicyCharge(p.slot),
                     InfoFor(*chain, now));
      chain->last_slot = p.slot;
      chain->last_sequence = p.sequence;
    }
    checksum_failures_ += corrupt.size();
  }
  if (!corrupt.empty()) {
    checksum_log_.Add(corrupt.size() - 1);
    if (checksum_log_.Due(now)) {
      spdlog::warn(
          "deleting stored blocks that failed verification: key {} ({} since the last "
          "such line)",
          absl::BytesToHexString(corrupt.front()), checksum_log_.TakeCount());
    }
    TURBOKV_RETURN_IF_ERROR(DeleteKeys(corrupt, RemovalReason::kCorrupt).status());
  }
  if (!expired.empty()) {
    TURBOKV_ASSIGN_OR_RETURN(uint64_t n,
                             DeleteKeys(expired, RemovalReason::kExpired, /*only_expired_at=*/now));
    std::lock_guard<std::mutex> l(mu_);
    expired_blocks_ += n;
  }
  return out;
}

std::optional<PolicyTuning> BlockStore::policy_tuning() const {
  std::lock_guard<std::mutex> l(mu_);
  return policy_->tuning();
}

void BlockStore::FollowPolicyTuning(const PolicyTuning& tuning) {
  if (options_.ignore_client_tuning) return;
  std::lock_guard<std::mutex> l(mu_);
  policy_->FollowTuning(tuning);
}

absl::StatusOr<size_t> BlockStore::Lookup(uint64_t namespace_id,
                                          absl::Span<const std::string_view> hashes,
                                          uint32_t lease_seconds) {
  if (!namespaces_->Contains(namespace_id)) return UnknownNamespace(namespace_id);
  const int64_t now = clock_->NowSeconds();
  // The chain is walked in slices, the index lock released between them, so one long chain
  // never holds up other calls for long.
  constexpr size_t kSlice = 256;
  size_t matched = 0;
  ChainCursor cursor;
  for (size_t begin = 0; begin < hashes.size(); begin += kSlice) {
    std::lock_guard<std::mutex> l(mu_);
    NumberRequest(&cursor);
    bool stop = false;
    for (size_t i = begin; i < std::min(hashes.size(), begin + kSlice); ++i) {
      if (!ValidateBlockHash(hashes[i]).ok()) {
        stop = true;
        break;
      }
      const uint32_t slot = index_.Find(namespace_id, hashes[i]);
      if (slot == kNoSlot || Expired(slot, now)) {
        stop = true;
        break;
      }
      if (lease_seconds > 0) {
        int64_t& until = leases_[slot];
        until = std::max<int64_t>(until, now + lease_seconds);
        QueueExpiry(slot);
      }
      uint32_t parent = kNoSlot;
      if (cursor.last_slot != kNoSlot && cursor.last_slot != slot &&
          index_.at(cursor.last_slot).sequence() == cursor.last_sequence) {
        parent = cursor.last_slot;
      }
      policy_->OnHit(slot, parent, Fingerprint(slot), PolicyCharge(slot), InfoFor(cursor, now));
      Touched(slot, now, /*refresh_access_time=*/false);
      cursor.last_slot = slot;
      cursor.last_sequence = index_.at(slot).sequence();
      ++matched;
    }
    if (stop) break;
  }
  return matched;
}

// ---- deletions -----------------------------------------------------------------------------

absl::StatusOr<uint64_t> BlockStore::DeleteBlocks(uint64_t namespace_id,
                                                  absl::Span<const std::string_view> hashes) {
  if (!namespaces_->Contains(namespace_id)) return UnknownNamespace(namespace_id);
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (std::string_view hash : hashes) {
      if (!ValidateBlockHash(hash).ok()) continue;
      if (index_.Find(namespace_id, hash) != kNoSlot) keys.push_back(BlockKey(namespace_id, hash));
    }
  }
  return DeleteKeys(std::move(keys), RemovalReason::kDeleted);
}

absl::StatusOr<uint64_t> BlockStore::DeleteKeys(std::vector<std::string> keys, RemovalReason reason,
                                                int64_t only_expired_at) {
  if (keys.empty()) return 0;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::unique_lock<std::mutex> l(mu_);
  AcquireKeys(l, keys);
  std::vector<Superseded> gone;
  std::vector<std::string> deleting;
  for (const std::string& k : keys) {
    const uint32_t slot =
        index_.Find(format::GetFixed64BE(k.data()), std::string_view(k).substr(8));
    // Re-check under the claim: an expiry candidate may have been refreshed or re-put since.
    if (slot == kNoSlot || (only_expired_at != 0 && !Expired(slot, only_expired_at))) continue;
    gone.push_back({slot, index_.at(slot).sequence(), index_.at(slot).location()});
    deleting.push_back(k);
  }
  l.unlock();
  // Records first: once the deletion is acknowledged no salvage can bring a block back.
  for (const Superseded& g : gone) log_->Erase(g.location);
  absl::Status s;
  if (!deleting.empty()) {
    rocksdb::WriteBatch batch;
    for (const std::string& k : deleting) {
      for (rocksdb::ColumnFamilyHandle* cf : {cf_meta_, cf_access_}) {
        if (s.ok()) s = FromRocksDb(batch.Delete(cf, k), "batch delete");
      }
    }
    if (s.ok()) s = Write(&batch, /*durable=*/true);
  }
  l.lock();
  std::vector<uint32_t> live;  // the records are gone whatever the write did
  for (const Superseded& g : gone) {
    if (index_.at(g.slot).sequence() == g.sequence) live.push_back(g.slot);
  }
  ReportRemoved(live, reason);
  for (uint32_t slot : live) {
    Forget(slot, only_expired_at != 0 ? EraseReason::kExpired : EraseReason::kDeleted);
  }
  ReleaseKeys(keys);
  if (!s.ok()) return s;
  return gone.size();
}

void BlockStore::ReportRemoved(std::vector<uint32_t> slots, RemovalReason reason) const {
  if (events_ == nullptr || slots.empty()) return;
  // One call per namespace: sort the slots by namespace (a call usually has one).
  std::sort(slots.begin(), slots.end(), [&](uint32_t a, uint32_t b) {
    return index_.at(a).namespace_slot < index_.at(b).namespace_slot;
  });
  std::vector<std::string_view> hashes;
  for (size_t i = 0; i < slots.size();) {
    const uint32_t ns_slot = index_.at(slots[i]).namespace_slot;
    hashes.clear();
    for (; i < slots.size() && index_.at(slots[i]).namespace_slot == ns_slot; ++i) {
      hashes.push_back(index_.at(slots[i]).hash_view());
    }
    events_->OnBlocksRemoved(index_.NamespaceId(ns_slot), hashes, reason);
  }
}

}  // namespace turbokv::server
