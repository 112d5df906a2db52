// The server's wire format (server/service/wire_format.h, written with protobuf's coded-stream
// primitives) against protobuf's own messages: the GetBlocksResponse bytes are the message's,
// with the payload as its own slice, and a LookupRequest parses exactly when protobuf's
// ParseFromString does, to the same fields; what does not parse is INVALID_ARGUMENT.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "byte_buffer_test_util.h"
#include "server/service/wire_format.h"

namespace turbokv::server {
namespace {

using turbokv::testing::Flatten;

void ExpectParsesLikeProtobuf(std::string_view bytes) {
  v1::LookupRequest m;
  const bool proto_ok = m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  LookupRequestView v;
  const absl::Status s = ParseLookupRequest(bytes, &v);
  ASSERT_EQ(s.ok(), proto_ok) << s << " on "
                              << absl::CHexEscape(absl::string_view(bytes.data(), bytes.size()));
  if (!s.ok()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return;
  }
  EXPECT_EQ(v.namespace_id, m.namespace_id());
  EXPECT_EQ(v.lease_seconds, m.lease_seconds());
  ASSERT_EQ(v.follow_tuning.has_value(), m.has_follow_tuning());
  if (v.follow_tuning.has_value()) {
    EXPECT_EQ(v.follow_tuning->half_life, m.follow_tuning().half_life());
    EXPECT_EQ(v.follow_tuning->unseen_age, m.follow_tuning().unseen_age());
  }
  ASSERT_EQ(v.block_hashes.size(), static_cast<size_t>(m.block_hashes_size()));
  for (int i = 0; i < m.block_hashes_size(); ++i) {
    EXPECT_EQ(v.block_hashes[i], m.block_hashes(i));
    // A view into `bytes`, not a copy.
    EXPECT_GE(v.block_hashes[i].data(), bytes.data());
    EXPECT_LE(v.block_hashes[i].data() + v.block_hashes[i].size(), bytes.data() + bytes.size());
  }
}

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
    const char* payload = owner->data() + 10;
    const grpc::ByteBuffer b = SerializeGetBlocksResponse(fields, {owner, payload, size});
    owner.reset();  // the buffer keeps the bytes alive
    EXPECT_EQ(Flatten(b), whole.SerializeAsString()) << size;
    // Zero copy: the payload goes out as its own slice over the owner's bytes.
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(b.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), size == 0 ? 1u : 2u);
    if (size != 0) {
      EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), payload);
      EXPECT_EQ(slices[1].size(), size);
    }
  }
}

