// The server's hand-rolled wire format (server/service/wire_format.h) against protobuf's own.
#include "server/service/wire_format.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "byte_buffer_test_util.h"

namespace turbokv::server {
namespace {

using turbokv::testing::Flatten;

TEST(ServerWireFormatTest, GetBlocksResponseIsTheMessagesSerialization) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{200}, size_t{1} << 20}) {
    auto owner = std::make_shared<std::string>(size + 10, 'p');
    for (size_t i = 0; i < owner->size(); ++i) (*owner)[i] = static_cast<char>(i * 13);
    v1::GetBlocksResponse fields;
    fields.set_index(5);
    fields.set_block_hash(std::string(16, 'h'));
    fields.set_found(true);
    fields.set_encoding(v1::ENCODING_RAW);
    fields.set_dtype(v1::DTYPE_FP16);
    fields.set_block_bytes(size * 2);
    fields.set_offset(size);
    v1::GetBlocksResponse whole = fields;
    whole.set_data(owner->substr(10, size));
    const grpc::ByteBuffer b = SerializeGetBlocksResponse(fields, {owner, owner->data() + 10, size});
    owner.reset();  // the buffer keeps the bytes alive
    EXPECT_EQ(Flatten(b), whole.SerializeAsString()) << size;
  }
}

TEST(ServerWireFormatTest, LookupRequestParsesLikeProtobuf) {
  v1::LookupRequest m;
  m.set_namespace_id(0xfedcba9876543210ULL);
  for (int i = 0; i < 300; ++i) m.add_block_hashes(std::string(8 + i % 25, static_cast<char>(i)));
  m.add_block_hashes("");
  m.set_lease_seconds(300);
  std::string bytes = m.SerializeAsString();
  bytes += std::string("\x20\x07", 2);  // an unknown field 4 (varint) is skipped
  LookupRequestView v;
  ASSERT_TRUE(ParseLookupRequest(bytes, &v).ok());
  EXPECT_EQ(v.namespace_id, m.namespace_id());
  EXPECT_EQ(v.lease_seconds, 300u);
  ASSERT_EQ(v.block_hashes.size(), static_cast<size_t>(m.block_hashes_size()));
  for (int i = 0; i < m.block_hashes_size(); ++i) EXPECT_EQ(v.block_hashes[i], m.block_hashes(i));

  ASSERT_TRUE(ParseLookupRequest("", &v).ok());  // the empty message: all defaults
  EXPECT_EQ(v.namespace_id, 0u);
  EXPECT_TRUE(v.block_hashes.empty());

  for (const std::string& bad : {bytes.substr(0, bytes.size() - 3),  // inside the lease varint
                                 std::string("\x09\x01\x02", 3),  // short fixed64
                                 std::string("\x12\x05" "ab", 4),    // bytes past the end
                                 std::string("\x00", 1), std::string("\x0b", 1)}) {
    EXPECT_EQ(ParseLookupRequest(bad, &v).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace turbokv::server
