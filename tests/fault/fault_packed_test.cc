// Poisoned packed blocks (issue 10, item 4): a PACKED put must be checked as strictly as a RAW
// one. A block whose checksum verifies but whose fp16 scales are Inf/NaN/negative, or whose
// QJL residual norm or plain (fp16/raw) values are non-finite, is INVALID_ARGUMENT and never
// stored; GetBlocks RAW never serves non-finite values.
#include <cmath>
#include <cstring>

#include "fault_util.h"
#include "turbokv/codec/block_codec.h"

namespace turbokv::fault {
namespace {

using client::Encoding;

void Reseal(std::string& p) {
  const uint64_t sum = XXH3_64bits(p.data(), p.size() - 8);
  std::memcpy(&p[p.size() - 8], &sum, 8);
}

// Offset of section s (2 * layer + kv) of a packed block.
size_t SectionAt(const std::string& packed, int s) {
  auto info = codec::ParsePackedBlock(Bytes(packed));
  EXPECT_TRUE(info.ok()) << info.status();
  size_t at = info->layer_offsets[s / 2];
  if (s % 2 == 1) {
    at += codec::SectionBytes(info->layers[s / 2].key, info->shape.vectors_per_section(),
                              info->shape.head_dim, info->shape.dtype);
  }
  return at;
}

bool AllFinite(const std::string& fp16) {
  for (size_t i = 0; i + 1 < fp16.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &fp16[i], 2);
    if ((h & 0x7C00) == 0x7C00) return false;
  }
  return true;
}

class PackedValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(std::vector<std::string>{});
    absl::Status s = server_->Start();
    if (absl::IsNotFound(s)) GTEST_SKIP() << s;
    ASSERT_TRUE(s.ok()) << s;
  }

  // Registers `preset`, stores block 1 RAW and returns its packed form (as the server encoded
  // it) and the namespace id.
  std::pair<uint64_t, std::string> PackedBlock(const std::string& preset) {
    client::Client& c = server_->client();
    auto ns = c.RegisterNamespace(SmallNamespace(preset));
    EXPECT_TRUE(ns.ok()) << ns.status();
    const std::string raw = RawOf(1, ns->raw_block_bytes);
    const std::vector<std::string> hashes = {HashOf(1)};
    const std::vector<absl::Span<const uint8_t>> blocks = {Bytes(raw)};
    auto put = c.PutBlocks(ns->namespace_id, hashes, blocks);
    EXPECT_TRUE(put.ok() && (*put)[0].status.ok());
    client::GetOptions packed;
    packed.encoding = Encoding::kPacked;
    auto got = c.GetBlocks(ns->namespace_id, hashes, packed);
    EXPECT_TRUE(got.ok() && got->blocks[0].has_value());
    return {ns->namespace_id, *got->blocks[0]};
  }

  // Puts `packed` (resealed) PACKED under a new hash: expects INVALID_ARGUMENT naming `what`,
  // and that nothing was stored.
  void ExpectRejected(uint64_t ns, std::string packed, const std::string& what, uint64_t i) {
    Reseal(packed);
    client::Client& c = server_->client();
    const std::vector<std::string> hashes = {HashOf(i)};
    const std::vector<absl::Span<const uint8_t>> blocks = {Bytes(packed)};
    auto put = c.PutBlocks(ns, hashes, blocks, Encoding::kPacked);
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ((*put)[0].status.code(), absl::StatusCode::kInvalidArgument) << (*put)[0].status;
    EXPECT_NE((*put)[0].status.message().find(what), std::string::npos) << (*put)[0].status;
    auto raw = c.GetBlocks(ns, hashes);
    ASSERT_TRUE(raw.ok()) << raw.status();
    EXPECT_FALSE(raw->blocks[0].has_value()) << "a rejected block was stored";
    if (raw->blocks[0].has_value()) {
      EXPECT_TRUE(AllFinite(*raw->blocks[0])) << "GetBlocks RAW served non-finite values";
    }
  }

  std::unique_ptr<Server> server_;
};

TEST_F(PackedValidation, NonFiniteOrNegativeScalesAreRejected) {
  auto [ns, good] = PackedBlock("k4v4-g32");
  uint64_t i = 100;
  // fp16 Inf and NaN; wide scales (sign bit set, FORMAT.md) whose bf16 is Inf or NaN.
  for (uint16_t bad : {uint16_t{0x7C00}, uint16_t{0xFF80}, uint16_t{0x7E00}, uint16_t{0xFFC0}}) {
    for (int section : {0, 3}) {
      std::string p = good;
      std::memcpy(&p[SectionAt(p, section) + 2 * 5], &bad, 2);
      ExpectRejected(ns, p, "scale", ++i);
    }
  }
  // The unmodified block is accepted (the same bytes under another hash).
  const std::vector<std::string> hashes = {HashOf(99)};
  const std::vector<absl::Span<const uint8_t>> blocks = {Bytes(good)};
  auto put = server_->client().PutBlocks(ns, hashes, blocks, Encoding::kPacked);
  ASSERT_TRUE(put.ok());
  EXPECT_TRUE((*put)[0].status.ok()) << (*put)[0].status;
}

TEST_F(PackedValidation, BadQjlResidualNormsAreRejected) {
  auto [ns, good] = PackedBlock("k3v2-g32-qjl");
  auto info = codec::ParsePackedBlock(Bytes(good));
  ASSERT_TRUE(info.ok());
  // Find a QJL section: residual norms follow the scales.
  for (int s = 0; s < 2 * info->shape.num_layers; ++s) {
    const codec::SectionCodec& sc =
        s % 2 == 0 ? info->layers[s / 2].key : info->layers[s / 2].value;
    if (!sc.qjl) continue;
    const size_t groups = info->shape.vectors_per_section() * info->shape.head_dim / sc.group_size;
    uint64_t i = 200 + 10 * s;
    for (uint16_t bad : {uint16_t{0x7C00}, uint16_t{0x7E00}, uint16_t{0x4400}}) {
      std::string p = good;
      std::memcpy(&p[SectionAt(p, s) + 2 * groups + 2 * 3], &bad, 2);
      ExpectRejected(ns, p, "QJL residual norm", ++i);
    }
    return;
  }
  FAIL() << "preset k3v2-g32-qjl has no QJL section";
}

TEST_F(PackedValidation, NonFinitePlainValuesAreRejected) {
  // Raw sections carry the source values verbatim.
  auto [ns, good] = PackedBlock("raw");
  uint64_t i = 300;
  for (uint16_t bad : {uint16_t{0x7C00}, uint16_t{0x7E00}}) {
    std::string p = good;
    std::memcpy(&p[SectionAt(p, 2) + 2 * 77], &bad, 2);
    ExpectRejected(ns, p, "non-finite", ++i);
  }
}

}  // namespace
}  // namespace turbokv::fault
