#include "server/storage/storage_options.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace turbokv::server {
namespace {

// The durability names, in --help order: the flag, ParseDurability and DurabilityName use it.
const std::vector<std::pair<std::string, Durability>>& DurabilityNames() {
  static const auto* names = new std::vector<std::pair<std::string, Durability>>{
      {"none", Durability::kNone}, {"wal", Durability::kWal}, {"fsync", Durability::kFsync}};
  return *names;
}

}  // namespace

std::string_view DurabilityName(Durability durability) {
  for (const auto& [name, value] : DurabilityNames()) {
    if (value == durability) return name;
  }
  return "unknown";
}

absl::StatusOr<Durability> ParseDurability(std::string_view name) {
  for (const auto& [text, value] : DurabilityNames()) {
    if (text == name) return value;
  }
  std::vector<std::string> names;
  for (const auto& [text, value] : DurabilityNames()) names.push_back(text);
  return absl::InvalidArgumentError(absl::StrCat("durability \"", std::string(name),
                                                 "\" is not one of ", absl::StrJoin(names, ", ")));
}

const OptionTable<StorageOptions>& StorageOptionTable() {
  using O = StorageOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    t->Text("--data-dir", "storage.data_dir", &O::data_dir, "DIR", {},
            "Data directory (created when missing): the value log of packed blocks in values/, "
            "and the RocksDB of their metadata; its filesystem must deallocate file ranges "
            "(ext4, XFS, btrfs, tmpfs, f2fs, NFS 4.2)");
    t->Bytes("--capacity", "storage.capacity_bytes", &O::capacity_bytes, 1,
             std::numeric_limits<uint64_t>::max(),
             "Hard budget on the data directory's bytes (the value log's page-aligned records "
             "of packed blocks and RocksDB's metadata files; only the disk reserve comes on "
             "top): plain bytes or with a unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 10GiB");
    t->Number("--high-watermark", "storage.high_watermark", &O::high_watermark, 0.01, 1.0,
              OptionUnit::kFraction, "Evict when a put would exceed this fraction of --capacity");
    t->Number("--low-watermark", "storage.low_watermark", &O::low_watermark, 0.01, 1.0,
              OptionUnit::kFraction,
              "Evict the eviction policy's least valuable unleased blocks down to this fraction "
              "(at most --high-watermark)");
    t->Text("--eviction-policy", "storage.eviction_policy", &O::eviction_policy, "",
            {"lrfu", "lru"},
            "Which blocks go first when the store is full: lrfu (knows the prefix tree: a "
            "chain's tail before its head; recency and frequency weighed with a half-life it "
            "tunes itself; docs/cache.md) or lru (least recently used, in chain order)");
    t->Switch("--ignore-client-tuning", "storage.ignore_client_tuning", &O::ignore_client_tuning,
              "Keep tuning the lrfu policy here even when a sharded client sends the cluster's "
              "tuning (LookupRequest.follow_tuning: the nodes of a cluster follow one node's "
              "half-life and unseen age, so they rank the pieces of a chain alike; "
              "docs/cluster.md)");
    t->Bytes("--segment-bytes", "storage.segment_bytes", &O::segment_bytes, uint64_t{1} << 20,
             uint64_t{4} << 30,
             "Size at which a value-log segment file is closed and the next one started");
    t->Bytes("--read-cache-bytes", "storage.read_cache_bytes", &O::read_cache_bytes, 0,
             std::numeric_limits<uint64_t>::max(),
             "Memory for recently read packed blocks, served again without a disk read, copy "
             "or checksum (an LRU cache; verified when first read); 0 disables it");
    t->Enum("--durability", "storage.durability", &O::durability, DurabilityNames(),
            "none: WAL off; wal: WAL, no fsync (survives a process crash); fsync: WAL fsync'ed "
            "before every ack");
    t->Bytes("", "storage.disk_reserve_bytes", &O::disk_reserve_bytes, 0,
             std::numeric_limits<uint64_t>::max(), "Bytes kept in <data_dir>/RESERVE; 0: none");
    t->Number("", "storage.maintenance_interval_ms", &O::maintenance_interval_ms, 0,
              std::numeric_limits<int>::max(), OptionUnit::kMilliseconds,
              "Period of the maintenance pass; 0: no background thread");
    return t;
  }();
  return *table;
}

absl::Status StorageOptions::Validate() const {
  if (data_dir.empty()) return absl::InvalidArgumentError("storage.data_dir must not be empty");
  if (absl::Status s = StorageOptionTable().Validate(*this); !s.ok()) return s;
  if (low_watermark > high_watermark) {
    return absl::InvalidArgumentError(absl::StrCat("storage.low_watermark ", low_watermark,
                                                   " (--low-watermark) is above "
                                                   "storage.high_watermark ",
                                                   high_watermark, " (--high-watermark)"));
  }
  return absl::OkStatus();
}

}  // namespace turbokv::server
