// Helpers of the fault suite (tests/fault): the real turbokv-server binary (ClusterNode, with
// per-test flags and data directory), the real C++ client, block data whose bytes are a
// function of the block's index (so any block read back can be checked byte for byte), and
// file damage (bit flips, truncation).
//
// Modes: TURBOKV_FAULT_MODE=long (or `fault_suite --long`) runs every loop longer (figures for
// docs/faults.md and the issue note); the default short mode is what CI runs.
#ifndef TURBOKV_TESTS_FAULT_FAULT_UTIL_H_
#define TURBOKV_TESTS_FAULT_FAULT_UTIL_H_

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster_test_node.h"
#include "gtest/gtest.h"
#include "turbokv/client/client.h"
#include "xxhash.h"

namespace turbokv::fault {

inline bool LongMode() {
  const char* m = std::getenv("TURBOKV_FAULT_MODE");
  return m != nullptr && std::string(m) == "long";
}

// A temporary directory removed at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& under = "") {
    std::random_device rd;
    const std::filesystem::path base =
        under.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(under);
    path_ = (base / ("turbokv-fault-" + std::to_string(rd()) + std::to_string(rd()))).string();
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The real server with the flags a test needs; skipped (GTEST_SKIP in the caller) when the
// binary is missing.
class Server {
 public:
  explicit Server(std::vector<std::string> flags, std::string data_dir = "")
      : node_(dir_.path(), Options(std::move(flags), std::move(data_dir))) {}
  ~Server() { node_.Kill(); }

  absl::Status Start() {
    client_.reset();
    absl::Status s = node_.Start();
    if (s.ok()) {
      client::ClientOptions o;
      o.max_attempts = 1;
      o.timeout = absl::Seconds(60);
      auto c = client::Client::Connect(node_.address(), o);
      if (!c.ok()) return c.status();
      client_ = *std::move(c);
    }
    return s;
  }
  void Kill() {
    client_.reset();
    node_.Kill();
  }
  void Stop() {
    client_.reset();
    node_.Stop();
  }
  client::Client& client() { return *client_; }
  std::string address() const { return node_.address(); }
  std::string data_dir() const { return node_.data_dir(); }
  testing::ClusterNode& node() { return node_; }
  std::string Log() const {
    std::ifstream in(node_.log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  static testing::ClusterNode::Options Options(std::vector<std::string> flags,
                                               std::string data_dir) {
    testing::ClusterNode::Options o;
    o.codec_threads = 2;
    o.log_level = "info";
    o.data_dir = std::move(data_dir);
    o.extra_args = std::move(flags);
    return o;
  }

  TempDir dir_;
  testing::ClusterNode node_;
  std::unique_ptr<client::Client> client_;
};

// fp16 [2 layers][2][16 tokens][2 heads][64] = 16 KiB raw; k4v4-g32 unless `preset` says.
inline client::NamespaceDescriptor SmallNamespace(const std::string& preset = "",
                                                  const std::string& model = "fault/model") {
  client::NamespaceDescriptor d;
  d.model = model;
  d.dtype = client::DType::kFloat16;
  d.num_layers = 2;
  d.num_kv_heads = 2;
  d.head_dim = 64;
  d.block_tokens = 16;
  d.codec.preset = preset;
  return d;
}

// Block i's hash and raw bytes: a pure function of (i, bytes), so a block read back is checked
// byte for byte without keeping it. Values are finite fp16 in about [-4, 4].
inline std::string HashOf(uint64_t i) {
  std::string h(16, '\0');
  const uint64_t a = XXH3_64bits(&i, 8), b = a * 0x9E3779B97F4A7C15ULL + i;
  std::memcpy(&h[0], &a, 8);
  std::memcpy(&h[8], &b, 8);
  return h;
}
inline std::string RawOf(uint64_t i, size_t bytes) {
  std::string out(bytes, '\0');
  std::mt19937_64 rng(i * 0x2545F4914F6CDD1DULL + 1);
  for (size_t k = 0; k + 1 < bytes; k += 2) {
    // sign, exponent 13..16 (0.25 .. 4), random mantissa: always finite.
    const uint64_t r = rng();
    const uint16_t h =
        static_cast<uint16_t>(((r & 1) << 15) | ((13 + ((r >> 1) & 3)) << 10) | ((r >> 3) & 0x3ff));
    std::memcpy(&out[k], &h, 2);
  }
  return out;
}

inline absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Files of the data directory whose names end with `ext` (".sst", ".blob", ".log"), or start
// with `ext` when it has no dot ("MANIFEST").
inline std::vector<std::string> FilesOf(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    const bool match = ext.front() == '.' ? f.path().extension() == ext : name.rfind(ext, 0) == 0;
    if (match && f.is_regular_file()) out.push_back(f.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Flips `bits` random bits of `path` in [begin, end) (end 0 = the file size). Returns the
// offsets flipped.
inline std::vector<uint64_t> FlipBits(const std::string& path, int bits, std::mt19937_64& rng,
                                      uint64_t begin = 0, uint64_t end = 0) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const uint64_t size = std::filesystem::file_size(path);
  if (end == 0 || end > size) end = size;
  std::vector<uint64_t> at;
  if (end <= begin) return at;
  for (int i = 0; i < bits; ++i) {
    const uint64_t off = begin + rng() % (end - begin);
    f.seekg(static_cast<std::streamoff>(off));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ (1 << (rng() % 8)));
    f.seekp(static_cast<std::streamoff>(off));
    f.write(&c, 1);
    at.push_back(off);
  }
  return at;
}

inline void Truncate(const std::string& path, uint64_t size) {
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(size)), 0) << path;
}

// Bytes a file occupies on disk (st_blocks: value-log segments are sparse, their length is
// not what they hold). 0 when it is gone.
inline uint64_t AllocatedBytes(const std::filesystem::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

// Allocated bytes of the regular files under `dir` (a data directory), without the disk-full
// RESERVE file: what `du` reports.
inline uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (f.is_regular_file(ec) && f.path().filename() != "RESERVE")
      total += AllocatedBytes(f.path());
  }
  return total;
}

}  // namespace turbokv::fault

#endif  // TURBOKV_TESTS_FAULT_FAULT_UTIL_H_
