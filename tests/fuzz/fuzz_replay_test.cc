// Deterministic stand-in for the fuzzer in every build (and under ASan/UBSan in CI): valid
// blocks of several codecs, then truncations, bit flips, byte overwrites and header-field
// mutations with the checksum recomputed (so the parser, not the checksum, must catch them).
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "packed_block_fuzz_target.h"
#include "xxhash.h"

namespace turbokv::codec {
namespace {

std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  const std::pair<const char*, BlockShape> cases[] = {
      {"k4v4-g32", {2, 3, 2, 64, DType::kFloat16}},
      {"k3v2-g32-qjl", {1, 2, 1, 32, DType::kBFloat16}},
      {"k8v4", {3, 1, 1, 16, DType::kFloat32}},
      {"raw", {1, 2, 1, 8, DType::kFloat16}},
  };
  for (const auto& [preset, shape] : cases) {
    CodecSpec spec = *PresetSpec(preset, shape.head_dim);
    spec.protected_last_layers = shape.num_layers > 1 ? 1 : 0;
    BlockCodec c = *BlockCodec::Create(shape, spec, 7);
    std::vector<uint8_t> packed(c.packed_bytes());
    EXPECT_TRUE(c.Encode(testing_util::RandomBlock(shape, 1), absl::MakeSpan(packed)).ok());
    seeds.push_back(packed);
  }
  // Wide scales (FORMAT.md): fp32 groups beyond fp16's range, up to near the fp32 maximum.
  const BlockShape shape{2, 2, 1, 32, DType::kFloat32};
  BlockCodec c = *BlockCodec::Create(shape, *PresetSpec("k3v2-g32-qjl", 32), 7);
  std::vector<uint8_t> raw = testing_util::RandomBlock(shape, 2);
  for (size_t i = 0; i < shape.num_values(); i += 3) {
    testing_util::StoreAs(shape.dtype, raw, i,
                          (i % 2 ? 1e4f : -3e38f) * (static_cast<float>(i % 7 + 1) / 7));
  }
  std::vector<uint8_t> packed(c.packed_bytes());
  const absl::Status s = c.Encode(raw, absl::MakeSpan(packed));
  EXPECT_TRUE(s.ok()) << s;
  seeds.push_back(packed);
  // 5- and 6-bit sections (issue 12's presets), after the older seeds so their files keep
  // their names.
  const std::pair<const char*, BlockShape> wide_bits[] = {
      {"k5v4", {2, 3, 1, 64, DType::kFloat16}},
      {"k6v5", {1, 2, 2, 32, DType::kBFloat16}},
  };
  for (const auto& [preset, shape] : wide_bits) {
    BlockCodec w = *BlockCodec::Create(shape, *PresetSpec(preset, shape.head_dim), 7);
    std::vector<uint8_t> p(w.packed_bytes());
    EXPECT_TRUE(w.Encode(testing_util::RandomBlock(shape, 3), absl::MakeSpan(p)).ok());
    seeds.push_back(p);
  }
  return seeds;
}

void Reseal(std::vector<uint8_t>& b) {
  if (b.size() < 8) return;
  const uint64_t sum = XXH3_64bits(b.data(), b.size() - 8);
  std::memcpy(b.data() + b.size() - 8, &sum, 8);
}

// TURBOKV_WRITE_FUZZ_SEEDS=tests/fuzz/corpus build/bin/codec_fuzz_replay_test writes the seed
// blocks as the libFuzzer starting corpus (committed under tests/fuzz/corpus).
TEST(FuzzReplayTest, WritesSeedCorpusOnRequest) {
  const char* dir = std::getenv("TURBOKV_WRITE_FUZZ_SEEDS");
  if (dir == nullptr) GTEST_SKIP() << "set TURBOKV_WRITE_FUZZ_SEEDS=DIR to write the corpus";
  int i = 0;
  for (const std::vector<uint8_t>& seed : Seeds()) {
    std::ofstream(std::string(dir) + "/seed-" + std::to_string(i++) + ".tkvb", std::ios::binary)
        .write(reinterpret_cast<const char*>(seed.data()),
               static_cast<std::streamsize>(seed.size()));
  }
}

TEST(FuzzReplayTest, MutatedBlocksNeverCrash) {
  std::mt19937 rng(2024);
  int parsed_ok = 0, total = 0;
  for (const std::vector<uint8_t>& seed : Seeds()) {
    fuzz::FuzzPackedBlock(seed.data(), seed.size());
    for (int i = 0; i < 1500; ++i) {
      std::vector<uint8_t> b = seed;
      switch (rng() % 5) {
        case 0:
          b.resize(rng() % (b.size() + 1));
          break;
        case 1:
          b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 2:
          b[rng() % std::min<size_t>(b.size(), 96)] = static_cast<uint8_t>(rng());
          Reseal(b);
          break;
        case 3:
          for (int k = 0; k < 4; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
          Reseal(b);
          break;
        case 4:
          b.insert(b.begin() + rng() % b.size(), static_cast<uint8_t>(rng()));
          Reseal(b);
          break;
      }
      fuzz::FuzzPackedBlock(b.data(), b.size());
      parsed_ok += ParsePackedBlock(b).ok();
      ++total;
    }
  }
  // Most mutations must be rejected; some (seeds, benign flips in payload) still parse.
  EXPECT_GT(parsed_ok, 0);
  EXPECT_LT(parsed_ok, total);
}

}  // namespace
}  // namespace turbokv::codec
