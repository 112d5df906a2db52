// Rendezvous placement and endpoint parsing (client/include/turbokv/client/rendezvous.h) against
// the vectors shared with the Python client (client/python/turbokv/rendezvous_vectors.json, also
// checked by tests/python/test_cluster_rendezvous.py).
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "turbokv/client/rendezvous.h"
#include "turbokv/client/sharded_client.h"

namespace turbokv::client {
namespace {

google::protobuf::Struct LoadVectors() {
  std::ifstream in(TURBOKV_RENDEZVOUS_VECTORS);
  std::stringstream ss;
  ss << in.rdbuf();
  google::protobuf::Struct doc;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(ss.str(), &doc).ok())
      << "cannot parse " << TURBOKV_RENDEZVOUS_VECTORS;
  return doc;
}

std::vector<std::string> VectorNodes(const google::protobuf::Struct& doc) {
  std::vector<std::string> nodes;
  for (const auto& n : doc.fields().at("nodes").list_value().values()) {
    nodes.push_back(n.string_value());
  }
  return nodes;
}

TEST(RendezvousTest, MatchesSharedVectors) {
  const google::protobuf::Struct doc = LoadVectors();
  const std::vector<std::string> nodes = VectorNodes(doc);
  const auto& cases = doc.fields().at("cases").list_value().values();
  ASSERT_GE(cases.size(), 5);
  for (const auto& c : cases) {
    const auto& f = c.struct_value().fields();
    const std::string hash = absl::HexStringToBytes(f.at("block_hash").string_value());
    SCOPED_TRACE(f.at("block_hash").string_value());
    for (const auto& [node, w] : f.at("weights").struct_value().fields()) {
      uint64_t want = 0;
      ASSERT_TRUE(absl::SimpleAtoi(w.string_value(), &want));
      EXPECT_EQ(RendezvousWeight(node, hash), want) << node;
    }
    const std::vector<size_t> rank = RendezvousRank(nodes, hash);
    const auto& want_rank = f.at("rank").list_value().values();
    ASSERT_EQ(rank.size(), static_cast<size_t>(want_rank.size()));
    for (size_t i = 0; i < rank.size(); ++i) {
      EXPECT_EQ(nodes[rank[i]], want_rank[i].string_value()) << "rank " << i;
    }
    const std::vector<size_t> two = RendezvousOwners(nodes, hash, 2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0], rank[0]);
    EXPECT_EQ(two[1], rank[1]);
  }
}

TEST(RendezvousTest, TuningNodeIsTheFirstOfTheTuningKeysRank) {
  // The same nodes as tests/python/test_cluster_rendezvous.py pins for sharding.tuning_node.
  const std::vector<std::string> a = {"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"};
  EXPECT_EQ(TuningNode(a), 1u);
  const std::vector<std::string> b = {"turbokv-0:50051", "turbokv-1:50051", "turbokv-2:50051",
                                      "turbokv-3:50051"};
  EXPECT_EQ(TuningNode(b), 1u);
  EXPECT_EQ(TuningNode(b), RendezvousRank(b, kTuningKey)[0]);
  // Dropping another node keeps it; dropping it moves it to the next of the rank (the
  // index is into the list given).
  const std::vector<std::string> without_0 = {b[0], b[1], b[3]};
  EXPECT_EQ(without_0[TuningNode(without_0)], b[1]);
  const std::vector<std::string> without_1 = {b[0], b[2], b[3]};
  EXPECT_EQ(without_1[TuningNode(without_1)], b[2]);
  EXPECT_EQ(TuningNode({}), 0u);
}

TEST(RendezvousTest, WeightMatchesIndependentSha256) {
  // `printf '127.0.0.1:50051\0' + bytes 0..31 | sha256sum`, first 16 hex digits (coreutils).
  std::string hash;
  for (int i = 0; i < 32; ++i) hash.push_back(static_cast<char>(i));
  EXPECT_EQ(RendezvousWeight("127.0.0.1:50051", hash), 0xd589d599507e749aULL);
}

std::string Key(int i) {
  std::string k = absl::StrCat("key ", i);
  k.resize(32, '\x5a');
  return k;
}

