#include "server/storage/store_repair.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rocksdb/db.h"
#include "rocksdb/metadata.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/write_batch.h"
#include "server/storage/namespace_table.h"
#include "server/storage/rocksdb_status.h"
#include "server/storage/store_format.h"
#include "server/storage/value_log.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::server {
namespace {

namespace fs = std::filesystem;
using format::CfIndex;

constexpr char kFresh[] = "salvage-new";
constexpr char kOld[] = "salvage-old";
constexpr char kOldPartial[] = "salvage-old.tmp";
constexpr char kDoneMarker[] = "SALVAGED";

bool IsSalvageDir(const std::string& name) {
  return name == kFresh || name == kOld || name == kOldPartial;
}

// An open database and its handles (CfIndex order); closed on destruction.
struct OpenDb {
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  OpenDb() = default;
  OpenDb(const OpenDb&) = delete;
  OpenDb& operator=(const OpenDb&) = delete;
  ~OpenDb() { Close(); }
  void Close() {
    if (db == nullptr) return;
    for (rocksdb::ColumnFamilyHandle* h : cfs) (void)db->DestroyColumnFamilyHandle(h);
    cfs.clear();
    (void)db->Close();
    delete db;
    db = nullptr;
  }
};

rocksdb::Status Open(const std::string& dir, const StorageOptions& options, bool paranoid,
                     OpenDb* out) {
  rocksdb::DBOptions o = format::DbOptions(options);
  o.paranoid_checks = paranoid;
  return rocksdb::DB::Open(o, dir, format::Descriptors(options), &out->cfs, &out->db);
}

// Damage RocksDB reports for a file it cannot read or trust (as opposed to a held lock, a
// full disk or a permission problem, which a repair would not fix).
bool IsDamage(const rocksdb::Status& s) { return s.IsCorruption() || s.IsPathNotFound(); }

// Column families with an SST that fails verification, and "blob" when a live blob file is
// missing or shorter than the MANIFEST says.
std::set<std::string> FindDamage(const OpenDb& d, std::vector<std::string>* findings) {
  std::set<std::string> damaged;
  std::vector<rocksdb::LiveFileMetaData> files;
  d.db->GetLiveFilesMetaData(&files);
  rocksdb::Options reader_options;
  for (const rocksdb::LiveFileMetaData& f : files) {
    const std::string path = f.directory + "/" + f.relative_filename;
    rocksdb::SstFileReader reader(reader_options);
    rocksdb::Status s = reader.Open(path);
    if (s.ok()) s = reader.VerifyChecksum();
    if (!s.ok()) {
      damaged.insert(f.column_family_name);
      findings->push_back(absl::StrCat("SST ", f.relative_filename, " (column family ",
                                       f.column_family_name, "): ", s.ToString()));
    }
  }
  rocksdb::ColumnFamilyMetaData blocks;
  d.db->GetColumnFamilyMetaData(d.cfs[CfIndex::kBlocks], &blocks);
  for (const rocksdb::BlobMetaData& b : blocks.blob_files) {
    const std::string name = b.blob_file_name.substr(b.blob_file_name.rfind('/') + 1);
    const std::string path = b.blob_file_path + "/" + name;
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec || size != b.blob_file_size) {
      damaged.insert("blob");
      findings->push_back(absl::StrCat(
          "blob file ", name, ": ",
          ec ? ec.message() : absl::StrCat(size, " bytes, expected ", b.blob_file_size)));
    }
  }
  return damaged;
}

// Every (key, value) of one column family, up to the first error (returned in *status).
std::vector<std::pair<std::string, std::string>> ScanCf(rocksdb::DB* db,
                                                        rocksdb::ColumnFamilyHandle* cf,
                                                        rocksdb::Status* status) {
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), cf));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  *status = it->status();
  return out;
}

absl::Status SyncPuts(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf,
                      const std::vector<std::pair<std::string, std::string>>& kvs) {
  rocksdb::WriteBatch batch;
  for (const auto& [k, v] : kvs) {
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Put(cf, k, v), "batch put"));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocksDb(db->Write(wo, &batch), "write rebuilt column family");
}

// Drops and recreates the column family at `index` (empty).
absl::Status Recreate(OpenDb& d, int index, const StorageOptions& options) {
  rocksdb::ColumnFamilyHandle*& h = d.cfs[index];
  const std::string name = h->GetName();
  TURBOKV_RETURN_IF_ERROR(FromRocksDb(d.db->DropColumnFamily(h), "drop " + name));
  TURBOKV_RETURN_IF_ERROR(FromRocksDb(d.db->DestroyColumnFamilyHandle(h), "drop " + name));
  h = nullptr;
  return FromRocksDb(d.db->CreateColumnFamily(format::CfOptions(name, options), name, &h),
                     "create " + name);
}

