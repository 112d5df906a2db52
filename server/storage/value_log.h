// The value log: every packed block is written once, appended to a segment file, and its
// location (segment, page, size, write sequence) is recorded in RocksDB (block_meta). This is
// the WiscKey layout (Lu et al., "WiscKey: Separating Keys from Values in SSD-conscious
// Storage", FAST'16) that RocksDB's BlobDB follows too; what differs is how space comes back.
// BlobDB frees a blob file only when garbage collection has copied its live values elsewhere
// (each value written two or three times, evicted values kept on disk until then); here an
// erased record's pages are deallocated at once with fallocate(PUNCH_HOLE), so the disk holds
// live records only, no value is ever copied, and the eviction policy may erase any record in
// any order. A segment whose records are all erased is unlinked.
//
// On disk, <data_dir>/values/<segment, 8 digits>.tkv (little-endian throughout):
//   page 0        SegmentHeader: magic "TKVSEG01", format version, segment number
//   record ...    each starts on a page boundary (kPageBytes) and fills whole pages:
//                   RecordHeader (64 bytes) | block hash (hash_bytes) | value | zeros to the page
//   RecordHeader  magic "TKVR" u32 | version u32 | sequence u64 | namespace id u64 |
//                 put time (unix s) u64 | value bytes u32 | hash bytes u8 | kind u8 |
//                 2 zero bytes | value checksum u64 (the value's last 8 bytes: a packed
//                 block's xxHash3-64 trailer) | header checksum u64 (XXH3-64 of bytes [0, 48)
//                 and the hash) | 8 zero bytes
// A record names its key, kind and write sequence, so the log alone can rebuild the index
// (salvage: ScanRecords, the highest sequence of a key wins) and a read checks that the record
// is the one the index points at. A record is deallocated before the metadata change that
// supersedes it commits (an overwrite, a delete, an eviction), so no salvage can bring back a
// deleted block or an older value of a key.
//
// Durability: Append writes with pwritev (the page cache: survives a process crash); with
// sync=true it also fdatasyncs the segment (and the directory when it created a file) before
// returning, so the caller may commit the record's location with an fsync'ed RocksDB write.
// A record whose location never reached RocksDB (a crash in between, --durability none) is
// garbage on disk: ReclaimGarbage, run once at open after the index is rebuilt, deallocates
// every page no live record covers.
//
// Thread safety: all methods are thread-safe. Appends reserve their place under a mutex and
// write outside it; reads take no lock beyond looking up the segment.
#ifndef TURBOKV_SERVER_STORAGE_VALUE_LOG_H_
#define TURBOKV_SERVER_STORAGE_VALUE_LOG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rocksdb/cache.h"

namespace turbokv::server {

// Allocation unit of the log (bytes). Records start and end on these boundaries so that
// deallocating one frees exactly its pages (4 KiB is the block size of ext4, XFS and tmpfs).
inline constexpr uint64_t kPageBytes = 4096;
inline constexpr size_t kRecordHeaderBytes = 64;

// Where a record lives. value_bytes is the packed block's size, hash_bytes its key's.
struct RecordLocation {
  uint32_t segment = 0;
  uint32_t page = 0;  // first page of the record within the segment
  uint32_t value_bytes = 0;
  uint8_t hash_bytes = 0;
};

// Bytes a record occupies on disk: header, hash and value rounded up to whole pages.
inline uint64_t RecordBytes(size_t hash_bytes, uint64_t value_bytes) {
  const uint64_t raw = kRecordHeaderBytes + hash_bytes + value_bytes;
  return (raw + kPageBytes - 1) / kPageBytes * kPageBytes;
}
inline uint64_t RecordBytes(const RecordLocation& l) {
  return RecordBytes(l.hash_bytes, l.value_bytes);
}

// What a record holds.
enum class RecordKind : uint8_t {
  kBlock = 0,      // a packed block; hash = its block hash
  kNamespace = 1,  // a namespace record (namespace_table.h); hash = the id, 8 bytes big-endian
};

// One record to append.
struct RecordWrite {
  RecordKind kind = RecordKind::kBlock;
  uint64_t namespace_id = 0;
  std::string_view hash;   // 8..32 bytes
  std::string_view value;  // the packed block
  uint64_t sequence = 0;   // the store's write sequence (higher = written later)
  int64_t put_time = 0;    // unix seconds
  uint64_t checksum = 0;   // the value's last 8 bytes (a packed block's trailer)
};

// What a record's header says (ScanRecords, salvage).
struct RecordInfo {
  RecordKind kind = RecordKind::kBlock;
  RecordLocation location;
  uint64_t namespace_id = 0;
  std::string hash;
  uint64_t sequence = 0;
  int64_t put_time = 0;
  uint64_t checksum = 0;
};

// A value read from the log. `bytes` points into `owner`'s memory.
struct LogValue {
  std::shared_ptr<const void> owner;
  std::string_view bytes;
};

struct ValueLogOptions {
  // Directory of the segment files (created when missing).
  std::string dir;
  // A segment is closed and a new one started once it holds this many bytes (a larger record
  // gets a segment to itself). Default: 256 MiB.
  uint64_t segment_bytes = uint64_t{256} << 20;
  // fdatasync every append (and the directory after creating a segment) before returning.
  bool sync = false;
  // Bytes of the cache of verified values (Cached / Remember): an LRU cache (RocksDB's
  // LRUCache, 4 shards: a value over a quarter of it is not cached) of records read and
  // verified before, served without a read, a copy or a checksum; its bytes count each
  // entry's bookkeeping too (about 90 bytes). 0: no cache. Default: 0 (BlockStore passes
  // --read-cache-bytes, at most the capacity).
  uint64_t cache_bytes = 0;
};

// The cache of verified values now.
struct ValueCacheStats {
  uint64_t capacity_bytes = 0;  // 0: no cache
  uint64_t bytes = 0;  // held now (values an evicted entry's readers still hold not counted)
};

class ValueLog {
 public:
  // Opens the directory: existing segments are read-only from now on (a new segment takes
  // the appends). FailedPrecondition when the filesystem cannot deallocate pages
  // (fallocate PUNCH_HOLE: ext4, XFS, btrfs, tmpfs, f2fs and NFS 4.2 can); Unavailable when
  // the directory cannot be created or listed.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ValueLog>> Open(ValueLogOptions options);
  ~ValueLog();
  ValueLog(const ValueLog&) = delete;
  ValueLog& operator=(const ValueLog&) = delete;