// Adding a node to N moves ~1/(N+1) of the keys, and only onto the new node.
TEST(RendezvousTest, AddingANodeMovesAboutOneOverNKeys) {
  for (int n : {3, 4, 8}) {
    std::vector<std::string> before;
    for (int i = 0; i < n; ++i) before.push_back(absl::StrCat("10.0.0.", i, ":50051"));
    std::vector<std::string> after = before;
    after.push_back(absl::StrCat("10.0.0.", n, ":50051"));
    const int keys = 20000;
    int moved = 0;
    for (int i = 0; i < keys; ++i) {
      const std::string k = Key(i);
      const size_t a = RendezvousOwners(before, k, 1)[0];
      const size_t b = RendezvousOwners(after, k, 1)[0];
      if (before[a] != after[b]) {
        EXPECT_EQ(b, static_cast<size_t>(n));
        ++moved;
      }
    }
    const double frac = static_cast<double>(moved) / keys;
    std::printf("remap %d -> %d nodes: %.4f of keys moved (1/N = %.4f)\n", n, n + 1, frac,
                1.0 / (n + 1));
    EXPECT_NEAR(frac, 1.0 / (n + 1), 0.015);
  }
}

TEST(RendezvousTest, OwnersAreDistinctAndCapped) {
  const std::vector<std::string> nodes = {"a:1", "b:1", "c:1"};
  for (int i = 0; i < 100; ++i) {
    const std::vector<size_t> o = RendezvousOwners(nodes, Key(i), 2);
    ASSERT_EQ(o.size(), 2u);
    EXPECT_NE(o[0], o[1]);
  }
  EXPECT_EQ(RendezvousOwners(nodes, Key(0), 7).size(), 3u);
  EXPECT_EQ(RendezvousOwners(nodes, Key(0), 0).size(), 1u);
}

// Segment placement: the same placement keys, contexts and owners as the Python client.
TEST(SegmentPlacementTest, MatchesSharedVectors) {
  const google::protobuf::Struct doc = LoadVectors();
  const std::vector<std::string> nodes = VectorNodes(doc);
  const auto& cases = doc.fields().at("segment_cases").list_value().values();
  ASSERT_GE(cases.size(), 8);
  for (const auto& c : cases) {
    const auto& f = c.struct_value().fields();
    SCOPED_TRACE(f.at("name").string_value());
    std::vector<std::string> chain;
    for (const auto& h : f.at("chain").list_value().values()) {
      chain.push_back(absl::HexStringToBytes(h.string_value()));
    }
    const int s = static_cast<int>(f.at("segment_blocks").number_value());
    const int r = static_cast<int>(f.at("replicas").number_value());
    const auto start = static_cast<size_t>(f.at("start").number_value());
    const auto end = static_cast<size_t>(f.at("end").number_value());
    absl::StatusOr<ChainContext> ctx = MakeChainContext(chain, start, s);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    const auto& want_ctx = f.at("context").struct_value().fields();
    EXPECT_EQ(ctx->position, static_cast<uint64_t>(want_ctx.at("position").number_value()));
    EXPECT_EQ(absl::BytesToHexString(ctx->segment_head),
              want_ctx.at("segment_head").string_value());
    const absl::Span<const std::string> slice =
        absl::MakeConstSpan(chain).subspan(start, end - start);
    absl::StatusOr<std::vector<absl::string_view>> keys = PlacementKeys(slice, s, *ctx);
    ASSERT_TRUE(keys.ok()) << keys.status();
    const auto& want_keys = f.at("placement_keys").list_value().values();
    const auto& want_owners = f.at("owners").list_value().values();
    ASSERT_EQ(keys->size(), static_cast<size_t>(want_keys.size()));
    for (size_t i = 0; i < keys->size(); ++i) {
      EXPECT_EQ(absl::BytesToHexString((*keys)[i]), want_keys[i].string_value()) << i;
      const std::vector<size_t> owners = RendezvousOwners(nodes, (*keys)[i], r);
      const auto& want = want_owners[i].list_value().values();
      ASSERT_EQ(owners.size(), static_cast<size_t>(want.size())) << i;
      for (size_t k = 0; k < owners.size(); ++k) {
        EXPECT_EQ(nodes[owners[k]], want[k].string_value()) << i << " owner " << k;
      }
    }
  }
}

