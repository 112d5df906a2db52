// turbokv::client against the real turbokv-server binary (fresh data dir per test).
// Skipped when the binary is missing (client_test_server.h). Quality bounds: relative MSE of
// every K and V section within [0.6, 1.12] x the codec theory for its (group size, bits)
// (docs/architecture.md, "The codec"; x (pi/2 - 1/g) for a QJL section), on real KV fixtures
// (tests/fixtures) and on synthetic KV.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "client_test_server.h"
#include "kv_layout.h"
#include "npy.h"
#include "turbokv/client/client.h"
#include "turbokv/client/prefix_hasher.h"

namespace turbokv::client {
namespace {

using cli::KvShape;
using cli::NpyArray;

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A sequence KV tensor [L][2][T][H][D] fp16 and its tokens.
struct Kv {
  uint32_t layers, tokens, heads, head_dim;
  std::string data;  // fp16
  std::vector<uint32_t> ids;
};

Kv SyntheticKv(uint32_t L, uint32_t T, uint32_t H, uint32_t D, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  Kv kv{L, T, H, D, std::string(size_t{L} * 2 * T * H * D * 2, '\0'), {}};
  size_t i = 0;
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t s = 0; s < 2; ++s)
      for (uint32_t t = 0; t < T; ++t)
        for (uint32_t c = 0; c < H * D; ++c, ++i) {
          const float v = s == 0 ? 0.3f + n(rng) * ((c % 37) == 0 ? 15.f : 1.f) : 0.3f * n(rng);
          // fp32 -> fp16 by truncation is fine for test data.
          uint32_t x;
          std::memcpy(&x, &v, 4);
          const int32_t e = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
          uint16_t hv = static_cast<uint16_t>((x >> 16) & 0x8000);
          if (e > 0 && e < 31) hv |= static_cast<uint16_t>((e << 10) | ((x >> 13) & 0x3ff));
          std::memcpy(kv.data.data() + 2 * i, &hv, 2);
        }
  for (uint32_t t = 0; t < T; ++t) kv.ids.push_back(t * 7 + 1);
  return kv;
}

// The fixture pair, or nullopt when absent.
std::optional<Kv> FixtureKv(const std::string& name) {
  const std::string dir = std::string(TURBOKV_SOURCE_DIR) + "/tests/fixtures/";
  absl::StatusOr<NpyArray> kv = cli::ReadNpy(dir + name + "_kv_64_fp16.npy");
  absl::StatusOr<NpyArray> tok = cli::ReadNpy(dir + name + "_tokens_64.npy");
  if (!kv.ok() || !tok.ok() || kv->descr != "<f2" || tok->descr != "<i4") return std::nullopt;
  Kv out{static_cast<uint32_t>(kv->shape[0]),
         static_cast<uint32_t>(kv->shape[2]),
         static_cast<uint32_t>(kv->shape[3]),
         static_cast<uint32_t>(kv->shape[4]),
         std::move(kv->data),
         {}};
  for (size_t i = 0; i < tok->shape[0]; ++i) {
    int32_t v;
    std::memcpy(&v, tok->data.data() + 4 * i, 4);
    out.ids.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

class ClientServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status st = server_.Start();
    if (st.code() == absl::StatusCode::kNotFound) GTEST_SKIP() << st.message();
    ASSERT_TRUE(st.ok()) << st;
    auto c = Client::Connect(server_.address());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }

  NamespaceInfo Register(const Kv& kv, uint32_t bt, const std::string& preset,
                         const std::string& model = "cpp-test") {
    NamespaceDescriptor d;
    d.model = model;
    d.dtype = DType::kFloat16;
    d.num_layers = kv.layers;
    d.num_kv_heads = kv.heads;
    d.head_dim = kv.head_dim;
    d.block_tokens = bt;
    d.codec.preset = preset;
    absl::StatusOr<NamespaceInfo> info = client_->RegisterNamespace(d);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : NamespaceInfo{};
  }

  std::vector<std::string> Blocks(const Kv& kv, uint32_t bt) {
    auto b = cli::SplitBlocks(kv.data, KvShape{kv.layers, kv.tokens, kv.heads, kv.head_dim, 2}, bt);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *b : std::vector<std::string>{};
  }

  static std::vector<absl::Span<const uint8_t>> Spans(const std::vector<std::string>& blocks) {
    std::vector<absl::Span<const uint8_t>> out;
    for (const std::string& b : blocks) {
      out.emplace_back(reinterpret_cast<const uint8_t*>(b.data()), b.size());
    }
    return out;
  }

  void PutOk(const NamespaceInfo& info, const std::vector<std::string>& hashes,
             const std::vector<std::string>& blocks) {
    auto res = client_->PutBlocks(info.namespace_id, hashes, Spans(blocks));
    ASSERT_TRUE(res.ok()) << res.status();
    ASSERT_EQ(res->size(), blocks.size());
    for (const BlockPutResult& r : *res) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.stored_bytes, info.packed_block_bytes);
    }
  }

  std::vector<std::string> Chain(uint64_t ns, const std::vector<uint32_t>& ids, uint32_t bt) {
    auto h = PrefixHasher(ns).BlockHashes(ids, static_cast<int>(bt));
    EXPECT_TRUE(h.ok());
    return *h;
  }

  testing::TestServer server_;
  std::unique_ptr<Client> client_;
};

