// The store's guard against a full disk and its measurement of the data directory
// (docs/faults.md, "Disk full"):
//   * a reserve file (<data_dir>/RESERVE, preallocated) released when the disk fills, so that
//     RocksDB can resume and take deletions, and before every open (replaying the WAL needs
//     room); taken again once the disk has room;
//   * puts stop (ResourceExhausted) while the filesystem is too full to take them and still
//     flush RocksDB's metadata;
//   * RocksDB is resumed after a failed write left it in a background-error state;
//   * the directory's allocated bytes, by kind, for the capacity accounting and the metrics.
//
// Thread safety: thread-safe.
#ifndef TURBOKV_SERVER_STORAGE_DISK_GUARD_H_
#define TURBOKV_SERVER_STORAGE_DISK_GUARD_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/storage/log_every.h"
#include "server/storage/storage_options.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace turbokv::server {

class ValueLog;

// Allocated bytes of the data directory (st_blocks: sparse value-log segments count what they
// hold, not their length).
struct DiskUsage {
  uint64_t values = 0;    // value-log segments
  uint64_t metadata = 0;  // RocksDB's data files: SST, WAL (and blob files of a legacy store)
  // RocksDB's other files (info LOG, MANIFEST, OPTIONS, ...): bounded by their options
  // (store_format.cc: about 13 MiB at most), not counted against the capacity.
  uint64_t other = 0;
  uint64_t reserve = 0;  // the RESERVE file
  // What --capacity bounds.
  uint64_t counted() const { return values + metadata; }
  uint64_t total() const { return values + metadata + other + reserve; }
};

class DiskGuard {
 public:
  explicit DiskGuard(const StorageOptions& options);

  // Bytes the reserve holds when taken: disk_reserve_bytes, at most 1/64 of the capacity
  // (so that the directory stays within max(64 MiB, 2%) of the capacity) and 1/8 of the
  // filesystem.
  uint64_t ReserveBytes() const;
  // Removes the reserve file; logged at info for the routine release at start-up, else warn.
  void ReleaseReserve(bool at_startup = false);
  // Takes the reserve again when the filesystem has room for it (4x, plus metadata flushes).
  void CreateReserve();
  // ResourceExhausted (logged at most every 10 s) when the filesystem cannot take
  // `incoming_bytes` more and still flush RocksDB; releases the reserve first.
  [[nodiscard]] absl::Status CheckRoom(uint64_t incoming_bytes, int64_t now);

  // A RocksDB write failed with an I/O error: resume it at the next TryResume.
  void NoteWriteFailure() { needs_resume_.store(true); }
  // Resumes RocksDB when a write failed (releasing the reserve if it is short of space), or
  // takes the reserve again when nothing failed. True when it resumed RocksDB.
  bool TryResume(rocksdb::DB* db, int64_t now);

  // One listing of the data directory (and the value log's segments).
  DiskUsage Measure(const ValueLog& log) const;

 private:
  std::string ReservePath() const;
  uint64_t FreeBytes() const;
  // Headroom RocksDB needs to flush its memtables (metadata only).
  uint64_t FlushHeadroom() const;

  const StorageOptions options_;
  std::atomic<bool> needs_resume_{false};
  LogEvery refused_log_, resume_log_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_DISK_GUARD_H_