// Moves every entry of `from` whose name passes `keep` into `to` (created).
absl::Status MoveEntries(const fs::path& from, const fs::path& to,
                         const std::function<bool(const std::string&)>& keep) {
  std::error_code ec;
  fs::create_directories(to, ec);
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(from, ec)) entries.push_back(e.path());
  for (const fs::path& p : entries) {
    if (!keep(p.filename().string())) continue;
    fs::rename(p, to / p.filename(), ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot move ", p.string(), " to ", to.string(), ": ", ec.message()));
    }
  }
  return ec ? absl::UnavailableError(
                  absl::StrCat("cannot list ", from.string(), ": ", ec.message()))
            : absl::OkStatus();
}

// The fresh database (salvage-new/, complete with its marker) replaces the old one. Every step
// can be repeated after a crash: the old entries go to salvage-old.tmp, which becomes
// salvage-old once all are there; then the fresh entries move up; then the rest is removed.
// `keep_old_as` (not empty): the old files are kept in that directory instead of removed.
absl::Status SwapInFreshDb(const fs::path& dir, const std::string& keep_old_as = "") {
  std::error_code ec;
  if (!fs::exists(dir / kOld, ec)) {
    TURBOKV_RETURN_IF_ERROR(MoveEntries(dir, dir / kOldPartial, [](const std::string& n) {
      return !IsSalvageDir(n) && n != format::kDirLockFile && n != format::kValuesDir;
    }));
    fs::rename(dir / kOldPartial, dir / kOld, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("salvage swap: ", ec.message()));
  }
  TURBOKV_RETURN_IF_ERROR(
      MoveEntries(dir / kFresh, dir, [](const std::string& n) { return n != kDoneMarker; }));
  if (!keep_old_as.empty()) fs::rename(dir / kOld, dir / keep_old_as, ec);
  fs::remove_all(dir / kOld, ec);
  fs::remove_all(dir / kFresh, ec);
  return absl::OkStatus();
}