// g * MSE per coordinate (docs/architecture.md, "The codec"), b = 1..4.
double Theory(uint32_t g, uint32_t b) {
  static const std::map<uint32_t, std::array<double, 4>> kTable = {
      {8, {0.3224, 0.09477, 0.02606, 0.006870}},  {16, {0.3432, 0.1058, 0.03008, 0.008094}},
      {32, {0.3534, 0.1116, 0.03226, 0.008774}},  {64, {0.3584, 0.1145, 0.03339, 0.009132}},
      {128, {0.3609, 0.1160, 0.03397, 0.009315}}, {256, {0.3621, 0.1167, 0.03426, 0.009408}}};
  return kTable.at(g)[b - 1];
}

// Relative MSE of section s (0 = K, 1 = V) over blocks [L][2][bt][H][D] fp16.
double RelMse(const std::vector<std::string>& want, const std::vector<std::string>& got, int s,
              uint32_t layers) {
  double num = 0, den = 0;
  for (size_t b = 0; b < want.size(); ++b) {
    const size_t slab = want[b].size() / 2 / (2 * layers);  // elements per (layer, K/V)
    for (uint32_t l = 0; l < layers; ++l) {
      const size_t base = (size_t{l} * 2 + s) * slab;
      for (size_t i = 0; i < slab; ++i) {
        uint16_t x, y;
        std::memcpy(&x, want[b].data() + 2 * (base + i), 2);
        std::memcpy(&y, got[b].data() + 2 * (base + i), 2);
        const double fx = HalfToFloat(x), fy = HalfToFloat(y);
        num += (fx - fy) * (fx - fy);
        den += fx * fx;
      }
    }
  }
  return num / den;
}

