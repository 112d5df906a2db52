// The block store: packed KV blocks in a value log, their index in an embedded RocksDB
// (docs/server.md, "Storage"). BlockStore is the facade; the jobs live in components:
//
//   value_log.h        the values: written once, in page-aligned records of segment files;
//                      an erased record's pages are deallocated at once
//   block_index.h      every block's key, value-log place and write sequence, in memory
//   eviction_policy.h  which blocks go when a put needs room (prefix-tree aware)
//   namespace_table.h  namespace records (two column families and a value-log record each)
//   disk_guard.h       the disk reserve, puts refused on a full disk, RocksDB resume,
//                      the directory's measurement
//   expiry_queue.h     blocks of namespaces with a TTL, by expiry
//   store_repair.h     damaged RocksDB files found and repaired (salvaged) before the open
//
// RocksDB column families (keys: 8-byte big-endian namespace id || block hash (8..32 bytes)):
//   block_meta  key -> the block's value-log place, size, put time, checksum and write
//               sequence (store_format.h, MetaValue); the block exists iff this entry does
//   access      key -> last access (unix seconds) and touch number, written in batches by the
//               maintenance pass with the WAL off (a lost update only makes the restart's
//               eviction order slightly older). Entries without block_meta are ignored.
//   namespaces, namespaces_copy  namespace id -> record (namespace_table.h)
//   blocks      values of stores written before the value log; migrated at open
//
// A put appends the values to the value log, then commits their metadata (and the deletion
// of the blocks it evicts or overwrites) in one WriteBatch: a block is visible whole or not at
// all, and its bytes were written once. Records a put supersedes (evicted blocks, the old
// value of an overwritten key) and records of deleted blocks are deallocated *before* the
// metadata change commits: a crash in between costs those blocks (a cache miss), and no
// salvage can ever bring a deleted block or an older value back. Every value read is checked
// three ways: its record header must name the key and the write sequence the index holds, the
// value must end in the checksum the header recorded, and the verifier (the codec's
// VerifyPackedChecksum in the server) must accept it; a value that fails is deleted, counted
// and reported missing, never returned.
//
// Capacity: every block is charged its record's pages and an estimate of its metadata
// (BlockCharge); what RocksDB's files hold beyond the estimates is measured each maintenance
// pass and counted too, so the data directory stays within the capacity (the disk reserve
// aside). A put that would take the total above high_watermark evicts the policy's least
// valuable blocks that are not leased, not being written, and not earlier blocks of the same
// request, down to low_watermark; a block that does not fit even then fails with
// ResourceExhausted.
//
// Tenants. Every namespace belongs to a tenant (NamespaceRecord::tenant, fixed when the
// namespace is first stored); a tenant's usage is the sum over its namespaces. Quotas come
// from SetTenantQuotas: packed value bytes a tenant may store. Both rules below are applied
// when a put commits its blocks, under the store's lock, so concurrent puts cannot overshoot:
//   * Quota. A block that would take its tenant's stored bytes (with what the tenant's puts
//     in flight add) above the quota evicts that tenant's own least valuable blocks first
//     (the same policy, filtered by tenant; never another tenant's). A block that does not
//     fit in the quota even then (the rest are leased, being written or earlier blocks of the
//     same request) fails with ResourceExhausted naming the quota. So a tenant stores at most
//     its quota, and at most one block more only after its quota was lowered.
//   * Share of the capacity (evictions for capacity, above high_watermark). A tenant's share
//     is max-min fair: what eviction works down to (low_watermark x capacity, less RocksDB's
//     measured overhead) divided equally among the tenants that hold blocks or are putting,
//     except that a tenant with a quota gets no more than its quota (counted in charged bytes
//     at its blocks' ratio of charged to packed bytes) and what it leaves is divided equally
//     among the others. Victims come from the tenants above their share first (the most above
//     first, each down to its share), then from the putting tenant's own blocks, and from
//     every tenant's blocks together only when no tenant is left above its share. So a tenant
//     within its share never loses blocks to another tenant's puts while a tenant above its
//     share holds blocks. With one tenant this is the global policy, unchanged.
//
// Thread safety: all methods are thread-safe. One mutex guards the index, the policy and the
// side tables; it is never held across I/O. A write claims its keys under it (a second writer
// of the same key waits, so the index sees a key's writes in commit order), reserves capacity
// and picks victims, then appends and commits with no turbokv lock held, so RocksDB's group
// commit batches concurrent writers. Lookup and Stats touch only memory.
#ifndef TURBOKV_SERVER_STORAGE_BLOCK_STORE_H_
#define TURBOKV_SERVER_STORAGE_BLOCK_STORE_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/periodic_tasks.h"
#include "server/storage/block_events.h"
#include "server/storage/block_index.h"
#include "server/storage/clock.h"
#include "server/storage/disk_guard.h"
#include "server/storage/eviction_policy.h"
#include "server/storage/expiry_queue.h"
#include "server/storage/log_every.h"
#include "server/storage/namespace_table.h"
#include "server/storage/storage_options.h"
#include "server/storage/value_log.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace turbokv::server {

