// Helpers of the storage unit tests: random values that carry the packed-block trailer
// (xxHash3-64 of everything before it, little-endian), a matching verifier, a fake clock and a
// temporary directory.
#ifndef TURBOKV_TESTS_UNIT_STORAGE_TEST_UTIL_H_
#define TURBOKV_TESTS_UNIT_STORAGE_TEST_UTIL_H_

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/storage/clock.h"
#include "xxhash.h"

namespace turbokv::server::testing {

// `size` bytes (>= 16): random payload, then its xxHash3-64 (little-endian).
inline std::string MakeValue(size_t size, std::mt19937_64& rng) {
  std::string v(size - 8, '\0');
  for (char& c : v) c = static_cast<char>(rng());
  const uint64_t h = XXH3_64bits(v.data(), v.size());
  for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
  return v;
}

inline absl::Status VerifyTrailer(absl::Span<const uint8_t> v) {
  if (v.size() < 8) return absl::DataLossError("too short");
  uint64_t stored = 0;
  for (int i = 7; i >= 0; --i) stored = (stored << 8) | v[v.size() - 8 + i];
  if (XXH3_64bits(v.data(), v.size() - 8) != stored) return absl::DataLossError("checksum");
  return absl::OkStatus();
}

// A block hash of `bytes` bytes derived from `i`.
inline std::string HashOf(uint64_t i, size_t bytes = 16) {
  std::string h(bytes, '\0');
  for (size_t k = 0; k < bytes; ++k) h[k] = static_cast<char>((i >> (8 * (k % 8))) + k * 31);
  return h;
}

// Flips the byte at `offset` of the first copy of `value` found in a value-log segment under
// `data_dir`/values. False when no segment holds it.
inline bool FlipByteOfStoredValue(const std::string& data_dir, const std::string& value,
                                  size_t offset) {
  for (const auto& e : std::filesystem::directory_iterator(data_dir + "/values")) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t at = bytes.find(value);
    if (at == std::string::npos) continue;
    f.clear();
    f.seekp(static_cast<std::streamoff>(at + offset));
    const char flipped = static_cast<char>(bytes[at + offset] ^ 0x40);
    f.write(&flipped, 1);
    return f.good();
  }
  return false;
}

// Writes back and drops the page cache of every file in `dir`. False on tmpfs (its pages are
// the files themselves) or when a file cannot be opened.
inline bool DropFromPageCache(const std::string& dir) {
  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994;
  if (statfs(dir.c_str(), &fs) != 0 || fs.f_type == kTmpfsMagic) return false;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return true;
}

class FakeClock final : public Clock {
 public:
  int64_t NowSeconds() const override { return now.load(); }
  std::atomic<int64_t> now{1'700'000'000};
};

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("turbokv-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace turbokv::server::testing

#endif  // TURBOKV_TESTS_UNIT_STORAGE_TEST_UTIL_H_
