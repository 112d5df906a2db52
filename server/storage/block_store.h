// The block store: packed KV blocks in an embedded RocksDB (docs/server.md, "Storage").
//
// Column families:
//   blocks      key = 8-byte big-endian namespace id || block hash (8..32 bytes)
//               value = packed block (BlobDB: values >= min_blob_size live in blob files)
//   block_meta  same key -> fixed64 LE value bytes, fixed64 LE put time (unix seconds),
//               fixed64 LE checksum (the packed block's xxHash3-64 trailer; older metadata
//               has 16 bytes and no checksum); written in the same WriteBatch as the value,
//               so the two never disagree.
//   access      same key -> fixed64 LE last access (unix seconds). Written in batches by the
//               maintenance pass with the WAL off: an access time lost in a crash only makes
//               eviction slightly less accurate. Entries without block_meta are ignored.
//   namespaces  fixed64 BE namespace id -> NamespaceRecord (see block_store.cc); written with
//               the WAL on and fsync'ed whatever the durability option says
//   namespaces_copy  the same records again, in the same WriteBatch: a damaged `namespaces`
//               is rebuilt from it, and the other way round (store_repair.h)
//
// Damaged files (bit flips, truncation, a damaged MANIFEST) are found and repaired on open
// (store_repair.h, docs/faults.md): the store starts and serves every block that could be
// recovered; what was dropped is logged and reported in StoreStats::repair.
//
// All of a PutBlocks call (values, metadata, evicted blocks' deletions) is one WriteBatch:
// a block is visible whole or not at all. Every value read is checked with the verifier (the
// codec's VerifyPackedChecksum in the server); a value that fails is deleted, counted and
// reported missing, never returned.
//
// Capacity: an in-memory index (BlockIndex, rebuilt on open by scanning block_meta and
// access) tracks every block's charge (value + keys + metadata bytes) and recency. A put that
// would take the charged bytes above high_watermark evicts least recently used blocks (Lookup,
// GetBlocks and PutBlocks count as uses) that are not leased, down to low_watermark; a block
// that does not fit even after evicting everything evictable fails with ResourceExhausted.
//
// Integrity: every value read is checked twice by turbokv itself: its xxHash3-64 trailer must
// verify (the verifier), and it must equal the checksum recorded for its key at put time
// (binds the bytes to the key). RocksDB's read-side checksums, which duplicated this, are off
// for such blocks (docs/server.md, "Integrity").
//
// Thread safety: all methods are thread-safe. One mutex guards the in-memory index; it is
// never held across RocksDB I/O. A write claims its keys under the index lock (a second writer
// of the same key waits, so the index sees a key's writes in RocksDB's commit order), reserves
// capacity and picks victims, then writes with no turbokv lock held, so RocksDB's group commit
// batches concurrent writers. Lookup and Stats touch only the index; expiry takes due blocks
// from a queue in slices, never scanning the index.
#ifndef TURBOKV_SERVER_STORAGE_BLOCK_STORE_H_
#define TURBOKV_SERVER_STORAGE_BLOCK_STORE_H_

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
#include "server/storage/block_index.h"
#include "server/storage/clock.h"
#include "server/storage/storage_options.h"

namespace rocksdb {
class Cache;
class DB;
class SstFileManager;
class ColumnFamilyHandle;
class TableFactory;
class WriteBatch;
}  // namespace rocksdb

