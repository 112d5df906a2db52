#include "server/storage/store_format.h"

#include <algorithm>
#include <utility>

#include "rocksdb/env.h"
#include "rocksdb/sst_file_manager.h"

namespace turbokv::server::format {

uint64_t WriteBufferBytes(const StorageOptions& options) {
  return std::clamp<uint64_t>(options.capacity_bytes / 256, uint64_t{256} << 10,
                              uint64_t{16} << 20);
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
  // one of 1 MiB each: 5 MiB (with the MANIFEST's 8 MiB, what the data directory holds beyond
  // the capacity, the reserve aside).
  db_options.max_log_file_size = uint64_t{1} << 20;
  db_options.keep_log_file_num = 4;
  // The MANIFEST gains a record with every flush and compaction (about 0.5 MiB a minute under
  // steady puts) and is only rewritten past this size (RocksDB's default: 1 GiB).
  db_options.max_manifest_file_size = uint64_t{8} << 20;
  // No fallocate'd tails: RocksDB preallocates each WAL to 1.1x the largest write buffer and
  // each MANIFEST to 4 MiB, space the disk accounting (allocated blocks) would count whether
  // written or not (18 MiB of WAL after one small put on a 10 GiB store; 4 MiB of MANIFEST
  // in a 6 MiB one). The files grow as written instead.
  db_options.allow_fallocate = false;
  // Tracks SST and blob bytes (the store's disk accounting) and, on a no-space background
  // error, polls for free space and resumes RocksDB by itself (BlockStore::TryResume as well).
  db_options.sst_file_manager.reset(rocksdb::NewSstFileManager(rocksdb::Env::Default()));
  return db_options;
}

rocksdb::ColumnFamilyOptions CfOptions(std::string_view name, const StorageOptions& options) {
  rocksdb::ColumnFamilyOptions cf;
  cf.compression = rocksdb::kNoCompression;
  cf.write_buffer_size = WriteBufferBytes(options);
  if (name == kCfBlocks) {
    // Legacy values (BlobDB), read once by the migration into the value log; blob GC lets the
    // migration's deletions give the blob files back.
    cf.enable_blob_files = true;
    cf.min_blob_size = 4096;
    cf.blob_file_size = uint64_t{256} << 20;
    cf.enable_blob_garbage_collection = true;
    cf.blob_garbage_collection_force_threshold = 0.5;
  }
  return cf;
}

std::vector<rocksdb::ColumnFamilyDescriptor> Descriptors(const StorageOptions& options) {
  std::vector<rocksdb::ColumnFamilyDescriptor> d;
  for (const char* name : {rocksdb::kDefaultColumnFamilyName.c_str(), kCfBlocks, kCfMeta, kCfAccess,
                           kCfNamespaces, kCfNamespacesCopy}) {
    d.emplace_back(name, CfOptions(name, options));
  }
  return d;
}

}  // namespace turbokv::server::format
