#include "server/storage/value_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "turbokv/codec/status_macros.h"
#include "xxhash.h"

namespace turbokv::server {
namespace {

namespace fs = std::filesystem;

constexpr char kSegmentMagic[8] = {'T', 'K', 'V', 'S', 'E', 'G', '0', '1'};
constexpr uint32_t kSegmentVersion = 1;
constexpr uint32_t kRecordMagic = 0x52564b54;  // "TKVR" little-endian
constexpr uint32_t kRecordVersion = 1;
constexpr char kSegmentSuffix[] = ".tkv";
constexpr size_t kMaxHashBytes = 32;
// Header bytes covered by the header checksum (the checksum sits right after them).
constexpr size_t kCheckedHeaderBytes = 48;

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// The cache's key of a record: its segment and page, 8 bytes.
struct CacheKey {
  char bytes[8];
  explicit CacheKey(const RecordLocation& where) {
    PutU32(bytes, where.segment);
    PutU32(bytes + 4, where.page);
  }
  rocksdb::Slice slice() const { return {bytes, sizeof(bytes)}; }
};

// A cached value: the memory Read returned, shared with the messages sending it.
struct CachedValue {
  LogValue value;
  uint64_t sequence;
};

void DeleteCachedValue(const rocksdb::Slice& /*key*/, void* value) {
  delete static_cast<CachedValue*>(value);
}

// XXH3-64 of the header's first kCheckedHeaderBytes and the hash.
uint64_t HeaderChecksum(const char* header, std::string_view hash) {
  char buf[kCheckedHeaderBytes + kMaxHashBytes];
  std::memcpy(buf, header, kCheckedHeaderBytes);
  std::memcpy(buf + kCheckedHeaderBytes, hash.data(), hash.size());
  return XXH3_64bits(buf, kCheckedHeaderBytes + hash.size());
}

// Header + hash of a record, ready to write.
void EncodeHeader(const RecordWrite& r, char* out /* kRecordHeaderBytes + hash */) {
  std::memset(out, 0, kRecordHeaderBytes);
  PutU32(out + 0, kRecordMagic);
  PutU32(out + 4, kRecordVersion);
  PutU64(out + 8, r.sequence);
  PutU64(out + 16, r.namespace_id);
  PutU64(out + 24, static_cast<uint64_t>(r.put_time));
  PutU32(out + 32, static_cast<uint32_t>(r.value.size()));
  out[36] = static_cast<char>(r.hash.size());
  out[37] = static_cast<char>(r.kind);
  PutU64(out + 40, r.checksum);
  PutU64(out + 48, HeaderChecksum(out, r.hash));
  std::memcpy(out + kRecordHeaderBytes, r.hash.data(), r.hash.size());
}

// Parses a record header followed by its hash (`bytes` holds at least kRecordHeaderBytes, and
// the hash when the header is intact). NotFound: no record starts here (zeros: a deallocated
// record, or never written). DataLoss: something else than an intact header.
absl::StatusOr<RecordInfo> DecodeHeader(std::string_view bytes) {
  const char* p = bytes.data();
  const uint32_t magic = GetU32(p);
  if (magic == 0) return absl::NotFoundError("no record");
  if (magic != kRecordMagic || GetU32(p + 4) != kRecordVersion) {
    return absl::DataLossError("not a value-log record header");
  }
  const size_t hash_bytes = static_cast<uint8_t>(p[36]);
  if (hash_bytes < 8 || hash_bytes > kMaxHashBytes ||
      bytes.size() < kRecordHeaderBytes + hash_bytes) {
    return absl::DataLossError("value-log record header has a bad hash length");
  }
  const std::string_view hash(p + kRecordHeaderBytes, hash_bytes);
  if (HeaderChecksum(p, hash) != GetU64(p + 48)) {
    return absl::DataLossError("value-log record header fails its checksum");
  }
  if (static_cast<uint8_t>(p[37]) > static_cast<uint8_t>(RecordKind::kNamespace)) {
    return absl::DataLossError("value-log record header has an unknown kind");
  }
  RecordInfo info;
  info.kind = static_cast<RecordKind>(p[37]);
  info.sequence = GetU64(p + 8);
  info.namespace_id = GetU64(p + 16);
  info.put_time = static_cast<int64_t>(GetU64(p + 24));
  info.location.value_bytes = GetU32(p + 32);
  info.location.hash_bytes = static_cast<uint8_t>(hash_bytes);
  info.checksum = GetU64(p + 40);
  info.hash = std::string(hash);
  return info;
}

absl::Status IoError(const char* what, const std::string& path, int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

// pwritev of all of `iov` at `offset`, continuing after short writes.
int WriteFully(int fd, std::vector<iovec> iov, off_t offset) {
  size_t first = 0;
  while (first < iov.size()) {
    const ssize_t n =
        ::pwritev(fd, iov.data() + first, static_cast<int>(iov.size() - first), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    offset += n;
    auto left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return 0;
}

const char kZeroPage[kPageBytes] = {};

}  // namespace

struct ValueLog::Segment {
  uint32_t number = 0;
  std::string path;
  int fd = -1;
  uint64_t tail = kPageBytes;  // next free offset (appends; the header takes page 0)
  uint64_t live_records = 0;
  uint64_t live_bytes = 0;  // RecordBytes of the live records
  // Recovery only (MarkLive -> ReclaimGarbage): (first page, pages) of the live records.
  std::vector<std::pair<uint32_t, uint32_t>> live_extents;
  bool unlinked = false;
  ~Segment() {
    if (fd >= 0) ::close(fd);
  }
};

std::shared_ptr<rocksdb::Cache> NewValueCache(uint64_t bytes) {
  if (bytes == 0) return nullptr;
  rocksdb::LRUCacheOptions lru;
  lru.capacity = bytes;
  // Values of ~0.04-8 MiB: few shards, so one shard (capacity / 2^bits) still holds many (a
  // value larger than its shard is never cached).
  lru.num_shard_bits = 2;
  lru.high_pri_pool_ratio = 0;
  return rocksdb::NewLRUCache(lru);
}

ValueLog::ValueLog(ValueLogOptions options)
    : options_(std::move(options)), cache_(NewValueCache(options_.cache_bytes)) {}
ValueLog::~ValueLog() = default;

std::string ValueLog::PathOf(uint32_t number) const {
  return (fs::path(options_.dir) / absl::StrFormat("%08u%s", number, kSegmentSuffix)).string();
}

absl::StatusOr<std::unique_ptr<ValueLog>> ValueLog::Open(ValueLogOptions options) {
  if (options.segment_bytes < 16 * kPageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value-log segment size ", options.segment_bytes, " is below 64 KiB"));
  }
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the value-log directory ", options.dir, ": ", ec.message()));
  }
  std::unique_ptr<ValueLog> log(new ValueLog(std::move(options)));
  // The design rests on deallocating pages; a filesystem without it would keep every evicted
  // value on disk. Probe it once, on a scratch file of this directory.
  {
    const std::string probe = (fs::path(log->options_.dir) / "punch-probe.tmp").string();
    const int fd = ::open(probe.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) return IoError("cannot create", probe, errno);
    int err = 0;
    if (::pwrite(fd, kZeroPage, kPageBytes, 0) != static_cast<ssize_t>(kPageBytes) ||
        ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kPageBytes) != 0) {
      err = errno;
    }
    ::close(fd);
    fs::remove(probe, ec);
    if (err == EOPNOTSUPP || err == ENOSYS) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the filesystem of ", log->options_.dir,
          " cannot deallocate file ranges (fallocate PUNCH_HOLE): turbokv needs it to give "
          "evicted blocks' space back; use ext4, XFS, btrfs, tmpfs, f2fs or NFS 4.2"));
    }
    if (err != 0) return IoError("cannot probe", probe, err);
  }
  TURBOKV_RETURN_IF_ERROR(log->LoadSegments());
  return log;
}

