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
#include "server/storage/blob_file_reader.h"
#include "server/storage/block_index.h"
#include "server/storage/rocksdb_status.h"
#include "server/storage/store_format.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::server {
namespace {

namespace fs = std::filesystem;
using format::CfIndex;

constexpr char kBlobsAside[] = "salvage-blobs";
constexpr char kFresh[] = "salvage-new";
constexpr char kOld[] = "salvage-old";
constexpr char kOldPartial[] = "salvage-old.tmp";
constexpr char kDoneMarker[] = "SALVAGED";

bool IsSalvageDir(const std::string& name) {
  return name == kBlobsAside || name == kFresh || name == kOld || name == kOldPartial;
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
      findings->push_back(absl::StrCat("blob file ", name, ": ",
                                       ec ? ec.message() : absl::StrCat(size, " bytes, expected ",
                                                                        b.blob_file_size)));
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
  return ec ? absl::UnavailableError(absl::StrCat("cannot list ", from.string(), ": ",
                                                  ec.message()))
            : absl::OkStatus();
}

// The fresh database (salvage-new/, complete with its marker) replaces the old one. Every step
// can be repeated after a crash: the old entries go to salvage-old.tmp, which becomes
// salvage-old once all are there; then the fresh entries move up; then the rest is removed.
absl::Status SwapInFreshDb(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kOld, ec)) {
    TURBOKV_RETURN_IF_ERROR(MoveEntries(dir, dir / kOldPartial,
                                        [](const std::string& n) {
                                          return !IsSalvageDir(n) && n != format::kDirLockFile;
                                        }));
    fs::rename(dir / kOldPartial, dir / kOld, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("salvage swap: ", ec.message()));
  }
  TURBOKV_RETURN_IF_ERROR(
      MoveEntries(dir / kFresh, dir, [](const std::string& n) { return n != kDoneMarker; }));
  fs::remove_all(dir / kOld, ec);
  fs::remove_all(dir / kBlobsAside, ec);
  fs::remove_all(dir / kFresh, ec);
  return absl::OkStatus();
}

struct Salvaged {
  std::string value;
  std::string meta;
};

