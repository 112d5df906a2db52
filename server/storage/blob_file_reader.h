// Reads RocksDB blob files (BlobDB, format version 1) record by record without RocksDB: the
// salvage path of the block store (docs/faults.md) uses it to recover block values when the
// MANIFEST or the SSTs that point into the blob files are damaged, and from blob files cut
// short. Internal to server/storage.
//
// Format (RocksDB db/blob/blob_log_format.h, v7.8):
//   header  30 bytes: u32 magic 0x00248f37 | u32 version 1 | u32 column family id | u8 flags |
//           u8 compression | u64 expiration range begin | u64 end          (little-endian)
//   record  u64 key size | u64 value size | u64 expiration | u32 header CRC | u32 blob CRC |
//           key | value. header CRC: masked CRC32C of the first 24 bytes; blob CRC: masked
//           CRC32C of key then value (mask: rotate right 15, add 0xa282ead8).
//   footer  32 bytes (u32 magic | u64 blob count | 2 x u64 | u32 CRC); absent when cut short.
// A record is returned only when both CRCs match. A record whose header verifies but whose
// blob CRC does not is skipped (its sizes are trusted to find the next one); a header that
// does not verify, or runs past the end of the file, ends the scan: what follows is
// unreachable without the SSTs' blob indexes.
#ifndef TURBOKV_SERVER_STORAGE_BLOB_FILE_READER_H_
#define TURBOKV_SERVER_STORAGE_BLOB_FILE_READER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace turbokv::server {

struct BlobFileScan {
  uint64_t records = 0;      // records whose CRCs verified (passed to the callback)
  uint64_t bad_records = 0;  // records skipped: blob CRC mismatch, or compressed
  bool complete = false;     // the scan reached a valid footer
  uint32_t column_family_id = 0;
};

// Calls `fn(key, value)` for every verified record of the blob file at `path`, in file order.
// The views are valid only during the call. DataLoss: the header is unreadable (nothing
// returned); Unavailable: the file cannot be read.
using BlobRecordFn = std::function<void(std::string_view key, std::string_view value)>;
[[nodiscard]] absl::Status ScanBlobFile(const std::string& path, const BlobRecordFn& fn,
                                        BlobFileScan* scan);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_BLOB_FILE_READER_H_
