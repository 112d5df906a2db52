// The client's wire format (wire_format.h, written with protobuf's coded-stream primitives)
// against protobuf's own messages: serialized PutBlocks chunks and LookupRequests are the
// messages' bytes, GetBlocksResponse bytes cut anywhere into pieces parse to the message's
// fields, and any input (truncated, out of order, unknown fields, huge lengths) parses exactly
// when protobuf's ParseFromString does; what does not parse is DataLoss.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "byte_buffer_test_util.h"
#include "turbokv/v1/turbokv.pb.h"
#include "wire_format.h"

namespace turbokv::client::internal {
namespace {

using turbokv::testing::Flatten;

// Parses `pieces` both ways: ours succeeds exactly when protobuf's does (else DataLoss), with
// the same fields.
void ExpectParsesLikeProtobuf(const std::vector<absl::string_view>& pieces) {
  std::string bytes;
  for (absl::string_view p : pieces) bytes.append(p.data(), p.size());
  v1::GetBlocksResponse m;
  const bool proto_ok = m.ParseFromString(bytes);
  WireChunk c;
  const absl::Status s = ParseGetBlocksResponse(pieces, &c);
  ASSERT_EQ(s.ok(), proto_ok) << s << " on " << absl::CHexEscape(bytes);
  if (!s.ok()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    return;
  }
  EXPECT_EQ(c.index, m.index());
  EXPECT_EQ(c.found, m.found());
  EXPECT_EQ(c.encoding, m.encoding());
  EXPECT_EQ(c.dtype, m.dtype());
  EXPECT_EQ(c.block_bytes, m.block_bytes());
  EXPECT_EQ(c.offset, m.offset());
  std::string data;
  for (absl::string_view p : c.data) data.append(p.data(), p.size());
  EXPECT_EQ(data, m.data());
  EXPECT_EQ(c.data_size, m.data().size());
}

void ExpectParsesLikeProtobuf(absl::string_view bytes) {
  ExpectParsesLikeProtobuf(std::vector<absl::string_view>{bytes});
}

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
  // With a tuning to follow (a zero field left off, as protobuf does; both zero: an empty
  // message that is still there).
  for (const PolicyTuning& t :
       {PolicyTuning{8, 0.25}, PolicyTuning{0, 1}, PolicyTuning{16, 0}, PolicyTuning{0, 0}}) {
    v1::LookupRequest m;
    m.set_namespace_id(7);
    for (const std::string& h : hashes) m.add_block_hashes(h);
    m.set_lease_seconds(30);
    m.mutable_follow_tuning()->set_half_life(t.half_life);
    m.mutable_follow_tuning()->set_unseen_age(t.unseen_age);
    EXPECT_EQ(Flatten(SerializeLookupRequest(7, hashes, 30, t)), m.SerializeAsString())
        << t.half_life << " " << t.unseen_age;
  }
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
      const std::vector<absl::string_view> pieces = {
          all.substr(0, cut1), all.substr(cut1, cut2 - cut1), all.substr(cut2)};
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
  bytes += std::string("\x48\x05", 2);                    // field 9, varint
  bytes += std::string("\x51", 1) + std::string(8, 'f');  // field 10, fixed64
  bytes += std::string("\x5a\x02zz", 4);                  // field 11, bytes
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
  EXPECT_EQ(
      ParseGetBlocksResponse({absl::string_view(bytes).substr(0, bytes.size() - 1)}, &c).code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseGetBlocksResponse({absl::string_view("\x08\x80", 2)}, &c).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseGetBlocksResponse({absl::string_view("\x00\x01", 2)}, &c).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseGetBlocksResponse({absl::string_view("\x0b", 1)}, &c).code(),
            absl::StatusCode::kDataLoss);  // wire type 3 (groups)
}

TEST(WireFormatTest, EveryPrefixParsesLikeProtobuf) {
  // Fields out of order, repeated (the last wins, `data` included), a known field number with
  // another wire type, and unknown fields of every wire type (a group too): each prefix of it.
  std::string bytes;
  bytes += std::string("\x40\x03", 2);                    // data, wire type 0: unknown
  bytes += std::string("\x42\x03old", 5);                 // data = "old"
  bytes += std::string("\x38\xac\x02", 3);                // offset = 300
  bytes += std::string("\x08\x07", 2);                    // index = 7
  bytes += std::string("\x49", 1) + std::string(8, 'f');  // field 9, fixed64
  bytes += std::string("\x55", 1) + std::string(4, 'g');  // field 10, fixed32
  bytes += std::string("\x5a\x02zz", 4);                  // field 11, bytes
  bytes += std::string("\x63\x08\x01\x64", 4);            // field 12, a group holding a varint
  bytes += std::string("\x18\x01\x20\x02\x28\x02", 6);    // found, encoding, dtype
  bytes += std::string("\x30\x80\x80\x80\x80\x20", 6);    // block_bytes = 1 << 33
  bytes += std::string("\x0a\x01h", 3);                   // field 1 (index), bytes: unknown
  bytes += std::string("\x68\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);  // field 13, max varint
  bytes += std::string(
      "\x42\x04"
      "data",
      6);                               // data = "data" (replaces "old")
  bytes += std::string("\x08\x09", 2);  // index = 9 (the last wins)
  v1::GetBlocksResponse whole;          // what the whole parses to
  ASSERT_TRUE(whole.ParseFromString(bytes));
  EXPECT_EQ(whole.index(), 9u);
  EXPECT_EQ(whole.data(), "data");
  EXPECT_EQ(whole.block_bytes(), 1ULL << 33);
  for (size_t n = 0; n <= bytes.size(); ++n) {
    ExpectParsesLikeProtobuf(absl::string_view(bytes).substr(0, n));
  }
  // And cut into three pieces anywhere.
  const absl::string_view all(bytes);
  for (size_t cut1 = 0; cut1 <= bytes.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= bytes.size(); cut2 += 3) {
      ExpectParsesLikeProtobuf(
          {all.substr(0, cut1), all.substr(cut1, cut2 - cut1), all.substr(cut2)});
    }
  }
}

TEST(WireFormatTest, MalformedParsesLikeProtobuf) {
  for (const std::string& bad : {
           std::string("\x00", 1),                      // field number 0
           std::string("\x0e\x01", 2),                  // wire type 6
           std::string("\x0f\x01", 2),                  // wire type 7
           std::string("\x0c", 1),                      // a stray end-group
           std::string("\x63\x08\x01", 3),              // a group never closed
           std::string("\x63\x08\x01\x6c", 4),          // closed by another field's end
           std::string("\x80\x80\x80\x80\x80\x80", 6),  // a tag over 5 bytes
           std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                       12),                                      // an 11-byte varint
           std::string("\x42\x80\x80\x80\x80\x08", 6) + "data",  // data of 2^31 bytes
           std::string("\x42\xff\xff\xff\xff\x0f", 6) + "data",  // data of 2^32 - 1 bytes
           std::string("\x42\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11),  // data of 2^64 - 1
           std::string("\x5a\x80\x80\x80\x80\x10", 6) + "zz",  // unknown bytes of 2^32
           std::string("\x42\x05"
                       "abcd",
                       6),  // data one byte short
       }) {
    ExpectParsesLikeProtobuf(bad);
    WireChunk c;
    EXPECT_EQ(ParseGetBlocksResponse({absl::string_view(bad)}, &c).code(),
              absl::StatusCode::kDataLoss)
        << absl::CHexEscape(bad);
  }
}

TEST(WireFormatTest, DataIsViewsIntoThePieces) {
  // Zero copy: each view of `data` points into the piece it came from, one view per piece.
  v1::GetBlocksResponse m;
  m.set_index(2);
  m.set_found(true);
  m.set_data(std::string(3000, 'd'));
  const std::string bytes = m.SerializeAsString();
  const absl::string_view all(bytes);
  const size_t head = bytes.size() - 3000;
  const std::vector<absl::string_view> pieces = {
      all.substr(0, head + 1000), all.substr(head + 1000, 1500), all.substr(head + 2500)};
  WireChunk c;
  ASSERT_TRUE(ParseGetBlocksResponse(pieces, &c).ok());
  ASSERT_EQ(c.data.size(), 3u);
  EXPECT_EQ(c.data[0].data(), bytes.data() + head);
  EXPECT_EQ(c.data[0].size(), 1000u);
  EXPECT_EQ(c.data[1].data(), pieces[1].data());
  EXPECT_EQ(c.data[1].size(), 1500u);
  EXPECT_EQ(c.data[2].data(), pieces[2].data());
  EXPECT_EQ(c.data[2].size(), 500u);
}

}  // namespace
}  // namespace turbokv::client::internal
