// Damaged files in the data directory cost cache misses, not an outage (docs/faults.md). Before
// the block store opens its database, RepairIfDamaged looks at it and repairs what it finds:
//
//   * every live SST is read in full and checked (SstFileReader::VerifyChecksum), every live
//     blob file of a store written before the value log is checked against the MANIFEST;
//   * only `access` damaged: the column family is dropped and recreated empty (recency falls
//     back to put times);
//   * only one of `namespaces` / `namespaces_copy` damaged: dropped, recreated and refilled
//     from the other;
//   * anything else (the MANIFEST, `block_meta`, both namespace copies, a database RocksDB
//     cannot open): a full salvage. RocksDB's RepairDB recovers what it can of the old files
//     (namespace records, access times; when even it fails, the old files are kept aside in
//     damaged-rocksdb-<time>/), and a fresh database is built from the value log
//     (value_log.h): every namespace from its log record (or the repaired copy), and for every
//     block key its intact record with the highest write sequence. No value is copied. A
//     record is deallocated before any overwrite or deletion of its key commits, so a salvage
//     never brings back a deleted block or an older value; blocks of a namespace nobody
//     knows any more are dropped and counted. The fresh database then replaces the old one.
//
// A salvage is restartable: a crash during it repeats it (the fresh database is swapped in
// only once it is complete, marked by a file). Internal to server/storage.
#ifndef TURBOKV_SERVER_STORAGE_STORE_REPAIR_H_
#define TURBOKV_SERVER_STORAGE_STORE_REPAIR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/storage/block_store.h"
#include "server/storage/storage_options.h"

namespace turbokv::server {

// Looks at the database in options.data_dir (nothing to do when it does not exist yet) and
// repairs it as above. Afterwards the directory opens with paranoid checks. Unavailable /
// ResourceExhausted when I/O fails.
[[nodiscard]] absl::StatusOr<RepairReport> RepairIfDamaged(const StorageOptions& options,
                                                           int64_t now);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_STORE_REPAIR_H_
