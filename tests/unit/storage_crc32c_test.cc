// RocksDB's CRC32C as RocksDB calls it (server/storage/rocksdb_crc32c.h): known answers, a
// bitwise reference, and the self-test that guards the hardware path.
#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "server/storage/rocksdb_crc32c.h"

namespace turbokv::server {
namespace {

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) one bit at a time, as RFC 3720 B.4
// defines it: the slow reference everything else is checked against.
uint32_t BitwiseExtend(uint32_t crc, const char* data, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= static_cast<uint8_t>(data[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t Value(std::string_view s) { return RocksDbCrc32cExtend(0, s); }

TEST(RocksDbCrc32c, KnownAnswers) {
  // RFC 3720, B.4 (iSCSI CRC32C examples), and the usual check value of "123456789".
  EXPECT_EQ(Value(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Value(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(Value(up), 0x46DD794Eu);
  EXPECT_EQ(Value(down), 0x113FDB5Cu);
  EXPECT_EQ(Value("123456789"), 0xE3069283u);
  EXPECT_EQ(Value(""), 0u);
}

TEST(RocksDbCrc32c, MatchesBitwiseReferenceAtManyLengthsAndOffsets) {
  std::mt19937 rng(7);
  std::string buf((1 << 18) + 64, '\0');
  for (char& c : buf) c = static_cast<char>(rng());
  for (size_t n : {0,   1,   2,   7,   8,   9,    15,   16,   17,   31,   63,   64,    65,     127,
                   128, 129, 255, 256, 257, 1000, 1023, 1024, 4095, 4096, 4097, 65536, 1 << 18}) {
    for (size_t offset : {0, 1, 5, 13}) {
      const std::string_view piece(buf.data() + offset, n);
      EXPECT_EQ(RocksDbCrc32cExtend(0, piece), BitwiseExtend(0, piece.data(), n))
          << n << " bytes at offset " << offset;
      EXPECT_EQ(RocksDbCrc32cExtend(0xdeadbeef, piece), BitwiseExtend(0xdeadbeef, piece.data(), n))
          << n << " bytes at offset " << offset << ", seeded";
    }
  }
  // Extending piece by piece equals one call (how RocksDB checksums a record's header + body).
  const std::string_view all(buf.data(), 100000);
  uint32_t crc = 0;
  for (size_t pos = 0; pos < all.size(); pos += 7777)
    crc = RocksDbCrc32cExtend(crc, all.substr(pos, 7777));
  EXPECT_EQ(crc, BitwiseExtend(0, all.data(), all.size()));
}

TEST(RocksDbCrc32c, RunsOnIsaLWhereTheBuildWrapsRocksDbAndTheCpuHasTheInstructions) {
#if defined(__SANITIZE_THREAD__)
  EXPECT_EQ(RocksDbCrc32cImplementation(), "rocksdb");  // shared librocksdb.so, not wrapped
#else
  if (!__builtin_cpu_supports("sse4.2") || !__builtin_cpu_supports("pclmul")) {
    EXPECT_EQ(RocksDbCrc32cImplementation(), "rocksdb");
  } else {
    EXPECT_EQ(RocksDbCrc32cImplementation(), "isa-l");
  }
#endif
}

uint32_t WrongAt257(uint32_t crc, const char* data, size_t n) {
  const uint32_t c = BitwiseExtend(crc, data, n);
  return n == 257 ? c ^ 1u : c;
}
uint32_t WrongWhenMisaligned(uint32_t crc, const char* data, size_t n) {
  const uint32_t c = BitwiseExtend(crc, data, n);
  return reinterpret_cast<uintptr_t>(data) % 8 == 5 && n > 64 ? c + 1 : c;
}
uint32_t WrongSeeded(uint32_t crc, const char* data, size_t n) {
  return BitwiseExtend(crc == 0 ? 0 : crc ^ 0x100u, data, n);
}
uint32_t WrongAboveOneMiB(uint32_t crc, const char* data, size_t n) {
  return n > (size_t{1} << 20) ? ~BitwiseExtend(crc, data, n) : BitwiseExtend(crc, data, n);
}

TEST(RocksDbCrc32c, SelfTestAcceptsEqualFunctionsAndRejectsEachKindOfDifference) {
  EXPECT_TRUE(Crc32cAgrees(&BitwiseExtend, &BitwiseExtend));
  EXPECT_FALSE(Crc32cAgrees(&WrongAt257, &BitwiseExtend));
  EXPECT_FALSE(Crc32cAgrees(&WrongWhenMisaligned, &BitwiseExtend));
  EXPECT_FALSE(Crc32cAgrees(&WrongSeeded, &BitwiseExtend));
  EXPECT_FALSE(Crc32cAgrees(&WrongAboveOneMiB, &BitwiseExtend));
}

}  // namespace
}  // namespace turbokv::server