// The full salvage (see the header).
absl::Status FullSalvage(const StorageOptions& options, int64_t now, RepairReport* report) {
  const fs::path dir = options.data_dir;
  std::error_code ec;
  report->salvaged = true;
  fs::remove_all(dir / kFresh, ec);

  // 1. What RocksDB's files still say, where RepairDB can make a database of them: the
  //    namespace records (a fallback for those the value log lost) and the access times.
  std::map<uint64_t, NamespaceRecord> rocksdb_namespaces;
  absl::flat_hash_map<std::string, std::string> access;  // values as stored (8 or 16 bytes)
  uint64_t known_blocks = 0;  // block_meta entries before the damage, as far as readable
  std::string keep_old_as;
  rocksdb::Status s =
      rocksdb::RepairDB(dir.string(), format::DbOptions(options), format::Descriptors(options),
                        format::CfOptions("", options));
  OpenDb old;
  if (s.ok()) s = Open(dir.string(), options, /*paranoid=*/false, &old);
  if (s.ok()) {
    for (int cf : {CfIndex::kNamespaces, CfIndex::kNamespacesCopy}) {
      rocksdb::Status scan;
      for (auto& [k, v] : ScanCf(old.db, old.cfs[cf], &scan)) {
        if (k.size() != 8) continue;
        RecordLocation ignored;
        uint64_t sequence = 0;
        absl::StatusOr<NamespaceRecord> r =
            DecodeNamespaceValue(format::GetFixed64BE(k.data()), v, &ignored, &sequence);
        if (r.ok()) rocksdb_namespaces.emplace(r->id, *r);
      }
      if (!scan.ok()) report->findings.push_back("namespaces scan: " + scan.ToString());
    }
    rocksdb::Status scan;
    for (auto& [k, v] : ScanCf(old.db, old.cfs[CfIndex::kAccess], &scan)) {
      if (v.size() == 8 || v.size() == 16) access[k] = v;
    }
    known_blocks = ScanCf(old.db, old.cfs[CfIndex::kMeta], &scan).size();
    old.Close();
  } else {
    // Nothing of RocksDB's can be trusted: start from the value log alone; the old files are
    // kept aside for a post-mortem.
    keep_old_as = absl::StrCat("damaged-rocksdb-", now);
    report->findings.push_back(absl::StrCat("RocksDB could not be repaired (", s.ToString(),
                                            "): the metadata is rebuilt from the value log "
                                            "alone; the old files are kept in ",
                                            keep_old_as));
    old.Close();
  }

  // 2. The value log is the truth: for each key its intact record with the highest write
  //    sequence. A record superseded by an overwrite or removed by a deletion was deallocated
  //    before that change committed, so what is found here is never older than the last
  //    acknowledged state of its key.
  ValueLogOptions log_options;
  log_options.dir = (dir / format::kValuesDir).string();
  log_options.segment_bytes = options.segment_bytes;
  TURBOKV_ASSIGN_OR_RETURN(std::unique_ptr<ValueLog> log, ValueLog::Open(log_options));
  absl::flat_hash_map<std::string, RecordInfo> blocks;       // storage key -> newest record
  absl::flat_hash_map<uint64_t, RecordInfo> namespace_logs;  // id -> newest record
  TURBOKV_RETURN_IF_ERROR(log->ScanRecords([&](const RecordInfo& r) {
    if (r.kind == RecordKind::kNamespace) {
      auto [it, inserted] = namespace_logs.try_emplace(r.namespace_id, r);
      if (!inserted && r.sequence > it->second.sequence) it->second = r;
      return absl::OkStatus();
    }
    std::string key = format::NamespaceKey(r.namespace_id);
    key.append(r.hash);
    auto [it, inserted] = blocks.try_emplace(std::move(key), r);
    if (!inserted && r.sequence > it->second.sequence) it->second = r;
    return absl::OkStatus();
  }));
  struct Namespace {
    NamespaceRecord record;
    RecordLocation location;  // its log record (segment 0: none; the open writes one)
    uint64_t sequence = 0;
  };
  std::map<uint64_t, Namespace> namespaces;
  for (const auto& [id, r] : namespace_logs) {
    absl::StatusOr<LogValue> v = log->Read(r.location, id, r.hash, r.sequence);
    absl::StatusOr<NamespaceRecord> record =
        v.ok() ? ParseNamespaceLogValue(id, v->bytes) : v.status();
    if (!record.ok()) {
      report->findings.push_back(absl::StrCat("namespace record ", absl::Hex(id),
                                              " in the "
                                              "value log: ",
                                              record.status().message()));
      continue;
    }
    namespaces[id] = Namespace{*record, r.location, r.sequence};
  }
  for (const auto& [id, r] : rocksdb_namespaces) {
    if (!namespaces.count(id)) namespaces[id] = Namespace{r, RecordLocation{}, 0};
  }
  log.reset();

  // 3. The fresh database: namespaces, then block_meta and access for every block whose
  //    namespace is known. No value is copied: the records stay where they are.
  const fs::path fresh_dir = dir / kFresh;
  OpenDb fresh;
  s = Open(fresh_dir.string(), options, /*paranoid=*/true, &fresh);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("create ", fresh_dir.string()));
  for (const auto& [id, n] : namespaces) {
    std::vector<std::pair<std::string, std::string>> one = {
        {format::NamespaceKey(id), EncodeNamespaceValue(n.record, n.location, n.sequence)}};
    TURBOKV_RETURN_IF_ERROR(SyncPuts(fresh.db, fresh.cfs[CfIndex::kNamespaces], one));
    TURBOKV_RETURN_IF_ERROR(SyncPuts(fresh.db, fresh.cfs[CfIndex::kNamespacesCopy], one));
  }
  rocksdb::WriteBatch batch;
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;  // flushed before the marker is written
  uint64_t orphaned = 0;
  for (const auto& [key, r] : blocks) {
    if (!namespaces.count(r.namespace_id)) {
      ++orphaned;
      continue;
    }
    format::MetaValue m;
    m.value_bytes = r.location.value_bytes;
    m.put_time = r.put_time;
    m.checksum = r.checksum;
    m.in_log = true;
    m.segment = r.location.segment;
    m.page = r.location.page;
    m.sequence = r.sequence;
    auto a = access.find(key);
    const std::string access_value =
        a != access.end()
            ? a->second
            : format::EncodeAccess(r.put_time,
                                   static_cast<uint64_t>(std::max<int64_t>(r.put_time, 0)) << 20);
    TURBOKV_RETURN_IF_ERROR(
        FromRocksDb(batch.Put(fresh.cfs[CfIndex::kMeta], key, format::EncodeMeta(m)), "put"));
    TURBOKV_RETURN_IF_ERROR(
        FromRocksDb(batch.Put(fresh.cfs[CfIndex::kAccess], key, access_value), "put"));
    ++report->salvaged_blocks;
    if (batch.GetDataSize() >= (size_t{32} << 20)) {
      TURBOKV_RETURN_IF_ERROR(FromRocksDb(fresh.db->Write(no_wal, &batch), "salvage write"));
      batch.Clear();
    }
  }
  if (orphaned > 0) {
    report->findings.push_back(absl::StrCat(orphaned,
                                            " blocks in the value log belong to no "
                                            "known namespace: dropped"));
  }
  report->dropped_blocks =
      known_blocks > report->salvaged_blocks ? known_blocks - report->salvaged_blocks : orphaned;
  if (batch.Count() > 0) {
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(fresh.db->Write(no_wal, &batch), "salvage write"));
  }
  rocksdb::FlushOptions flush;
  flush.wait = true;
  TURBOKV_RETURN_IF_ERROR(FromRocksDb(fresh.db->Flush(flush, fresh.cfs), "salvage flush"));
  fresh.Close();
  {
    std::ofstream marker(fresh_dir / kDoneMarker);
    marker << "salvaged " << report->salvaged_blocks << " blocks\n";
    if (!marker.good()) return absl::UnavailableError("cannot write the salvage marker");
  }
  return SwapInFreshDb(dir, keep_old_as);
}

}  // namespace

