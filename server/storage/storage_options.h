// Options of the block store (docs/server.md, "Storage"). Built by main.cc from flags, or directly by
// tests; nested in ServerOptions (server/server_options.h).
#ifndef TURBOKV_SERVER_STORAGE_STORAGE_OPTIONS_H_
#define TURBOKV_SERVER_STORAGE_STORAGE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace turbokv::server {

// How hard a write is made durable before it is acknowledged.
enum class Durability {
  kNone,   // RocksDB WAL disabled: a process crash loses unflushed writes.
  kWal,    // WAL on, no fsync per write: survives a process crash, not a power loss.
  kFsync,  // WAL on and fsync'ed (WriteOptions::sync) before the ack.
};
std::string_view DurabilityName(Durability durability);  // "none", "wal", "fsync"
[[nodiscard]] absl::StatusOr<Durability> ParseDurability(std::string_view name);

struct StorageOptions {
  // Directory of the embedded RocksDB; created when missing. Default: "./turbokv-data".
  std::string data_dir = "./turbokv-data";
  // Hard budget on stored bytes (packed values plus keys and per-block metadata, as accounted
  // by the store; RocksDB's own overhead and not-yet-collected blob garbage come on top).
  // Default: 10 GiB.
  uint64_t capacity_bytes = uint64_t{10} << 30;
  // When a put would take the stored bytes above high_watermark * capacity, least recently
  // used blocks without an active lease are evicted until they are at or below
  // low_watermark * capacity. 0 < low <= high <= 1. Default: 0.95 and 0.90.
  double high_watermark = 0.95;
  double low_watermark = 0.90;
  // Default: kWal.
  Durability durability = Durability::kWal;
  // Values at least this large go to RocksDB blob files (BlobDB), so compaction does not
  // rewrite them. Default: 4096 bytes.
  uint64_t min_blob_size = 4096;
  // Bytes preallocated in <data_dir>/RESERVE and released when the disk fills (so RocksDB can
  // resume and take deletions) and before every open (so replaying the WAL on a nearly full
  // disk succeeds); at most 1/8 of the filesystem, taken again once the disk has 4x the
  // reserve free. 0 disables it. Default: 64 MiB.
  uint64_t disk_reserve_bytes = uint64_t{64} << 20;
  // RocksDB blob cache (one LRU cache) of the blocks column family, in bytes: blocks are put
  // into it when a flush writes them to a blob file (prepopulate_blob_cache = kFlushOnly) and
  // when a read fetches them from one, so recently written or read blocks are served from
  // memory (a PACKED GetBlocks of them runs on the calling thread, no hop to the I/O pool).
  // Memory on top of the memtables, at most capacity_bytes (a larger cache could never fill);
  // its use is turbokv_rocksdb_blob_cache_bytes. 0 disables it. Default: 64 MiB.
  uint64_t blob_cache_bytes = uint64_t{64} << 20;
  // Period of the maintenance pass (TTL expiry, persisting batched access times), in
  // milliseconds. 0 disables the background thread (tests call RunMaintenance()).
  // Default: 1000.
  int maintenance_interval_ms = 1000;

  // InvalidArgument naming the field when a value is out of range.
  [[nodiscard]] absl::Status Validate() const;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_STORAGE_OPTIONS_H_