namespace turbokv::server {

// Block hashes are opaque bytes of this length range (docs/architecture.md, "Terms").
inline constexpr size_t kMinBlockHashBytes = 8;
inline constexpr size_t kMaxBlockHashBytes = 32;
// InvalidArgument naming the length when a hash is outside [8, 32] bytes.
[[nodiscard]] absl::Status ValidateBlockHash(std::string_view hash);

// What the store keeps about a namespace. The descriptor is opaque here (the service layer
// stores its serialized canonical NamespaceDescriptor).
struct NamespaceRecord {
  uint64_t id = 0;
  std::string descriptor;            // opaque bytes
  uint32_t ttl_seconds = 0;          // 0: blocks never expire
  uint64_t logical_block_bytes = 0;  // raw bytes of one block in the namespace dtype
};

struct NamespaceStatsEntry {
  NamespaceRecord record;
  uint64_t blocks = 0;
  uint64_t value_bytes = 0;    // packed bytes stored
  uint64_t logical_bytes = 0;  // blocks * logical_block_bytes
};

// What the repair on open found and did (store_repair.h). All zero/false for an intact store.
struct RepairReport {
  bool access_rebuilt = false;      // `access` dropped and recreated (recency from put times)
  bool namespaces_rebuilt = false;  // one namespace copy rebuilt from the other
  bool salvaged = false;            // full salvage into a fresh database
  uint64_t salvaged_blocks = 0;     // blocks the salvage recovered
  uint64_t dropped_blocks = 0;      // blocks known before the damage and not recovered
  std::vector<std::string> findings;  // what was damaged, one line each (logged)
};

struct StoreStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;   // charged bytes (values + keys + metadata)
  uint64_t value_bytes = 0;  // packed bytes of all values
  uint64_t blocks = 0;
  uint64_t logical_bytes = 0;
  uint64_t evicted_blocks = 0;                  // since open
  uint64_t evicted_bytes = 0;                   // charged bytes evicted since open
  uint64_t expired_blocks = 0;                  // TTL expiries since open
  uint64_t checksum_failures = 0;               // since open
  RepairReport repair;                          // what the open repaired
  // Bytes of every file in the data directory (SST, blob, WAL, info LOG, MANIFEST, OPTIONS,
  // RESERVE, ...), as of the last maintenance pass.
  uint64_t disk_bytes = 0;
  uint64_t write_resumes = 0;  // RocksDB resumed after a background error (a full disk)
  std::vector<NamespaceStatsEntry> namespaces;  // sorted by id
};

// RocksDB's own view of its size.
struct DbStats {
  uint64_t sst_bytes = 0;                 // rocksdb.total-sst-files-size, all column families
  uint64_t blob_bytes = 0;                // rocksdb.total-blob-file-size
  uint64_t pending_compaction_bytes = 0;  // rocksdb.estimate-pending-compaction-bytes
  uint64_t blob_cache_bytes = 0;          // in the blob cache (StorageOptions::blob_cache_bytes)
};

// A stored value read without a copy: `bytes` stay valid while `owner` (or a copy of it) lives,
// also after the block is deleted or overwritten and after the store is closed. The owner is
// RocksDB's pinned read result (a blob cache or block cache entry, or RocksDB's own read
// buffer) together with the caches it pins into.
struct PinnedValue {
  std::shared_ptr<const void> owner;
  std::string_view bytes;
};

// Checks one stored value before it is returned (the server passes the codec's
// VerifyPackedChecksum). Non-OK = corrupt.
using ValueVerifier = std::function<absl::Status(absl::Span<const uint8_t> value)>;