absl::StatusOr<RepairReport> RepairIfDamaged(const StorageOptions& options, int64_t now) {
  RepairReport report;
  const fs::path dir = options.data_dir;
  std::error_code ec;
  if (fs::exists(dir / kFresh / kDoneMarker, ec)) {
    report.salvaged = true;
    report.findings.emplace_back("finishing an interrupted salvage");
    TURBOKV_RETURN_IF_ERROR(SwapInFreshDb(dir));
    return report;
  }
  if (fs::exists(dir / kFresh, ec) || fs::exists(dir / kOldPartial, ec)) {
    report.findings.emplace_back("repeating an interrupted salvage");
    if (fs::exists(dir / kOldPartial, ec)) {
      // The swap had begun moving the old files aside: put them back first.
      TURBOKV_RETURN_IF_ERROR(
          MoveEntries(dir / kOldPartial, dir, [](const std::string&) { return true; }));
      fs::remove_all(dir / kOldPartial, ec);
    }
    TURBOKV_RETURN_IF_ERROR(FullSalvage(options, now, &report));
    return report;
  }
  if (!fs::exists(dir / "CURRENT", ec)) return report;  // a new database

  OpenDb d;
  rocksdb::Status s = Open(dir.string(), options, /*paranoid=*/true, &d);
  if (!s.ok() && IsDamage(s)) {
    report.findings.push_back("open: " + s.ToString());
    d.Close();
    s = Open(dir.string(), options, /*paranoid=*/false, &d);
  }
  if (!s.ok()) {
    if (!IsDamage(s)) return FromRocksDb(s, absl::StrCat("open ", dir.string()));
    report.findings.push_back("open without paranoid checks: " + s.ToString());
    d.Close();
    TURBOKV_RETURN_IF_ERROR(FullSalvage(options, now, &report));
    return report;
  }
  const std::set<std::string> damaged = FindDamage(d, &report.findings);
  if (damaged.empty() && report.findings.empty()) return report;
  const std::set<std::string> cheap = {format::kCfAccess, format::kCfNamespaces,
                                       format::kCfNamespacesCopy};
  const bool both_copies =
      damaged.count(format::kCfNamespaces) && damaged.count(format::kCfNamespacesCopy);
  const bool only_cheap = !damaged.empty() && !both_copies &&
                          std::all_of(damaged.begin(), damaged.end(),
                                      [&](const std::string& n) { return cheap.count(n); });
  if (only_cheap) {
    if (damaged.count(format::kCfAccess)) {
      TURBOKV_RETURN_IF_ERROR(Recreate(d, CfIndex::kAccess, options));
      report.access_rebuilt = true;
    }
    for (auto [bad, good] : {std::pair{CfIndex::kNamespaces, CfIndex::kNamespacesCopy},
                             std::pair{CfIndex::kNamespacesCopy, CfIndex::kNamespaces}}) {
      if (!damaged.count(d.cfs[bad]->GetName())) continue;
      rocksdb::Status scan;
      const auto records = ScanCf(d.db, d.cfs[good], &scan);
      TURBOKV_RETURN_IF_ERROR(FromRocksDb(scan, "scan namespace copy"));
      TURBOKV_RETURN_IF_ERROR(Recreate(d, bad, options));
      TURBOKV_RETURN_IF_ERROR(SyncPuts(d.db, d.cfs[bad], records));
      report.namespaces_rebuilt = true;
    }
    return report;
  }
  d.Close();
  TURBOKV_RETURN_IF_ERROR(FullSalvage(options, now, &report));
  return report;
}

}  // namespace turbokv::server
