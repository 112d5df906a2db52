#include "server/storage/namespace_table.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "server/storage/rocksdb_status.h"
#include "server/storage/store_format.h"
#include "turbokv/codec/status_macros.h"
#include "xxhash.h"

namespace turbokv::server {
namespace {

using format::GetFixed64BE;
using format::GetFixed64LE;
using format::NamespaceKey;
using format::PutFixed64LE;

// Record encodings: version 1 = ttl u32 | logical block bytes u64 | descriptor;
// version 2 = version 1's fields, then the value-log place: segment u32 | page u32 |
// value bytes u32 | sequence u64, then the descriptor. Both little-endian after the version.
constexpr uint8_t kRecordV1 = 1;
constexpr uint8_t kRecordV2 = 2;
constexpr size_t kV1Header = 13;
constexpr size_t kV2Header = kV1Header + 20;

void PutFixed32LE(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetFixed32LE(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

constexpr std::string_view kTenantTag = "\xfftenant";

// The record's tenant (when not "") in front of its descriptor (namespace_table.h).
void AppendTenantAndDescriptor(std::string* out, const NamespaceRecord& r) {
  if (!r.tenant.empty()) {
    out->append(kTenantTag);
    PutFixed32LE(out, static_cast<uint32_t>(r.tenant.size()));
    out->append(r.tenant);
  }
  out->append(r.descriptor);
}

absl::Status Malformed(uint64_t id, size_t bytes) {
  return absl::DataLossError(absl::StrCat("namespace record ", absl::Hex(id, absl::kZeroPad16),
                                          " is malformed (", bytes, " bytes)"));
}

// Splits AppendTenantAndDescriptor's bytes into r->tenant and r->descriptor.
absl::Status SplitTenantAndDescriptor(uint64_t id, std::string_view bytes, NamespaceRecord* r) {
  r->tenant.clear();
  if (bytes.substr(0, kTenantTag.size()) == kTenantTag) {
    std::string_view rest = bytes.substr(kTenantTag.size());
    if (rest.size() < 4) return Malformed(id, bytes.size());
    const uint32_t n = GetFixed32LE(rest.data());
    rest.remove_prefix(4);
    if (rest.size() < n) return Malformed(id, bytes.size());
    r->tenant = std::string(rest.substr(0, n));
    rest.remove_prefix(n);
    bytes = rest;
  }
  r->descriptor = std::string(bytes);
  return absl::OkStatus();
}

std::string EncodeV1(const NamespaceRecord& r) {
  std::string v;
  v.push_back(static_cast<char>(kRecordV1));
  PutFixed32LE(&v, r.ttl_seconds);
  PutFixed64LE(&v, r.logical_block_bytes);
  AppendTenantAndDescriptor(&v, r);
  return v;
}

}  // namespace

std::string NamespaceLogValue(const NamespaceRecord& record) {
  std::string v = EncodeV1(record);
  PutFixed64LE(&v, XXH3_64bits(v.data(), v.size()));
  return v;
}

absl::StatusOr<NamespaceRecord> ParseNamespaceLogValue(uint64_t id, std::string_view value) {
  if (value.size() < kV1Header + 8 || static_cast<uint8_t>(value[0]) != kRecordV1 ||
      XXH3_64bits(value.data(), value.size() - 8) !=
          GetFixed64LE(value.data() + value.size() - 8)) {
    return Malformed(id, value.size());
  }
  NamespaceRecord r;
  r.id = id;
  r.ttl_seconds = GetFixed32LE(value.data() + 1);
  r.logical_block_bytes = GetFixed64LE(value.data() + 5);
  TURBOKV_RETURN_IF_ERROR(
      SplitTenantAndDescriptor(id, value.substr(kV1Header, value.size() - kV1Header - 8), &r));
  return r;
}

std::string EncodeNamespaceValue(const NamespaceRecord& record, const RecordLocation& location,
                                 uint64_t sequence) {
  std::string v;
  v.push_back(static_cast<char>(kRecordV2));
  PutFixed32LE(&v, record.ttl_seconds);
  PutFixed64LE(&v, record.logical_block_bytes);
  PutFixed32LE(&v, location.segment);
  PutFixed32LE(&v, location.page);
  PutFixed32LE(&v, location.value_bytes);
  PutFixed64LE(&v, sequence);
  AppendTenantAndDescriptor(&v, record);
  return v;
}

absl::StatusOr<NamespaceRecord> DecodeNamespaceValue(uint64_t id, std::string_view v,
                                                     RecordLocation* location, uint64_t* sequence) {
  *location = RecordLocation{};
  *sequence = 0;
  if (v.size() < kV1Header) return Malformed(id, v.size());
  const auto version = static_cast<uint8_t>(v[0]);
  if (version != kRecordV1 && (version != kRecordV2 || v.size() < kV2Header)) {
    return Malformed(id, v.size());
  }
  NamespaceRecord r;
  r.id = id;
  r.ttl_seconds = GetFixed32LE(v.data() + 1);
  r.logical_block_bytes = GetFixed64LE(v.data() + 5);
  size_t descriptor_at = kV1Header;
  if (version == kRecordV2) {
    location->segment = GetFixed32LE(v.data() + 13);
    location->page = GetFixed32LE(v.data() + 17);
    location->value_bytes = GetFixed32LE(v.data() + 21);
    location->hash_bytes = 8;
    *sequence = GetFixed64LE(v.data() + 25);
    descriptor_at = kV2Header;
  }
  TURBOKV_RETURN_IF_ERROR(SplitTenantAndDescriptor(id, v.substr(descriptor_at), &r));
  return r;
}

NamespaceTable::NamespaceTable(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* primary,
                               rocksdb::ColumnFamilyHandle* copy, ValueLog* log,
                               std::function<uint64_t()> next_sequence)
    : db_(db),
      primary_(primary),
      copy_(copy),
      log_(log),
      next_sequence_(std::move(next_sequence)) {}

absl::StatusOr<NamespaceTable::Entry> NamespaceTable::Write(const NamespaceRecord& record,
                                                            int64_t now) {
  Entry e;
  e.record = record;
  e.sequence = next_sequence_();
  const std::string key = NamespaceKey(record.id);
  const std::string value = NamespaceLogValue(record);
  RecordWrite w;
  w.kind = RecordKind::kNamespace;
  w.namespace_id = record.id;
  w.hash = key;
  w.value = value;
  w.sequence = e.sequence;
  w.put_time = now;
  w.checksum = GetFixed64LE(value.data() + value.size() - 8);
  TURBOKV_ASSIGN_OR_RETURN(std::vector<RecordLocation> at,
                           log_->Append(absl::MakeConstSpan(&w, 1)));
  e.location = at[0];
  rocksdb::WriteBatch batch;
  const std::string encoded = EncodeNamespaceValue(record, e.location, e.sequence);
  absl::Status s = FromRocksDb(batch.Put(primary_, key, encoded), "batch put");
  if (s.ok()) s = FromRocksDb(batch.Put(copy_, key, encoded), "batch put");
  if (s.ok()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = FromRocksDb(db_->Write(wo, &batch), "write namespace record");
  }
  if (!s.ok()) {
    log_->Erase(e.location);
    return s;
  }
  return e;
}

absl::Status NamespaceTable::Load(int64_t now) {
  // Records live in two column families (two sets of SST files); a record missing from one (a
  // store written before the copy existed, or a crash) is written back to it.
  absl::flat_hash_map<uint64_t, std::string> in_primary, in_copy;
  for (auto [cf, into] : {std::pair{primary_, &in_primary}, std::pair{copy_, &in_copy}}) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().size() != 8) continue;
      (*into)[GetFixed64BE(it->key().data())] = it->value().ToString();
    }
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(it->status(), "scan namespaces"));
  }
  rocksdb::WriteBatch fix;
  for (auto [from, to, cf] :
       {std::tuple{&in_primary, &in_copy, copy_}, std::tuple{&in_copy, &in_primary, primary_}}) {
    for (const auto& [id, v] : *from) {
      if (!to->contains(id)) {
        TURBOKV_RETURN_IF_ERROR(FromRocksDb(fix.Put(cf, NamespaceKey(id), v), "batch put"));
      }
    }
  }
  for (const auto& [id, v] : in_copy) in_primary.emplace(id, v);
  if (fix.Count() > 0) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(db_->Write(wo, &fix), "write namespace copies"));
  }
  std::lock_guard<std::mutex> wl(write_mu_);
  for (const auto& [id, v] : in_primary) {
    Entry e;
    TURBOKV_ASSIGN_OR_RETURN(e.record, DecodeNamespaceValue(id, v, &e.location, &e.sequence));
    if (e.location.segment == 0) {
      // Written before the value log existed: give it its log record now.
      TURBOKV_ASSIGN_OR_RETURN(e, Write(e.record, now));
    } else if (!log_->MarkLive(e.location)) {
      // Its log record is gone (a damaged value log): write it again.
      TURBOKV_ASSIGN_OR_RETURN(e, Write(e.record, now));
    }
    std::lock_guard<std::mutex> l(mu_);
    entries_[id] = std::move(e);
  }
  return absl::OkStatus();
}

