// The PutBlocks chunk assembler (server/service/chunk_assembler.h): a pure component, driven
// message by message; each test checks the Step it reports and the statuses and messages a
// client sees.
#include <string>

#include "gtest/gtest.h"
#include "server/service/chunk_assembler.h"

namespace turbokv::server {
namespace {

constexpr uint64_t kNs = 0x1234;
const std::string kHashA(16, 'a');
const std::string kHashB(16, 'b');

BlockSizes Sizes(uint64_t quota = 0) { return {kNs, 100, 40, "[1][2][1][1][25] of fp16", quota}; }

v1::PutBlocksRequest Msg(const std::string& hash, uint64_t offset, size_t bytes,
                         v1::Encoding encoding = v1::ENCODING_RAW, uint64_t block_bytes = 100) {
  v1::PutBlocksRequest m;
  m.set_namespace_id(kNs);
  m.set_block_hash(hash);
  m.set_offset(offset);
  if (offset == 0) {
    m.set_encoding(encoding);
    m.set_block_bytes(block_bytes);
  }
  m.set_data(std::string(bytes, 'x'));
  return m;
}

TEST(ChunkAssemblerTest, CutsChunksIntoBlocksInStreamOrder) {
  v1::PutBlocksRequest first = Msg(kHashA, 0, 60);
  ChunkAssembler a(Sizes(), first);
  ChunkAssembler::Step step;
  ASSERT_TRUE(a.Accept(first, &step).ok());
  ASSERT_TRUE(step.result.has_value());
  EXPECT_TRUE(step.result->ok());
  EXPECT_EQ(step.result_index, 0u);
  EXPECT_EQ(step.block_bytes, 100u);
  EXPECT_TRUE(step.chunk);
  EXPECT_EQ(step.data.size(), 60u);
  EXPECT_TRUE(first.data().empty());  // moved, not copied
  EXPECT_FALSE(step.completes);
  EXPECT_TRUE(a.in_block());

  v1::PutBlocksRequest rest = Msg(kHashA, 60, 40);
  ASSERT_TRUE(a.Accept(rest, &step).ok());
  EXPECT_FALSE(step.result.has_value());
  EXPECT_EQ(step.offset, 60u);
  EXPECT_TRUE(step.completes);
  EXPECT_FALSE(a.in_block());

  v1::PutBlocksRequest packed = Msg(kHashB, 0, 40, v1::ENCODING_PACKED, 40);
  ASSERT_TRUE(a.Accept(packed, &step).ok());
  EXPECT_EQ(step.result_index, 1u);
  EXPECT_EQ(step.encoding, v1::ENCODING_PACKED);
  EXPECT_TRUE(step.completes);
  EXPECT_EQ(a.results(), 2u);
  EXPECT_FALSE(a.End().has_value());
}

TEST(ChunkAssemblerTest, ABlockCutShortByTheNextOrByTheEndIsNotStored) {
  v1::PutBlocksRequest m = Msg(kHashA, 0, 30);
  ChunkAssembler a(Sizes(), m);
  ChunkAssembler::Step step;
  ASSERT_TRUE(a.Accept(m, &step).ok());
  m = Msg(kHashB, 0, 30);
  ASSERT_TRUE(a.Accept(m, &step).ok());
  ASSERT_TRUE(step.cut.has_value());
  EXPECT_EQ(step.cut->block_index, 0u);
  EXPECT_EQ(step.cut->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(step.cut->status.message().find("ended after 30 of 100 bytes (the next block started)"),
            std::string::npos)
      << step.cut->status;
  EXPECT_EQ(step.result_index, 1u);  // the next block starts
  std::optional<ChunkAssembler::Step::Cut> end = a.End();
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->block_index, 1u);
  EXPECT_NE(end->status.message().find("stream ended after 30 of 100 bytes"), std::string::npos);
}

TEST(ChunkAssemblerTest, OutOfOrderAndOverrunningChunksRefuseTheBlockAndItsRest) {
  v1::PutBlocksRequest m = Msg(kHashA, 0, 30);
  ChunkAssembler a(Sizes(), m);
  ChunkAssembler::Step step;
  ASSERT_TRUE(a.Accept(m, &step).ok());
  m = Msg(kHashA, 50, 10);  // skips 30..50
  ASSERT_TRUE(a.Accept(m, &step).ok());
  ASSERT_TRUE(step.cut.has_value());
  EXPECT_NE(step.cut->status.message().find("expected the chunk at offset 30"), std::string::npos);
  EXPECT_FALSE(step.result.has_value());  // the rest of a refused block: no new result
  m = Msg(kHashA, 60, 40);
  ASSERT_TRUE(a.Accept(m, &step).ok());
  EXPECT_FALSE(step.cut.has_value() || step.result.has_value() || step.chunk);

  m = Msg(kHashB, 0, 120);  // more than block_bytes in its first chunk
  ASSERT_TRUE(a.Accept(m, &step).ok());
  ASSERT_TRUE(step.result.has_value());
  EXPECT_EQ(step.result->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(step.result->message().find("overruns block"), std::string::npos);
  EXPECT_FALSE(step.chunk);
  EXPECT_EQ(a.results(), 2u);

  // A chunk without its block's first: one result, its later chunks none.
  const std::string c(8, 'c');
  m = Msg(c, 10, 10);
  ASSERT_TRUE(a.Accept(m, &step).ok());
  ASSERT_TRUE(step.result.has_value());
  EXPECT_NE(step.result->message().find("arrived without the block's first chunk"),
            std::string::npos);
  m = Msg(c, 20, 10);
  ASSERT_TRUE(a.Accept(m, &step).ok());
  EXPECT_FALSE(step.result.has_value());
  EXPECT_EQ(a.results(), 3u);
}

TEST(ChunkAssemblerTest, RefusesBadHashesEncodingsSizesAndBlocksOverTheQuota) {
  v1::PutBlocksRequest m = Msg("short", 0, 10);
  ChunkAssembler a(Sizes(/*quota=*/30), m);
  ChunkAssembler::Step step;
  ASSERT_TRUE(a.Accept(m, &step).ok());
  EXPECT_EQ(step.result->code(), absl::StatusCode::kInvalidArgument);
  m = Msg(kHashA, 0, 10, v1::ENCODING_UNSPECIFIED);
  ASSERT_TRUE(a.Accept(m, &step).ok());
  EXPECT_NE(step.result->message().find("must be ENCODING_RAW or ENCODING_PACKED"),
            std::string::npos);
  m = Msg(kHashA, 0, 10, v1::ENCODING_RAW, 99);
  ASSERT_TRUE(a.Accept(m, &step).ok());
  EXPECT_NE(step.result->message().find("is not the namespace's raw block size 100 ([1][2]"),
            std::string::npos)
      << *step.result;
  m = Msg(kHashB, 0, 10, v1::ENCODING_PACKED, 40);
  ASSERT_TRUE(a.Accept(m, &step).ok());
  EXPECT_EQ(step.result->code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(step.result->message().find("over this tenant's quota of 30 bytes"), std::string::npos);
  EXPECT_EQ(a.results(), 4u);
  EXPECT_FALSE(a.in_block());
}

TEST(ChunkAssemblerTest, StreamErrorsFailTheWholeStream) {
  v1::PutBlocksRequest m = Msg(kHashA, 0, 100);
  m.mutable_header()->set_block_count(1);
  m.mutable_header()->set_chain_continues(true);
  ChunkAssembler a(Sizes(), m);
  EXPECT_TRUE(a.chain_continues());
  ChunkAssembler::Step step;
  ASSERT_TRUE(a.Accept(m, &step).ok());
  EXPECT_TRUE(a.all_declared_in());
  m = Msg(kHashB, 0, 100);
  absl::Status s = a.Accept(m, &step);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("more than the 1 blocks"), std::string::npos) << s;

  v1::PutBlocksRequest first = Msg(kHashA, 0, 10);
  ChunkAssembler b(Sizes(), first);
  ASSERT_TRUE(b.Accept(first, &step).ok());
  m = Msg(kHashA, 10, 10);
  m.set_namespace_id(kNs + 1);
  EXPECT_NE(b.Accept(m, &step).message().find("one PutBlocks stream writes one namespace"),
            std::string::npos);
  m = Msg(kHashA, 10, 10);
  m.mutable_header()->set_block_count(3);
  EXPECT_NE(b.Accept(m, &step).message().find("only the first may"), std::string::npos);
}

}  // namespace
}  // namespace turbokv::server
