// The store's namespace records: in memory for every request, durable in three places — the
// `namespaces` and `namespaces_copy` column families (separate SST files: a damaged one is
// rebuilt from the other, store_repair.h) and one value-log record each (so a salvage that
// rebuilds the metadata from the value log alone knows every namespace; value_log.h).
//
// Thread safety: thread-safe. Writers (Put, Delete) are serialized among themselves; readers
// never wait for a writer's I/O.
#ifndef TURBOKV_SERVER_STORAGE_NAMESPACE_TABLE_H_
#define TURBOKV_SERVER_STORAGE_NAMESPACE_TABLE_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/storage/value_log.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace turbokv::server {

// What the store keeps about a namespace. The descriptor is opaque here (the service layer
// stores its serialized canonical NamespaceDescriptor).
//
// The tenant owns the namespace's blocks: they count against its quota and its share of the
// capacity (block_store.h, "Tenants"). It is stored in front of the descriptor bytes when not
// "" ("\xfftenant", u32 little-endian length, the name; 0xff never starts a serialized
// protobuf message), so records written before the field existed read back unchanged.
struct NamespaceRecord {
  uint64_t id = 0;
  std::string tenant;                // "" = no tenant (a server without authentication)
  std::string descriptor;            // opaque bytes
  uint32_t ttl_seconds = 0;          // 0: blocks never expire
  uint64_t logical_block_bytes = 0;  // raw bytes of one block in the namespace dtype
};

// The value-log record of a namespace: its encoded record followed by an 8-byte XXH3-64 of
// it (the log's value checksum). ParseNamespaceLogValue undoes it; DataLoss when malformed.
std::string NamespaceLogValue(const NamespaceRecord& record);
[[nodiscard]] absl::StatusOr<NamespaceRecord> ParseNamespaceLogValue(uint64_t id,
                                                                     std::string_view value);
// The column-family value of a record with its value-log record's place, and back. Values
// written before the value log existed carry no place (then *location is left zero).
std::string EncodeNamespaceValue(const NamespaceRecord& record, const RecordLocation& location,
                                 uint64_t sequence);
[[nodiscard]] absl::StatusOr<NamespaceRecord> DecodeNamespaceValue(uint64_t id,
                                                                   std::string_view value,
                                                                   RecordLocation* location,
                                                                   uint64_t* sequence);

class NamespaceTable {
 public:
  // `log` must outlive the table; `next_sequence` hands out the store's write sequences.
  // Records are written to RocksDB with sync whatever the store's durability says: a
  // registration is rare and everything else depends on it.
  NamespaceTable(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* primary,
                 rocksdb::ColumnFamilyHandle* copy, ValueLog* log,
                 std::function<uint64_t()> next_sequence);
  NamespaceTable(const NamespaceTable&) = delete;
  NamespaceTable& operator=(const NamespaceTable&) = delete;

  // Reads both column families; a record missing from one is written back to it; a record
  // without a value-log record (written before the log existed) gets one. Tells the log which
  // records are live (ValueLog::MarkLive). Before any other call.
  [[nodiscard]] absl::Status Load(int64_t now);

  // Creates or replaces a record durably (value log, both column families fsync'ed). The
  // replaced value-log record is deallocated first.
  [[nodiscard]] absl::Status Put(const NamespaceRecord& record, int64_t now);
  // Deletes the record: its value-log record is deallocated, then `commit` gets a batch with
  // the column-family deletions, adds what else must go with them and writes it; when that
  // succeeds the record is gone from memory. NotFound when unknown; else commit's status.
  [[nodiscard]] absl::Status Delete(
      uint64_t id, const std::function<absl::Status(rocksdb::WriteBatch*)>& commit);

  std::optional<NamespaceRecord> Get(uint64_t id) const;
  bool Contains(uint64_t id) const;
  uint32_t TtlSeconds(uint64_t id) const;     // 0 when unknown
  std::vector<NamespaceRecord> List() const;  // sorted by id

 private:
  struct Entry {
    NamespaceRecord record;
    RecordLocation location;  // its value-log record (segment 0: none)
    uint64_t sequence = 0;
  };
  // Writes the record to the log and both column families; returns its entry.
  absl::StatusOr<Entry> Write(const NamespaceRecord& record, int64_t now);

  rocksdb::DB* const db_;
  rocksdb::ColumnFamilyHandle* const primary_;
  rocksdb::ColumnFamilyHandle* const copy_;
  ValueLog* const log_;
  const std::function<uint64_t()> next_sequence_;
  std::mutex write_mu_;    // serializes Put and Delete; taken before mu_
  mutable std::mutex mu_;  // guards entries_
  absl::flat_hash_map<uint64_t, Entry> entries_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_NAMESPACE_TABLE_H_