  // Appends the records (one pwritev each) and returns their locations, in order. All or
  // nothing: on failure the records written so far are deallocated again. ResourceExhausted
  // when the filesystem is full; Unavailable for other I/O errors.
  [[nodiscard]] absl::StatusOr<std::vector<RecordLocation>> Append(
      absl::Span<const RecordWrite> records);

  // Reads the value of the record at `where`, checking that the record header is intact, names
  // (namespace_id, hash, sequence) and that the value ends in the header's checksum. NotFound: the
  // record is not there any more (its pages were deallocated, or the segment is gone: an erase
  // raced with this read). DataLoss: the header is damaged or names another record.
  [[nodiscard]] absl::StatusOr<LogValue> Read(const RecordLocation& where, uint64_t namespace_id,
                                              std::string_view hash, uint64_t sequence) const;

  // The value of the record at `where` written with `sequence`, when the cache holds it:
  // Remember'ed after a Read that the caller verified, and not erased since. A record
  // location is reused only with a new sequence, so a hit is never another or an older
  // value. nullopt: not cached (or no cache). Counts nothing (the caller knows what a lookup
  // that it may retry means). Thread-safe.
  [[nodiscard]] std::optional<LogValue> Cached(const RecordLocation& where,
                                               uint64_t sequence) const;
  // Keeps `value` (what Read returned for `where` and `sequence`, verified by the caller:
  // Cached skips every check) in the cache, sharing its memory (no copy), until the LRU
  // cache evicts it or Erase(where) drops it. No-op without a cache. Thread-safe.
  void Remember(const RecordLocation& where, uint64_t sequence, const LogValue& value);
  ValueCacheStats CacheStats() const;

  // Frees the record's pages (the record must be live, i.e. appended or marked live since the
  // open, and not erased before); unlinks its segment when that was its last live record and
  // appends have moved on; drops its cached value. Best effort: an I/O error is logged and the
  // pages stay allocated (ReclaimGarbage frees them at the next open).
  void Erase(const RecordLocation& where);

  // Recovery, before any Append: tells the log which records the index still references.
  // Call MarkLive for each, then ReclaimGarbage once: it unlinks segments with no live record
  // and deallocates the pages of every other segment that no live record covers (records of
  // writes that never committed, erases lost in a crash). Returns the bytes it freed.
  // MarkLive is false (and marks nothing) when the record cannot be there: its segment is
  // gone or ends before it.
  [[nodiscard]] bool MarkLive(const RecordLocation& where);
  uint64_t ReclaimGarbage();

  // Every record of every segment whose header is intact, in segment and page order (a
  // damaged or deallocated stretch is skipped page by page). For salvage; values are not
  // read. Stops at the first error of `fn`.
  [[nodiscard]] absl::Status ScanRecords(
      const std::function<absl::Status(const RecordInfo&)>& fn) const;

  // Bytes allocated on disk by all segments (st_blocks), and the live records' bytes.
  uint64_t AllocatedBytes() const;
  uint64_t LiveBytes() const;
  size_t SegmentCount() const;
  const std::string& dir() const { return options_.dir; }

 private:
  struct Segment;
  explicit ValueLog(ValueLogOptions options);
  absl::Status LoadSegments();
  // Starts segment `number` (mu_ held): creates the file and writes its header.
  absl::Status StartSegment(uint32_t number);
  std::shared_ptr<Segment> Find(uint32_t number) const;
  // Deallocates [offset, offset + bytes) of the segment's file.
  static absl::Status Punch(const Segment& s, uint64_t offset, uint64_t bytes);
  std::string PathOf(uint32_t number) const;
  // Unlinks a segment with no live records that is not the active one (mu_ held).
  void DropIfDead(uint32_t number);

  const ValueLogOptions options_;
  std::shared_ptr<rocksdb::Cache> cache_;  // null: no cache
  mutable std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<Segment>> segments_;  // by number
  std::shared_ptr<Segment> active_;                        // appends go here; null before any
  uint32_t next_segment_ = 1;
  uint64_t live_bytes_ = 0;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_VALUE_LOG_H_
