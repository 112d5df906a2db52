// Packed block format v1: a golden block, and a parser that rejects every damaged input.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "codec_test_util.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "xxhash.h"

namespace turbokv::codec {
namespace {

// The worked example of kernels/FORMAT.md: 2 layers, 2 tokens, 1 KV head, head_dim 16, fp16,
// K 2-bit + QJL g = 8, V 3-bit g = 16, layer 1 protected at 8 bits, namespace id
// 0x1122334455667788, values x[l][kv][t][d] = (l + 1) * (kv ? -1 : 1) * (t + 1) * (d - 7.5) / 8.
BlockCodec ExampleCodec() {
  CodecSpec spec;
  spec.key = {2, 8, true};
  spec.value = {3, 16, false};
  spec.protected_last_layers = 1;
  absl::StatusOr<BlockCodec> c =
      BlockCodec::Create({2, 2, 1, 16, DType::kFloat16}, spec, 0x1122334455667788ULL);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

std::vector<uint8_t> ExampleRaw() {
  const BlockShape s{2, 2, 1, 16, DType::kFloat16};
  std::vector<uint8_t> raw(s.raw_bytes());
  size_t i = 0;
  for (int l = 0; l < 2; ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int t = 0; t < 2; ++t)
        for (int d = 0; d < 16; ++d)
          testing_util::StoreAs(DType::kFloat16, raw, i++,
                                (l + 1) * (kv ? -1.0f : 1.0f) * (t + 1) * (d - 7.5f) / 8.0f);
  return raw;
}

std::vector<uint8_t> ExamplePacked() {
  const BlockCodec c = ExampleCodec();
  std::vector<uint8_t> packed(c.packed_bytes());
  absl::Status s = c.Encode(ExampleRaw(), absl::MakeSpan(packed));
  EXPECT_TRUE(s.ok()) << s;
  return packed;
}

TEST(FormatTest, GoldenBlock) {
  // Any change here is a format change: bump format_version and document it in FORMAT.md.
  const std::string kGolden =
      "544b564201000100887766554433221131766b6f6b727574316b7275746c6a710200020001001000"
      "0108000001000283030400004c00000002830304080408044c00000078000000c0000000e03dd93d"
      "e041d9413b34e0343b34e034590806ac590806ac3ab53ab586408644db6393ef565adb6393ef565a"
      "994499485b83556f0e9d8a6f04627590a46275905b83556f0e9d8a6f04627590a46275909d449d48"
      "43aabcbcb097689d75758a8a28e3d7d743aabcbcb097689d75758a8a28e3d7d7b9692331ed25d311";
  const std::vector<uint8_t> packed = ExamplePacked();
  EXPECT_EQ(absl::BytesToHexString(std::string(packed.begin(), packed.end())), kGolden);
}

// 5- and 6-bit sections (section codec bits 5 and 6, FORMAT.md): the example's values with
// K 5-bit g = 16 and V 6-bit g = 8, no protected layer.
TEST(FormatTest, GoldenBlockFiveAndSixBits) {
  CodecSpec spec;
  spec.key = {5, 16, false};
  spec.value = {6, 8, false};
  absl::StatusOr<BlockCodec> c =
      BlockCodec::Create({2, 2, 1, 16, DType::kFloat16}, spec, 0x1122334455667788ULL);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint8_t> packed(c->packed_bytes());
  ASSERT_TRUE(c->Encode(ExampleRaw(), absl::MakeSpan(packed)).ok());
  const std::string kGolden =
      "544b564201000100887766554433221131766b6f6b727574316b7275746c6a710200020001001000"
      "0100000000000504060300004c00000005040603050406034c00000084000000bc000000ac40ac44"
      "511e33f462a74a09d948511e33f462a74a09d948a83e953ea84295422e093f34ed6e09664fa73bb9"
      "2e093f34ed6e09664fa73bb9b344b3480baa16666c80394999930baa16666c80394999939442a342"
      "9446a34692d9b6d7ddd6569aa6f8b34c92d9b6d7ddd6569aa6f8b34cbe82a95d7d85203b";
  EXPECT_EQ(absl::BytesToHexString(std::string(packed.begin(), packed.end())), kGolden);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa != CpuIsa::kScalar && DetectCpuIsa() < isa) continue;
    std::vector<uint8_t> again(c->packed_bytes());
    ASSERT_TRUE(c->Encode(ExampleRaw(), absl::MakeSpan(again), isa).ok());
    EXPECT_EQ(again, packed) << static_cast<int>(isa);
  }
}

TEST(FormatTest, ParsesItsOwnHeader) {
  const std::vector<uint8_t> packed = ExamplePacked();
  absl::StatusOr<PackedBlockInfo> info = ParsePackedBlock(packed);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->format_version, 1);
  EXPECT_EQ(info->namespace_id, 0x1122334455667788ULL);
  EXPECT_EQ(info->shape.num_layers, 2);
  EXPECT_EQ(info->shape.head_dim, 16);
  EXPECT_EQ(info->layers[0].key.bits, 2);
  EXPECT_TRUE(info->layers[0].key.qjl);
  EXPECT_EQ(info->layers[1].key.bits, 8);
  EXPECT_EQ(info->layers[1].key.group_size, 16);
  EXPECT_EQ(info->total_bytes, packed.size());
  EXPECT_TRUE(VerifyPackedChecksum(packed).ok());
  absl::StatusOr<BlockCodec> c = BlockCodec::FromPacked(packed);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->packed_bytes(), packed.size());
  EXPECT_EQ(c->spec().protected_last_layers, 1);
}