// Block hashes are opaque bytes of this length range (docs/architecture.md, "Terms").
inline constexpr size_t kMinBlockHashBytes = 8;
inline constexpr size_t kMaxBlockHashBytes = 32;
// InvalidArgument naming the length when a hash is outside [8, 32] bytes.
[[nodiscard]] absl::Status ValidateBlockHash(std::string_view hash);

struct NamespaceStatsEntry {
  NamespaceRecord record;
  uint64_t blocks = 0;
  uint64_t value_bytes = 0;    // packed bytes stored
  uint64_t logical_bytes = 0;  // blocks * logical_block_bytes
};

// What the repair on open found and did (store_repair.h). All zero/false for an intact store.
struct RepairReport {
  bool access_rebuilt = false;        // `access` dropped and recreated (recency from put times)
  bool namespaces_rebuilt = false;    // one namespace copy rebuilt from the other
  bool salvaged = false;              // the metadata rebuilt from the value log
  uint64_t salvaged_blocks = 0;       // blocks the salvage recovered
  uint64_t dropped_blocks = 0;        // blocks known before the damage and not recovered
  std::vector<std::string> findings;  // what was damaged, one line each (logged)
};

struct StoreStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;   // charged bytes (records + metadata estimates)
  uint64_t value_bytes = 0;  // packed bytes of all values
  uint64_t blocks = 0;
  uint64_t logical_bytes = 0;
  uint64_t evicted_blocks = 0;        // since open, for capacity or quota
  uint64_t evicted_bytes = 0;         // charged bytes evicted since open
  uint64_t quota_evicted_blocks = 0;  // ... of which to keep a tenant in its quota
  uint64_t quota_evicted_bytes = 0;
  uint64_t expired_blocks = 0;     // TTL expiries since open
  uint64_t checksum_failures = 0;  // since open
  RepairReport repair;             // what the open repaired
  // Allocated bytes of the data directory (value log, RocksDB's files, the reserve), as of
  // the last maintenance pass.
  uint64_t disk_bytes = 0;
  uint64_t write_resumes = 0;  // RocksDB resumed after a background error (a full disk)
  std::vector<NamespaceStatsEntry> namespaces;  // sorted by id
};

// The store's files.
struct DbStats {
  uint64_t sst_bytes = 0;                 // rocksdb.total-sst-files-size, all column families
  uint64_t value_log_bytes = 0;           // allocated bytes of the value-log segments
  uint64_t value_log_segments = 0;        // segment files
  uint64_t pending_compaction_bytes = 0;  // rocksdb.estimate-pending-compaction-bytes
  uint64_t index_memory_bytes = 0;        // the in-memory index and eviction policy, together
  uint64_t block_index_memory_bytes = 0;  // ... of which the index (entries and key set)
  uint64_t policy_memory_bytes = 0;       // ... of which the eviction policy
  ValueCacheStats read_cache;             // the cache of recently read values
  uint64_t read_cache_hits = 0;           // blocks read served from the read cache since the open
  uint64_t read_cache_misses = 0;         // ... read from the value log (0 without a read cache)
};