TEST(ServerWireFormatTest, LookupRequestParsesLikeProtobuf) {
  v1::LookupRequest m;
  m.set_namespace_id(0xfedcba9876543210ULL);
  for (int i = 0; i < 300; ++i) m.add_block_hashes(std::string(8 + i % 25, static_cast<char>(i)));
  m.add_block_hashes("");
  m.set_lease_seconds(300);
  std::string bytes = m.SerializeAsString();
  bytes += std::string("\x20\x07", 2);  // field 4 (follow_tuning) as a varint: skipped
  LookupRequestView v;
  ASSERT_TRUE(ParseLookupRequest(bytes, &v).ok());
  EXPECT_EQ(v.namespace_id, m.namespace_id());
  EXPECT_EQ(v.lease_seconds, 300u);
  ASSERT_EQ(v.block_hashes.size(), static_cast<size_t>(m.block_hashes_size()));
  for (int i = 0; i < m.block_hashes_size(); ++i) EXPECT_EQ(v.block_hashes[i], m.block_hashes(i));

  EXPECT_FALSE(v.follow_tuning.has_value());

  m.mutable_follow_tuning()->set_half_life(8);
  m.mutable_follow_tuning()->set_unseen_age(0.25);
  ASSERT_TRUE(ParseLookupRequest(m.SerializeAsString(), &v).ok());
  ASSERT_TRUE(v.follow_tuning.has_value());
  EXPECT_EQ(v.follow_tuning->half_life, 8.0);
  EXPECT_EQ(v.follow_tuning->unseen_age, 0.25);
  m.mutable_follow_tuning()->Clear();  // present, every field default
  ASSERT_TRUE(ParseLookupRequest(m.SerializeAsString(), &v).ok());
  ASSERT_TRUE(v.follow_tuning.has_value());
  EXPECT_EQ(v.follow_tuning->half_life, 0.0);

  ASSERT_TRUE(ParseLookupRequest("", &v).ok());  // the empty message: all defaults
  EXPECT_EQ(v.namespace_id, 0u);
  EXPECT_TRUE(v.block_hashes.empty());
  EXPECT_FALSE(v.follow_tuning.has_value());

  for (const std::string& bad : {bytes.substr(0, bytes.size() - 3),  // inside the lease varint
                                 std::string("\x09\x01\x02", 3),     // short fixed64
                                 std::string("\x12\x05"
                                             "ab",
                                             4),  // bytes past the end
                                 std::string("\x00", 1), std::string("\x0b", 1)}) {
    EXPECT_EQ(ParseLookupRequest(bad, &v).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ServerWireFormatTest, EveryPrefixParsesLikeProtobuf) {
  // Fields out of order, repeated (the last scalar wins), a known field number with another
  // wire type, unknown fields of every wire type (a group too), and an empty hash.
  std::string bytes;
  bytes += std::string("\x18\x05", 2);  // lease_seconds = 5
  bytes += std::string(
      "\x12\x03"
      "abc",
      5);                                                                    // a hash
  bytes += std::string("\x09", 1) + std::string(8, 'n');                     // namespace_id
  bytes += std::string("\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);  // field 4, max varint
  bytes += std::string("\x29", 1) + std::string(8, 'f');                     // field 5, fixed64
  bytes += std::string("\x35", 1) + std::string(4, 'g');                     // field 6, fixed32
  bytes += std::string("\x3a\x02zz", 4);                                     // field 7, bytes
  bytes += std::string("\x43\x08\x01\x44", 4);  // field 8, a group holding a varint
  bytes += std::string("\x10\x07", 2);          // field 2 (hashes), varint: unknown
  bytes += std::string(
      "\x0d"
      "abcd",
      5);                                       // field 1 (namespace), fixed32: unknown
  bytes += std::string("\x12\x00", 2);          // an empty hash
  bytes += std::string("\x18\xe0\xa7\x12", 4);  // lease_seconds = 300000 (the last wins)
  bytes += std::string("\x12\x01z", 3);         // a third hash
  // follow_tuning twice: the messages merge (half_life from the first, unseen_age from both,
  // the last wins), one with an unknown field inside.
  bytes += std::string("\x22\x12\x09", 3) + std::string("\x00\x00\x00\x00\x00\x00\x20\x40", 8) +
           std::string("\x11", 1) + std::string("\x00\x00\x00\x00\x00\x00\xd0\x3f", 8);
  bytes += std::string("\x22\x0b\x11", 3) + std::string("\x00\x00\x00\x00\x00\x00\xe0\x3f", 8) +
           std::string("\x18\x01", 2);
  v1::LookupRequest whole;  // what the whole parses to
  ASSERT_TRUE(whole.ParseFromString(bytes));
  EXPECT_EQ(whole.lease_seconds(), 300000u);
  EXPECT_EQ(whole.block_hashes_size(), 3);
  EXPECT_EQ(whole.follow_tuning().half_life(), 8.0);
  EXPECT_EQ(whole.follow_tuning().unseen_age(), 0.5);
  for (size_t n = 0; n <= bytes.size(); ++n) {
    ExpectParsesLikeProtobuf(std::string_view(bytes).substr(0, n));
  }
}

TEST(ServerWireFormatTest, MalformedParsesLikeProtobuf) {
  for (const std::string& bad : {
           std::string("\x00", 1),                      // field number 0
           std::string("\x0e\x01", 2),                  // wire type 6
           std::string("\x0f\x01", 2),                  // wire type 7
           std::string("\x0c", 1),                      // a stray end-group
           std::string("\x43\x08\x01", 3),              // a group never closed
           std::string("\x80\x80\x80\x80\x80\x80", 6),  // a tag over 5 bytes
           std::string("\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                       12),                                      // an 11-byte varint
           std::string("\x12\x80\x80\x80\x80\x08", 6) + "hash",  // a hash of 2^31 bytes
           std::string("\x12\xff\xff\xff\xff\x0f", 6) + "hash",  // a hash of 2^32 - 1 bytes
           std::string("\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11),  // of 2^64 - 1
           std::string("\x3a\x80\x80\x80\x80\x10", 6) + "zz",   // unknown bytes of 2^32
           std::string("\x09\x01\x02\x03\x04\x05\x06\x07", 8),  // namespace one byte short
           std::string("\x22\x03\x09\x01\x02", 5),              // follow_tuning: a double cut short
           std::string("\x22\x02\x00\x00", 4),  // follow_tuning: field number 0 inside
           std::string("\x22\x01\x0c", 3),      // follow_tuning: a stray end-group inside
           std::string("\x22\x05\x09\x01", 4),  // follow_tuning past the end
       }) {
    ExpectParsesLikeProtobuf(bad);
    LookupRequestView v;
    EXPECT_EQ(ParseLookupRequest(bad, &v).code(), absl::StatusCode::kInvalidArgument)
        << absl::CHexEscape(bad);
  }
}

}  // namespace
}  // namespace turbokv::server