// The full salvage (see the header).
absl::Status FullSalvage(const StorageOptions& options, const ValueVerifier& verifier,
                         int64_t now, RepairReport* report) {
  const fs::path dir = options.data_dir;
  std::error_code ec;
  report->salvaged = true;
  // 1. Blob files aside: RepairDB does not know them and would have the database delete them.
  TURBOKV_RETURN_IF_ERROR(MoveEntries(dir, dir / kBlobsAside, [](const std::string& n) {
    return fs::path(n).extension() == ".blob";
  }));
  fs::remove_all(dir / kFresh, ec);
  rocksdb::Status s = rocksdb::RepairDB(dir.string(), format::DbOptions(options),
                                        format::Descriptors(options),
                                        format::CfOptions("", options));
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("RepairDB ", dir.string()));
  OpenDb old;
  s = Open(dir.string(), options, /*paranoid=*/false, &old);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("open repaired ", dir.string()));

  // 2. What the repaired metadata still says. Scans stop at the first error: the SSTs that
  //    failed RepairDB's own check are already gone, so one should not occur.
  std::map<std::string, std::string> namespaces;  // key -> record
  for (int cf : {CfIndex::kNamespaces, CfIndex::kNamespacesCopy}) {
    rocksdb::Status scan;
    for (auto& [k, v] : ScanCf(old.db, old.cfs[cf], &scan)) namespaces.emplace(k, v);
    if (!scan.ok()) report->findings.push_back("namespaces scan: " + scan.ToString());
  }
  rocksdb::Status scan;
  std::vector<std::pair<std::string, std::string>> metas =
      ScanCf(old.db, old.cfs[CfIndex::kMeta], &scan);
  if (!scan.ok()) report->findings.push_back("block_meta scan: " + scan.ToString());
  absl::flat_hash_map<std::string, std::string> access;  // values as stored (8 or 16 bytes)
  for (auto& [k, v] : ScanCf(old.db, old.cfs[CfIndex::kAccess], &scan)) {
    if (v.size() == 8 || v.size() == 16) access[k] = v;
  }
  auto known_namespace = [&](std::string_view key) {
    return key.size() >= 8 && namespaces.count(std::string(key.substr(0, 8)));
  };

  // 3. The fresh database: namespaces, then every block that can be recovered.
  const fs::path fresh_dir = dir / kFresh;
  OpenDb fresh;
  s = Open(fresh_dir.string(), options, /*paranoid=*/true, &fresh);
  if (!s.ok()) return FromRocksDb(s, absl::StrCat("create ", fresh_dir.string()));
  for (const auto& [k, v] : namespaces) {
    std::vector<std::pair<std::string, std::string>> one = {{k, v}};
    TURBOKV_RETURN_IF_ERROR(SyncPuts(fresh.db, fresh.cfs[CfIndex::kNamespaces], one));
    TURBOKV_RETURN_IF_ERROR(SyncPuts(fresh.db, fresh.cfs[CfIndex::kNamespacesCopy], one));
  }
  rocksdb::WriteBatch batch;
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;  // flushed before the marker is written
  auto put_block = [&](std::string_view key, std::string_view value,
                       std::string_view meta) -> absl::Status {
    const std::string k(key);
    auto a = access.find(k);
    const std::string access_value =
        a != access.end()
            ? a->second
            : format::EncodeAccess(now, static_cast<uint64_t>(now) << kRecencyIndexBits);
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Put(fresh.cfs[CfIndex::kBlocks], k, value), "put"));
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(batch.Put(fresh.cfs[CfIndex::kMeta], k, meta), "put"));
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(
        batch.Put(fresh.cfs[CfIndex::kAccess], k, access_value), "put"));
    ++report->salvaged_blocks;
    if (batch.GetDataSize() >= (size_t{32} << 20)) {
      TURBOKV_RETURN_IF_ERROR(FromRocksDb(fresh.db->Write(no_wal, &batch), "salvage write"));
      batch.Clear();
    }
    return absl::OkStatus();
  };
  auto verified = [&](std::string_view v) {
    return verifier(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                              v.size()))
        .ok();
  };

  // Blocks block_meta describes: inline values come straight from the repaired database;
  // values in blob files are found below by the checksum block_meta recorded.
  struct Wanted {
    uint64_t checksum = 0;
    std::string meta;
  };
  absl::flat_hash_map<std::string, Wanted> wanted;
  absl::flat_hash_map<std::string, bool> described;  // key -> recovered
  for (const auto& [k, m] : metas) {
    if (!known_namespace(k) || (m.size() != 16 && m.size() != 24)) {
      ++report->dropped_blocks;
      continue;
    }
    const uint64_t checksum = m.size() == 24 ? format::GetFixed64LE(m.data() + 16) : 0;
    // NotFound with block_meta present: the key's `blocks` entry was in an SST RepairDB
    // dropped (both are written and deleted in one batch); its blob record may remain.
    rocksdb::PinnableSlice value;
    s = old.db->Get(rocksdb::ReadOptions(), old.cfs[CfIndex::kBlocks], k, &value);
    described[k] = false;
    if (s.ok() && verified(value.ToStringView()) &&
        (checksum == 0 || format::TrailerOf(value.ToStringView()) == checksum)) {
      TURBOKV_RETURN_IF_ERROR(put_block(k, value.ToStringView(), m));
      described[k] = true;
      continue;
    }
    wanted[k] = Wanted{checksum, m};
  }
  // Blob records, oldest file first: a record matches a described block by its checksum; a
  // block block_meta lost (a damaged block_meta SST) whose key the repaired `blocks` still
  // has takes the newest verified record of its key.
  std::vector<fs::path> blobs;
  for (const auto& e : fs::directory_iterator(dir / kBlobsAside, ec)) blobs.push_back(e.path());
  std::sort(blobs.begin(), blobs.end());
  absl::Status write_status;
  for (const fs::path& p : blobs) {
    BlobFileScan blob_scan;
    absl::Status read = ScanBlobFile(
        p.string(),
        [&](std::string_view key, std::string_view value) {
          if (!write_status.ok() || !verified(value)) return;
          const std::string k(key);
          if (auto w = wanted.find(k); w != wanted.end()) {
            if (w->second.checksum != 0 && format::TrailerOf(value) != w->second.checksum) return;
            write_status = put_block(k, value, w->second.meta);
            described[k] = true;
            if (w->second.checksum != 0) wanted.erase(w);
            return;
          }
          if (described.contains(k) || !known_namespace(k)) return;
          rocksdb::PinnableSlice ignored;
          rocksdb::Status g = old.db->Get(rocksdb::ReadOptions(), old.cfs[CfIndex::kBlocks], k,
                                          &ignored);
          if (g.IsNotFound()) return;  // deleted since: never resurrect it
          write_status = put_block(
              k, value, format::EncodeMeta(value.size(), now, format::TrailerOf(value)));
        },
        &blob_scan);
    TURBOKV_RETURN_IF_ERROR(write_status);
    if (!read.ok() || !blob_scan.complete || blob_scan.bad_records > 0) {
      report->findings.push_back(absl::StrCat(
          "blob file ", p.filename().string(), ": ", blob_scan.records, " records verified, ",
          blob_scan.bad_records, " damaged", blob_scan.complete ? "" : ", cut short",
          read.ok() ? "" : absl::StrCat(" (", read.message(), ")")));
    }
  }
  for (const auto& [k, ok] : described) {
    if (!ok) ++report->dropped_blocks;
  }
  if (batch.Count() > 0) {
    TURBOKV_RETURN_IF_ERROR(FromRocksDb(fresh.db->Write(no_wal, &batch), "salvage write"));
  }
  rocksdb::FlushOptions flush;
  flush.wait = true;
  TURBOKV_RETURN_IF_ERROR(FromRocksDb(fresh.db->Flush(flush, fresh.cfs), "salvage flush"));
  fresh.Close();
  old.Close();
  {
    std::ofstream marker(fresh_dir / kDoneMarker);
    marker << "salvaged " << report->salvaged_blocks << " blocks\n";
    if (!marker.good()) return absl::UnavailableError("cannot write the salvage marker");
  }
  return SwapInFreshDb(dir);
}

}  // namespace

absl::StatusOr<RepairReport> RepairIfDamaged(const StorageOptions& options,
                                             const ValueVerifier& verifier, int64_t now) {
  RepairReport report;
  const fs::path dir = options.data_dir;
  std::error_code ec;
  if (fs::exists(dir / kFresh / kDoneMarker, ec)) {
    report.salvaged = true;
    report.findings.push_back("finishing an interrupted salvage");
    TURBOKV_RETURN_IF_ERROR(SwapInFreshDb(dir));
    return report;
  }
  if (fs::exists(dir / kBlobsAside, ec)) {
    report.findings.push_back("repeating an interrupted salvage");
    TURBOKV_RETURN_IF_ERROR(FullSalvage(options, verifier, now, &report));
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
    TURBOKV_RETURN_IF_ERROR(FullSalvage(options, verifier, now, &report));
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
  TURBOKV_RETURN_IF_ERROR(FullSalvage(options, verifier, now, &report));
  return report;
}

}  // namespace turbokv::server