// How long the last Open took, step by step (Open logs them at info). Each step: wall
// seconds, and CPU seconds of the opening thread (RocksDB's background threads not included;
// the CPU time is what a busy machine cannot hide).
struct OpenStep {
  double wall_s = 0;
  double cpu_s = 0;
};
struct OpenTimings {
  OpenStep repair_check;          // RepairIfDamaged: a first open, every live SST's checksums read
  OpenStep rocksdb_open;          // DB::Open (WAL replay), the value log and policy objects
  OpenStep scan;                  // Recover: block_meta merge-joined with access into the index
                                  // (CPU: the opening thread's and the scanning threads')
  int scan_threads = 0;           // threads that decoded the scan (ScanBlockMeta's key ranges)
  double scan_threads_cpu_s = 0;  // their CPU time, together (part of scan.cpu_s)
  OpenStep policy;                // Recover: the blocks handed to the eviction policy in order
  OpenStep policy_sort;           // of which the sort of the restart order (part of policy)
  OpenStep reclaim;               // Recover: orphans deleted, unreferenced value-log pages freed
  OpenStep total;                 // all of Open (the above, the migration, the disk measurement)
};

// A stored value read without a further copy: `bytes` stay valid while `owner` (or a copy of
// it) lives, also after the block is deleted or overwritten and after the store is closed.
struct PinnedValue {
  std::shared_ptr<const void> owner;
  std::string_view bytes;
};

// The quota of a tenant: packed value bytes its namespaces may store; 0 = none (only its
// share of the capacity). Called under the store's lock by puts: it must be cheap and
// thread-safe and must not call the store.
using TenantQuotaFn = std::function<uint64_t(std::string_view tenant)>;

// Checks one stored value before it is returned (the server passes the codec's
// VerifyPackedChecksum). Non-OK = corrupt.
using ValueVerifier = std::function<absl::Status(absl::Span<const uint8_t> value)>;

