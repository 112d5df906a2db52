// Options of the block store (docs/server.md, "Storage"). Built by main.cc from flags, or directly
// by tests; nested in ServerOptions (server/server_options.h). Each field's default is its
// initializer below; its flag, range and help are in StorageOptionTable() (storage_options.cc).
#ifndef TURBOKV_SERVER_STORAGE_STORAGE_OPTIONS_H_
#define TURBOKV_SERVER_STORAGE_STORAGE_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/option_table.h"

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
  // Hard budget on the data directory's bytes: the value log's records (packed blocks, each
  // rounded up to whole 4 KiB pages) and RocksDB's data files (SST, WAL); only the disk
  // reserve (disk_reserve_bytes) and RocksDB's bounded bookkeeping files (info LOG, MANIFEST:
  // at most 13 MiB) come on top. Default: 10 GiB.
  uint64_t capacity_bytes = uint64_t{10} << 30;
  // When a put would take the bytes above high_watermark * capacity, the eviction policy's
  // least valuable blocks without an active lease are evicted until they are at or below
  // low_watermark * capacity; low <= high. Default: 0.995 and 0.99 (a value log gives
  // an evicted block's space back at once, so the store can run close to full; the gap only
  // batches evictions).
  double high_watermark = 0.995;
  double low_watermark = 0.99;
  // Which blocks go first when the store is full (eviction_policy.h): "lrfu" (prefix-tree
  // aware, recency and frequency with an adaptive half-life; lrfu_policy.h) or "lru" (the
  // order before issue 21). Default: "lrfu".
  std::string eviction_policy = "lrfu";
  // Refuse LookupRequest.follow_tuning: the policy keeps tuning itself even when a sharded
  // client sends the cluster's tuning node's choice (docs/cluster.md). Default: false.
  bool ignore_client_tuning = false;
  // Default: kWal.
  Durability durability = Durability::kWal;
  // Bytes preallocated in <data_dir>/RESERVE and released when the disk fills (so RocksDB can
  // resume and take deletions) and before every open (so replaying the WAL on a nearly full
  // disk succeeds); at most 1/64 of capacity_bytes and 1/8 of the filesystem, taken again once
  // the disk has 4x the reserve free. 0 disables it. Default: 64 MiB.
  uint64_t disk_reserve_bytes = uint64_t{64} << 20;
  // Size at which a value-log segment file is closed and the next one started (value_log.h).
  // Default: 256 MiB.
  uint64_t segment_bytes = uint64_t{256} << 20;
  // Memory for the cache of recently read packed blocks (ValueLogOptions::cache_bytes): a hit
  // is served without a disk read, a copy or a checksum (it was verified when read). 0: none.
  // Default: 64 MiB.
  uint64_t read_cache_bytes = uint64_t{64} << 20;
  // Period of the maintenance pass (TTL expiry, persisting batched access times), in
  // milliseconds. 0 disables the background thread (tests call RunMaintenance()).
  // Default: 1000.
  int maintenance_interval_ms = 1000;

  // InvalidArgument naming the field when a value is out of range (StorageOptionTable()), the
  // data directory is empty or low_watermark > high_watermark.
  [[nodiscard]] absl::Status Validate() const;
};

// Flag, field name, range, unit and help of every StorageOptions field: the one place each is
// written (Validate and the server's flags come from it).
const OptionTable<StorageOptions>& StorageOptionTable();

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_STORAGE_OPTIONS_H_
