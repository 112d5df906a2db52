#include "server/storage/rocksdb_crc32c.h"

#include <algorithm>
#include <memory>

#include "spdlog/spdlog.h"

#if TURBOKV_ROCKSDB_CRC32C_WRAPPED
#include "isa-l/crc.h"
#endif

// RocksDB's own declaration (util/crc32c.h, not among the headers Debian installs).
namespace rocksdb::crc32c {
uint32_t Extend(uint32_t init_crc, const char* data, size_t n);
}  // namespace rocksdb::crc32c

#if TURBOKV_ROCKSDB_CRC32C_WRAPPED
// ld --wrap=SYMBOL sends undefined references to SYMBOL to __wrap_SYMBOL and lets
// __real_SYMBOL name the original (the names are the linker's convention, hence the reserved
// identifiers). SYMBOL is rocksdb::crc32c::Extend(unsigned int, char const*, unsigned long).
// NOLINTBEGIN(bugprone-reserved-identifier,readability-identifier-naming)
extern "C" uint32_t __real__ZN7rocksdb6crc32c6ExtendEjPKcm(uint32_t crc, const char* data,
                                                           size_t n);
extern "C" uint32_t __wrap__ZN7rocksdb6crc32c6ExtendEjPKcm(uint32_t crc, const char* data,
                                                           size_t n);
// NOLINTEND(bugprone-reserved-identifier,readability-identifier-naming)
#endif

namespace turbokv::server {
namespace {

struct Choice {
  Crc32cExtendFn extend;
  std::string_view name;
};

#if TURBOKV_ROCKSDB_CRC32C_WRAPPED
uint32_t RocksDbOwn(uint32_t crc, const char* data, size_t n) {
  return __real__ZN7rocksdb6crc32c6ExtendEjPKcm(crc, data, n);
}

// ISA-L's CRC32C takes an int length and neither inverts its input nor its result (RFC 3720's
// pre- and post-inversion are the caller's); rocksdb::crc32c::Extend does both.
uint32_t IsalExtend(uint32_t crc, const char* data, size_t n) {
  uint32_t c = ~crc;
  while (n > 0) {
    const size_t len = std::min<size_t>(n, size_t{1} << 30);
    c = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data)),
                    static_cast<int>(len), c);
    data += len;
    n -= len;
  }
  return ~c;
}

Choice Choose() {
  // ISA-L dispatches on the CPU itself; without these it would run its byte-wise table code,
  // slower than RocksDB's own.
  if (!__builtin_cpu_supports("sse4.2") || !__builtin_cpu_supports("pclmul")) {
    return {&RocksDbOwn, "rocksdb"};
  }
  if (!Crc32cAgrees(&IsalExtend, &RocksDbOwn)) {
    spdlog::error(
        "ISA-L's CRC32C disagrees with RocksDB's own on the self-test: RocksDB keeps "
        "its software CRC32C");
    return {&RocksDbOwn, "rocksdb"};
  }
  return {&IsalExtend, "isa-l"};
}
#else
Choice Choose() { return {&rocksdb::crc32c::Extend, "rocksdb"}; }
#endif

const Choice& Chosen() {
  static const Choice choice = Choose();
  return choice;
}

}  // namespace

bool Crc32cAgrees(Crc32cExtendFn candidate, Crc32cExtendFn reference) {
  constexpr size_t kLarge = (size_t{1} << 20) + 7;
  constexpr size_t kAlign = 16;
  auto buf = std::make_unique<char[]>(kLarge + kAlign);
  uint64_t x = 0x9e3779b97f4a7c15u;  // splitmix64: fixed, varied bytes
  for (size_t i = 0; i < kLarge + kAlign; ++i) {
    x += 0x9e3779b97f4a7c15u;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    buf[i] = static_cast<char>(z ^ (z >> 31));
  }
  const uint32_t seeds[] = {0, 0xffffffffu, 0x12345678u};
  for (uint32_t seed : seeds) {
    for (size_t align = 0; align < kAlign; ++align) {
      for (size_t n = 0; n <= 300; ++n) {
        if (candidate(seed, buf.get() + align, n) != reference(seed, buf.get() + align, n)) {
          return false;
        }
      }
    }
    for (size_t n : {size_t{1021}, size_t{4096}, size_t{65539}, kLarge}) {
      for (size_t align : {size_t{0}, size_t{3}, size_t{8}}) {
        if (candidate(seed, buf.get() + align, n) != reference(seed, buf.get() + align, n)) {
          return false;
        }
      }
    }
  }
  // Chained: extending in two pieces equals one call.
  const uint32_t head = candidate(0, buf.get(), 1000);
  return candidate(head, buf.get() + 1000, 5000) == reference(0, buf.get(), 6000);
}

std::string_view RocksDbCrc32cImplementation() { return Chosen().name; }

uint32_t RocksDbCrc32cExtend(uint32_t crc, std::string_view data) {
  return rocksdb::crc32c::Extend(crc, data.data(), data.size());
}

}  // namespace turbokv::server

#if TURBOKV_ROCKSDB_CRC32C_WRAPPED
// NOLINTNEXTLINE(bugprone-reserved-identifier,readability-identifier-naming)
extern "C" uint32_t __wrap__ZN7rocksdb6crc32c6ExtendEjPKcm(uint32_t crc, const char* data,
                                                           size_t n) {
  return turbokv::server::Chosen().extend(crc, data, n);
}
#endif