class BlockStore {
 public:
  // Opens (creating if needed) the store in options.data_dir: repairs damaged RocksDB files
  // (store_repair.h), migrates values of a store written before the value log, rebuilds the
  // index, frees value-log pages no block references. `clock` may be null (the system
  // clock); it must outlive the store. InvalidArgument: bad options. FailedPrecondition: the
  // directory is in use, or its filesystem cannot deallocate file ranges. Unavailable /
  // DataLoss / Internal: the store could not be opened. `events` may be null; else it is told
  // of every block a put stored, every block removed (evicted, expired, deleted, dropped as
  // corrupt, lost with a failed overwrite) and every namespace dropped, after the change and
  // with the blocks' keys still claimed (block_events.h), and must outlive the store.
  // RunMaintenance() runs every maintenance_interval_ms (0: never) as a task on `tasks` (the
  // server's PeriodicTasks), which must outlive the store; null: on a PeriodicTasks of the
  // store's own (tests and tools).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BlockStore>> Open(
      const StorageOptions& options, ValueVerifier verifier, const Clock* clock = nullptr,
      BlockEventSink* events = nullptr, PeriodicTasks* tasks = nullptr);
  // Persists access times, flushes memtables and closes the database.
  ~BlockStore();
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  // Creates or updates a namespace record (durably, whatever the durability option says).
  // InvalidArgument when the namespace exists with another tenant (a namespace's tenant is
  // fixed).
  [[nodiscard]] absl::Status PutNamespace(const NamespaceRecord& record);
  std::optional<NamespaceRecord> GetNamespace(uint64_t id) const;
  std::vector<NamespaceRecord> ListNamespaces() const;  // sorted by id
  // Deletes the namespace and all its blocks (one write). NotFound when unknown.
  [[nodiscard]] absl::StatusOr<uint64_t> DropNamespace(uint64_t id);

  struct BlockWrite {
    std::string_view hash;   // 8..32 bytes
    std::string_view value;  // packed block
  };
  // A request's place in its prefix chain across the store calls it is split into (the put
  // and get reactors commit or read a long chain in pieces). The eviction policy learns each
  // block's parent (the request's previous block) from it, and a put never evicts an earlier
  // block of its own request (the block being put hangs below it). Start with a
  // default-constructed cursor per request; one call at a time per cursor.
  struct ChainCursor {
    uint64_t request = 0;               // the store's number for the request (0: not yet numbered)
    uint32_t last_slot = kNoSlot;       // the request's last placed block
    uint64_t last_sequence = 0;         // ... its write sequence (its slot may be reused since)
    absl::flat_hash_set<uint32_t> own;  // slots of the blocks this request put
    // A block of this request did not fit: the later ones are refused too (they would hang
    // below a gap, where no Lookup reaches them).
    bool refused_room = false;
    // Whether the next PutBlocks call ends the request (its last block is then the request's
    // last: RequestInfo::last_in_call). A caller that commits a request in several calls sets
    // it false for all but the last (the put reactor: all but the commit holding the stream's
    // last block, and every commit of a stream whose header sets chain_continues, a
    // sharded client's call that does not hold the request's last block). Default: true.
    bool call_ends_request = true;
  };
  // Stores blocks. Returns one status per block: OK (stored and durable per the durability
  // option), InvalidArgument (bad hash), ResourceExhausted (does not fit even after evicting
  // everything evictable, or the disk is full; once a block of the request did not fit, every
  // later block of it too, since a chain with a gap is only matched up to the gap). NotFound for
  // every block when the namespace is unknown; Unavailable/Internal for every block when the write
  // fails. `chain`: the request's cursor when it spans several calls; null: this call is the whole
  // request.
  std::vector<absl::Status> PutBlocks(uint64_t namespace_id, absl::Span<const BlockWrite> blocks,
                                      ChainCursor* chain = nullptr);

  // Reads blocks. Each result is the verified value, or nullopt when the block is missing,
  // expired or failed verification (then deleted and counted). Releases the blocks' leases
  // and refreshes their recency and TTL. NotFound: unknown namespace.
  //
  // With would_block set, memory only: values the read cache holds (verified when first read;
  // no read, copy or checksum). When a block is not there, or is expired (deleting it writes),
  // it returns with *would_block = true and has changed nothing: read again without.
  [[nodiscard]] absl::StatusOr<std::vector<std::optional<std::string>>> GetBlocks(
      uint64_t namespace_id, absl::Span<const std::string_view> hashes,
      bool* would_block = nullptr);
  // GetBlocks without copying the values again (the request path hands them to gRPC as they
  // are). Same results, errors and side effects.
  [[nodiscard]] absl::StatusOr<std::vector<std::optional<PinnedValue>>> GetPinnedBlocks(
      uint64_t namespace_id, absl::Span<const std::string_view> hashes, bool* would_block = nullptr,
      ChainCursor* chain = nullptr);

  // Number of leading hashes of the prefix chain that are stored (index only, no value I/O).
  // Matched blocks count as used (the eviction policy's hit); with lease_seconds > 0 they are
  // not evicted for that long (or until a GetBlocks of them). NotFound: unknown namespace.
  [[nodiscard]] absl::StatusOr<size_t> Lookup(uint64_t namespace_id,
                                              absl::Span<const std::string_view> hashes,
                                              uint32_t lease_seconds);

  // The eviction policy's tuning (nullopt with LRU), and taking another node's instead of the
  // policy's own choice (a cluster's nodes follow one node's: LookupRequest.follow_tuning;
  // EvictionPolicy::FollowTuning).
  std::optional<PolicyTuning> policy_tuning() const;
  void FollowPolicyTuning(const PolicyTuning& tuning);

  // Deletes the blocks that exist (one write); returns how many did. NotFound: namespace.
  [[nodiscard]] absl::StatusOr<uint64_t> DeleteBlocks(uint64_t namespace_id,
                                                      absl::Span<const std::string_view> hashes);

  // Deletes expired blocks, persists batched access times, measures the disk, resumes
  // RocksDB after a full disk. Runs every maintenance_interval_ms in the background (a periodic
  // task; its errors are logged there and surface again on the next request's write); tests may
  // call it directly.
  [[nodiscard]] absl::Status RunMaintenance();

  // Where quotas come from (see "Tenants" above); null (the default): no tenant has one. Takes
  // effect from the next put.
  void SetTenantQuotas(TenantQuotaFn quotas);
  // What the namespaces of `tenant` hold (zeros for a tenant without blocks). O(1).
  NamespaceUsage TenantUsage(std::string_view tenant) const;

  StoreStats Stats() const;
  // Packed value bytes stored in the namespaces `namespace_ids` (kept per namespace as blocks
  // come and go: O(ids), no copy of the namespace table). Thread-safe.
  uint64_t StoredValueBytes(absl::Span<const uint64_t> namespace_ids) const;
  DbStats GetDbStats() const;
  const StorageOptions& options() const { return options_; }
  // Set once by Open; constant afterwards.
  const OpenTimings& open_timings() const { return open_timings_; }

 private:
  BlockStore(const StorageOptions& options, ValueVerifier verifier, const Clock* clock,
             BlockEventSink* events);
  // Open's steps (block_store_open.cc).
  absl::Status OpenDb();
  absl::Status Recover();
  absl::Status MigrateLegacyValues(std::vector<std::string> keys);

  absl::Status Write(rocksdb::WriteBatch* batch, bool durable);
  // Expiry of a block (0 = never): max(last access + TTL, lease). Requires mu_.
  int64_t ExpiryOf(uint32_t slot) const;
  bool Expired(uint32_t slot, int64_t now) const { return Expired(ExpiryOf(slot), now); }
  static bool Expired(int64_t expire_at, int64_t now) { return expire_at != 0 && now >= expire_at; }
  // Queues the block's current expiry (namespaces with a TTL). Requires mu_.
  void QueueExpiry(uint32_t slot);
  // Records that the block was used now (put, hit or read): access time, touch number to
  // persist. Requires mu_.
  void Touched(uint32_t slot, int64_t now, bool refresh_access_time);
  // Removes a block from the index, the policy and the side tables. Requires mu_.
  // A 64-bit hash of the block's storage key (namespace id, block hash): the policy's name for
  // it across evictions (EvictionPolicy::OnInsert).
  uint64_t Fingerprint(uint32_t slot) const;
  // The block's charge as the policy is told it (every event passes it: the policy keeps none).
  uint32_t PolicyCharge(uint32_t slot) const {
    return static_cast<uint32_t>(std::min<uint64_t>(index_.charge(slot), UINT32_MAX));
  }
  void Forget(uint32_t slot, EraseReason reason);
  // Claims keys for a write: waits on busy_cv_ while any is claimed by another writer, then
  // marks them all. Requires mu_ (held by `l`). ReleaseKeys requires mu_.
  void AcquireKeys(std::unique_lock<std::mutex>& l, const std::vector<std::string>& keys);
  void ReleaseKeys(const std::vector<std::string>& keys);
  bool Busy(uint32_t slot) const;  // its key is claimed; requires mu_
  // Deletes blocks by key (records first, then one write, claiming the keys). only_expired_at
  // != 0: only those still expired at that time when claimed. Returns how many went; those
  // are reported to events_ as removed for `reason`.
  absl::StatusOr<uint64_t> DeleteKeys(std::vector<std::string> keys, RemovalReason reason,
                                      int64_t only_expired_at = 0);
  // Reports blocks (slots still in the index: call before Forget) to events_ as removed, one
  // call per namespace. Requires mu_, with the blocks' keys still claimed, so a block's
  // reports keep the order of its changes. Cost: the sink's copy of the hashes (no I/O).
  void ReportRemoved(std::vector<uint32_t> slots, RemovalReason reason) const;
  absl::Status FlushAccessTimes();
  void CloseDb();  // flushes and closes db_ (destructor)
  [[nodiscard]] absl::Status LockDataDir();
  // Measures the data directory and updates the disk overhead counted against the capacity.
  void MeasureDisk();
  // The next request number (ChainCursor::request). Requires mu_.
  uint64_t NumberRequest(ChainCursor* chain);
  RequestInfo InfoFor(const ChainCursor& chain, int64_t now) const;

  // Tenants (block_store_tenants.cc). All require mu_.
  // The dense number of tenant `name` (0 is ""), assigned on first use.
  uint32_t TenantNumber(std::string_view name);
  uint64_t QuotaOf(uint32_t tenant) const;  // 0: none
  // Growth reserved by puts in flight, net of the victims they picked, by tenant.
  struct InFlight {
    int64_t value_bytes = 0;
    int64_t charge = 0;
  };
  InFlight& ReservedOf(uint32_t tenant);
  // Takes back what one put added to tenant_reserved_.
  void ReleaseTenantReservations(const absl::flat_hash_map<uint32_t, InFlight>& added);
  // Victims among `tenant`'s blocks whose packed bytes add up to at least `value_bytes` (or
  // all evictable ones), least valuable first.
  // `prior`: the victims the put picked already (refused by `evictable`; the policy lets their
  // parents follow).
  std::vector<uint32_t> PickQuotaVictims(uint32_t tenant, uint64_t value_bytes,
                                         const std::vector<uint32_t>& prior,
                                         EvictablePredicate evictable);
  // Victims of at least `bytes` charged bytes for capacity, by the tenants' shares (see
  // "Tenants"). `putter`: the putting tenant; `growth`: charged bytes its put adds on top of
  // what ReservedOf already holds.
  std::vector<uint32_t> PickCapacityVictims(uint64_t bytes, uint32_t putter, int64_t growth,
                                            const std::vector<uint32_t>& prior,
                                            EvictablePredicate evictable);

  const StorageOptions options_;
  const ValueVerifier verifier_;
  const Clock* const clock_;
  BlockEventSink* const events_;  // may be null

  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_default_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_blocks_ = nullptr;  // legacy values only
  rocksdb::ColumnFamilyHandle* cf_meta_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_access_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_namespaces_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_namespaces_copy_ = nullptr;
  RepairReport repair_;       // set by OpenDb
  OpenTimings open_timings_;  // set by Open
  std::unique_ptr<ValueLog> log_;
  // The value log's read cache: whether there is one (set at the open), and the blocks that
  // GetPinnedBlocks served from it or read from the log (DbStats::read_cache_hits / _misses).
  bool has_read_cache_ = false;
  std::atomic<uint64_t> read_cache_hits_{0};
  std::atomic<uint64_t> read_cache_misses_{0};
  std::unique_ptr<NamespaceTable> namespaces_;
  DiskGuard disk_;
  // Write sequences of value-log records: AllocateSequences(n) returns the first of n new
  // ones. Every sequence handed out is below a high-water mark persisted (fsync'ed, in the
  // default column family) before it is crossed, and a restart continues from that mark: no
  // record a crash left behind shares a sequence with a later write.
  uint64_t AllocateSequences(uint64_t n);
  absl::Status LoadSequenceMark();
  std::atomic<uint64_t> next_sequence_{1};
  std::mutex sequence_mu_;  // guards sequence_mark_ and its writes
  std::atomic<uint64_t> sequence_mark_{0};

  LogEvery refused_log_, write_failure_log_, checksum_log_;

  mutable std::mutex mu_;  // guards everything below; never held across I/O
  std::condition_variable busy_cv_;
  absl::flat_hash_set<std::string> busy_;  // storage keys claimed by writes in flight
  BlockIndex index_;
  std::unique_ptr<EvictionPolicy> policy_;
  absl::flat_hash_map<uint32_t, int64_t> leases_;  // slot -> unix seconds it is leased until
  ExpiryQueue expiry_;
  uint64_t ttl_blocks_ = 0;  // blocks of namespaces with a TTL (expiry_ compaction)
  struct Dirty {
    uint64_t sequence;  // the block's sequence when touched (a reused slot differs)
    uint64_t touch;     // its touch number
  };
  absl::flat_hash_map<uint32_t, Dirty> dirty_access_;  // access entries to persist
  uint64_t next_touch_ = 1;
  uint64_t next_request_ = 1;
  int64_t reserved_bytes_ = 0;        // capacity reserved by writes in flight
  uint64_t disk_overhead_bytes_ = 0;  // allocated bytes beyond the charges (measured)
  DiskUsage disk_usage_;              // the last measurement
  uint64_t evicted_blocks_ = 0;
  uint64_t evicted_bytes_ = 0;
  uint64_t quota_evicted_blocks_ = 0;
  uint64_t quota_evicted_bytes_ = 0;
  TenantQuotaFn quotas_;  // may be null
  absl::flat_hash_map<std::string, uint32_t> tenant_numbers_;
  std::vector<std::string> tenant_names_;  // by number; [0] = ""
  std::vector<InFlight> tenant_reserved_;  // by number
  uint64_t expired_blocks_ = 0;
  uint64_t checksum_failures_ = 0;
  uint64_t write_resumes_ = 0;

  // The maintenance task: on tasks given to Open, else on own_tasks_. Cancelled first thing in
  // the destructor, so no pass runs while the database closes.
  std::unique_ptr<PeriodicTasks> own_tasks_;
  PeriodicTasks::Handle maintenance_;
  int dir_lock_fd_ = -1;  // flock'ed format::kDirLockFile; closed after the database
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_BLOCK_STORE_H_
