// PrefixHasher against the shared test vectors (client/python/turbokv/hash_vectors.json, also
// checked by tests/python/test_client_hasher.py) and its edge cases.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "turbokv/client/client.h"
#include "turbokv/client/prefix_hasher.h"

namespace turbokv::client {
namespace {

google::protobuf::Struct LoadVectors() {
  std::ifstream in(TURBOKV_HASH_VECTORS);
  std::stringstream ss;
  ss << in.rdbuf();
  google::protobuf::Struct doc;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(ss.str(), &doc).ok())
      << "cannot parse " << TURBOKV_HASH_VECTORS;
  return doc;
}

TEST(PrefixHasherTest, MatchesSharedVectors) {
  const google::protobuf::Struct doc = LoadVectors();
  const auto& vectors = doc.fields().at("vectors").list_value().values();
  ASSERT_GE(vectors.size(), 8);
  for (const auto& v : vectors) {
    const auto& f = v.struct_value().fields();
    SCOPED_TRACE(f.at("name").string_value());
    absl::StatusOr<uint64_t> ns = ParseNamespaceId(f.at("namespace_id").string_value());
    ASSERT_TRUE(ns.ok());
    PrefixHasher hasher(*ns, absl::HexStringToBytes(f.at("extra_key_hex").string_value()));
    EXPECT_EQ(HexEncode(hasher.RootHash()), f.at("root_hash").string_value());
    std::vector<uint32_t> tokens;
    for (const auto& t : f.at("tokens").list_value().values()) {
      tokens.push_back(static_cast<uint32_t>(t.number_value()));
    }
    absl::StatusOr<std::vector<std::string>> hashes =
        hasher.BlockHashes(tokens, static_cast<int>(f.at("block_tokens").number_value()));
    ASSERT_TRUE(hashes.ok()) << hashes.status();
    const auto& want = f.at("block_hashes").list_value().values();
    ASSERT_EQ(hashes->size(), static_cast<size_t>(want.size()));
    for (size_t i = 0; i < hashes->size(); ++i) {
      EXPECT_EQ((*hashes)[i].size(), PrefixHasher::kHashBytes);
      EXPECT_EQ(HexEncode((*hashes)[i]), want[i].string_value()) << "block " << i;
    }
  }
}

TEST(PrefixHasherTest, PinnedRootOfNamespaceZero) {
  // SHA-256 of eight zero bytes.
  EXPECT_EQ(HexEncode(PrefixHasher(0).RootHash()),
            "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc");
}

TEST(PrefixHasherTest, PrefixPropertyAndDivergence) {
  PrefixHasher h(0xabcdef);
  std::vector<uint32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<uint32_t> b = {1, 2, 3, 4, 5, 6, 7, 99};
  auto ha = h.BlockHashes(a, 4);
  auto hb = h.BlockHashes(b, 4);
  ASSERT_TRUE(ha.ok() && hb.ok());
  ASSERT_EQ(ha->size(), 2u);  // the 9th token is a partial block
  ASSERT_EQ(hb->size(), 2u);
  EXPECT_EQ((*ha)[0], (*hb)[0]);
  EXPECT_NE((*ha)[1], (*hb)[1]);
  // Chaining by hand gives the same hashes.
  EXPECT_EQ((*ha)[1], h.NextHash(h.NextHash(h.RootHash(), {1, 2, 3, 4}), {5, 6, 7, 8}));
}

TEST(PrefixHasherTest, NamespaceAndExtraKeySeparate) {
  std::vector<uint32_t> t = {1, 2, 3, 4};
  auto a = PrefixHasher(1).BlockHashes(t, 4);
  auto b = PrefixHasher(2).BlockHashes(t, 4);
  auto c = PrefixHasher(1, "x").BlockHashes(t, 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE((*a)[0], (*b)[0]);
  EXPECT_NE((*a)[0], (*c)[0]);
}

TEST(PrefixHasherTest, Int32TokensReinterpretAsUint32) {
  std::vector<int32_t> s = {-1, 0, 7};
  std::vector<uint32_t> u = {0xffffffffu, 0, 7};
  auto a = PrefixHasher(3).BlockHashes(s, 1);
  auto b = PrefixHasher(3).BlockHashes(u, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(PrefixHasherTest, RejectsBadBlockTokens) {
  std::vector<uint32_t> t = {1};
  EXPECT_EQ(PrefixHasher(0).BlockHashes(t, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NamespaceIdTest, FormatAndParse) {
  EXPECT_EQ(FormatNamespaceId(0x0123456789abcdefULL), "0123456789abcdef");
  EXPECT_EQ(FormatNamespaceId(1), "0000000000000001");
  EXPECT_EQ(*ParseNamespaceId("0123456789ABCDEF"), 0x0123456789abcdefULL);
  EXPECT_EQ(*ParseNamespaceId("0x00000000000000ff"), 255u);
  EXPECT_EQ(*ParseNamespaceId("0X00000000000000FF"), 255u);
  EXPECT_EQ(*ParseNamespaceId("ffffffffffffffff"), ~uint64_t{0});
  EXPECT_EQ(*ParseNamespaceId(FormatNamespaceId(1)), 1u);
}

// Anything but 16 hex digits is refused, never zero-padded: an id with two digits dropped
// would otherwise address another namespace.
TEST(NamespaceIdTest, RefusesAnythingButSixteenHexDigits) {
  const std::string expected =
      "expected exactly 16 hex digits, as `turbokv ns register` and `ns list` print it";
  struct Case {
    const char* text;
    std::string message;
  };
  const Case cases[] = {
      {"00000000000001", "namespace id \"00000000000001\" has 14 digits; " + expected},
      {"000000000000001", "namespace id \"000000000000001\" has 15 digits; " + expected},
      {"1ffffffffffffffff", "namespace id \"1ffffffffffffffff\" has 17 digits; " + expected},
      {"0xff", "namespace id \"0xff\" has 2 digits; " + expected},
      {"1", "namespace id \"1\" has 1 digits; " + expected},
      {"", "namespace id \"\" has 0 digits; " + expected},
      {"0x", "namespace id \"0x\" has 0 digits; " + expected},
      {"00000000000012g4", "namespace id \"00000000000012g4\" is not hexadecimal; " + expected},
      {"-000000000000001", "namespace id \"-000000000000001\" is not hexadecimal; " + expected},
      {"+000000000000001", "namespace id \"+000000000000001\" is not hexadecimal; " + expected},
      {" 000000000000001", "namespace id \" 000000000000001\" is not hexadecimal; " + expected},
  };
  for (const Case& c : cases) {
    absl::StatusOr<uint64_t> id = ParseNamespaceId(c.text);
    ASSERT_FALSE(id.ok()) << c.text << " parsed as " << *id;
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_EQ(id.status().message(), c.message);
  }
}

TEST(ClientOptionsTest, ValidateRanges) {
  ClientOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.max_chunk_bytes = (1 << 20) + 1;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = ClientOptions();
  o.max_attempts = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = ClientOptions();
  o.timeout = absl::ZeroDuration();
  EXPECT_FALSE(o.Validate().ok());
  for (int n : {0, 65}) {
    o = ClientOptions();
    o.connections = n;
    EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument) << n;
  }
  o.connections = 64;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(Client::Connect("", ClientOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientTest, UnreachableServerIsUnavailableAfterRetries) {
  ClientOptions o;
  o.max_attempts = 3;
  o.initial_backoff = absl::Milliseconds(10);
  o.timeout = absl::Seconds(5);
  auto c = Client::Connect("127.0.0.1:1", o);
  ASSERT_TRUE(c.ok());
  const absl::Time t0 = absl::Now();
  absl::StatusOr<ServerStats> s = (*c)->Stats();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

TEST(ClientTest, MismatchedPutArgumentsFailLocally) {
  auto c = Client::Connect("127.0.0.1:1");
  ASSERT_TRUE(c.ok());
  std::vector<std::string> hashes = {std::string(32, 'a')};
  std::vector<absl::Span<const uint8_t>> blocks;
  EXPECT_EQ((*c)->PutBlocks(1, hashes, blocks).status().code(), absl::StatusCode::kInvalidArgument);
  auto empty = (*c)->PutBlocks(1, {}, {});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(DTypeTest, ParseAndSize) {
  EXPECT_EQ(*ParseDType("fp16"), DType::kFloat16);
  EXPECT_EQ(*ParseDType("BFloat16"), DType::kBFloat16);
  EXPECT_EQ(*ParseDType("f32"), DType::kFloat32);
  EXPECT_FALSE(ParseDType("int8").ok());
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  NamespaceDescriptor d;
  d.num_layers = 30;
  d.num_kv_heads = 3;
  d.head_dim = 64;
  d.block_tokens = 16;
  EXPECT_EQ(d.raw_block_bytes(), 30u * 2 * 16 * 3 * 64 * 2);
}

}  // namespace
}  // namespace turbokv::client