absl::Status NamespaceTable::Put(const NamespaceRecord& record, int64_t now) {
  std::lock_guard<std::mutex> wl(write_mu_);
  std::optional<RecordLocation> old;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = entries_.find(record.id); it != entries_.end() && it->second.location.segment) {
      old = it->second.location;
    }
  }
  // The old log record goes first: a salvage must never find it once the new one is written
  // (a crash in between costs the record; the column families still hold it).
  if (old.has_value()) log_->Erase(*old);
  TURBOKV_ASSIGN_OR_RETURN(Entry e, Write(record, now));
  std::lock_guard<std::mutex> l(mu_);
  entries_[record.id] = std::move(e);
  return absl::OkStatus();
}

absl::Status NamespaceTable::Delete(
    uint64_t id, const std::function<absl::Status(rocksdb::WriteBatch*)>& commit) {
  std::lock_guard<std::mutex> wl(write_mu_);
  RecordLocation location;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      return absl::NotFoundError(
          absl::StrCat("namespace ", absl::Hex(id, absl::kZeroPad16), " is not registered"));
    }
    location = it->second.location;
  }
  if (location.segment != 0) log_->Erase(location);
  rocksdb::WriteBatch batch;
  for (rocksdb::ColumnFamilyHandle* cf : {primary_, copy_}) {
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Delete(cf, NamespaceKey(id)), "batch delete"));
  }
  TURBOKV_RETURN_IF_ERROR(commit(&batch));
  std::lock_guard<std::mutex> l(mu_);
  entries_.erase(id);
  return absl::OkStatus();
}

std::optional<NamespaceRecord> NamespaceTable::Get(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.record;
}

bool NamespaceTable::Contains(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.contains(id);
}

uint32_t NamespaceTable::TtlSeconds(uint64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.record.ttl_seconds;
}

std::vector<NamespaceRecord> NamespaceTable::List() const {
  std::vector<NamespaceRecord> out;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, e] : entries_) out.push_back(e.record);
  }
  std::sort(out.begin(), out.end(),
            [](const NamespaceRecord& a, const NamespaceRecord& b) { return a.id < b.id; });
  return out;
}

}  // namespace turbokv::server
