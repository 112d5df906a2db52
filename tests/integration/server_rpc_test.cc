// turbokv-server end to end through the generated gRPC stub: round trips, every bad input's
// status code, capacity, restart, kill -9 under write load, SIGTERM, health, metrics.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server_process.h"

namespace turbokv::server {
namespace {

using testing::Scaled;
using testing::ServerProcess;

constexpr size_t kChunk = size_t{1} << 20;

// ---- data ---------------------------------------------------------------------------------
uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (x >> 16) & 0x8000;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  const uint32_t mant = x & 0x7fffff;
  if (exp <= 0) return sign;            // tiny -> 0 (test data never goes there)
  if (exp >= 31) return sign | 0x7bff;  // clamp (never happens either)
  uint16_t h = static_cast<uint16_t>(sign | (exp << 10) | (mant >> 13));
  if (mant & 0x1000) ++h;  // round half up
  return h;
}
float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t x = exp == 0 ? sign : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Random N(0,1) fp16 values: `bytes` bytes.
std::string RandomFp16(size_t bytes, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::string out(bytes, '\0');
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    const uint16_t h = FloatToHalf(normal(rng));
    std::memcpy(&out[i], &h, 2);
  }
  return out;
}

std::string Hash(uint64_t i, size_t bytes = 16) {
  std::string h(bytes, '\0');
  for (size_t k = 0; k < bytes; ++k) h[k] = static_cast<char>((i >> (8 * (k % 8))) ^ (k * 37));
  return h;
}

v1::NamespaceDescriptor SmallDescriptor(const std::string& preset = "") {
  v1::NamespaceDescriptor d;
  d.set_model("test/model");
  d.set_dtype(v1::DTYPE_FP16);
  d.set_num_layers(2);
  d.set_num_kv_heads(2);
  d.set_head_dim(64);
  d.set_block_tokens(16);
  d.mutable_codec()->set_preset(preset);
  return d;  // raw block: 2*2*16*2*64*2 = 16 KiB
}

v1::NamespaceDescriptor LargeDescriptor() {
  v1::NamespaceDescriptor d = SmallDescriptor();
  d.set_num_layers(8);
  d.set_num_kv_heads(8);
  d.set_head_dim(128);
  d.set_block_tokens(64);
  return d;  // raw block: 8*2*64*8*128*2 = 2 MiB (two chunks)
}

