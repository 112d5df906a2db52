#include "server/storage/storage_options.h"

#include "absl/strings/str_cat.h"

namespace turbokv::server {

std::string_view DurabilityName(Durability durability) {
  switch (durability) {
    case Durability::kNone:
      return "none";
    case Durability::kWal:
      return "wal";
    case Durability::kFsync:
      return "fsync";
  }
  return "unknown";
}

absl::StatusOr<Durability> ParseDurability(std::string_view name) {
  if (name == "none") return Durability::kNone;
  if (name == "wal") return Durability::kWal;
  if (name == "fsync") return Durability::kFsync;
  return absl::InvalidArgumentError(
      absl::StrCat("durability \"", std::string(name), "\" is not one of none, wal, fsync"));
}

absl::Status StorageOptions::Validate() const {
  if (data_dir.empty()) return absl::InvalidArgumentError("storage.data_dir must not be empty");
  if (capacity_bytes == 0) {
    return absl::InvalidArgumentError("storage.capacity_bytes must be greater than 0");
  }
  if (!(low_watermark > 0.0 && low_watermark <= high_watermark && high_watermark <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage watermarks must satisfy 0 < low_watermark <= high_watermark <= 1, got low ",
        low_watermark, " high ", high_watermark));
  }
  if (segment_bytes < (uint64_t{1} << 20) || segment_bytes > (uint64_t{4} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage.segment_bytes must be in [1 MiB, 4 GiB], got ", segment_bytes));
  }
  if (eviction_policy != "lrfu" && eviction_policy != "lru") {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage.eviction_policy \"", eviction_policy, "\" is not one of lrfu, lru"));
  }
  if (maintenance_interval_ms < 0) {
    return absl::InvalidArgumentError("storage.maintenance_interval_ms must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace turbokv::server
