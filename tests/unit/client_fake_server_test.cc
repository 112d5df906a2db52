// turbokv::client against an in-process fake TurboKV service on 127.0.0.1:0: what the client
// puts on the wire (chunk sizes, offsets, hashes), how it reassembles and validates GetBlocks
// streams, and its retry / deadline behaviour. The fake is a seam for the client only; the
// real server is exercised by tests/integration/client_server_test.cc.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "turbokv/client/client.h"
#include "turbokv/v1/turbokv.grpc.pb.h"

namespace turbokv::client {
namespace {

namespace v1 = ::turbokv::v1;

class FakeService final : public v1::TurboKV::Service {
 public:
  // Calls fail with UNAVAILABLE this many times before behaving.
  std::atomic<int> fail_first{0};
  std::atomic<int> calls{0};
  // What the last PutBlocks stream carried.
  std::mutex mu;
  std::vector<v1::PutBlocksRequest> put_messages;
  // GetBlocks writes these responses (or runs `get_script` when set).
  std::vector<v1::GetBlocksResponse> get_responses;
  grpc::Status stats_status = grpc::Status::OK;

  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* resp) override {
    ++calls;
    if (fail_first.fetch_sub(1) > 0) return grpc::Status(grpc::UNAVAILABLE, "try later");
    if (!stats_status.ok()) return stats_status;
    resp->set_version("fake");
    auto* ns = resp->add_namespaces();
    ns->set_namespace_id(0xfedcba9876543210ULL);
    ns->mutable_namespace_descriptor()->set_num_layers(7);
    return grpc::Status::OK;
  }

  grpc::Status PutBlocks(grpc::ServerContext*, grpc::ServerReader<v1::PutBlocksRequest>* reader,
                         v1::PutBlocksResponse* resp) override {
    ++calls;
    std::vector<v1::PutBlocksRequest> msgs;
    v1::PutBlocksRequest m;
    while (reader->Read(&m)) msgs.push_back(m);
    if (fail_first.fetch_sub(1) > 0) return grpc::Status(grpc::UNAVAILABLE, "try later");
    std::string last;
    for (const auto& x : msgs) {
      if (x.offset() == 0) {
        auto* r = resp->add_results();
        r->set_block_hash(x.block_hash());
        r->set_stored_bytes(x.block_bytes() / 4);
        if (x.block_bytes() == 3) {  // a block the fake refuses
          r->set_code(grpc::INVALID_ARGUMENT);
          r->set_message("block_bytes 3 is not raw_block_bytes");
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    put_messages = std::move(msgs);
    return grpc::Status::OK;
  }

  grpc::Status GetBlocks(grpc::ServerContext*, const v1::GetBlocksRequest*,
                         grpc::ServerWriter<v1::GetBlocksResponse>* writer) override {
    ++calls;
    if (fail_first.fetch_sub(1) > 0) return grpc::Status(grpc::UNAVAILABLE, "try later");
    for (const auto& r : get_responses) writer->Write(r);
    return grpc::Status::OK;
  }

  grpc::Status Lookup(grpc::ServerContext* ctx, const v1::LookupRequest* req,
                      v1::LookupResponse* resp) override {
    ++calls;
    if (req->lease_seconds() == 99) {  // hang until the client's deadline
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return grpc::Status(grpc::CANCELLED, "cancelled");
    }
    if (req->lease_seconds() == 7) return grpc::Status(grpc::NOT_FOUND, "unknown namespace");
    resp->set_matched_blocks(static_cast<uint32_t>(req->block_hashes_size()) + 1);  // lie
    return grpc::Status::OK;
  }
};

class FakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ClientOptions o;
    o.initial_backoff = absl::Milliseconds(5);
    o.max_backoff = absl::Milliseconds(20);
    o.max_chunk_bytes = 1024;
    o.timeout = absl::Seconds(10);
    auto c = Client::Connect("127.0.0.1:" + std::to_string(port), o);
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);
  }
  void TearDown() override { server_->Shutdown(); }

  static v1::GetBlocksResponse Chunk(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                     std::string data) {
    v1::GetBlocksResponse r;
    r.set_index(index);
    r.set_found(true);
    r.set_encoding(v1::ENCODING_RAW);
    r.set_dtype(v1::DTYPE_FP16);
    r.set_block_bytes(block_bytes);
    r.set_offset(offset);
    r.set_data(std::move(data));
    return r;
  }
  static v1::GetBlocksResponse Missing(uint32_t index) {
    v1::GetBlocksResponse r;
    r.set_index(index);
    r.set_found(false);
    return r;
  }