absl::Status ValueLog::LoadSegments() {
  std::error_code ec;
  for (fs::directory_iterator it(options_.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() != kSegmentSuffix) continue;
    uint32_t number = 0;
    if (!absl::SimpleAtoi(p.stem().string(), &number) || number == 0) {
      spdlog::warn("value log: ignoring {} (not a segment name)", p.string());
      continue;
    }
    auto s = std::make_shared<Segment>();
    s->number = number;
    s->path = p.string();
    s->fd = ::open(s->path.c_str(), O_RDWR | O_CLOEXEC);
    if (s->fd < 0) return IoError("cannot open value-log segment", s->path, errno);
    char header[sizeof(kSegmentMagic) + 8] = {};
    const ssize_t n = ::pread(s->fd, header, sizeof(header), 0);
    if (n != static_cast<ssize_t>(sizeof(header)) ||
        std::memcmp(header, kSegmentMagic, sizeof(kSegmentMagic)) != 0) {
      // A damaged header page costs nothing else: records are found by their own headers.
      spdlog::warn("value log: segment {} has a damaged header page", s->path);
    }
    struct stat st {};
    if (::fstat(s->fd, &st) == 0) s->tail = static_cast<uint64_t>(st.st_size);
    segments_[number] = std::move(s);
    next_segment_ = std::max(next_segment_, number + 1);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot list the value-log directory ", options_.dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status ValueLog::StartSegment(uint32_t number) {
  auto s = std::make_shared<Segment>();
  s->number = number;
  s->path = PathOf(number);
  s->fd = ::open(s->path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
  if (s->fd < 0) return IoError("cannot create value-log segment", s->path, errno);
  char header[kPageBytes] = {};
  std::memcpy(header, kSegmentMagic, sizeof(kSegmentMagic));
  PutU32(header + 8, kSegmentVersion);
  PutU32(header + 12, number);
  // Only the bytes that carry something: the rest of page 0 stays a hole.
  if (::pwrite(s->fd, header, 16, 0) != 16) {
    const int err = errno;
    ::unlink(s->path.c_str());
    return IoError("cannot write value-log segment", s->path, err);
  }
  if (options_.sync) {
    const int dir_fd = ::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      (void)::fsync(dir_fd);
      ::close(dir_fd);
    }
  }
  s->tail = kPageBytes;
  segments_[number] = s;
  active_ = std::move(s);
  next_segment_ = std::max(next_segment_, number + 1);
  return absl::OkStatus();
}

std::shared_ptr<ValueLog::Segment> ValueLog::Find(uint32_t number) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = segments_.find(number);
  return it == segments_.end() ? nullptr : it->second;
}