TEST(SegmentPlacementTest, SharedErrorVectorsNameTheArgument) {
  const google::protobuf::Struct doc = LoadVectors();
  for (const auto& c : doc.fields().at("segment_errors").list_value().values()) {
    const auto& f = c.struct_value().fields();
    SCOPED_TRACE(f.at("name").string_value());
    ChainContext ctx;
    ctx.position = static_cast<uint64_t>(f.at("position").number_value());
    ctx.segment_head = absl::HexStringToBytes(f.at("segment_head").string_value());
    std::vector<std::string> hashes(static_cast<size_t>(f.at("hashes").number_value()),
                                    std::string(32, 'h'));
    absl::StatusOr<std::vector<absl::string_view>> keys =
        PlacementKeys(hashes, static_cast<int>(f.at("segment_blocks").number_value()), ctx);
    ASSERT_FALSE(keys.ok());
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(keys.status().message().find(f.at("names").string_value()), absl::string_view::npos)
        << keys.status();
  }
}

// A slice placed with its context lands exactly where the whole chain puts those blocks.
TEST(SegmentPlacementTest, SliceWithContextMatchesWholeChain) {
  std::vector<std::string> chain;
  for (int i = 0; i < 70; ++i) chain.push_back(Key(i));
  for (int s : {1, 2, 3, 16, 64, 100}) {
    absl::StatusOr<std::vector<absl::string_view>> whole = PlacementKeys(chain, s, {});
    ASSERT_TRUE(whole.ok());
    for (size_t i = 0; i < chain.size(); ++i) {
      ASSERT_EQ((*whole)[i], chain[i - i % s]) << s << " " << i;
    }
    for (size_t start = 0; start <= chain.size(); ++start) {
      absl::StatusOr<ChainContext> ctx = MakeChainContext(chain, start, s);
      ASSERT_TRUE(ctx.ok());
      absl::StatusOr<std::vector<absl::string_view>> part =
          PlacementKeys(absl::MakeConstSpan(chain).subspan(start), s, *ctx);
      ASSERT_TRUE(part.ok()) << part.status();
      for (size_t j = 0; j < part->size(); ++j) {
        ASSERT_EQ((*part)[j], (*whole)[start + j]) << s << " " << start << " " << j;
      }
    }
  }
  EXPECT_EQ(MakeChainContext(chain, 71, 16).status().code(), absl::StatusCode::kInvalidArgument);
  // At a segment boundary the position alone is enough; inside one the head is required.
  ChainContext at_boundary;
  at_boundary.position = 32;
  EXPECT_TRUE(PlacementKeys(absl::MakeConstSpan(chain).subspan(32), 16, at_boundary).ok());
  ChainContext inside;
  inside.position = 21;
  absl::StatusOr<std::vector<absl::string_view>> bad =
      PlacementKeys(absl::MakeConstSpan(chain).subspan(21), 16, inside);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "chain.segment_head is required: hashes[0] sits at chain position 21, inside the "
            "segment that starts at position 16 (segment_blocks=16); build the context with "
            "MakeChainContext");
  EXPECT_TRUE(PlacementKeys({}, 16, inside).ok());  // an empty call needs nothing
}

