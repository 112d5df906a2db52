// Splitting a sequence KV tensor into raw blocks and joining them back; the CLI's JSON output.
#include <gtest/gtest.h>

#include <cstring>

#include "json_writer.h"
#include "kv_layout.h"

namespace turbokv::cli {
namespace {

// Element (l, kv, t, h, d) of a [L][2][T][H][D] tensor of uint16, encoded from its indices.
uint16_t Code(uint64_t l, uint64_t kv, uint64_t t, uint64_t h, uint64_t d) {
  return static_cast<uint16_t>(l * 4096 + kv * 2048 + t * 64 + h * 8 + d);
}

std::string MakeSequence(const KvShape& s) {
  std::string out(s.total_bytes(), '\0');
  size_t i = 0;
  for (uint64_t l = 0; l < s.num_layers; ++l)
    for (uint64_t kv = 0; kv < 2; ++kv)
      for (uint64_t t = 0; t < s.num_tokens; ++t)
        for (uint64_t h = 0; h < s.num_kv_heads; ++h)
          for (uint64_t d = 0; d < s.head_dim; ++d, ++i) {
            const uint16_t c = Code(l, kv, t, h, d);
            std::memcpy(out.data() + 2 * i, &c, 2);
          }
  return out;
}

TEST(KvLayoutTest, SplitPutsTheRightTokensInEachBlock) {
  const KvShape seq{3, 10, 2, 4, 2};  // L=3, T=10, H=2, D=4, fp16-sized
  const std::string data = MakeSequence(seq);
  absl::StatusOr<std::vector<std::string>> blocks = SplitBlocks(data, seq, 4);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  ASSERT_EQ(blocks->size(), 2u);  // 10 tokens -> 2 full blocks of 4, 2 tokens dropped
  for (uint64_t b = 0; b < 2; ++b) {
    const std::string& blk = (*blocks)[b];
    ASSERT_EQ(blk.size(), 3u * 2 * 4 * 2 * 4 * 2);
    size_t i = 0;
    for (uint64_t l = 0; l < 3; ++l)
      for (uint64_t kv = 0; kv < 2; ++kv)
        for (uint64_t t = 0; t < 4; ++t)
          for (uint64_t h = 0; h < 2; ++h)
            for (uint64_t d = 0; d < 4; ++d, ++i) {
              uint16_t c;
              std::memcpy(&c, blk.data() + 2 * i, 2);
              ASSERT_EQ(c, Code(l, kv, b * 4 + t, h, d)) << b << l << kv << t << h << d;
            }
  }
}

TEST(KvLayoutTest, JoinInvertsSplit) {
  const KvShape seq{2, 12, 3, 8, 2};
  const std::string data = MakeSequence(seq);
  auto blocks = SplitBlocks(data, seq, 4);
  ASSERT_TRUE(blocks.ok());
  absl::StatusOr<std::string> joined = JoinBlocks(*blocks, KvShape{2, 4, 3, 8, 2});
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(*joined, data);
  // A prefix of the blocks joins to the sequence's leading tokens.
  auto prefix = JoinBlocks(absl::MakeConstSpan(*blocks).subspan(0, 1), KvShape{2, 4, 3, 8, 2});
  ASSERT_TRUE(prefix.ok());
  auto expect = SplitBlocks(data, seq, 4);
  EXPECT_EQ(*prefix, (*expect)[0]);
  // Zero blocks give an empty tensor.
  EXPECT_TRUE(JoinBlocks({}, KvShape{2, 4, 3, 8, 2})->empty());
}

TEST(KvLayoutTest, RejectsWrongSizes) {
  const KvShape seq{2, 4, 1, 8, 2};
  EXPECT_EQ(SplitBlocks(std::string(10, '\0'), seq, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitBlocks(std::string(seq.total_bytes(), '\0'), seq, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> bad = {std::string(5, '\0')};
  EXPECT_EQ(JoinBlocks(bad, seq).status().code(), absl::StatusCode::kInvalidArgument);
  // Fewer tokens than a block: no blocks.
  auto none = SplitBlocks(std::string(seq.total_bytes(), '\0'), seq, 8);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(JsonWriterTest, DumpsOneLineWithEscapes) {
  JsonObject inner;
  inner.Add("p50_ms", 1.25);
  JsonObject o;
  o.Add("id", "00ff")
      .Add("n", uint64_t{18446744073709551615ULL})
      .Add("neg", int64_t{-3})
      .Add("ok", true)
      .Add("msg", "a\"b\\c\n\x01")
      .Add("put", inner)
      .AddArray("list", {JsonObject().Add("a", 1), JsonObject().Add("b", 2)});
  EXPECT_EQ(o.Dump(),
            "{\"id\":\"00ff\",\"n\":18446744073709551615,\"neg\":-3,\"ok\":true,"
            "\"msg\":\"a\\\"b\\\\c\\n\\u0001\",\"put\":{\"p50_ms\":1.25},"
            "\"list\":[{\"a\":1},{\"b\":2}]}");
  EXPECT_EQ(JsonObject().Add("x", 0.0 / 0.0).Dump(), "{\"x\":null}");
  // Doubles keep 6 significant digits, in JSON and for people.
  EXPECT_EQ(JsonObject().Add("r", 3.14159265).Dump(), "{\"r\":3.14159}");
  EXPECT_EQ(JsonObject().Add("r", 3.14159265).Human(), "r: 3.14159\n");
  // Bytes that are not UTF-8 are replaced, not a failed dump.
  EXPECT_EQ(JsonObject().Add("m", std::string("a\xff")).Dump(), "{\"m\":\"a\xef\xbf\xbd\"}");
  EXPECT_EQ(JsonObject().Add("a", "b").Add("c", 2).Human(), "a: b\nc: 2\n");
}

}  // namespace
}  // namespace turbokv::cli
