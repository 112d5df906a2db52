// Chunk splitting for PutBlocks and reassembly of GetBlocks streams.
#include <gtest/gtest.h>

#include "chunking.h"

namespace turbokv::client::internal {
namespace {

TEST(SplitIntoChunksTest, ExactAndRemainder) {
  const uint64_t mib = 1 << 20;
  EXPECT_EQ(SplitIntoChunks(2 * mib, mib), (std::vector<ChunkRange>{{0, mib}, {mib, mib}}));
  EXPECT_EQ(SplitIntoChunks(2 * mib + 5, mib),
            (std::vector<ChunkRange>{{0, mib}, {mib, mib}, {2 * mib, 5}}));
  EXPECT_EQ(SplitIntoChunks(10, mib), (std::vector<ChunkRange>{{0, 10}}));
  // An empty block still sends one message (it carries the hash).
  EXPECT_EQ(SplitIntoChunks(0, mib), (std::vector<ChunkRange>{{0, 0}}));
}

TEST(SplitIntoChunksTest, CoversEveryByteOnce) {
  for (uint64_t size : {1u, 7u, 1023u, 1024u, 1025u, 100000u}) {
    uint64_t next = 0;
    for (const ChunkRange& c : SplitIntoChunks(size, 1024)) {
      EXPECT_EQ(c.offset, next);
      EXPECT_GT(c.size, 0u);
      EXPECT_LE(c.size, 1024u);
      next += c.size;
    }
    EXPECT_EQ(next, size);
  }
}

TEST(BlockAssemblerTest, InterleavedChunksAndMisses) {
  BlockAssembler a(3);
  ASSERT_TRUE(a.AddChunk(0, 6, 0, absl::string_view("abc")).ok());
  ASSERT_TRUE(a.AddMissing(1).ok());
  ASSERT_TRUE(a.AddChunk(2, 2, 0, std::string("xy")).ok());
  ASSERT_TRUE(a.AddChunk(0, 6, 3, absl::string_view("def")).ok());
  std::vector<std::optional<std::string>> out;
  ASSERT_TRUE(a.Finish(&out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], "abcdef");
  EXPECT_FALSE(out[1].has_value());
  EXPECT_EQ(out[2], "xy");
}

TEST(BlockAssemblerTest, EmptyFoundBlock) {
  BlockAssembler a(1);
  ASSERT_TRUE(a.AddChunk(0, 0, 0, std::string()).ok());
  std::vector<std::optional<std::string>> out;
  ASSERT_TRUE(a.Finish(&out).ok());
  ASSERT_TRUE(out[0].has_value());
  EXPECT_TRUE(out[0]->empty());
}

TEST(BlockAssemblerTest, RejectsProtocolViolations) {
  {
    BlockAssembler a(1);
    EXPECT_EQ(a.AddChunk(1, 3, 0, absl::string_view("abc")).code(),
              absl::StatusCode::kDataLoss);  // index out of range
  }
  {
    BlockAssembler a(1);
    EXPECT_EQ(a.AddChunk(0, 6, 3, absl::string_view("abc")).code(),
              absl::StatusCode::kDataLoss);  // does not start at 0
  }
  {
    BlockAssembler a(1);
    ASSERT_TRUE(a.AddChunk(0, 6, 0, absl::string_view("abc")).ok());
    EXPECT_EQ(a.AddChunk(0, 6, 2, absl::string_view("cde")).code(),
              absl::StatusCode::kDataLoss);  // overlap
  }
  {
    BlockAssembler a(1);
    ASSERT_TRUE(a.AddChunk(0, 6, 0, absl::string_view("abc")).ok());
    EXPECT_EQ(a.AddChunk(0, 7, 3, absl::string_view("def")).code(),
              absl::StatusCode::kDataLoss);  // size changed
  }
  {
    BlockAssembler a(1);
    EXPECT_EQ(a.AddChunk(0, 2, 0, absl::string_view("abc")).code(),
              absl::StatusCode::kDataLoss);  // exceeds block_bytes
  }
  {
    BlockAssembler a(1);
    ASSERT_TRUE(a.AddMissing(0).ok());
    EXPECT_EQ(a.AddChunk(0, 1, 0, absl::string_view("a")).code(),
              absl::StatusCode::kDataLoss);  // data after missing
    EXPECT_EQ(a.AddMissing(0).code(), absl::StatusCode::kDataLoss);
  }
  {
    BlockAssembler a(1);
    ASSERT_TRUE(a.AddChunk(0, 1, 0, absl::string_view("a")).ok());
    EXPECT_EQ(a.AddChunk(0, 1, 1, absl::string_view("")).code(),
              absl::StatusCode::kDataLoss);  // more after complete
  }
}

TEST(BlockAssemblerTest, FinishRejectsIncompleteOrUnreported) {
  {
    BlockAssembler a(2);
    ASSERT_TRUE(a.AddMissing(0).ok());
    std::vector<std::optional<std::string>> out;
    absl::Status st = a.Finish(&out);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(st.message().find("block 1"), absl::string_view::npos) << st;
  }
  {
    BlockAssembler a(1);
    ASSERT_TRUE(a.AddChunk(0, 6, 0, absl::string_view("abc")).ok());
    std::vector<std::optional<std::string>> out;
    absl::Status st = a.Finish(&out);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(st.message().find("3 of 6"), absl::string_view::npos) << st;
  }
}

}  // namespace
}  // namespace turbokv::client::internal