class BlockStore {
 public:
  // Opens (creating if needed) the database in options.data_dir and rebuilds the index.
  // `clock` may be null (the system clock); it must outlive the store.
  // InvalidArgument: bad options. Unavailable / DataLoss / Internal: RocksDB failed to open.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<BlockStore>> Open(
      const StorageOptions& options, ValueVerifier verifier, const Clock* clock = nullptr);
  // Persists access times, flushes memtables and closes the database.
  ~BlockStore();
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  // Creates or updates a namespace record (durably, per the durability option).
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
  // and get reactors commit or read a long chain in pieces). Eviction order: each block of a
  // chain ranks immediately below the previous block of the same request, so a chain's tail
  // is evicted before its head, even when the request spans several calls (vLLM's prefix
  // cache frees a request's blocks in reverse order for the same reason). Start with a
  // default-constructed cursor per request; one call at a time per cursor.
  struct ChainCursor {
    uint64_t call = 0;    // the request's number (0: not yet numbered)
    uint64_t next = 0;    // position of the request's next block in its chain
    std::string anchor;   // storage key of the request's last placed block ("": none yet)
  };
  // Stores blocks (all that fit in one WriteBatch). Returns one status per block: OK (stored
  // and durable per the durability option), InvalidArgument (bad hash), ResourceExhausted
  // (does not fit even after evicting everything evictable). NotFound for every block when
  // the namespace is unknown; Unavailable/Internal for every block when the write fails.
  // `chain`: the request's cursor when it spans several calls; null: this call is the whole
  // request.
  std::vector<absl::Status> PutBlocks(uint64_t namespace_id, absl::Span<const BlockWrite> blocks,
                                      ChainCursor* chain = nullptr);

  // Reads blocks with one MultiGet. Each result is the verified value, or nullopt when the
  // block is missing, expired or failed verification (then deleted and counted). Releases
  // the blocks' leases and refreshes their recency and TTL. NotFound: unknown namespace.
  //
  // With would_block set, the read never does I/O (RocksDB's kBlockCacheTier: memtables and
  // the blob/block caches only), so it may run on a thread that must not block. When a block
  // is not all in memory, or is expired or fails verification (those need writes), it
  // returns with *would_block = true and has changed nothing: read again without it.
  [[nodiscard]] absl::StatusOr<std::vector<std::optional<std::string>>> GetBlocks(
      uint64_t namespace_id, absl::Span<const std::string_view> hashes,
      bool* would_block = nullptr);
  // GetBlocks without copying the values out of RocksDB (the request path hands them to gRPC
  // as they are). Same results, errors and side effects.
  [[nodiscard]] absl::StatusOr<std::vector<std::optional<PinnedValue>>> GetPinnedBlocks(
      uint64_t namespace_id, absl::Span<const std::string_view> hashes,
      bool* would_block = nullptr, ChainCursor* chain = nullptr);

  // Number of leading hashes of the prefix chain that are stored (index only, no value I/O).
  // Matched blocks become most recently used; with lease_seconds > 0 they are not evicted
  // for that long (or until a GetBlocks of them). NotFound: unknown namespace.
  [[nodiscard]] absl::StatusOr<size_t> Lookup(uint64_t namespace_id,
                                              absl::Span<const std::string_view> hashes,
                                              uint32_t lease_seconds);

  // Deletes the blocks that exist (one write); returns how many did. NotFound: namespace.
  [[nodiscard]] absl::StatusOr<uint64_t> DeleteBlocks(uint64_t namespace_id,
                                                      absl::Span<const std::string_view> hashes);

  // Deletes expired blocks and persists batched access times. Runs every
  // maintenance_interval_ms in the background; tests may call it directly.
  [[nodiscard]] absl::Status RunMaintenance();

  StoreStats Stats() const;
  DbStats GetDbStats() const;
  const StorageOptions& options() const { return options_; }

 private:
  BlockStore(const StorageOptions& options, ValueVerifier verifier, const Clock* clock);
  absl::Status OpenDb();
  absl::Status Recover();
  absl::Status Write(rocksdb::WriteBatch* batch, bool durable);
  absl::Status WriteSync(rocksdb::WriteBatch* batch);  // WAL on, fsync'ed
  bool Expired(const IndexEntry& e, int64_t now) const;  // requires mu_
  int64_t ExpiryOf(const IndexEntry& e) const;            // requires mu_; 0 = never
  // Claims keys for a write: waits on busy_cv_ while any is claimed by another writer, then
  // marks them all. Requires mu_ (held by `l`). ReleaseKeys requires mu_.
  void AcquireKeys(std::unique_lock<std::mutex>& l, const std::vector<std::string_view>& keys);
  void ReleaseKeys(const std::vector<std::string_view>& keys);
  // Deletes blocks by key (one write, claiming the keys). only_expired_at != 0: only those
  // still expired at that time when claimed. Returns how many index entries went.
  absl::StatusOr<uint64_t> DeleteKeys(std::vector<std::string> keys, int64_t only_expired_at = 0);
  absl::Status FlushAccessTimes();
  void CloseDb();  // flushes and closes db_ (destructor)
  // Disk full (docs/faults.md): resumes RocksDB after a failed write, releasing the reserve
  // file when it is still short of space; re-creates the reserve once there is room again.
  void TryResume();
  void MeasureDisk();  // disk_bytes_ and disk_overhead_bytes_ (one listing of data_dir)
  uint64_t FreeDiskBytes() const;
  // ResourceExhausted when the filesystem is too full to take `blocks` and still flush.
  absl::Status CheckDiskRoom(absl::Span<const BlockWrite> blocks, int64_t now);
  std::string ReservePath() const;
  // Takes the data directory's lock file (format::kDirLockFile) or says who holds it.
  [[nodiscard]] absl::Status LockDataDir();
  // Removes the reserve file; logged at info for the routine release at start-up, else at warn.
  void ReleaseReserve(bool at_startup = false);
  void CreateReserve();
  void MaintenanceLoop();

  const StorageOptions options_;
  const ValueVerifier verifier_;
  const Clock* const clock_;

  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_default_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_blocks_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_meta_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_access_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_namespaces_ = nullptr;
  rocksdb::ColumnFamilyHandle* cf_namespaces_copy_ = nullptr;
  RepairReport repair_;  // set by OpenDb
  std::shared_ptr<rocksdb::SstFileManager> sst_file_manager_;
  std::shared_ptr<rocksdb::Cache> blob_cache_;  // null when disabled
  // The blocks column family's table factory (owns its block cache): a PinnedValue keeps it
  // and blob_cache_ alive, since RocksDB's pins release their cache entry when they go.
  std::shared_ptr<rocksdb::TableFactory> blocks_table_factory_;
  std::atomic<bool> needs_resume_{false};

  // At most one log line per interval for events that can come per block (a flood of
  // refused puts or damaged blocks), counting the ones it did not log.
  class LogEvery {
   public:
    bool Due(int64_t now) {
      ++count_;
      int64_t last = last_.load();
      return now - last >= kIntervalSeconds && last_.compare_exchange_strong(last, now);
    }
    void Add(uint64_t n) { count_ += n; }
    uint64_t TakeCount() { return count_.exchange(0); }

   private:
    static constexpr int64_t kIntervalSeconds = 10;
    std::atomic<int64_t> last_{0};
    std::atomic<uint64_t> count_{0};
  };
  LogEvery refused_log_, write_failure_log_, checksum_log_, resume_log_;

  // IndexEntry::recency of the next block of `chain`; advances the cursor (numbering the
  // request on first use). Needs mu_.
  uint64_t NextRecency(ChainCursor* chain);

  std::mutex namespace_mu_;  // serializes PutNamespace / DropNamespace; taken before mu_
  mutable std::mutex mu_;    // guards everything below; never held across RocksDB I/O
  std::condition_variable busy_cv_;
  absl::flat_hash_set<std::string> busy_;  // keys claimed by writes in flight
  uint64_t reserved_bytes_ = 0;            // capacity reserved by writes in flight
  uint64_t next_version_ = 0;
  uint64_t next_call_ = 1;  // ChainCursor::call numbers; Open seeds it above every stored one
  BlockIndex index_;
  absl::flat_hash_map<uint64_t, NamespaceRecord> namespaces_;
  absl::flat_hash_set<std::string> dirty_access_;  // keys whose last_access changed
  uint64_t evicted_blocks_ = 0;
  uint64_t evicted_bytes_ = 0;
  uint64_t expired_blocks_ = 0;
  uint64_t checksum_failures_ = 0;
  uint64_t disk_bytes_ = 0;
  uint64_t disk_overhead_bytes_ = 0;  // SST + blob + WAL bytes beyond the charged bytes
  uint64_t write_resumes_ = 0;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread maintenance_;
  int dir_lock_fd_ = -1;  // flock'ed format::kDirLockFile; closed after the database
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_BLOCK_STORE_H_