TEST_F(ClientServerTest, RegisterIsIdempotentAndValidates) {
  Kv kv = SyntheticKv(2, 32, 2, 64, 1);
  NamespaceInfo a = Register(kv, 16, "k4v4-g32");
  NamespaceInfo b = Register(kv, 16, "k4v4-g32");
  EXPECT_TRUE(a.created);
  EXPECT_FALSE(b.created);
  EXPECT_EQ(a.namespace_id, b.namespace_id);
  EXPECT_EQ(a.raw_block_bytes, 2u * 2 * 16 * 2 * 64 * 2);
  EXPECT_GT(a.bits_per_value, 4.0);
  EXPECT_LT(a.bits_per_value, 5.5);
  ASSERT_TRUE(a.descriptor.codec.key.has_value());
  EXPECT_EQ(a.descriptor.codec.key->bits, 4u);
  EXPECT_NE(Register(kv, 16, "k3v3-g32").namespace_id, a.namespace_id);
  NamespaceDescriptor bad;
  bad.model = "m";
  bad.num_layers = 2;
  bad.num_kv_heads = 2;
  bad.head_dim = 0;
  bad.block_tokens = 16;
  EXPECT_EQ(client_->RegisterNamespace(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientServerTest, RawPresetIsBitExact) {
  Kv kv = SyntheticKv(3, 40, 2, 32, 2);
  NamespaceInfo info = Register(kv, 8, "raw");
  auto chain = Chain(info.namespace_id, kv.ids, 8);
  auto blocks = Blocks(kv, 8);
  ASSERT_EQ(chain.size(), 5u);
  PutOk(info, chain, blocks);
  auto got = client_->GetBlocks(info.namespace_id, chain);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->dtype, DType::kFloat16);
  ASSERT_EQ(got->blocks.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(got->blocks[i].has_value());
    EXPECT_EQ(*got->blocks[i], blocks[i]) << "block " << i;
  }
}

class PresetTest : public ClientServerTest,
                   public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(PresetTest, RoundTripsWithinTheory) {
  const auto& [preset, source] = GetParam();
  std::optional<Kv> kv = source == "synthetic" ? SyntheticKv(4, 64, 2, 128, 3) : FixtureKv(source);
  if (!kv) GTEST_SKIP() << "fixture " << source << " missing";
  NamespaceInfo info = Register(*kv, 16, preset);
  auto chain = Chain(info.namespace_id, kv->ids, 16);
  auto blocks = Blocks(*kv, 16);
  PutOk(info, chain, blocks);
  auto got = client_->GetBlocks(info.namespace_id, chain);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<std::string> out;
  for (auto& b : got->blocks) {
    ASSERT_TRUE(b.has_value());
    out.push_back(*b);
  }
  if (preset == "raw") {
    EXPECT_EQ(out, blocks);
    return;
  }
  const CodecConfig& codec = info.descriptor.codec;
  ASSERT_TRUE(codec.key && codec.value) << "server did not resolve the codec";
  for (int s = 0; s < 2; ++s) {
    const SectionCodec& sc = s == 0 ? *codec.key : *codec.value;
    const double mse = RelMse(blocks, out, s, kv->layers);
    double lo = 0, hi = 2e-4;  // 8 bits
    if (sc.bits <= 4) {
      // QJL makes inner products unbiased at the price of MSE: its residual estimate has
      // E||r_hat - r||^2 = (pi/2 - 1/g) ||r||^2, so the section's MSE is that multiple of the
      // plain b-bit MSE (derivation in tests/python/test_client_integration.py).
      const double t = Theory(sc.group_size, sc.bits);
      lo = 0.6 * t;
      hi = 1.12 * t * (sc.qjl ? M_PI / 2 - 1.0 / sc.group_size : 1.0);
    }
    EXPECT_GE(mse, lo) << preset << (s ? " V" : " K") << " bits " << sc.bits;
    EXPECT_LE(mse, hi) << preset << (s ? " V" : " K") << " bits " << sc.bits;
    std::printf("[ quality  ] %s %s %s: bits %u g %u qjl %d relative MSE %.5f\n", source.c_str(),
                preset.c_str(), s ? "V" : "K", sc.bits, sc.group_size, sc.qjl, mse);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetTest,
                         ::testing::Combine(::testing::Values("k8v4", "k4v4-g32", "k4v3-g32",
                                                              "k3v3-g32", "k3v2-g32-qjl", "raw"),
                                            ::testing::Values("synthetic", "smollm2",
                                                              "stories260k")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST_F(ClientServerTest, LookupIsAnExactLeadingMatch) {
  std::optional<Kv> kv = FixtureKv("smollm2");
  if (!kv) kv = SyntheticKv(30, 64, 3, 64, 4);
  NamespaceInfo info = Register(*kv, 16, "k4v4-g32");
  const uint64_t ns = info.namespace_id;
  auto chain = Chain(ns, kv->ids, 16);
  auto blocks = Blocks(*kv, 16);
  ASSERT_EQ(chain.size(), 4u);
  auto lookup = [&](const std::vector<std::string>& c) {
    auto r = client_->Lookup(ns, c);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : LookupResult{999, 999};
  };
  EXPECT_EQ(lookup(chain).matched_blocks, 0u);
  PutOk(info, {chain[0], chain[1]}, {blocks[0], blocks[1]});
  EXPECT_EQ(lookup(chain).matched_blocks, 2u);
  EXPECT_EQ(lookup(chain).matched_tokens, 32u);
  PutOk(info, {chain[2], chain[3]}, {blocks[2], blocks[3]});
  auto full = client_->Lookup(ns, chain, /*lease_seconds=*/30);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->matched_blocks, 4u);
  EXPECT_EQ(full->matched_tokens, 64u);
  std::vector<uint32_t> div = kv->ids;
  div[40] += 1;
  EXPECT_EQ(lookup(Chain(ns, div, 16)).matched_blocks, 2u);
  EXPECT_EQ(lookup({}).matched_blocks, 0u);
  std::vector<std::string> holed = chain;
  holed[0] = std::string(32, '\0');
  EXPECT_EQ(lookup(holed).matched_blocks, 0u);
  EXPECT_EQ(client_->Lookup(ns ^ 1, chain).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientServerTest, LayerRangeEqualsSliceOfFullGet) {
  std::optional<Kv> kv = FixtureKv("smollm2");
  if (!kv) kv = SyntheticKv(30, 64, 3, 64, 5);
  NamespaceInfo info = Register(*kv, 16, "k3v3-g32");
  auto chain = Chain(info.namespace_id, kv->ids, 16);
  PutOk(info, chain, Blocks(*kv, 16));
  auto full = client_->GetBlocks(info.namespace_id, chain);
  ASSERT_TRUE(full.ok()) << full.status();
  const size_t per_layer = full->blocks[0]->size() / kv->layers;
  for (auto [a, b] : {std::pair<uint32_t, uint32_t>{0, 1}, {5, 17}, {kv->layers - 1, kv->layers}}) {
    GetOptions opt;
    opt.layer_begin = a;
    opt.layer_end = b;
    auto part = client_->GetBlocks(info.namespace_id, chain, opt);
    ASSERT_TRUE(part.ok()) << part.status();
    for (size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ(*part->blocks[i], full->blocks[i]->substr(a * per_layer, (b - a) * per_layer))
          << "layers " << a << ":" << b << " block " << i;
    }
  }
  GetOptions bad;
  bad.layer_begin = 3;
  bad.layer_end = kv->layers + 1;
  EXPECT_EQ(client_->GetBlocks(info.namespace_id, chain, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientServerTest, BlocksLargerThanOneChunk) {
  Kv kv = SyntheticKv(32, 32, 8, 128, 6);  // a 16-token block is 2 MiB of fp16
  NamespaceInfo info = Register(kv, 16, "raw", "big");
  ASSERT_EQ(info.raw_block_bytes, 2u << 20);
  auto chain = Chain(info.namespace_id, kv.ids, 16);
  auto blocks = Blocks(kv, 16);
  PutOk(info, chain, blocks);
  auto got = client_->GetBlocks(info.namespace_id, chain);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got->blocks[0], blocks[0]);
  EXPECT_EQ(*got->blocks[1], blocks[1]);
}

// A client with several connections, used by as many threads at once: every call (2 MiB
// blocks in two chunks each way, RAW and PACKED gets) round-trips on whichever it takes.
TEST_F(ClientServerTest, SeveralConnectionsSharedByThreads) {
  ClientOptions o;
  o.connections = 3;
  auto multi = Client::Connect(server_.address(), o);
  ASSERT_TRUE(multi.ok()) << multi.status();
  Kv kv = SyntheticKv(32, 64, 8, 128, 8);  // four 2 MiB blocks
  NamespaceInfo info = Register(kv, 16, "raw", "multi");
  const auto chain = Chain(info.namespace_id, kv.ids, 16);
  const auto blocks = Blocks(kv, 16);
  ASSERT_EQ(blocks.size(), 4u);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        const size_t b = static_cast<size_t>(t + round) % blocks.size();
        const absl::Span<const uint8_t> span(reinterpret_cast<const uint8_t*>(blocks[b].data()),
                                             blocks[b].size());
        auto put = (*multi)->PutBlocks(info.namespace_id, {chain[b]}, {span});
        if (!put.ok() || !(*put)[0].status.ok()) continue;
        GetOptions packed;
        packed.encoding = Encoding::kPacked;
        auto raw = (*multi)->GetBlocks(info.namespace_id, {chain[b]});
        auto pk = (*multi)->GetBlocks(info.namespace_id, {chain[b]}, packed);
        if (raw.ok() && pk.ok() && raw->blocks[0] == blocks[b] && pk->blocks[0].has_value() &&
            pk->blocks[0]->size() == info.packed_block_bytes) {
          ++ok;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 9);
}

TEST_F(ClientServerTest, PackedRoundTripAndMissingBlocks) {
  Kv kv = SyntheticKv(4, 48, 2, 64, 7);
  NamespaceInfo info = Register(kv, 16, "k4v3-g32");
  auto chain = Chain(info.namespace_id, kv.ids, 16);
  auto blocks = Blocks(kv, 16);
  PutOk(info, {chain[0], chain[1]}, {blocks[0], blocks[1]});
  GetOptions packed;
  packed.encoding = Encoding::kPacked;
  auto p = client_->GetBlocks(info.namespace_id, chain, packed);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->blocks[0] && p->blocks[1]);
  EXPECT_FALSE(p->blocks[2].has_value());
  EXPECT_EQ(p->blocks[0]->size(), info.packed_block_bytes);
  // Re-put the packed bytes under other hashes: decodes identically.
  auto other = PrefixHasher(info.namespace_id, "copy").BlockHashes(kv.ids, 16);
  std::vector<std::string> pk = {*p->blocks[0], *p->blocks[1]};
  auto res = client_->PutBlocks(info.namespace_id, {(*other)[0], (*other)[1]}, Spans(pk),
                                Encoding::kPacked);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_TRUE((*res)[0].status.ok() && (*res)[1].status.ok());
  auto a = client_->GetBlocks(info.namespace_id, {chain[0], chain[1]});
  auto b = client_->GetBlocks(info.namespace_id, {(*other)[0], (*other)[1]});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->blocks, b->blocks);
  // A corrupted packed block is refused for that block only.
  std::string bad = pk[0];
  bad[bad.size() / 2] ^= 0x5a;
  auto r2 = client_->PutBlocks(info.namespace_id, {std::string(32, 'z')},
                               Spans(std::vector<std::string>{bad}), Encoding::kPacked);
  if (r2.ok()) {
    EXPECT_FALSE((*r2)[0].status.ok());
  } else {
    EXPECT_EQ(r2.status().code(), absl::StatusCode::kInvalidArgument) << r2.status();
  }
}

TEST_F(ClientServerTest, DeleteDropAndStats) {
  std::optional<Kv> kv = FixtureKv("stories260k");
  if (!kv) kv = SyntheticKv(5, 64, 4, 8, 8);
  NamespaceInfo info = Register(*kv, 16, "k4v4-g32");
  const uint64_t ns = info.namespace_id;
  auto chain = Chain(ns, kv->ids, 16);
  PutOk(info, chain, Blocks(*kv, 16));
  auto stats = client_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  bool seen = false;
  for (const NamespaceStats& s : stats->namespaces) {
    if (s.namespace_id != ns) continue;
    seen = true;
    EXPECT_EQ(s.blocks, 4u);
    EXPECT_EQ(s.logical_bytes, 4 * info.raw_block_bytes);
    EXPECT_EQ(s.descriptor.num_layers, kv->layers);
  }
  EXPECT_TRUE(seen);
  EXPECT_FALSE(stats->codec_backend.empty());
  std::vector<std::string> del = {chain[2], chain[3], std::string(32, 'q')};
  auto deleted = client_->DeleteBlocks(ns, del);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 2u);
  EXPECT_EQ(client_->Lookup(ns, chain)->matched_blocks, 2u);
  auto dropped = client_->DropNamespace(ns);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(*dropped, 2u);
  EXPECT_EQ(client_->Lookup(ns, chain).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientServerTest, ShutdownGivesUnavailableAndRestartRecovers) {
  std::optional<Kv> kv = FixtureKv("stories260k");
  if (!kv) kv = SyntheticKv(5, 64, 4, 8, 9);
  NamespaceInfo info = Register(*kv, 16, "k4v4-g32");
  auto chain = Chain(info.namespace_id, kv->ids, 16);
  PutOk(info, chain, Blocks(*kv, 16));
  server_.Stop();
  ClientOptions fast;
  fast.max_attempts = 2;
  fast.timeout = absl::Seconds(3);
  // Channel arguments of its own, so it gets a subchannel of its own: with the defaults it
  // would share (gRPC's global subchannel pool) the one of the client connected below, and
  // leave it in reconnect backoff (1 s, growing) after its refused connects; that client's 4
  // attempts (350 ms of backoff) could then all fail on a server that is up again (seen under
  // TSan).
  fast.max_reconnect_backoff = absl::Milliseconds(100);
  auto dead = Client::Connect(server_.address(), fast);
  ASSERT_TRUE(dead.ok());
  EXPECT_EQ((*dead)->Stats().status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(server_.Start().ok());
  auto c = Client::Connect(server_.address());
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Lookup(info.namespace_id, chain);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->matched_blocks, 4u);
}

}  // namespace
}  // namespace turbokv::client
