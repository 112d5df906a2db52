#include "server/storage/store_format.h"

#include <algorithm>
#include <utility>

#include "rocksdb/cache.h"
#include "rocksdb/env.h"
#include "rocksdb/sst_file_manager.h"

namespace turbokv::server::format {

uint64_t WriteBufferBytes(const StorageOptions& options) {
  return std::clamp<uint64_t>(options.capacity_bytes / 16, uint64_t{1} << 20, uint64_t{64} << 20);
}

rocksdb::DBOptions DbOptions(const StorageOptions& options) {
  rocksdb::DBOptions db_options;
  // WALs past this force a flush (all column families, atomic flush).
  db_options.max_total_wal_size = 2 * WriteBufferBytes(options);
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  // Column families are flushed together, so a crash with the WAL off (durability none)
  // cannot leave a value without its metadata or the other way round.
  db_options.atomic_flush = true;
  db_options.max_background_jobs = 2;
  // RocksDB's info LOG gains lines with every flush and compaction; without a size limit it
  // only rolls at a restart and grew without bound under steady puts (85 MiB in a 10-minute
  // soak of a 16 MiB store, tests/fault/fault_soak_test.cc). At most 4 old files + the current
  // one of 4 MiB each: 20 MiB.
  db_options.max_log_file_size = uint64_t{4} << 20;
  db_options.keep_log_file_num = 4;
  // The MANIFEST gains a record with every flush and compaction (about 0.5 MiB a minute under
  // steady puts) and is only rewritten past this size (RocksDB's default: 1 GiB).
  db_options.max_manifest_file_size = uint64_t{8} << 20;
  // Tracks SST and blob bytes (the store's disk accounting) and, on a no-space background
  // error, polls for free space and resumes RocksDB by itself (BlockStore::TryResume as well).
  db_options.sst_file_manager.reset(rocksdb::NewSstFileManager(rocksdb::Env::Default()));
  return db_options;
}

std::shared_ptr<rocksdb::Cache> NewBlobCache(const StorageOptions& options) {
  const uint64_t bytes = std::min(options.blob_cache_bytes, options.capacity_bytes);
  if (bytes == 0) return nullptr;
  rocksdb::LRUCacheOptions lru;
  lru.capacity = bytes;
  // Blobs of ~0.1-8 MiB: few shards, so one shard (capacity / 2^bits) still holds many.
  lru.num_shard_bits = 2;
  return rocksdb::NewLRUCache(lru);
}

rocksdb::ColumnFamilyOptions CfOptions(std::string_view name, const StorageOptions& options,
                                       std::shared_ptr<rocksdb::Cache> blob_cache) {
  rocksdb::ColumnFamilyOptions cf;
  cf.compression = rocksdb::kNoCompression;
  if (name == kCfBlocks) {
    cf.write_buffer_size = WriteBufferBytes(options);
    // Packed blocks are incompressible and large: keep them in blob files so compaction moves
    // only keys, and let blob GC reclaim space of deleted blocks.
    cf.enable_blob_files = true;
    cf.min_blob_size = options.min_blob_size;
    cf.blob_file_size = uint64_t{256} << 20;
    cf.blob_compression_type = rocksdb::kNoCompression;
    cf.enable_blob_garbage_collection = true;
    // Blob files at least half garbage are compacted whatever their age: deleted and evicted
    // blocks give their disk space back instead of staying on disk as uncounted garbage.
    cf.blob_garbage_collection_force_threshold = 0.5;
    if (blob_cache != nullptr) {
      cf.blob_cache = std::move(blob_cache);
      // A KV block is most often read soon after it was written (the next request of the same
      // prefix): a flush leaves the blocks it writes in memory.
      cf.prepopulate_blob_cache = rocksdb::PrepopulateBlobCache::kFlushOnly;
    }
  }
  return cf;
}

std::vector<rocksdb::ColumnFamilyDescriptor> Descriptors(
    const StorageOptions& options, const std::shared_ptr<rocksdb::Cache>& blob_cache) {
  std::vector<rocksdb::ColumnFamilyDescriptor> d;
  for (const char* name : {rocksdb::kDefaultColumnFamilyName.c_str(), kCfBlocks, kCfMeta,
                           kCfAccess, kCfNamespaces, kCfNamespacesCopy}) {
    d.emplace_back(name, CfOptions(name, options, blob_cache));
  }
  return d;
}

}  // namespace turbokv::server::format