  FakeService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(FakeServerTest, PutSplitsBlocksIntoBoundedChunksInOrder) {
  std::string a(2500, 'a'), b(1024, 'b'), c(3, 'c');
  std::vector<std::string> hashes = {std::string(32, '1'), std::string(32, '2'),
                                     std::string(32, '3')};
  std::vector<absl::Span<const uint8_t>> blocks;
  for (const std::string* s : {&a, &b, &c}) {
    blocks.emplace_back(reinterpret_cast<const uint8_t*>(s->data()), s->size());
  }
  auto res = client_->PutBlocks(42, hashes, blocks);
  ASSERT_TRUE(res.ok()) << res.status();
  ASSERT_EQ(res->size(), 3u);
  EXPECT_TRUE((*res)[0].status.ok());
  EXPECT_EQ((*res)[0].stored_bytes, 625u);
  EXPECT_EQ((*res)[2].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*res)[2].status.message(), "block_bytes 3 is not raw_block_bytes");
  std::lock_guard<std::mutex> lock(service_.mu);
  const auto& m = service_.put_messages;
  ASSERT_EQ(m.size(), 5u);  // 1024 + 1024 + 452, 1024, 3
  const uint64_t want_offsets[] = {0, 1024, 2048, 0, 0};
  const uint64_t want_sizes[] = {1024, 1024, 452, 1024, 3};
  const char* want_hash[] = {"1", "1", "1", "2", "3"};
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i].namespace_id(), 42u);
    EXPECT_EQ(m[i].encoding(), v1::ENCODING_RAW);
    EXPECT_EQ(m[i].offset(), want_offsets[i]) << i;
    EXPECT_EQ(m[i].data().size(), want_sizes[i]) << i;
    EXPECT_EQ(m[i].block_hash(), std::string(32, want_hash[i][0])) << i;
  }
  EXPECT_EQ(m[0].block_bytes(), 2500u);
  EXPECT_EQ(m[0].data() + m[1].data() + m[2].data(), a);
}

TEST_F(FakeServerTest, GetReassemblesInterleavedChunks) {
  service_.get_responses = {Chunk(0, 6, 0, "abc"), Missing(1), Chunk(2, 1, 0, "z"),
                            Chunk(0, 6, 3, "def")};
  std::vector<std::string> hashes(3, std::string(32, 'h'));
  auto got = client_->GetBlocks(1, hashes);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->dtype, DType::kFloat16);
  ASSERT_EQ(got->blocks.size(), 3u);
  EXPECT_EQ(got->blocks[0], "abcdef");
  EXPECT_FALSE(got->blocks[1].has_value());
  EXPECT_EQ(got->blocks[2], "z");
}

TEST_F(FakeServerTest, GetRejectsBrokenStreams) {
  std::vector<std::string> hashes(2, std::string(32, 'h'));
  service_.get_responses = {Chunk(0, 6, 0, "abc"), Missing(1)};  // block 0 incomplete
  EXPECT_EQ(client_->GetBlocks(1, hashes).status().code(), absl::StatusCode::kDataLoss);
  service_.get_responses = {Chunk(0, 3, 0, "abc")};  // block 1 never reported
  EXPECT_EQ(client_->GetBlocks(1, hashes).status().code(), absl::StatusCode::kDataLoss);
  service_.get_responses = {Chunk(0, 3, 0, "abc"), Chunk(5, 1, 0, "x")};  // bad index
  EXPECT_EQ(client_->GetBlocks(1, hashes).status().code(), absl::StatusCode::kDataLoss);
  auto packed = Chunk(0, 3, 0, "abc");
  packed.set_encoding(v1::ENCODING_PACKED);  // asked for RAW
  service_.get_responses = {packed, Missing(1)};
  EXPECT_EQ(client_->GetBlocks(1, hashes).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(FakeServerTest, RetriesUnavailableThenSucceeds) {
  service_.fail_first = 2;
  auto s = client_->Stats();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(service_.calls.load(), 3);
  EXPECT_EQ(s->version, "fake");
  ASSERT_EQ(s->namespaces.size(), 1u);
  EXPECT_EQ(s->namespaces[0].descriptor.num_layers, 7u);
  // Streams are retried as a whole.
  service_.calls = 0;
  service_.fail_first = 1;
  std::string blk(10, 'x');
  std::vector<std::string> hashes = {std::string(8, 'k')};
  std::vector<absl::Span<const uint8_t>> blocks = {
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(blk.data()), blk.size())};
  auto put = client_->PutBlocks(1, hashes, blocks);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(service_.calls.load(), 2);
  EXPECT_EQ(put->size(), 1u);
}

TEST_F(FakeServerTest, RetriesAreBoundedAndOnlyForUnavailable) {
  service_.fail_first = 100;
  auto s = client_->Stats();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(service_.calls.load(), 4);  // ClientOptions::max_attempts
  service_.fail_first = 0;
  service_.calls = 0;
  service_.stats_status = grpc::Status(grpc::RESOURCE_EXHAUSTED, "full");
  s = client_->Stats();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.status().message(), "full");
  EXPECT_EQ(service_.calls.load(), 1);
  std::vector<std::string> chain = {std::string(32, 'a')};
  EXPECT_EQ(client_->Lookup(1, chain, 7).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FakeServerTest, DeadlineIsPerCall) {
  std::vector<std::string> chain = {std::string(32, 'a')};
  const absl::Time t0 = absl::Now();
  auto r = client_->Lookup(1, chain, 99, CallOptions{absl::Milliseconds(200)});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  // The call's 200 ms, not the client's 10 s timeout (the margin is for a loaded machine).
  EXPECT_LT(absl::Now() - t0, absl::Seconds(8));
}

TEST_F(FakeServerTest, LookupRejectsImpossibleMatchCounts) {
  std::vector<std::string> chain = {std::string(32, 'a')};
  EXPECT_EQ(client_->Lookup(1, chain).status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace turbokv::client
