// RocksDB's CRC32C on the CPU's CRC32 / carry-less multiply instructions. Internal to
// server/storage.
//
// RocksDB checksums every WAL record and every blob record with CRC32C
// (rocksdb::crc32c::Extend, util/crc32c.cc). Debian's librocksdb is built portable, without
// SSE4.2, so that function is a table-driven software loop (about 1.2 GB/s here): a quarter of
// the server's CPU on a put of 2 MiB blocks, whose packed value is checksummed twice (the WAL
// write, the blob file at flush).
//
// The mechanism (server/CMakeLists.txt): the server links Debian's static librocksdb.a with
// `ld --wrap=<rocksdb::crc32c::Extend>`, so every call RocksDB makes to it from its other
// objects lands in this file's wrapper instead. The wrapper calls ISA-L's crc32_iscsi (the
// same Castagnoli polynomial; ISA-L picks SSE4.2, PCLMULQDQ or AVX-512 VPCLMULQDQ code at run
// time) once, on its first call, a self-test has found ISA-L's results equal to RocksDB's own
// (the wrapped original) on a set of lengths, alignments and seeds; otherwise (or on a CPU
// where ISA-L's own dispatch falls back to its table code) every call goes to RocksDB's own.
// The bytes RocksDB writes are the same either way, so data directories move freely between
// builds. A ThreadSanitizer build links the shared librocksdb.so and is not wrapped.
#ifndef TURBOKV_SERVER_STORAGE_ROCKSDB_CRC32C_H_
#define TURBOKV_SERVER_STORAGE_ROCKSDB_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace turbokv::server {

// What RocksDB's CRC32C runs on: "isa-l" (the wrapper, self-tested), "rocksdb" (its own code:
// not wrapped in this build, or the self-test failed). Runs the self-test if no CRC was taken
// yet. Thread-safe.
std::string_view RocksDbCrc32cImplementation();

// RocksDB's CRC32C entry point as RocksDB itself calls it (through the wrapper when there is
// one): the CRC32C of `data` continuing from `crc` (0 to start), unmasked, as
// rocksdb::crc32c::Extend. Thread-safe.
uint32_t RocksDbCrc32cExtend(uint32_t crc, std::string_view data);

// The signature of a CRC32C-extend function (rocksdb::crc32c::Extend's).
using Crc32cExtendFn = uint32_t (*)(uint32_t crc, const char* data, size_t n);

// True when `candidate` returns what `reference` returns on every input of the self-test:
// lengths 0..300 and a few of up to 1 MiB + 7, at every alignment of 0..15, from several
// seeds, including the empty and the RFC 3720 (B.4) vectors. Exposed for its test.
bool Crc32cAgrees(Crc32cExtendFn candidate, Crc32cExtendFn reference);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_ROCKSDB_CRC32C_H_
