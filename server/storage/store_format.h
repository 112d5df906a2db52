// The block store's on-disk layout (column families, keys, values, RocksDB options), shared by
// the store (block_store.cc) and its repair path (store_repair.cc). The layout is described in
// block_store.h. Internal to server/storage.
#ifndef TURBOKV_SERVER_STORAGE_STORE_FORMAT_H_
#define TURBOKV_SERVER_STORAGE_STORE_FORMAT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "server/storage/storage_options.h"

namespace turbokv::server::format {

inline constexpr char kCfBlocks[] = "blocks";
inline constexpr char kCfMeta[] = "block_meta";
inline constexpr char kCfAccess[] = "access";
inline constexpr char kCfNamespaces[] = "namespaces";
// A second copy of every namespace record, in its own SST files: a damaged `namespaces` CF is
// rebuilt from it (and the other way round).
inline constexpr char kCfNamespacesCopy[] = "namespaces_copy";

// The data directory's own lock file (flock, held for the store's lifetime, with the holder's
// pid): taken before anything in the directory is touched — the disk reserve, the repair —, so
// a second server started on the same directory changes nothing. RocksDB's LOCK is taken only
// later, by DB::Open. Salvage keeps it in place.
inline constexpr char kDirLockFile[] = "turbokv.lock";
// Order of the handles OpenDb returns.
enum CfIndex { kDefault = 0, kBlocks, kMeta, kAccess, kNamespaces, kNamespacesCopy, kNumCfs };

inline void PutFixed64BE(std::string* out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline uint64_t GetFixed64BE(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
inline void PutFixed64LE(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline uint64_t GetFixed64LE(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

inline std::string NamespaceKey(uint64_t id) {
  std::string key;
  PutFixed64BE(&key, id);
  return key;
}

// block_meta value: fixed64 LE value bytes | fixed64 LE put time | fixed64 LE checksum (the
// value's trailing 8 bytes; absent in metadata written before it existed).
inline std::string EncodeMeta(uint64_t value_bytes, int64_t put_time, uint64_t checksum) {
  std::string v;
  PutFixed64LE(&v, value_bytes);
  PutFixed64LE(&v, static_cast<uint64_t>(put_time));
  PutFixed64LE(&v, checksum);
  return v;
}

// The trailing 8 bytes of a packed block (its xxHash3-64 checksum, FORMAT.md), 0 when shorter.
inline uint64_t TrailerOf(std::string_view value) {
  return value.size() < 8 ? 0 : GetFixed64LE(value.data() + value.size() - 8);
}

// access column family value: last_access (unix seconds), then the eviction order key
// (IndexEntry::recency). Values written before the key existed are 8 bytes (last_access only).
inline std::string EncodeAccess(int64_t last_access, uint64_t recency) {
  std::string v;
  PutFixed64LE(&v, static_cast<uint64_t>(last_access));
  PutFixed64LE(&v, recency);
  return v;
}

// Memtable of the blocks column family: 1/16 of the capacity within [1 MiB, 64 MiB], so the
// WAL and memtables (counted against the capacity, BlockStore::MeasureDisk) stay a small part
// of a small store's budget.
uint64_t WriteBufferBytes(const StorageOptions& options);

// The RocksDB options every open of the data directory uses (paranoid checks on; the repair
// path turns them off for its first look at a damaged directory).
rocksdb::DBOptions DbOptions(const StorageOptions& options);
// Options of the named column family. `blob_cache` (may be null: none) becomes the blocks
// family's blob cache, prepopulated at flush.
rocksdb::ColumnFamilyOptions CfOptions(std::string_view name, const StorageOptions& options,
                                       std::shared_ptr<rocksdb::Cache> blob_cache = nullptr);
// Descriptors in CfIndex order.
std::vector<rocksdb::ColumnFamilyDescriptor> Descriptors(
    const StorageOptions& options, const std::shared_ptr<rocksdb::Cache>& blob_cache = nullptr);
// The blob cache options.blob_cache_bytes asks for (min with capacity_bytes); null when 0.
std::shared_ptr<rocksdb::Cache> NewBlobCache(const StorageOptions& options);

}  // namespace turbokv::server::format

#endif  // TURBOKV_SERVER_STORAGE_STORE_FORMAT_H_
