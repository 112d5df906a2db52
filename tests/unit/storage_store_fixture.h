// The fixture of the BlockStore tests (storage_block_store_test.cc, storage_repair_test.cc): a
// real RocksDB in a fresh temporary directory, values checked by their packed-block trailer, a
// fake clock, a seeded generator, and one-block helpers over BlockStore's span API.
#ifndef TURBOKV_TESTS_UNIT_STORAGE_STORE_FIXTURE_H_
#define TURBOKV_TESTS_UNIT_STORAGE_STORE_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "server/storage/block_store.h"
#include "storage_test_util.h"

namespace turbokv::server::testing {

class StoreFixture : public ::testing::Test {
 protected:
  explicit StoreFixture(uint64_t seed) : rng_(seed) {}

  // This fixture's directory, no maintenance thread (tests run passes themselves), every
  // other field at its default.
  StorageOptions Options() const {
    StorageOptions o;
    o.data_dir = dir_.path();
    o.maintenance_interval_ms = 0;
    return o;
  }
  absl::StatusOr<std::unique_ptr<BlockStore>> OpenStore(const StorageOptions& o) {
    return BlockStore::Open(o, VerifyTrailer, &clock_);
  }

  // Registers namespace `id` ("descriptor of <id>").
  static void PutNamespace(BlockStore& s, uint64_t id, uint32_t ttl_seconds = 0,
                           uint64_t logical_block_bytes = 0) {
    NamespaceRecord r;
    r.id = id;
    r.descriptor = "descriptor of " + std::to_string(id);
    r.ttl_seconds = ttl_seconds;
    r.logical_block_bytes = logical_block_bytes;
    ASSERT_TRUE(s.PutNamespace(r).ok());
  }
  static absl::Status Put(BlockStore& s, uint64_t ns, const std::string& hash,
                          const std::string& value) {
    BlockStore::BlockWrite w{hash, value};
    return s.PutBlocks(ns, absl::MakeConstSpan(&w, 1))[0];
  }
  // The block's bytes; nullopt when missing (or the call failed, which is a test failure).
  static std::optional<std::string> Get(BlockStore& s, uint64_t ns, const std::string& hash) {
    std::string_view h = hash;
    auto r = s.GetBlocks(ns, absl::MakeConstSpan(&h, 1));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)[0] : std::nullopt;
  }

  TempDir dir_;
  FakeClock clock_;
  std::mt19937_64 rng_;
};

}  // namespace turbokv::server::testing

#endif  // TURBOKV_TESTS_UNIT_STORAGE_STORE_FIXTURE_H_
