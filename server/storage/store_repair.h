// Damaged files in the data directory cost cache misses, not an outage (docs/faults.md). Before
// the block store opens its database, RepairIfDamaged looks at it and repairs what it finds:
//
//   * every live SST is read in full and checked (SstFileReader::VerifyChecksum), every live
//     blob file's size is compared with what the MANIFEST recorded;
//   * only `access` damaged: the column family is dropped and recreated empty (recency falls
//     back to put times);
//   * only one of `namespaces` / `namespaces_copy` damaged: dropped, recreated and refilled
//     from the other;
//   * anything else (the MANIFEST, `blocks`, `block_meta`, both namespace copies, a blob file
//     cut short, a database RocksDB cannot open): a full salvage. Blob files are moved aside,
//     RocksDB's RepairDB rebuilds a MANIFEST from the SSTs and WALs that still verify, and a
//     fresh database is written from it: each block that block_meta still describes, with
//     the value read from the repaired database or, for values in blob files, the blob record
//     whose bytes carry the checksum block_meta recorded (blob_file_reader.h; records before a
//     cut are used). The fresh database then replaces the old one. Blocks that cannot be
//     recovered are dropped and counted; no block is ever returned with bytes other than
//     those put for it.
//
// A salvage needs free space for a second copy of the recovered blocks while it runs. It is
// restartable: a crash during it repeats it (the blob files stay in salvage-blobs/ until the
// fresh database has replaced the old one). Internal to server/storage.
#ifndef TURBOKV_SERVER_STORAGE_STORE_REPAIR_H_
#define TURBOKV_SERVER_STORAGE_STORE_REPAIR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/storage/block_store.h"
#include "server/storage/storage_options.h"

namespace turbokv::server {

// Looks at the database in options.data_dir (nothing to do when it does not exist yet) and
// repairs it as above. Afterwards the directory opens with paranoid checks. DataLoss when
// even RepairDB cannot make a database of it; Unavailable / ResourceExhausted when I/O fails.
[[nodiscard]] absl::StatusOr<RepairReport> RepairIfDamaged(const StorageOptions& options,
                                                           const ValueVerifier& verifier,
                                                           int64_t now);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_STORE_REPAIR_H_
