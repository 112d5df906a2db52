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

// Values of stores written before the value log (BlobDB); empty once migrated (BlockStore).
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

// block_meta value. Current (40 bytes): fixed64 LE value bytes | fixed64 LE put time |
// fixed64 LE checksum (the value's trailing 8 bytes) | fixed32 LE value-log segment |
// fixed32 LE page | fixed64 LE write sequence. Stores written before the value log have 16 or
// 24 bytes (no place: the value is in the legacy `blocks` column family) and are migrated at
// open (BlockStore).
struct MetaValue {
  uint64_t value_bytes = 0;
  int64_t put_time = 0;
  uint64_t checksum = 0;
  bool in_log = false;    // false: a legacy value in `blocks`
  uint32_t segment = 0;   // in_log only
  uint32_t page = 0;      // in_log only
  uint64_t sequence = 0;  // in_log only
};
inline constexpr size_t kMetaBytes = 40;
inline std::string EncodeMeta(const MetaValue& m) {
  std::string v;
  v.reserve(kMetaBytes);
  PutFixed64LE(&v, m.value_bytes);
  PutFixed64LE(&v, static_cast<uint64_t>(m.put_time));
  PutFixed64LE(&v, m.checksum);
  PutFixed64LE(&v, uint64_t{m.segment} | (uint64_t{m.page} << 32));
  PutFixed64LE(&v, m.sequence);
  return v;
}
// False when `v` is no block_meta value.
inline bool DecodeMeta(std::string_view v, MetaValue* m) {
  if (v.size() != 16 && v.size() != 24 && v.size() != kMetaBytes) return false;
  m->value_bytes = GetFixed64LE(v.data());
  m->put_time = static_cast<int64_t>(GetFixed64LE(v.data() + 8));
  m->checksum = v.size() >= 24 ? GetFixed64LE(v.data() + 16) : 0;
  m->in_log = v.size() == kMetaBytes;
  if (m->in_log) {
    const uint64_t place = GetFixed64LE(v.data() + 24);
    m->segment = static_cast<uint32_t>(place);
    m->page = static_cast<uint32_t>(place >> 32);
    m->sequence = GetFixed64LE(v.data() + 32);
  }
  return true;
}

// The trailing 8 bytes of a packed block (its xxHash3-64 checksum, FORMAT.md), 0 when shorter.
inline uint64_t TrailerOf(std::string_view value) {
  return value.size() < 8 ? 0 : GetFixed64LE(value.data() + value.size() - 8);
}

// access column family value: last_access (unix seconds), then the block's touch number (the
// store numbers every put, hit and read; a restart hands blocks to the eviction policy in this
// order). Values written before the number existed are 8 bytes (last_access only).
inline std::string EncodeAccess(int64_t last_access, uint64_t recency) {
  std::string v;
  PutFixed64LE(&v, static_cast<uint64_t>(last_access));
  PutFixed64LE(&v, recency);
  return v;
}

// Memtable of each metadata column family: 1/256 of the capacity within [256 KiB, 16 MiB]. Only
// metadata goes through RocksDB (about 150 bytes a block), so the WAL and memtables (counted
// against the capacity) stay a small part of a small store's budget.
uint64_t WriteBufferBytes(const StorageOptions& options);

// The RocksDB options every open of the data directory uses (paranoid checks on; the repair
// path turns them off for its first look at a damaged directory).
rocksdb::DBOptions DbOptions(const StorageOptions& options);
// Options of the named column family.
rocksdb::ColumnFamilyOptions CfOptions(std::string_view name, const StorageOptions& options);
// Descriptors in CfIndex order.
std::vector<rocksdb::ColumnFamilyDescriptor> Descriptors(const StorageOptions& options);
// The value log's directory inside the data directory.
inline constexpr char kValuesDir[] = "values";

}  // namespace turbokv::server::format

#endif  // TURBOKV_SERVER_STORAGE_STORE_FORMAT_H_