// ---- RPC helpers --------------------------------------------------------------------------
v1::RegisterNamespaceResponse Register(v1::TurboKV::Stub& stub, const v1::NamespaceDescriptor& d,
                                       grpc::Status* status_out = nullptr) {
  grpc::ClientContext ctx;
  v1::RegisterNamespaceRequest req;
  *req.mutable_namespace_descriptor() = d;
  v1::RegisterNamespaceResponse resp;
  grpc::Status s = stub.RegisterNamespace(&ctx, req, &resp);
  if (status_out != nullptr) {
    *status_out = s;
  } else {
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  return resp;
}

struct PutBlock {
  std::string hash;
  v1::Encoding encoding = v1::ENCODING_RAW;
  std::string bytes;
};

// Chunks of at most 1 MiB, block_bytes and encoding on every chunk.
std::vector<v1::PutBlocksRequest> Chunks(uint64_t ns, const std::vector<PutBlock>& blocks) {
  std::vector<v1::PutBlocksRequest> out;
  for (const PutBlock& b : blocks) {
    size_t offset = 0;
    do {
      v1::PutBlocksRequest m;
      m.set_namespace_id(ns);
      m.set_block_hash(b.hash);
      m.set_encoding(b.encoding);
      m.set_block_bytes(b.bytes.size());
      m.set_offset(offset);
      m.set_data(b.bytes.substr(offset, kChunk));
      offset += kChunk;
      out.push_back(std::move(m));
    } while (offset < b.bytes.size());
  }
  return out;
}

grpc::Status PutMessages(v1::TurboKV::Stub& stub, const std::vector<v1::PutBlocksRequest>& msgs,
                         v1::PutBlocksResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto writer = stub.PutBlocks(&ctx, resp);
  for (const auto& m : msgs) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

v1::PutBlocksResponse Put(v1::TurboKV::Stub& stub, uint64_t ns,
                          const std::vector<PutBlock>& blocks) {
  v1::PutBlocksResponse resp;
  grpc::Status s = PutMessages(stub, Chunks(ns, blocks), &resp);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  return resp;
}

grpc::Status Lookup(v1::TurboKV::Stub& stub, uint64_t ns, const std::vector<std::string>& chain,
                    v1::LookupResponse* resp, uint32_t lease = 0) {
  grpc::ClientContext ctx;
  v1::LookupRequest req;
  req.set_namespace_id(ns);
  for (const auto& h : chain) req.add_block_hashes(h);
  req.set_lease_seconds(lease);
  return stub.Lookup(&ctx, req, resp);
}

uint32_t Matched(v1::TurboKV::Stub& stub, uint64_t ns, const std::vector<std::string>& chain) {
  v1::LookupResponse resp;
  grpc::Status s = Lookup(stub, ns, chain, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.matched_blocks();
}

struct GotBlock {
  bool found = false;
  std::string bytes;
};

// Reassembles the stream per request index, checking chunk order and sizes.
grpc::Status Get(v1::TurboKV::Stub& stub, const v1::GetBlocksRequest& req,
                 std::vector<GotBlock>* out) {
  out->assign(req.block_hashes_size(), GotBlock{});
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub.GetBlocks(&ctx, req);
  v1::GetBlocksResponse m;
  while (reader->Read(&m)) {
    EXPECT_LT(m.index(), static_cast<uint32_t>(req.block_hashes_size()));
    EXPECT_LE(m.data().size(), kChunk);
    GotBlock& g = (*out)[m.index()];
    EXPECT_EQ(m.block_hash(), req.block_hashes(m.index()));
    if (!m.found()) continue;
    g.found = true;
    EXPECT_EQ(m.offset(), g.bytes.size());
    g.bytes += m.data();
    EXPECT_LE(g.bytes.size(), m.block_bytes());
  }
  return reader->Finish();
}

std::vector<GotBlock> GetOk(v1::TurboKV::Stub& stub, uint64_t ns,
                            const std::vector<std::string>& hashes, v1::Encoding enc,
                            v1::DType dtype = v1::DTYPE_UNSPECIFIED, uint32_t layer_begin = 0,
                            uint32_t layer_end = 0) {
  v1::GetBlocksRequest req;
  req.set_namespace_id(ns);
  for (const auto& h : hashes) req.add_block_hashes(h);
  req.set_encoding(enc);
  req.set_dtype(dtype);
  req.set_layer_begin(layer_begin);
  req.set_layer_end(layer_end);
  std::vector<GotBlock> out;
  grpc::Status s = Get(stub, req, &out);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  return out;
}

v1::StatsResponse Stats(v1::TurboKV::Stub& stub) {
  grpc::ClientContext ctx;
  v1::StatsResponse resp;
  EXPECT_TRUE(stub.Stats(&ctx, v1::StatsRequest(), &resp).ok());
  return resp;
}

double RelativeError(const std::string& fp16_in, const std::string& fp32_out) {
  EXPECT_EQ(fp16_in.size() * 2, fp32_out.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < fp16_in.size() / 2; ++i) {
    uint16_t h;
    std::memcpy(&h, &fp16_in[2 * i], 2);
    float x = HalfToFloat(h), y;
    std::memcpy(&y, &fp32_out[4 * i], 4);
    err += (x - y) * (x - y);
    norm += x * x;
  }
  return std::sqrt(err / norm);
}

// ---- tests --------------------------------------------------------------------------------

TEST(ServerRpcTest, RoundTripsRawAndPackedBlocks) {
  ServerProcess server;
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  std::mt19937_64 rng(1);

  for (bool large : {false, true}) {
    SCOPED_TRACE(large ? "2 MiB blocks" : "16 KiB blocks");
    const v1::NamespaceDescriptor d = large ? LargeDescriptor() : SmallDescriptor();
    v1::RegisterNamespaceResponse reg = Register(stub, d);
    EXPECT_TRUE(reg.created());
    EXPECT_EQ(Register(stub, d).namespace_id(), reg.namespace_id());  // idempotent
    EXPECT_FALSE(Register(stub, d).created());
    const uint64_t ns = reg.namespace_id();
    EXPECT_EQ(reg.raw_block_bytes(), large ? 2u << 20 : 16u << 10);
    EXPECT_GT(reg.bits_per_value(), 4.8);
    EXPECT_LT(reg.bits_per_value(), 5.0);
    // The server's default preset, k5v4: K 5-bit g = 32, V 4-bit g = 64.
    EXPECT_EQ(reg.namespace_descriptor().codec().key().bits(), 5u);
    EXPECT_EQ(reg.namespace_descriptor().codec().value().group_size(), 64u);

    const int n = large ? 2 : 3;
    std::vector<PutBlock> blocks;
    std::vector<std::string> hashes;
    for (int i = 0; i < n; ++i) {
      hashes.push_back(Hash(i + (large ? 100 : 0), 8 + 8 * i));
      blocks.push_back({hashes.back(), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
    }
    v1::PutBlocksResponse put = Put(stub, ns, blocks);
    ASSERT_EQ(put.results_size(), n);
    for (const auto& r : put.results()) {
      EXPECT_EQ(r.code(), 0) << r.message();
      EXPECT_EQ(r.stored_bytes(), reg.packed_block_bytes());
    }

    v1::LookupResponse lookup;
    ASSERT_TRUE(Lookup(stub, ns, hashes, &lookup).ok());
    EXPECT_EQ(lookup.matched_blocks(), static_cast<uint32_t>(n));
    EXPECT_EQ(lookup.matched_tokens(), static_cast<uint64_t>(n) * d.block_tokens());
    EXPECT_EQ(Matched(stub, ns, {hashes[0], Hash(999), hashes[1]}), 1u);

    // PACKED: stored bytes; a missing block in the middle is a per-block miss.
    std::vector<std::string> with_miss = {hashes[0], Hash(999), hashes[1]};
    std::vector<GotBlock> packed = GetOk(stub, ns, with_miss, v1::ENCODING_PACKED);
    ASSERT_EQ(packed.size(), 3u);
    EXPECT_TRUE(packed[0].found);
    EXPECT_FALSE(packed[1].found);
    EXPECT_TRUE(packed[2].found);
    EXPECT_EQ(packed[0].bytes.size(), reg.packed_block_bytes());

    // RAW fp32: close to the input (k5v4: relative RMS error ~0.08).
    std::vector<GotBlock> raw = GetOk(stub, ns, hashes, v1::ENCODING_RAW, v1::DTYPE_FP32);
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(raw[i].found);
      const double rel = RelativeError(blocks[i].bytes, raw[i].bytes);
      EXPECT_LT(rel, 0.15) << i;
      EXPECT_GT(rel, 0.0) << i;
    }
    // A layer range is exactly that slice of the full decode.
    const uint32_t layers = d.num_layers();
    std::vector<GotBlock> last =
        GetOk(stub, ns, {hashes[0]}, v1::ENCODING_RAW, v1::DTYPE_FP32, layers - 1, layers);
    ASSERT_TRUE(last[0].found);
    const size_t per_layer = raw[0].bytes.size() / layers;
    EXPECT_EQ(last[0].bytes, raw[0].bytes.substr((layers - 1) * per_layer));
    // Default dtype = the namespace's (fp16).
    std::vector<GotBlock> fp16 = GetOk(stub, ns, {hashes[0]}, v1::ENCODING_RAW);
    EXPECT_EQ(fp16[0].bytes.size(), reg.raw_block_bytes());

    // A PACKED put of the served bytes stores them untouched.
    v1::PutBlocksResponse put2 =
        Put(stub, ns, {{Hash(500 + large), v1::ENCODING_PACKED, packed[0].bytes}});
    ASSERT_EQ(put2.results_size(), 1);
    EXPECT_EQ(put2.results(0).code(), 0) << put2.results(0).message();
    EXPECT_EQ(GetOk(stub, ns, {Hash(500 + large)}, v1::ENCODING_PACKED)[0].bytes, packed[0].bytes);

    // Delete.
    grpc::ClientContext ctx;
    v1::DeleteBlocksRequest del;
    del.set_namespace_id(ns);
    del.add_block_hashes(hashes[0]);
    del.add_block_hashes(Hash(999));
    v1::DeleteBlocksResponse del_resp;
    ASSERT_TRUE(stub.DeleteBlocks(&ctx, del, &del_resp).ok());
    EXPECT_EQ(del_resp.deleted_blocks(), 1u);
    EXPECT_EQ(Matched(stub, ns, hashes), 0u);
  }

  v1::StatsResponse st = Stats(stub);
  EXPECT_EQ(st.namespaces_size(), 2);
  EXPECT_EQ(st.blocks(), 2u + 1u + 2u);  // (3 - 1 + 1) small + (2 - 1 + 1) large
  EXPECT_EQ(st.codec_backend().rfind("cpu-", 0), 0u) << st.codec_backend();
  EXPECT_EQ(st.durability(), "wal");
  EXPECT_GT(st.logical_bytes(), 3 * (st.used_bytes() / 2));  // ~3.5x compression
  EXPECT_EQ(st.checksum_failures(), 0u);
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

TEST(ServerRpcTest, BadInputsGetTheRightCodeAndAClearMessage) {
  ServerProcess server;
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  std::mt19937_64 rng(2);
  const uint64_t unknown = 0x1234;

  // Unknown namespace: NOT_FOUND for every RPC.
  {
    v1::PutBlocksResponse resp;
    grpc::Status s = PutMessages(stub, Chunks(unknown, {{Hash(1), v1::ENCODING_RAW, "x"}}), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_NE(s.error_message().find("not registered"), std::string::npos);
    v1::LookupResponse lr;
    EXPECT_EQ(Lookup(stub, unknown, {Hash(1)}, &lr).error_code(), grpc::StatusCode::NOT_FOUND);
    v1::GetBlocksRequest g;
    g.set_namespace_id(unknown);
    g.add_block_hashes(Hash(1));
    g.set_encoding(v1::ENCODING_PACKED);
    std::vector<GotBlock> got;
    EXPECT_EQ(Get(stub, g, &got).error_code(), grpc::StatusCode::NOT_FOUND);
    grpc::ClientContext ctx;
    v1::DropNamespaceRequest drop;
    drop.set_namespace_id(unknown);
    v1::DropNamespaceResponse dr;
    EXPECT_EQ(stub.DropNamespace(&ctx, drop, &dr).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // Bad descriptors: INVALID_ARGUMENT naming the field.
  for (auto [mutate, field] :
       std::vector<std::pair<std::function<void(v1::NamespaceDescriptor&)>, std::string>>{
           {[](auto& d) { d.set_dtype(v1::DTYPE_UNSPECIFIED); }, "dtype"},
           {[](auto& d) { d.set_head_dim(12); }, "head_dim"},
           {[](auto& d) { d.set_num_layers(0); }, "num_layers"},
           {[](auto& d) { d.mutable_codec()->set_preset("k9v9"); }, "preset"}}) {
    v1::NamespaceDescriptor d = SmallDescriptor();
    mutate(d);
    grpc::Status s;
    Register(stub, d, &s);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(s.error_message().find(field), std::string::npos) << s.error_message();
  }

  v1::RegisterNamespaceResponse reg = Register(stub, SmallDescriptor());
  const uint64_t ns = reg.namespace_id();
  const std::string raw = RandomFp16(reg.raw_block_bytes(), rng);

  // One stream with many bad blocks and good ones between them: per-block codes.
  std::string packed_good;
  {
    ASSERT_EQ(Put(stub, ns, {{Hash(50), v1::ENCODING_RAW, raw}}).results(0).code(), 0);
    packed_good = GetOk(stub, ns, {Hash(50)}, v1::ENCODING_PACKED)[0].bytes;
    ASSERT_EQ(packed_good.size(), reg.packed_block_bytes());
  }
  std::string flipped = packed_good;
  flipped[flipped.size() / 2] ^= 0x10;  // payload byte: checksum fails
  std::string garbage(reg.packed_block_bytes(), '\x5a');
  std::vector<PutBlock> blocks = {
      {Hash(1), v1::ENCODING_RAW, raw.substr(0, raw.size() - 2)},   // 0: wrong size
      {Hash(2, 7), v1::ENCODING_RAW, raw},                          // 1: 7-byte hash
      {Hash(3, 33), v1::ENCODING_RAW, raw},                         // 2: 33-byte hash
      {Hash(4), v1::ENCODING_UNSPECIFIED, raw},                     // 3: no encoding
      {Hash(5), v1::ENCODING_PACKED, garbage},                      // 4: malformed packed
      {Hash(6), v1::ENCODING_PACKED, flipped},                      // 5: checksum
      {Hash(7), v1::ENCODING_PACKED, packed_good.substr(1) + "x"},  // 6: shifted bytes
      {Hash(8), v1::ENCODING_RAW, raw},                             // 7: fine
      {Hash(9, 32), v1::ENCODING_PACKED, packed_good},              // 8: fine (32-byte hash)
  };
  // Non-finite input: NaN in the first value.
  std::string nan_block = raw;
  nan_block[0] = '\x00';
  nan_block[1] = '\x7e';
  blocks.push_back({Hash(10), v1::ENCODING_RAW, nan_block});  // 9: NaN
  v1::PutBlocksResponse resp = Put(stub, ns, blocks);
  ASSERT_EQ(resp.results_size(), 10);
  auto code = [&](int i) { return static_cast<grpc::StatusCode>(resp.results(i).code()); };
  auto msg = [&](int i) { return resp.results(i).message(); };
  EXPECT_EQ(code(0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(msg(0).find("raw block size 16384"), std::string::npos) << msg(0);
  EXPECT_EQ(code(1), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(msg(1).find("7 bytes"), std::string::npos) << msg(1);
  EXPECT_EQ(code(2), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(msg(2).find("33 bytes"), std::string::npos) << msg(2);
  EXPECT_EQ(code(3), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(msg(3).find("encoding"), std::string::npos) << msg(3);
  EXPECT_TRUE(code(4) == grpc::StatusCode::INVALID_ARGUMENT ||
              code(4) == grpc::StatusCode::DATA_LOSS)
      << msg(4);
  EXPECT_EQ(code(5), grpc::StatusCode::DATA_LOSS) << msg(5);
  EXPECT_NE(msg(5).find("checksum"), std::string::npos) << msg(5);
  EXPECT_TRUE(code(6) == grpc::StatusCode::INVALID_ARGUMENT ||
              code(6) == grpc::StatusCode::DATA_LOSS)
      << msg(6);
  EXPECT_EQ(code(7), grpc::StatusCode::OK) << msg(7);
  EXPECT_EQ(code(8), grpc::StatusCode::OK) << msg(8);
  EXPECT_EQ(code(9), grpc::StatusCode::INVALID_ARGUMENT) << msg(9);
  for (int i : {0, 3, 4, 5, 6, 9}) EXPECT_EQ(Matched(stub, ns, {Hash(i + 1)}), 0u) << i;
  EXPECT_EQ(Matched(stub, ns, {Hash(8), Hash(9, 32)}), 2u);

  // Truncated stream: the block cut short is not stored; the one before it is.
  {
    std::vector<v1::PutBlocksRequest> msgs =
        Chunks(ns, {{Hash(20), v1::ENCODING_RAW, raw}, {Hash(21), v1::ENCODING_RAW, raw}});
    msgs.back().set_data(msgs.back().data().substr(0, 1000));
    v1::PutBlocksResponse r;
    ASSERT_TRUE(PutMessages(stub, msgs, &r).ok());
    ASSERT_EQ(r.results_size(), 2);
    EXPECT_EQ(r.results(0).code(), 0);
    EXPECT_EQ(r.results(1).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_NE(r.results(1).message().find("stream ended after 1000 of 16384"), std::string::npos)
        << r.results(1).message();
    EXPECT_EQ(Matched(stub, ns, {Hash(20), Hash(21)}), 1u);
  }
  // Chunks out of order, and a block cut short by the next block.
  {
    std::vector<v1::PutBlocksRequest> msgs;
    v1::PutBlocksRequest m;
    m.set_namespace_id(ns);
    m.set_block_hash(Hash(30));
    m.set_encoding(v1::ENCODING_RAW);
    m.set_block_bytes(raw.size());
    m.set_offset(0);
    m.set_data(raw.substr(0, 4096));
    msgs.push_back(m);
    m.set_offset(8192);  // skips 4096..8192
    m.set_data(raw.substr(8192, 4096));
    msgs.push_back(m);
    m.set_offset(12288);  // dropped silently: rest of the rejected block
    msgs.push_back(m);
    m.set_block_hash(Hash(31));
    m.set_offset(0);
    m.set_data(raw.substr(0, 100));
    msgs.push_back(m);  // cut short by the next block
    for (const auto& c : Chunks(ns, {{Hash(32), v1::ENCODING_RAW, raw}})) msgs.push_back(c);
    v1::PutBlocksResponse r;
    ASSERT_TRUE(PutMessages(stub, msgs, &r).ok());
    ASSERT_EQ(r.results_size(), 3);
    EXPECT_EQ(r.results(0).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_NE(r.results(0).message().find("in order"), std::string::npos) << r.results(0).message();
    EXPECT_EQ(r.results(1).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_NE(r.results(1).message().find("next block started"), std::string::npos);
    EXPECT_EQ(r.results(2).code(), 0);
  }
  // A message over 4 MiB: RESOURCE_EXHAUSTED from gRPC.
  {
    v1::PutBlocksRequest m;
    m.set_namespace_id(ns);
    m.set_block_hash(Hash(40));
    m.set_encoding(v1::ENCODING_RAW);
    m.set_block_bytes(5 << 20);
    m.set_data(std::string(5 << 20, '\0'));
    v1::PutBlocksResponse r;
    grpc::Status s = PutMessages(stub, {m}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  // Namespace id changing within a stream: the RPC fails.
  {
    v1::RegisterNamespaceResponse other = Register(stub, LargeDescriptor());
    std::vector<v1::PutBlocksRequest> msgs = Chunks(ns, {{Hash(41), v1::ENCODING_RAW, raw}});
    msgs.push_back(msgs.front());
    msgs.back().set_namespace_id(other.namespace_id());
    v1::PutBlocksResponse r;
    grpc::Status s = PutMessages(stub, msgs, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("one namespace"), std::string::npos) << s.error_message();
  }
  // Lookup / GetBlocks / DeleteBlocks with bad hashes or ranges.
  {
    v1::LookupResponse lr;
    grpc::Status s = Lookup(stub, ns, {Hash(8), Hash(1, 7)}, &lr);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("block_hashes[1]"), std::string::npos) << s.error_message();
    v1::GetBlocksRequest g;
    g.set_namespace_id(ns);
    g.add_block_hashes(Hash(1, 33));
    g.set_encoding(v1::ENCODING_PACKED);
    std::vector<GotBlock> got;
    EXPECT_EQ(Get(stub, g, &got).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    g.set_block_hashes(0, Hash(8));
    g.set_encoding(v1::ENCODING_RAW);
    g.set_layer_begin(1);
    g.set_layer_end(5);
    grpc::Status gs = Get(stub, g, &got);
    EXPECT_EQ(gs.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(gs.error_message().find("layer range"), std::string::npos) << gs.error_message();
    g.set_encoding(v1::ENCODING_UNSPECIFIED);
    EXPECT_EQ(Get(stub, g, &got).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // The server is still healthy after all of it.
  EXPECT_EQ(Matched(stub, ns, {Hash(50), Hash(8)}), 2u);
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

TEST(ServerRpcTest, FullStoreWithNothingEvictableIsResourceExhausted) {
  ServerProcess server({"--capacity", "64KiB"});
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  std::mt19937_64 rng(3);
  v1::RegisterNamespaceResponse reg = Register(stub, SmallDescriptor());
  const uint64_t ns = reg.namespace_id();
  int ok = 0, exhausted = 0;
  std::string message;
  for (int i = 0; i < 20; ++i) {
    v1::PutBlocksResponse r =
        Put(stub, ns, {{Hash(i), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)}});
    ASSERT_EQ(r.results_size(), 1);
    if (r.results(0).code() == 0) {
      ++ok;
      v1::LookupResponse lr;
      ASSERT_TRUE(Lookup(stub, ns, {Hash(i)}, &lr, /*lease=*/600).ok());  // pin it
      ASSERT_EQ(lr.matched_blocks(), 1u);
    } else {
      EXPECT_EQ(r.results(0).code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
      message = r.results(0).message();
      ++exhausted;
    }
  }
  EXPECT_GT(ok, 5);
  EXPECT_GT(exhausted, 0);
  EXPECT_NE(message.find("leased"), std::string::npos) << message;
  v1::StatsResponse st = Stats(stub);
  EXPECT_LE(st.used_bytes(), st.capacity_bytes());
  EXPECT_EQ(st.capacity_bytes(), 64u << 10);
  EXPECT_EQ(st.evicted_blocks(), 0u);
  EXPECT_EQ(st.blocks(), static_cast<uint64_t>(ok));
}

// Survivors of `chain` (one-hash Lookups) and its match from the start must be equal: no
// block left that Lookup can never reach.
void ExpectNoStrandedBlocks(v1::TurboKV::Stub& stub, uint64_t ns,
                            const std::vector<std::string>& chain, size_t* survivors_out,
                            size_t* matched_out) {
  size_t survivors = 0;
  for (const std::string& h : chain) survivors += Matched(stub, ns, {h});
  const size_t matched = Matched(stub, ns, chain);
  *survivors_out = survivors;
  *matched_out = matched;
}

TEST(ServerRpcTest, EvictionTakesChainTailsSoEverySurvivorStaysReachable) {
  // Several requests' chains, each one PutBlocks stream (committed in pieces as it arrives),
  // into a store with room for about half of them; then one chain longer than the store. (At
  // least 1 MiB: RocksDB's WAL, counted against the capacity, may hold up to 256 KiB.)
  ServerProcess server({"--capacity", "1MiB"});
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  std::mt19937_64 rng(11);
  v1::RegisterNamespaceResponse reg = Register(stub, SmallDescriptor("raw"));
  const uint64_t ns = reg.namespace_id();
  std::vector<std::vector<std::string>> chains;
  for (uint64_t k = 0; k < 10; ++k) {
    std::vector<std::string> chain;
    std::vector<PutBlock> blocks;
    for (uint64_t i = 0; i < 8; ++i) {
      chain.push_back(Hash(1000 * (k + 1) + i));
      blocks.push_back({chain.back(), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
    }
    v1::PutBlocksResponse r = Put(stub, ns, blocks);
    ASSERT_EQ(r.results_size(), 8);
    for (const auto& res : r.results()) ASSERT_EQ(res.code(), 0) << res.message();
    chains.push_back(std::move(chain));
  }
  EXPECT_GT(Stats(stub).evicted_blocks(), 0u);
  for (size_t k = 0; k < chains.size(); ++k) {
    size_t survivors = 0, matched = 0;
    ExpectNoStrandedBlocks(stub, ns, chains[k], &survivors, &matched);
    EXPECT_EQ(matched, survivors) << "chain " << k;
  }
  EXPECT_EQ(Matched(stub, ns, chains.back()), 8u);

  // One request of 80 blocks (1.25 MiB raw) into 1 MiB: the blocks that fit are the chain's
  // head (the rest is refused rather than evicting the request's own earlier blocks).
  std::vector<std::string> longest;
  std::vector<PutBlock> blocks;
  for (uint64_t i = 0; i < 80; ++i) {
    longest.push_back(Hash(90000 + i));
    blocks.push_back({longest.back(), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
  }
  v1::PutBlocksResponse r = Put(stub, ns, blocks);
  ASSERT_EQ(r.results_size(), 80);
  size_t stored = 0;
  for (const auto& res : r.results()) {
    if (res.code() == 0) {
      ++stored;
    } else {
      EXPECT_EQ(res.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
    }
  }
  size_t survivors = 0, matched = 0;
  ExpectNoStrandedBlocks(stub, ns, longest, &survivors, &matched);
  EXPECT_EQ(matched, survivors);
  EXPECT_EQ(survivors, stored);
  EXPECT_GE(matched, 5u);  // about 9-17 fit beside what RocksDB holds
}

TEST(ServerRpcTest, RestartKeepsDataAndSigtermExitsZero) {
  ServerProcess server({"--durability", "fsync"});
  ASSERT_TRUE(server.Start()) << server.Log();
  std::mt19937_64 rng(4);
  v1::RegisterNamespaceResponse reg = Register(server.stub(), SmallDescriptor("k3v3-g32"));
  std::vector<PutBlock> blocks;
  std::vector<std::string> hashes;
  for (int i = 0; i < 6; ++i) {
    hashes.push_back(Hash(i));
    blocks.push_back({hashes.back(), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
  }
  const v1::PutBlocksResponse put = Put(server.stub(), reg.namespace_id(), blocks);
  for (const auto& r : put.results()) {
    ASSERT_EQ(r.code(), 0) << r.message();
  }
  std::vector<GotBlock> before =
      GetOk(server.stub(), reg.namespace_id(), hashes, v1::ENCODING_PACKED);
  const v1::StatsResponse stats_before = Stats(server.stub());
  const int status = server.Stop(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << server.Log();
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(server.Log().find("turbokv-server stopped"), std::string::npos);

  ASSERT_TRUE(server.Start()) << server.Log();
  EXPECT_NE(server.Log().find("recovered 1 namespaces and 6 blocks"), std::string::npos)
      << server.Log();
  v1::RegisterNamespaceResponse again = Register(server.stub(), SmallDescriptor("k3v3-g32"));
  EXPECT_FALSE(again.created());
  EXPECT_EQ(again.namespace_id(), reg.namespace_id());
  EXPECT_EQ(Matched(server.stub(), reg.namespace_id(), hashes), 6u);
  std::vector<GotBlock> after =
      GetOk(server.stub(), reg.namespace_id(), hashes, v1::ENCODING_PACKED);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(after[i].bytes, before[i].bytes) << i;
  v1::StatsResponse stats_after = Stats(server.stub());
  EXPECT_EQ(stats_after.durability(), "fsync");
  EXPECT_EQ(stats_after.blocks(), stats_before.blocks());
  EXPECT_EQ(stats_after.used_bytes(), stats_before.used_bytes());
  EXPECT_EQ(stats_after.logical_bytes(), stats_before.logical_bytes());
  EXPECT_EQ(server.Stop(SIGINT), 0);
}

// A minimal HTTP GET of /metrics.
std::string Scrape(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// The value of the sample `series` (name{labels} exactly as exposed), or -1.
double MetricValue(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

TEST(ServerRpcTest, SigtermLetsAnInFlightPutStreamFinish) {
  // The grace period only has to outlast the rest of the stream; a generous one keeps a
  // loaded machine from cancelling the stream (the server exits as soon as the stream ends).
  const std::string grace_ms = std::to_string(Scaled(std::chrono::seconds(30)).count());
  ServerProcess server({"--metrics-listen", "127.0.0.1:0", "--shutdown-grace-ms", grace_ms});
  ASSERT_TRUE(server.Start()) << server.Log();
  std::mt19937_64 rng(6);
  v1::RegisterNamespaceResponse reg = Register(server.stub(), SmallDescriptor());
  std::vector<PutBlock> blocks;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back({Hash(i), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
  }
  std::vector<v1::PutBlocksRequest> msgs = Chunks(reg.namespace_id(), blocks);
  grpc::ClientContext ctx;
  v1::PutBlocksResponse resp;
  auto writer = server.stub().PutBlocks(&ctx, &resp);
  for (size_t i = 0; i < msgs.size() / 2; ++i) ASSERT_TRUE(writer->Write(msgs[i]));
  // Let the server accept the call first: a call it has not started yet when shutdown begins
  // is cancelled, not drained (seen under load with six copies of this test at once). A
  // started put stream holds in-flight budget for its next read while it is open, which
  // turbokv_in_flight_bytes shows (refreshed every second): wait for that, not for a time.
  const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(60));
  double in_flight = -1;
  while ((in_flight = MetricValue(Scrape(server.metrics_port()), "turbokv_in_flight_bytes")) <= 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(in_flight, 0) << "the server never started the put stream\n" << server.Log();
  server.Signal(SIGTERM);  // shutdown begins while the stream is open
  // The server logs the signal right before it shuts down.
  while (server.Log().find("received SIGTERM, shutting down") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(server.Log().find("received SIGTERM, shutting down"), std::string::npos)
      << server.Log();
  for (size_t i = msgs.size() / 2; i < msgs.size(); ++i) ASSERT_TRUE(writer->Write(msgs[i]));
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_EQ(resp.results_size(), 8);
  for (const auto& r : resp.results()) EXPECT_EQ(r.code(), 0) << r.message();
  const int status = server.Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << server.Log();

  ASSERT_TRUE(server.Start()) << server.Log();
  std::vector<std::string> hashes;
  for (const auto& b : blocks) hashes.push_back(b.hash);
  EXPECT_EQ(Matched(server.stub(), reg.namespace_id(), hashes), 8u);
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

TEST(ServerRpcTest, Kill9DuringPutLoadLosesNoAcknowledgedBlock) {
  ServerProcess server({"--durability", "wal"});
  ASSERT_TRUE(server.Start()) << server.Log();
  // The raw preset stores blocks verbatim, so a RAW get must return exactly what was put.
  v1::RegisterNamespaceResponse reg = Register(server.stub(), SmallDescriptor("raw"));
  const uint64_t ns = reg.namespace_id();

  std::mutex mu;
  std::map<std::string, std::string> acked, sent;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(10 + t);
      auto stub = v1::TurboKV::NewStub(server.channel());
      for (uint64_t round = 0; !stop.load(); ++round) {
        std::vector<PutBlock> blocks;
        for (int k = 0; k < 4; ++k) {
          blocks.push_back({Hash((uint64_t(t + 1) << 32) | (round * 4 + k)), v1::ENCODING_RAW,
                            RandomFp16(reg.raw_block_bytes(), rng)});
        }
        {
          std::lock_guard<std::mutex> l(mu);
          for (const auto& b : blocks) sent[b.hash] = b.bytes;
        }
        v1::PutBlocksResponse resp;
        grpc::Status s = PutMessages(*stub, Chunks(ns, blocks), &resp);
        if (!s.ok()) break;  // the server is gone
        std::lock_guard<std::mutex> l(mu);
        for (int k = 0; k < resp.results_size(); ++k) {
          if (resp.results(k).code() == 0) acked[blocks[k].hash] = blocks[k].bytes;
        }
      }
    });
  }
  // Let the load run until 300 blocks are acknowledged (however long a loaded machine takes),
  // then kill the server in the middle of it.
  const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(60));
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> l(mu);
    if (acked.size() >= 300) break;
  }
  const int status = server.Stop(SIGKILL);
  EXPECT_TRUE(WIFSIGNALED(status));
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_GT(acked.size(), 20u);

  ASSERT_TRUE(server.Start()) << server.Log();
  std::vector<std::string> hashes;
  for (const auto& [h, b] : sent) hashes.push_back(h);
  std::vector<GotBlock> got = GetOk(server.stub(), ns, hashes, v1::ENCODING_RAW);
  size_t found = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const bool was_acked = acked.count(hashes[i]) > 0;
    if (was_acked) {
      EXPECT_TRUE(got[i].found) << "acknowledged block lost: " << i;
    }
    if (got[i].found) {
      ++found;
      EXPECT_EQ(got[i].bytes, sent[hashes[i]]) << "wrong bytes for block " << i;
    }
  }
  EXPECT_GE(found, acked.size());
  EXPECT_EQ(Stats(server.stub()).checksum_failures(), 0u);
  std::cout << "kill -9 test: " << sent.size() << " blocks sent, " << acked.size()
            << " acknowledged, " << found << " readable after restart\n";
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

TEST(ServerRpcTest, HealthMetricsAndCodecBackendSelection) {
  ServerProcess server({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(server.Start()) << server.Log();
  ASSERT_GT(server.metrics_port(), 0);

  // grpc.health.v1.Health/Check through the generic stub: request {} -> response {status: 1}.
  grpc::GenericStub generic(server.channel());
  grpc::ClientContext ctx;
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status hs = done.get_future().get();
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // SERVING

  v1::RegisterNamespaceResponse reg = Register(server.stub(), SmallDescriptor());
  std::mt19937_64 rng(5);
  Put(server.stub(), reg.namespace_id(),
      {{Hash(1), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)}});
  EXPECT_EQ(Matched(server.stub(), reg.namespace_id(), {Hash(1), Hash(2)}), 1u);
  // The store's gauges are refreshed every second, after the put: wait for that refresh (the
  // counters are updated before each call returns).
  const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(60));
  std::string metrics = Scrape(server.metrics_port());
  while ((MetricValue(metrics, "turbokv_blocks") != 1 ||
          MetricValue(metrics, "turbokv_namespaces") != 1) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    metrics = Scrape(server.metrics_port());
  }
  for (const char* needle :
       {"turbokv_rpc_requests_total{code=\"OK\",method=\"PutBlocks\"} 1",
        "turbokv_rpc_duration_seconds_bucket", "turbokv_lookup_blocks_total{result=\"hit\"} 1",
        "turbokv_lookup_blocks_total{result=\"miss\"} 1",
        "turbokv_lookup_tokens_total{result=\"hit\"} 16",
        "turbokv_put_blocks_total{result=\"OK\"} 1", "turbokv_blocks 1", "turbokv_namespaces 1",
        "turbokv_codec_backend_info{backend=\"cpu-", "turbokv_codec_seconds_total{backend=\"cpu-",
        "turbokv_compression_ratio", "turbokv_capacity_bytes",
        "turbokv_rocksdb_pending_compaction_bytes", "turbokv_checksum_failures_total 0",
        "turbokv_evictions_total 0"}) {
    EXPECT_NE(metrics.find(needle), std::string::npos) << needle << "\n" << metrics.substr(0, 4000);
  }
  // A second server on the same port refuses to start (no SO_REUSEPORT sharing).
  ServerProcess twin({"--listen", "127.0.0.1:" + std::to_string(server.port())});
  EXPECT_FALSE(twin.Start());
  EXPECT_NE(twin.Log().find("cannot listen"), std::string::npos) << twin.Log();
  EXPECT_EQ(server.Stop(SIGTERM), 0);

  // --codec-backend cuda without a CUDA backend: refuses to start, says why.
  ServerProcess cuda({"--codec-backend", "cuda"});
  EXPECT_FALSE(cuda.Start());
  EXPECT_TRUE(WIFEXITED(cuda.exit_status()));
  EXPECT_NE(WEXITSTATUS(cuda.exit_status()), 0);
  EXPECT_NE(cuda.Log().find("cuda"), std::string::npos) << cuda.Log();
}

// --codec-backend auto (the default) on a machine without a usable CUDA device: the CPU codec
// runs, the log says why CUDA is not used, and the codec metrics carry the CPU's label only.
TEST(ServerRpcTest, AutoCodecBackendWithoutADeviceRunsAndLabelsTheCpu) {
  ServerProcess server({"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(server.Start()) << server.Log();
  const std::string backend = Stats(server.stub()).codec_backend();
  if (backend == "cuda") GTEST_SKIP() << "a CUDA device passed the self-test (tests/gpu covers it)";
  EXPECT_EQ(backend.rfind("cpu-", 0), 0u) << backend;
  EXPECT_NE(server.Log().find("CUDA not used: "), std::string::npos) << server.Log();

  v1::RegisterNamespaceResponse reg = Register(server.stub(), SmallDescriptor());
  std::mt19937_64 rng(8);
  Put(server.stub(), reg.namespace_id(),
      {{Hash(1), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)},
       {Hash(2), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)}});
  const std::vector<GotBlock> got = GetOk(server.stub(), reg.namespace_id(), {Hash(1), Hash(2)},
                                          v1::ENCODING_RAW, v1::DTYPE_FP32);
  ASSERT_EQ(got.size(), 2u);
  const std::string metrics = Scrape(server.metrics_port());
  const std::string cpu = "backend=\"" + backend + "\"";
  EXPECT_EQ(MetricValue(metrics, "turbokv_codec_bytes_total{" + cpu + ",op=\"encode\"}"),
            2.0 * reg.raw_block_bytes());
  EXPECT_EQ(MetricValue(metrics, "turbokv_codec_bytes_total{" + cpu + ",op=\"decode\"}"),
            2.0 * 2 * reg.raw_block_bytes());  // fp16 in, fp32 out
  EXPECT_EQ(metrics.find("backend=\"cuda\""), std::string::npos) << "no CUDA series";
  EXPECT_EQ(
      MetricValue(metrics, "turbokv_codec_fallbacks_total{op=\"encode\",reason=\"device_error\"}"),
      0);
  EXPECT_EQ(MetricValue(metrics, "turbokv_codec_degraded"), 0);
  EXPECT_EQ(server.Stop(SIGTERM), 0);

  // --codec-backend cuda: refuses to start and says why (no device, or no CUDA in this build).
  ServerProcess cuda({"--codec-backend", "cuda"});
  EXPECT_FALSE(cuda.Start());
  const std::string log = cuda.Log();
  EXPECT_TRUE(log.find("no CUDA device is usable") != std::string::npos ||
              log.find("built without the CUDA backend") != std::string::npos)
      << log;
}

}  // namespace
}  // namespace turbokv::server
