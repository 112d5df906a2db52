#include "server/storage/store_format.h"

namespace turbokv::server::format {

rocksdb::DBOptions DbOptions() {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  // Column families are flushed together, so a crash with the WAL off (durability none)
  // cannot leave a value without its metadata or the other way round.
  db_options.atomic_flush = true;
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 4;
  return db_options;
}

rocksdb::ColumnFamilyOptions CfOptions(std::string_view name, const StorageOptions& options) {
  rocksdb::ColumnFamilyOptions cf;
  cf.compression = rocksdb::kNoCompression;
  if (name == kCfBlocks) {
    // Packed blocks are incompressible and large: keep them in blob files so compaction moves
    // only keys, and let blob GC reclaim space of deleted blocks.
    cf.enable_blob_files = true;
    cf.min_blob_size = options.min_blob_size;
    cf.blob_file_size = uint64_t{256} << 20;
    cf.blob_compression_type = rocksdb::kNoCompression;
    cf.enable_blob_garbage_collection = true;
  }
  return cf;
}

std::vector<rocksdb::ColumnFamilyDescriptor> Descriptors(const StorageOptions& options) {
  std::vector<rocksdb::ColumnFamilyDescriptor> d;
  for (const char* name : {rocksdb::kDefaultColumnFamilyName.c_str(), kCfBlocks, kCfMeta,
                           kCfAccess, kCfNamespaces, kCfNamespacesCopy}) {
    d.emplace_back(name, CfOptions(name, options));
  }
  return d;
}

}  // namespace turbokv::server::format