absl::Status ValueLog::Punch(const Segment& s, uint64_t offset, uint64_t bytes) {
  if (::fallocate(s.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(bytes)) != 0) {
    return IoError("cannot deallocate a range of", s.path, errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RecordLocation>> ValueLog::Append(
    absl::Span<const RecordWrite> records) {
  struct Placed {
    std::shared_ptr<Segment> segment;
    uint64_t offset;
  };
  std::vector<Placed> placed;
  placed.reserve(records.size());
  std::vector<RecordLocation> out(records.size());
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t i = 0; i < records.size(); ++i) {
      const RecordWrite& r = records[i];
      if (r.hash.size() < 8 || r.hash.size() > kMaxHashBytes || r.value.size() > UINT32_MAX) {
        for (size_t k = 0; k < i; ++k) {  // undo the reservations made so far
          placed[k].segment->live_records -= 1;
          placed[k].segment->live_bytes -= RecordBytes(out[k]);
          live_bytes_ -= RecordBytes(out[k]);
        }
        return absl::InvalidArgumentError(
            absl::StrCat("value-log record with a ", r.hash.size(), "-byte hash and a ",
                         r.value.size(), "-byte value: expected 8..32 and at most 4 GiB"));
      }
      const uint64_t bytes = RecordBytes(r.hash.size(), r.value.size());
      if (active_ == nullptr ||
          (active_->tail + bytes > options_.segment_bytes && active_->tail > kPageBytes)) {
        const std::shared_ptr<Segment> previous = active_;
        TURBOKV_RETURN_IF_ERROR(StartSegment(next_segment_));
        if (previous != nullptr) DropIfDead(previous->number);
      }
      if (active_->tail / kPageBytes + bytes / kPageBytes > UINT32_MAX) {
        return absl::ResourceExhaustedError("value-log segment past 2^32 pages");
      }
      out[i].segment = active_->number;
      out[i].page = static_cast<uint32_t>(active_->tail / kPageBytes);
      out[i].value_bytes = static_cast<uint32_t>(r.value.size());
      out[i].hash_bytes = static_cast<uint8_t>(r.hash.size());
      placed.push_back({active_, active_->tail});
      active_->tail += bytes;
      active_->live_records += 1;
      active_->live_bytes += bytes;
      live_bytes_ += bytes;
    }
  }
  // Written outside the lock: concurrent appends fill their own reserved ranges.
  absl::Status failed;
  size_t written = 0;
  for (; written < records.size(); ++written) {
    const RecordWrite& r = records[written];
    char head[kRecordHeaderBytes + kMaxHashBytes];
    EncodeHeader(r, head);
    const size_t head_bytes = kRecordHeaderBytes + r.hash.size();
    const uint64_t pad = RecordBytes(out[written]) - head_bytes - r.value.size();
    std::vector<iovec> iov;
    iov.push_back({head, head_bytes});
    if (!r.value.empty()) iov.push_back({const_cast<char*>(r.value.data()), r.value.size()});
    // The pad is written (not left a hole) so that the record's last page is allocated now,
    // not later by a neighbour: the disk accounting counts whole pages per record.
    if (pad > 0) iov.push_back({const_cast<char*>(kZeroPage), pad});
    const Segment& s = *placed[written].segment;
    if (int err = WriteFully(s.fd, std::move(iov), static_cast<off_t>(placed[written].offset));
        err != 0) {
      failed = IoError("cannot append to value-log segment", s.path, err);
      break;
    }
  }
  if (failed.ok() && options_.sync) {
    const Segment* synced = nullptr;
    for (const Placed& p : placed) {
      if (p.segment.get() == synced) continue;
      synced = p.segment.get();
      if (::fdatasync(p.segment->fd) != 0) {
        failed = IoError("cannot fdatasync value-log segment", p.segment->path, errno);
        break;
      }
    }
  }
  if (!failed.ok()) {
    // The records that made it (and the one that failed part way) become holes again; Erase
    // also gives back the reservations of those never written.
    for (const RecordLocation& l : out) Erase(l);
    return failed;
  }
  return out;
}

absl::StatusOr<LogValue> ValueLog::Read(const RecordLocation& where, uint64_t namespace_id,
                                        std::string_view hash, uint64_t sequence) const {
  std::shared_ptr<Segment> s = Find(where.segment);
  if (s == nullptr) return absl::NotFoundError("value-log segment is gone");
  const size_t bytes = kRecordHeaderBytes + where.hash_bytes + where.value_bytes;
  std::shared_ptr<char[]> buf(new char[bytes]);
  iovec iov{buf.get(), bytes};
  const off_t offset = static_cast<off_t>(uint64_t{where.page} * kPageBytes);
  ssize_t n;
  do {
    n = ::preadv2(s->fd, &iov, 1, offset, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return IoError("cannot read value-log segment", s->path, errno);
  if (static_cast<size_t>(n) < bytes) {
    // A record past the end of its file: the segment was cut short.
    if (n < static_cast<ssize_t>(kRecordHeaderBytes)) {
      return absl::DataLossError(absl::StrCat("value-log segment ", s->path, " is cut short"));
    }
  }
  absl::StatusOr<RecordInfo> info =
      DecodeHeader(std::string_view(buf.get(), static_cast<size_t>(n)));
  if (!info.ok()) {
    if (absl::IsNotFound(info.status())) return absl::NotFoundError("record deallocated");
    return absl::DataLossError(
        absl::StrCat(info.status().message(), " (", s->path, " page ", where.page, ")"));
  }
  if (info->sequence != sequence || info->namespace_id != namespace_id || info->hash != hash ||
      info->location.value_bytes != where.value_bytes) {
    return absl::DataLossError(absl::StrCat("value-log record at ", s->path, " page ", where.page,
                                            " is not the one the index names"));
  }
  if (static_cast<size_t>(n) < bytes) {
    return absl::DataLossError(absl::StrCat("value-log segment ", s->path, " is cut short"));
  }
  const std::string_view value(buf.get() + kRecordHeaderBytes + where.hash_bytes,
                               where.value_bytes);
  if (value.size() >= 8 && GetU64(value.data() + value.size() - 8) != info->checksum) {
    return absl::DataLossError(absl::StrCat("value-log record at ", s->path, " page ", where.page,
                                            " does not end in its checksum"));
  }
  const char* data = buf.get();
  return LogValue{std::shared_ptr<const void>(buf, data), value};
}

std::optional<LogValue> ValueLog::Cached(const RecordLocation& where, uint64_t sequence) const {
  if (cache_ == nullptr) return std::nullopt;
  const CacheKey key(where);
  rocksdb::Cache::Handle* h = cache_->Lookup(key.slice());
  std::optional<LogValue> out;
  if (h != nullptr) {
    const auto* c = static_cast<const CachedValue*>(cache_->Value(h));
    // Another sequence: a record that a reader Remember'ed after an Erase raced with it.
    if (c->sequence == sequence && c->value.bytes.size() == where.value_bytes) out = c->value;
    cache_->Release(h);
  }
  return out;
}

void ValueLog::Remember(const RecordLocation& where, uint64_t sequence, const LogValue& value) {
  if (cache_ == nullptr) return;
  const CacheKey key(where);
  auto* c = new CachedValue{value, sequence};
  // Insert takes the entry even when it fails (it deletes it then).
  cache_->Insert(key.slice(), c, value.bytes.size(), &DeleteCachedValue).PermitUncheckedError();
}

ValueCacheStats ValueLog::CacheStats() const {
  ValueCacheStats out;
  if (cache_ == nullptr) return out;
  out.capacity_bytes = cache_->GetCapacity();
  out.bytes = cache_->GetUsage();
  return out;
}

void ValueLog::Erase(const RecordLocation& where) {
  if (cache_ != nullptr) cache_->Erase(CacheKey(where).slice());
  std::shared_ptr<Segment> s;
  bool drop = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = segments_.find(where.segment);
    if (it == segments_.end()) return;
    s = it->second;
    const uint64_t bytes = RecordBytes(where);
    if (s->live_records > 0) {
      s->live_records -= 1;
      s->live_bytes -= std::min(s->live_bytes, bytes);
      live_bytes_ -= std::min(live_bytes_, bytes);
    }
    drop = s->live_records == 0 && s != active_;
    if (drop) DropIfDead(s->number);
  }
  if (drop) return;  // the whole file went
  if (absl::Status st = Punch(*s, uint64_t{where.page} * kPageBytes, RecordBytes(where));
      !st.ok()) {
    spdlog::warn("value log: {} (the space comes back at the next start)",
                 std::string(st.message()));
  }
}

void ValueLog::DropIfDead(uint32_t number) {
  auto it = segments_.find(number);
  if (it == segments_.end()) return;
  Segment& s = *it->second;
  if (s.live_records != 0 || it->second == active_) return;
  if (::unlink(s.path.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("value log: cannot remove the empty segment {}: {}", s.path, std::strerror(errno));
    return;
  }
  s.unlinked = true;
  segments_.erase(it);  // readers holding it keep the descriptor until they finish
}

bool ValueLog::MarkLive(const RecordLocation& where) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = segments_.find(where.segment);
  if (it == segments_.end()) return false;
  Segment& s = *it->second;
  const uint64_t bytes = RecordBytes(where);
  // The file's length covers every record written into it (the pad is written too).
  if (uint64_t{where.page} * kPageBytes + bytes > s.tail || where.page == 0) return false;
  s.live_records += 1;
  s.live_bytes += bytes;
  live_bytes_ += bytes;
  s.live_extents.emplace_back(where.page, static_cast<uint32_t>(bytes / kPageBytes));
  return true;
}

uint64_t ValueLog::ReclaimGarbage() {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t freed = 0;
  std::vector<uint32_t> dead;
  for (auto& [number, s] : segments_) {
    struct stat st {};
    const uint64_t allocated =
        ::fstat(s->fd, &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
    if (s->live_records == 0 && s != active_) {
      dead.push_back(number);
      freed += allocated;
      continue;
    }
    // The header page and the live records' pages, and nothing else, should be allocated.
    if (allocated <= kPageBytes + s->live_bytes) {
      s->live_extents = {};
      continue;
    }
    std::sort(s->live_extents.begin(), s->live_extents.end());
    uint64_t from = kPageBytes;
    Segment& segment = *s;  // (a lambda cannot capture a structured binding before C++20)
    auto punch_to = [&](uint64_t to) {
      if (to > from) (void)Punch(segment, from, to - from);
    };
    for (const auto& [page, pages] : s->live_extents) {
      punch_to(uint64_t{page} * kPageBytes);
      from = std::max(from, (uint64_t{page} + pages) * kPageBytes);
    }
    punch_to(std::max(s->tail, from));
    s->live_extents = {};
    const uint64_t after =
        ::fstat(s->fd, &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : allocated;
    freed += allocated > after ? allocated - after : 0;
  }
  for (uint32_t number : dead) DropIfDead(number);
  return freed;
}

absl::Status ValueLog::ScanRecords(const std::function<absl::Status(const RecordInfo&)>& fn) const {
  std::vector<std::shared_ptr<Segment>> segments;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [number, s] : segments_) segments.push_back(s);
  }
  char head[kRecordHeaderBytes + kMaxHashBytes];
  for (const std::shared_ptr<Segment>& s : segments) {
    struct stat st {};
    if (::fstat(s->fd, &st) != 0) return IoError("cannot stat", s->path, errno);
    const auto size = static_cast<uint64_t>(st.st_size);
    uint64_t offset = kPageBytes;
    while (offset + kRecordHeaderBytes <= size) {
      // Skip deallocated stretches in one call instead of page by page.
      const off_t data = ::lseek(s->fd, static_cast<off_t>(offset), SEEK_DATA);
      if (data < 0) break;  // ENXIO: only holes from here to the end
      offset = (static_cast<uint64_t>(data) + kPageBytes - 1) / kPageBytes * kPageBytes;
      if (offset + kRecordHeaderBytes > size) break;
      const ssize_t n = ::pread(s->fd, head, sizeof(head), static_cast<off_t>(offset));
      if (n < static_cast<ssize_t>(kRecordHeaderBytes)) break;
      absl::StatusOr<RecordInfo> info = DecodeHeader(std::string_view(head, n));
      if (!info.ok()) {
        offset += kPageBytes;
        continue;
      }
      info->location.segment = s->number;
      info->location.page = static_cast<uint32_t>(offset / kPageBytes);
      const uint64_t bytes = RecordBytes(info->location);
      if (offset + kRecordHeaderBytes + info->location.hash_bytes + info->location.value_bytes >
          size) {
        break;  // cut short: the record's value is not all there
      }
      TURBOKV_RETURN_IF_ERROR(fn(*info));
      offset += bytes;
    }
  }
  return absl::OkStatus();
}

uint64_t ValueLog::AllocatedBytes() const {
  std::vector<std::shared_ptr<Segment>> segments;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [number, s] : segments_) segments.push_back(s);
  }
  uint64_t total = 0;
  for (const auto& s : segments) {
    struct stat st {};
    if (::fstat(s->fd, &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

uint64_t ValueLog::LiveBytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return live_bytes_ + segments_.size() * kPageBytes;
}

size_t ValueLog::SegmentCount() const {
  std::lock_guard<std::mutex> l(mu_);
  return segments_.size();
}

}  // namespace turbokv::server