TEST(FormatTest, EveryTruncationIsDataLoss) {
  const std::vector<uint8_t> packed = ExamplePacked();
  for (size_t n = 0; n < packed.size(); ++n) {
    absl::StatusOr<PackedBlockInfo> info = ParsePackedBlock(absl::MakeConstSpan(packed.data(), n));
    ASSERT_EQ(info.status().code(), absl::StatusCode::kDataLoss) << n;
  }
  std::vector<uint8_t> longer = packed;
  longer.push_back(0);
  EXPECT_EQ(ParsePackedBlock(longer).status().code(), absl::StatusCode::kDataLoss);
}

TEST(FormatTest, EverySingleByteFlipIsCaught) {
  // Header damage fails the parser or the header comparison; any damage fails the checksum.
  const std::vector<uint8_t> packed = ExamplePacked();
  const BlockCodec c = ExampleCodec();
  for (size_t i = 0; i < packed.size(); ++i) {
    std::vector<uint8_t> bad = packed;
    bad[i] ^= 0x5A;
    EXPECT_EQ(VerifyPackedChecksum(bad).code(), absl::StatusCode::kDataLoss) << i;
    if (i < c.header().size()) {
      absl::StatusOr<PackedBlockInfo> info = ParsePackedBlock(bad);
      std::vector<uint8_t> out(*c.DecodedBytes(DType::kFloat16, {}));
      const absl::Status s = c.Decode(bad, DType::kFloat16, {}, absl::MakeSpan(out));
      EXPECT_FALSE(s.ok()) << "header byte " << i;
    }
  }
}

// The codec's checksum runs its own AVX2 / AVX-512 build of XXH3 where the CPU has them: it must
// give Debian's libxxhash's 64 bits for every length class of XXH3 (0-16, 17-128, 129-240,
// and longer inputs ending anywhere in a stripe and a block), and still catch a flipped byte.
TEST(FormatTest, ChecksumEqualsLibxxhashAtEveryLength) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 2100; ++n) lengths.push_back(n);
  for (size_t n : {size_t{16383}, size_t{16384}, size_t{16385}, size_t{100003}, size_t{368640},
                   size_t{1} << 21}) {
    lengths.push_back(n);
  }
  std::vector<uint8_t> bytes((size_t{1} << 21) + 8);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (size_t n : lengths) {
    std::vector<uint8_t> block(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n + 8));
    const uint64_t sum = XXH3_64bits(block.data(), n);
    std::memcpy(block.data() + n, &sum, 8);
    ASSERT_TRUE(VerifyPackedChecksum(block).ok()) << n << " bytes";
    if (n > 0) {
      block[n / 2] ^= 0x01;
      ASSERT_EQ(VerifyPackedChecksum(block).code(), absl::StatusCode::kDataLoss) << n << " bytes";
    }
  }
}

TEST(FormatTest, SpecificHeaderErrors) {
  const std::vector<uint8_t> packed = ExamplePacked();
  auto message = [](std::vector<uint8_t> b) {
    return std::string(ParsePackedBlock(b).status().message());
  };
  std::vector<uint8_t> b = packed;
  b[0] = 'X';
  EXPECT_NE(message(b).find("magic"), std::string::npos);
  b = packed;
  b[4] = 2;
  EXPECT_EQ(ParsePackedBlock(b).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message(b).find("format_version 2"), std::string::npos);
  b = packed;
  b[38] = 12;  // head_dim 12
  EXPECT_NE(message(b).find("head_dim"), std::string::npos);
  b = packed;
  b[56] = 3;  // layer 0 K bits in the layer table disagree with the header's codec
  EXPECT_NE(message(b).find("layer 0"), std::string::npos);
  b = packed;
  b[46] = 7;  // key bits 7
  EXPECT_NE(message(b).find("key.bits 7"), std::string::npos);
  b = packed;
  b[40] = 7;  // dtype
  EXPECT_NE(message(b).find("dtype"), std::string::npos);
}

}  // namespace
}  // namespace turbokv::codec