TEST(ShardedClientTest, RejectsCallsWithoutTheSegmentHead) {
  ShardedClientOptions o;
  o.segment_blocks = 0;
  EXPECT_EQ(ShardedClient::Connect("127.0.0.1:1", o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.segment_blocks = 4;
  absl::StatusOr<std::unique_ptr<ShardedClient>> c =
      ShardedClient::Connect("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", o);
  ASSERT_TRUE(c.ok());
  std::vector<std::string> chain;
  for (int i = 0; i < 10; ++i) chain.push_back(Key(i));
  const absl::Span<const std::string> tail = absl::MakeConstSpan(chain).subspan(6);
  ChainContext no_head;
  no_head.position = 6;
  // Refused before any RPC (the nodes do not exist): the caller's error, not Unavailable.
  EXPECT_EQ((*c)->Lookup(7, tail, 0, {}, no_head).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->GetBlocks(7, tail, {}, {}, no_head).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->DeleteBlocks(7, tail, {}, no_head).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string byte = "x";
  std::vector<absl::Span<const uint8_t>> blocks(
      tail.size(), absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(byte.data()), 1));
  EXPECT_EQ((*c)->PutBlocks(7, tail, blocks, Encoding::kRaw, {}, no_head).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Placement: segment [4, 8) on the owners of chain[4], [8, 10) on those of chain[8].
  absl::StatusOr<ChainContext> ctx = (*c)->ContextOf(chain, 6);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ(ctx->segment_head, chain[4]);
  absl::StatusOr<std::vector<std::vector<std::string>>> p = (*c)->Placement(tail, *ctx);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 4u);
  EXPECT_EQ((*p)[0], (*c)->Owners(chain[4]));
  EXPECT_EQ((*p)[1], (*c)->Owners(chain[4]));
  EXPECT_EQ((*p)[2], (*c)->Owners(chain[8]));
  EXPECT_EQ((*p)[3], (*c)->Owners(chain[8]));
}

TEST(EndpointsTest, ParsesStaticAndDnsItems) {
  absl::StatusOr<std::vector<Endpoint>> eps =
      ParseEndpoints("127.0.0.1:1, localhost:2,[::1]:3,dns:///svc.ns:50051");
  ASSERT_TRUE(eps.ok()) << eps.status();
  ASSERT_EQ(eps->size(), 4u);
  EXPECT_EQ((*eps)[0].Spec(), "127.0.0.1:1");
  EXPECT_EQ((*eps)[1].Spec(), "localhost:2");
  EXPECT_EQ((*eps)[2].host, "::1");
  EXPECT_EQ((*eps)[2].Spec(), "[::1]:3");
  EXPECT_TRUE((*eps)[3].dns);
  EXPECT_EQ((*eps)[3].Spec(), "dns:///svc.ns:50051");
}

TEST(EndpointsTest, RejectsBadSpecs) {
  for (const char* bad : {"", "host", "host:0", "host:70000", ":5", "a:1,a:1", "dns://auth/x:1",
                          "::1:5", "a:1,,b:2", "a:1x"}) {
    absl::StatusOr<std::vector<Endpoint>> eps = ParseEndpoints(bad);
    EXPECT_FALSE(eps.ok()) << bad;
    if (!eps.ok()) {
      EXPECT_EQ(eps.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(EndpointsTest, ResolvesDnsToIpNodes) {
  absl::StatusOr<std::vector<Endpoint>> eps = ParseEndpoints("dns:///localhost:7000,10.1.2.3:9");
  ASSERT_TRUE(eps.ok());
  absl::StatusOr<std::vector<std::string>> nodes = ResolveEndpoints(*eps);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->back(), "10.1.2.3:9");
  bool loopback = false;
  for (const std::string& n : *nodes) loopback |= n == "127.0.0.1:7000" || n == "[::1]:7000";
  EXPECT_TRUE(loopback);
  eps = ParseEndpoints("dns:///no-such-host.invalid:1");
  ASSERT_TRUE(eps.ok());
  EXPECT_EQ(ResolveEndpoints(*eps).status().code(), absl::StatusCode::kUnavailable);
}

TEST(ShardedClientTest, ValidatesOptionsAndSpec) {
  ShardedClientOptions o;
  o.replicas = 0;
  EXPECT_EQ(ShardedClient::Connect("127.0.0.1:1", o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShardedClient::Connect("nope").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<ShardedClient>> c =
      ShardedClient::Connect("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->Nodes().size(), 3u);
  EXPECT_EQ((*c)->Owners(Key(1)).size(), 1u);
}

// With every node unreachable the call fails with Unavailable; nothing else ever does.
TEST(ShardedClientTest, AllNodesDownIsUnavailable) {
  ShardedClientOptions o;
  o.client.timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<ShardedClient>> c = ShardedClient::Connect("127.0.0.1:1", o);
  ASSERT_TRUE(c.ok());
  const std::vector<std::string> hashes = {Key(1), Key(2)};
  EXPECT_EQ((*c)->Lookup(7, hashes).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*c)->GetBlocks(7, hashes).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace turbokv::client
