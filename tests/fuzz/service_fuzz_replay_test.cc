// Deterministic stand-in for the service fuzzer in every service build (gcc, CI): the committed
// seed corpus (tests/fuzz/service_corpus, inputs the fuzzer found to cover new paths) and
// seeded random inputs run through the same target and invariants (service_fuzz_target.h)
// against an in-process server. A violated invariant aborts the test.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "service_fuzz_target.h"

namespace turbokv::server::fuzz {
namespace {

TEST(ServiceFuzzReplayTest, SeedCorpusAndRandomSequencesKeepTheInvariants) {
  ServiceFuzzer& f = ServiceFuzzer::Get();
  int inputs = 0;
  std::error_code ec;
  std::vector<std::filesystem::path> seeds;
  for (const auto& e : std::filesystem::directory_iterator(TURBOKV_SERVICE_CORPUS, ec)) {
    seeds.push_back(e.path());
  }
  std::sort(seeds.begin(), seeds.end());
  for (const auto& p : seeds) {
    std::ifstream in(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    f.Run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++inputs;
  }
  std::mt19937_64 rng(10);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(16 + rng() % 240, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    f.Run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++inputs;
  }
  const ServiceFuzzer::Counts& c = f.counts();
  std::printf(
      "[fuzz] service replay: %zu corpus inputs, %d inputs in all: calls=%llu "
      "acked_blocks=%llu refused_blocks=%llu failed_streams=%llu blocks_checked=%llu "
      "misses=%llu\n",
      seeds.size(), inputs, static_cast<unsigned long long>(c.calls),
      static_cast<unsigned long long>(c.acked), static_cast<unsigned long long>(c.refused),
      static_cast<unsigned long long>(c.failed_streams), static_cast<unsigned long long>(c.checked),
      static_cast<unsigned long long>(c.misses));
  EXPECT_GT(c.acked, 0u);
  EXPECT_GT(c.checked, 0u);
  f.Shutdown();
}

}  // namespace
}  // namespace turbokv::server::fuzz
