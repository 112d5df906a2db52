#include "server/storage/disk_guard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "server/storage/store_format.h"
#include "server/storage/value_log.h"
#include "spdlog/spdlog.h"

namespace turbokv::server {
namespace {

namespace fs = std::filesystem;

constexpr char kReserveFile[] = "RESERVE";

uint64_t AllocatedBytes(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;  // removed since the listing
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace

DiskGuard::DiskGuard(const StorageOptions& options) : options_(options) {}

std::string DiskGuard::ReservePath() const {
  return (fs::path(options_.data_dir) / kReserveFile).string();
}

uint64_t DiskGuard::FlushHeadroom() const { return 2 * format::WriteBufferBytes(options_); }

uint64_t DiskGuard::ReserveBytes() const {
  uint64_t reserve = std::min(options_.disk_reserve_bytes, options_.capacity_bytes / 64);
  struct statvfs fs {};
  if (statvfs(options_.data_dir.c_str(), &fs) == 0) {
    reserve = std::min(reserve, static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize / 8);
  }
  return reserve;
}

void DiskGuard::ReleaseReserve(bool at_startup) {
  std::error_code ec;
  if (!fs::remove(ReservePath(), ec)) return;
  if (at_startup) {
    spdlog::info("released the disk reserve {} for the start-up (taken again once open)",
                 ReservePath());
  } else {
    spdlog::warn("released the disk reserve {}: the disk is nearly full", ReservePath());
  }
}

void DiskGuard::CreateReserve() {
  const uint64_t reserve = ReserveBytes();
  if (reserve == 0) return;
  std::error_code ec;
  if (fs::exists(ReservePath(), ec)) return;
  // Only with room to spare: the reserve must not be what fills the disk.
  if (FreeBytes() < 4 * reserve + FlushHeadroom()) return;
  const int fd = ::open(ReservePath().c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(reserve));
  if (rc == 0) (void)fsync(fd);
  ::close(fd);
  if (rc != 0) fs::remove(ReservePath(), ec);
}

uint64_t DiskGuard::FreeBytes() const {
  struct statvfs fs {};
  if (statvfs(options_.data_dir.c_str(), &fs) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

absl::Status DiskGuard::CheckRoom(uint64_t incoming_bytes, int64_t now) {
  // A write RocksDB cannot append to its WAL stops all its writes until it is resumed: stop
  // puts while the filesystem still has room for the values and RocksDB's flushes.
  const uint64_t headroom = FlushHeadroom() + incoming_bytes;
  uint64_t free_bytes = FreeBytes();
  if (free_bytes >= headroom) return absl::OkStatus();
  ReleaseReserve();
  free_bytes = FreeBytes();
  if (free_bytes >= headroom) return absl::OkStatus();
  absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
      "the data directory's filesystem has ", free_bytes, " bytes free; puts stop below ", headroom,
      " so RocksDB can still flush (free disk space, or lower --capacity)"));
  if (refused_log_.Due(now)) {
    spdlog::warn("put refused (RESOURCE_EXHAUSTED, {} since the last such line): {}",
                 refused_log_.TakeCount(), std::string(full.message()));
  }
  return full;
}

bool DiskGuard::TryResume(rocksdb::DB* db, int64_t now) {
  if (!needs_resume_.load()) {
    CreateReserve();  // again, once a full disk has room
    return false;
  }
  rocksdb::Status s = db->Resume();
  if (!s.ok() && s.IsNoSpace()) {
    // Nothing else frees space while writes are stopped (deletions are writes too): give
    // RocksDB the reserve so it can flush and take deletions again.
    ReleaseReserve();
    s = db->Resume();
  }
  if (s.ok()) {
    needs_resume_.store(false);
    spdlog::info("RocksDB writes resumed after a background error");
    return true;
  }
  if (resume_log_.Due(now)) {
    spdlog::warn("RocksDB writes stopped (reads are served): {}; retrying", s.ToString());
  }
  return false;
}

DiskUsage DiskGuard::Measure(const ValueLog& log) const {
  DiskUsage u;
  u.values = log.AllocatedBytes();
  // Never throws (the non-throwing increment): a listing that fails part way, e.g. the
  // directory removed under a running server, counts what it saw.
  std::error_code ec;
  for (fs::directory_iterator it(options_.data_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code file_ec;
    if (!it->is_regular_file(file_ec)) continue;  // values/ and salvage leftovers
    const fs::path ext = p.extension();
    if (p.filename() == kReserveFile) {
      u.reserve += AllocatedBytes(p);
    } else if (ext == ".sst" || ext == ".log" || ext == ".blob") {
      u.metadata += AllocatedBytes(p);
    } else {
      u.other += AllocatedBytes(p);
    }
  }
  return u;
}

}  // namespace turbokv::server
