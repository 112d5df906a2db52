// The client's hand-rolled wire format (wire_format.h) against protobuf's own: serialized
// PutBlocks chunks parse as the message, GetBlocksResponse bytes cut anywhere into pieces
// parse to the message's fields, malformed bytes are DataLoss.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "byte_buffer_test_util.h"
#include "turbokv/v1/turbokv.pb.h"
#include "wire_format.h"

namespace turbokv::client::internal {
namespace {

using turbokv::testing::Flatten;

TEST(WireFormatTest, PutChunkIsTheMessagesSerialization) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{300000}}) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 + 3);
    v1::PutBlocksRequest fields;
    fields.set_namespace_id(0x0123456789abcdefULL);
    fields.set_block_hash(std::string(32, 'h'));
    fields.set_encoding(v1::ENCODING_RAW);
    fields.set_block_bytes(size * 3);
    fields.set_offset(size);
    v1::PutBlocksRequest whole = fields;
    whole.set_data(data);
    EXPECT_EQ(Flatten(SerializeWithData(fields, 6, data)), whole.SerializeAsString()) << size;
  }
}

TEST(WireFormatTest, LookupRequestIsTheMessagesSerialization) {
  std::vector<std::string> hashes;
  for (int i = 0; i < 1000; ++i) hashes.push_back(std::string(8 + i % 25, static_cast<char>(i)));
  hashes.push_back(std::string(200, 'l'));  // a length over one varint byte
  for (uint64_t ns : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    for (uint32_t lease : {0u, 1u, 100000u}) {
      v1::LookupRequest m;
      m.set_namespace_id(ns);
      for (const std::string& h : hashes) m.add_block_hashes(h);
      m.set_lease_seconds(lease);
      EXPECT_EQ(Flatten(SerializeLookupRequest(ns, hashes, lease)), m.SerializeAsString());
    }
  }
  EXPECT_EQ(Flatten(SerializeLookupRequest(0, {}, 0)), "");
}

TEST(WireFormatTest, ResponseParsesFromAnySplit) {
  v1::GetBlocksResponse m;
  m.set_index(7);
  m.set_block_hash(std::string(20, 'x'));
  m.set_found(true);
  m.set_encoding(v1::ENCODING_PACKED);
  m.set_dtype(v1::DTYPE_BF16);
  m.set_block_bytes(1ULL << 33);
  m.set_offset(300);
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i % 251);
  m.set_data(data);
  const std::string bytes = m.SerializeAsString();
  for (size_t cut1 : {size_t{0}, size_t{1}, size_t{5}, size_t{30}, size_t{40}, size_t{500}}) {
    for (size_t cut2 : {cut1, cut1 + 1, bytes.size()}) {
      if (cut2 > bytes.size()) continue;
      const absl::string_view all(bytes);
      const std::vector<absl::string_view> pieces = {all.substr(0, cut1),
                                                     all.substr(cut1, cut2 - cut1),
                                                     all.substr(cut2)};
      WireChunk c;
      ASSERT_TRUE(ParseGetBlocksResponse(pieces, &c).ok()) << cut1 << " " << cut2;
      EXPECT_EQ(c.index, 7u);
      EXPECT_TRUE(c.found);
      EXPECT_EQ(c.encoding, v1::ENCODING_PACKED);
      EXPECT_EQ(c.dtype, v1::DTYPE_BF16);
      EXPECT_EQ(c.block_bytes, 1ULL << 33);
      EXPECT_EQ(c.offset, 300u);
      EXPECT_EQ(c.data_size, data.size());
      std::string got;
      for (absl::string_view p : c.data) got.append(p.data(), p.size());
      EXPECT_EQ(got, data);
    }
  }
}

TEST(WireFormatTest, MissingBlockAndUnknownFields) {
  v1::GetBlocksResponse m;
  m.set_index(3);
  m.set_found(false);
  std::string bytes = m.SerializeAsString();
  bytes += std::string("\x48\x05", 2);                  // field 9, varint
  bytes += std::string("\x51", 1) + std::string(8, 'f');  // field 10, fixed64
  bytes += std::string("\x5a\x02zz", 4);               // field 11, bytes
  WireChunk c;
  ASSERT_TRUE(ParseGetBlocksResponse({absl::string_view(bytes)}, &c).ok());
  EXPECT_EQ(c.index, 3u);
  EXPECT_FALSE(c.found);
  EXPECT_EQ(c.data_size, 0u);
  EXPECT_TRUE(c.data.empty());
}

TEST(WireFormatTest, MalformedIsDataLoss) {
  v1::GetBlocksResponse m;
  m.set_index(1);
  m.set_found(true);
  m.set_data(std::string(100, 'd'));
  const std::string bytes = m.SerializeAsString();
  WireChunk c;
  // Cut inside the data field, inside a varint, and a field number 0.
  EXPECT_EQ(ParseGetBlocksResponse({absl::string_view(bytes).substr(0, bytes.size() - 1)}, &c)
                .code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseGetBlocksResponse({absl::string_view("\x08\x80", 2)}, &c).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseGetBlocksResponse({absl::string_view("\x00\x01", 2)}, &c).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseGetBlocksResponse({absl::string_view("\x0b", 1)}, &c).code(),
            absl::StatusCode::kDataLoss);  // wire type 3 (groups)
}

}  // namespace
}  // namespace turbokv::client::internal
