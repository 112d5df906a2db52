#include "server/storage/blob_file_reader.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/storage/rocksdb_crc32c.h"

namespace turbokv::server {
namespace {

constexpr uint32_t kBlobMagic = 0x00248f37;
constexpr size_t kHeaderBytes = 30;
constexpr size_t kRecordHeaderBytes = 32;
constexpr size_t kFooterBytes = 32;
// Keys are 8-byte namespace id + 8..32-byte hash; anything else is not a block of ours.
constexpr uint64_t kMaxKeyBytes = 1024;
constexpr uint64_t kMaxValueBytes = uint64_t{4} << 30;

// RocksDB's masked CRC32C (RocksDbCrc32cExtend: RocksDB's own, or ISA-L's where wrapped).
uint32_t MaskedCrc32c(const char* data, size_t n) {
  const uint32_t crc = RocksDbCrc32cExtend(0, std::string_view(data, n));
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint32_t Fixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t Fixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

absl::Status ScanBlobFile(const std::string& path, const BlobRecordFn& fn, BlobFileScan* scan) {
  *scan = BlobFileScan();
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return absl::UnavailableError(absl::StrCat("cannot read blob file ", path));
  char header[kHeaderBytes];
  if (size < kHeaderBytes || !in.read(header, kHeaderBytes) || Fixed32(header) != kBlobMagic ||
      Fixed32(header + 4) != 1) {
    return absl::DataLossError(absl::StrCat("blob file ", path, " has no valid header"));
  }
  scan->column_family_id = Fixed32(header + 8);
  const bool compressed = header[13] != 0;
  uint64_t at = kHeaderBytes;
  std::vector<char> body;
  while (at + kRecordHeaderBytes <= size) {
    char rh[kRecordHeaderBytes];
    if (!in.read(rh, kRecordHeaderBytes)) break;
    if (size - at == kFooterBytes && Fixed32(rh) == kBlobMagic &&
        MaskedCrc32c(rh, kFooterBytes - 4) == Fixed32(rh + 28)) {
      scan->complete = true;
      break;
    }
    if (MaskedCrc32c(rh, 24) != Fixed32(rh + 24)) break;
    const uint64_t key_bytes = Fixed64(rh);
    const uint64_t value_bytes = Fixed64(rh + 8);
    if (key_bytes > kMaxKeyBytes || value_bytes > kMaxValueBytes ||
        at + kRecordHeaderBytes + key_bytes + value_bytes > size) {
      break;  // cut short inside this record
    }
    body.resize(key_bytes + value_bytes);
    if (!in.read(body.data(), static_cast<std::streamsize>(body.size()))) break;
    at += kRecordHeaderBytes + body.size();
    if (compressed || MaskedCrc32c(body.data(), body.size()) != Fixed32(rh + 28)) {
      ++scan->bad_records;
      continue;
    }
    ++scan->records;
    fn(std::string_view(body.data(), key_bytes),
       std::string_view(body.data() + key_bytes, value_bytes));
  }
  return absl::OkStatus();
}

}  // namespace turbokv::server
