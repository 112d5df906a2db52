// The recovery scan of the block store's metadata: block_meta merge-joined with access (same
// keys, same order), decoded, on several threads over disjoint key ranges. Internal to
// server/storage (BlockStore::Recover).
#ifndef TURBOKV_SERVER_STORAGE_META_SCAN_H_
#define TURBOKV_SERVER_STORAGE_META_SCAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "rocksdb/db.h"
#include "server/storage/store_format.h"

namespace turbokv::server {

// One block_meta entry with a well-formed key (8-byte namespace id, then 8..32 hash bytes) and
// value (format::DecodeMeta), joined with its access entry.
struct ScannedBlock {
  uint64_t namespace_id = 0;
  format::MetaValue meta;
  int64_t last_access = 0;  // unix seconds: the later of the put time and the access entry's
  uint64_t touch = 0;       // the access entry's touch number; 0 when it has none
  uint8_t hash_bytes = 0;
  char hash[32];

  // The block_meta key: namespace id (BE) || hash.
  std::string Key() const;
};

// A piece of the scan: blocks of one key range in key order, and the keys of block_meta
// entries that are no block (a key of the wrong length, a value DecodeMeta rejects).
struct MetaScanChunk {
  std::vector<ScannedBlock> blocks;
  std::vector<std::string> malformed;
};

// Scans block_meta (joined with access) on min(threads, ranges) threads, each over one key
// range; the ranges hold about the same bytes (RocksDB's size estimate; one range when
// block_meta holds under 2 MiB). `consume` runs on the calling thread, one chunk at
// a time: the chunks of one range arrive in key order, those of different ranges interleaved,
// so the caller sees every entry exactly once but not in key order. At most a few chunks are
// buffered (the scan's memory does not grow with the store).
//
// Reads bypass the block cache and do not verify block checksums: the open's repair check
// (store_repair.h) has just verified every SST file in full. Errors: RocksDB's status of the
// first iterator that failed (the scan stops early; chunks already consumed stay consumed).
struct MetaScanStats {
  int threads = 0;            // scanning threads used (key ranges)
  double scanners_cpu_s = 0;  // their CPU time, together (the caller's is not included)
};
[[nodiscard]] absl::Status ScanBlockMeta(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                                         rocksdb::ColumnFamilyHandle* access, int threads,
                                         absl::FunctionRef<void(MetaScanChunk&)> consume,
                                         MetaScanStats* stats);

// One block of the restart order: what the eviction policy is told about it, by its last use.
struct RestartRecord {
  uint64_t touch;        // the access entry's touch number (or one made from the put time)
  uint64_t fingerprint;  // BlockStore::Fingerprint of the block
  uint32_t slot;         // its index slot
  uint32_t charge;       // bytes it counts against the capacity
  // Ties (touch numbers derived from put times) by fingerprint, not slot: the slots depend on
  // how the scanning threads' chunks interleaved.
  bool operator<(const RestartRecord& o) const {
    if (touch != o.touch) return touch < o.touch;
    return fingerprint != o.fingerprint ? fingerprint < o.fingerprint : slot < o.slot;
  }
};

// Sorts `order` by operator< (the result std::sort gives: the order is total, slots differ) in
// O(n): a least-significant-digit radix sort of the touch numbers (8-bit digits; a digit every
// record shares costs no pass) through a scratch array as large as `order` (24 bytes a block
// while it runs), then each run of equal touch numbers sorted by fingerprint and slot. Under
// 4,096 records: std::sort.
void SortRestartOrder(std::vector<RestartRecord>& order);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_META_SCAN_H_
