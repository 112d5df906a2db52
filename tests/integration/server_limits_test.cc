// turbokv-server under hostile and concurrent input, end to end on the real binary through the
// generated stub (issue 9): namespaces that would cost too much, a stalled half block, hundreds
// of streams that never finish, over-long leases and chains, paged Stats, and write order
// (issue 10 item 3): the last acknowledged put of a hash wins, concurrent puts of one hash
// leave one whole block.
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server_process.h"

namespace turbokv::server {
namespace {

using testing::DeadlineIn;
using testing::Hash;
using testing::kThreadSanitizer;
using testing::RandomFp16;
using testing::Scaled;
using testing::ServerProcess;
using testing::SlowBuild;

constexpr size_t kChunk = size_t{1} << 20;

v1::NamespaceDescriptor Descriptor(uint32_t layers, uint32_t heads, uint32_t head_dim,
                                   uint32_t tokens, v1::DType dtype = v1::DTYPE_FP16) {
  v1::NamespaceDescriptor d;
  d.set_model("test/limits");
  d.set_dtype(dtype);
  d.set_num_layers(layers);
  d.set_num_kv_heads(heads);
  d.set_head_dim(head_dim);
  d.set_block_tokens(tokens);
  return d;
}

grpc::Status Register(v1::TurboKV::Stub& stub, const v1::NamespaceDescriptor& d,
                      v1::RegisterNamespaceResponse* resp) {
  grpc::ClientContext ctx;
  v1::RegisterNamespaceRequest req;
  *req.mutable_namespace_descriptor() = d;
  return stub.RegisterNamespace(&ctx, req, resp);
}

struct Block {
  std::string hash;
  v1::Encoding encoding;
  std::string bytes;
};

std::vector<v1::PutBlocksRequest> Chunks(uint64_t ns, const std::vector<Block>& blocks) {
  std::vector<v1::PutBlocksRequest> out;
  for (const Block& b : blocks) {
    size_t offset = 0;
    do {
      v1::PutBlocksRequest& m = out.emplace_back();
      m.set_namespace_id(ns);
      m.set_block_hash(b.hash);
      m.set_encoding(b.encoding);
      m.set_block_bytes(b.bytes.size());
      m.set_offset(offset);
      m.set_data(b.bytes.substr(offset, kChunk));
      offset += kChunk;
    } while (offset < b.bytes.size());
  }
  return out;
}

v1::PutBlocksResponse Put(v1::TurboKV::Stub& stub, uint64_t ns, const std::vector<Block>& blocks) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(60)));
  v1::PutBlocksResponse resp;
  auto writer = stub.PutBlocks(&ctx, &resp);
  for (const v1::PutBlocksRequest& m : Chunks(ns, blocks)) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  return resp;
}

// One block per hash (PACKED or RAW as asked); "" when missing.
std::map<std::string, std::string> Get(v1::TurboKV::Stub& stub, uint64_t ns,
                                       const std::vector<std::string>& hashes, v1::Encoding enc,
                                       grpc::Status* status = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(std::chrono::seconds(60)));
  v1::GetBlocksRequest req;
  req.set_namespace_id(ns);
  for (const std::string& h : hashes) req.add_block_hashes(h);
  req.set_encoding(enc);
  auto reader = stub.GetBlocks(&ctx, req);
  std::map<std::string, std::string> out;
  v1::GetBlocksResponse m;
  while (reader->Read(&m)) {
    if (m.found()) out[m.block_hash()] += m.data();
  }
  grpc::Status s = reader->Finish();
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  }
  return out;
}

// Resident set of a process, bytes (0 when unreadable).
uint64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// The server stays useful: a namespace registers, a block goes in and comes back whole.
void ExpectHealthy(v1::TurboKV::Stub& stub, uint64_t seed) {
  v1::RegisterNamespaceResponse reg;
  ASSERT_TRUE(Register(stub, Descriptor(2, 2, 64, 16), &reg).ok());
  std::mt19937_64 rng(seed);
  const std::string raw = RandomFp16(reg.raw_block_bytes(), rng);
  v1::PutBlocksResponse put = Put(stub, reg.namespace_id(), {{Hash(seed), v1::ENCODING_RAW, raw}});
  ASSERT_EQ(put.results_size(), 1);
  EXPECT_EQ(put.results(0).code(), 0) << put.results(0).message();
  auto got = Get(stub, reg.namespace_id(), {Hash(seed)}, v1::ENCODING_RAW);
  EXPECT_EQ(got[Hash(seed)].size(), raw.size());
}

TEST(ServerLimitsTest, NamespacesThatWouldCostTooMuchAreRefusedAndTheServerStaysHealthy) {
  ServerProcess server;
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();

  // An fp32 namespace whose raw block is 32 GiB: refused at registration, naming both sizes.
  v1::RegisterNamespaceResponse reg;
  grpc::Status s = Register(stub, Descriptor(1024, 16, 128, 2048, v1::DTYPE_FP32), &reg);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("34359738368"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("268435456"), std::string::npos) << s.error_message();

  // 4,096 layers, head_dim 4,096, 1-bit + QJL at g = 256: ~2 GiB of QJL matrices. Refused
  // before any of it is built (it used to cost +3 GiB and ~24 s of a worker).
  v1::NamespaceDescriptor qjl = Descriptor(4096, 1, 4096, 1);
  for (v1::SectionCodec* c :
       {qjl.mutable_codec()->mutable_key(), qjl.mutable_codec()->mutable_value()}) {
    c->set_bits(1);
    c->set_group_size(256);
    c->set_qjl(true);
  }
  const auto t0 = std::chrono::steady_clock::now();
  s = Register(stub, qjl, &reg);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("max-codec-setup-bytes"), std::string::npos)
      << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, Scaled(std::chrono::seconds(10)));

  // A 3.9 MiB model name.
  v1::NamespaceDescriptor big_name = Descriptor(2, 2, 64, 16);
  big_name.set_model(std::string(3900 << 10, 'm'));
  s = Register(stub, big_name, &reg);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("namespace_descriptor.model"), std::string::npos)
      << s.error_message();

  ExpectHealthy(stub, 1);
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

TEST(ServerLimitsTest, LeasesChainsAndStatsAreBounded) {
  ServerProcess server({"--max-stats-namespaces", "2", "--max-hashes-per-call", "1000"});
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  v1::RegisterNamespaceResponse reg;
  ASSERT_TRUE(Register(stub, Descriptor(2, 2, 64, 16), &reg).ok());

  grpc::ClientContext c1;
  v1::LookupRequest lookup;
  lookup.set_namespace_id(reg.namespace_id());
  lookup.add_block_hashes(Hash(1));
  lookup.set_lease_seconds(0xffffffffu);  // ~136 years
  v1::LookupResponse lr;
  grpc::Status s = stub.Lookup(&c1, lookup, &lr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("3600"), std::string::npos) << s.error_message();

  lookup.set_lease_seconds(60);
  for (int i = 0; i < 1000; ++i) lookup.add_block_hashes(Hash(100 + i));
  grpc::ClientContext c2;
  s = stub.Lookup(&c2, lookup, &lr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("1001 block hashes"), std::string::npos) << s.error_message();

  std::vector<std::string> many;
  for (int i = 0; i < 1001; ++i) many.push_back(Hash(i));
  Get(stub, reg.namespace_id(), many, v1::ENCODING_PACKED, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Five namespaces, pages of two, every one seen once, in id order.
  std::set<uint64_t> registered = {reg.namespace_id()};
  for (int i = 0; i < 4; ++i) {
    v1::NamespaceDescriptor d = Descriptor(2, 2, 64, 16);
    d.set_cache_salt("tenant-" + std::to_string(i));
    ASSERT_TRUE(Register(stub, d, &reg).ok());
    registered.insert(reg.namespace_id());
  }
  std::vector<uint64_t> seen;
  v1::StatsRequest sreq;
  for (int page = 0; page < 10; ++page) {
    grpc::ClientContext ctx;
    v1::StatsResponse sr;
    ASSERT_TRUE(stub.Stats(&ctx, sreq, &sr).ok());
    EXPECT_LE(sr.namespaces_size(), 2);
    for (const auto& n : sr.namespaces()) seen.push_back(n.namespace_id());
    if (!sr.has_next_page_after()) break;
    sreq.set_page_after(sr.next_page_after());
  }
  EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()), registered);
  EXPECT_EQ(seen.size(), registered.size());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

// A client-side stream that sends its messages and then stalls (never WritesDone) until
// cancelled.
class StalledPut : public grpc::ClientWriteReactor<v1::PutBlocksRequest> {
 public:
  StalledPut(v1::TurboKV::Stub& stub, std::vector<v1::PutBlocksRequest> messages)
      : messages_(std::move(messages)) {
    stub.async()->PutBlocks(&ctx_, &resp_, this);
    StartCall();
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (ok) Next();
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> l(mu_);
    status_ = s;
    done_ = true;
    cv_.notify_all();
  }
  void Cancel() { ctx_.TryCancel(); }
  grpc::Status Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return done_; });
    return status_;
  }
  bool done() {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }

 private:
  void Next() {
    if (next_ < messages_.size()) StartWrite(&messages_[next_++]);
  }
  grpc::ClientContext ctx_;
  v1::PutBlocksResponse resp_;
  std::vector<v1::PutBlocksRequest> messages_;
  size_t next_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

TEST(ServerLimitsTest, AHalfBlockStallDoesNotBlockOtherClients) {
  // The stall must outlast the test, also a sanitizer run's: no idle timeout.
  ServerProcess server({"--stream-idle-timeout-ms", "0"});
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  v1::RegisterNamespaceResponse reg;
  ASSERT_TRUE(Register(stub, Descriptor(8, 8, 128, 64), &reg).ok());  // 2 MiB raw blocks
  std::mt19937_64 rng(3);
  const std::string raw = RandomFp16(reg.raw_block_bytes(), rng);
  std::vector<v1::PutBlocksRequest> half =
      Chunks(reg.namespace_id(), {{Hash(1), v1::ENCODING_RAW, raw}});
  half.resize(1);  // the first of two chunks, then nothing
  StalledPut stalled(stub, half);

  // Others go on: puts of whole blocks, gets, lookups.
  for (int i = 0; i < 4; ++i) {
    v1::PutBlocksResponse put =
        Put(stub, reg.namespace_id(), {{Hash(10 + i), v1::ENCODING_RAW, raw}});
    ASSERT_EQ(put.results_size(), 1);
    EXPECT_EQ(put.results(0).code(), 0) << put.results(0).message();
  }
  auto got = Get(stub, reg.namespace_id(), {Hash(10), Hash(1)}, v1::ENCODING_PACKED);
  EXPECT_EQ(got.count(Hash(10)), 1u);
  EXPECT_EQ(got.count(Hash(1)), 0u);  // the stalled block is not stored
  EXPECT_FALSE(stalled.done());
  stalled.Cancel();
  EXPECT_EQ(stalled.Wait().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

// Streams that each send 1 MiB and stall hold at most the in-flight budget: all but about the
// budget's worth of them are refused, and the server's memory grows by a few budgets, not by
// the streams' total. 500 streams against 64 MiB; in a sanitizer build (TimeScale() > 1),
// 160 against 16 MiB: streams still 8-10 times what fits, at a third of the work, since every
// instrumented stream costs the client and the server ~10x.
TEST(ServerLimitsTest, HundredsOfStalledStreamsAreBoundedByTheInFlightBudget) {
  const int budget_mib = SlowBuild() ? 16 : 64;
  const int streams_total = SlowBuild() ? 10 * budget_mib : 500;
  // No idle timeout: this test is about what stalled streams hold while they sit (a sanitizer
  // run lasts past the default 30 s, and those holding budget would be cancelled;
  // tests/python/test_tenant_budget.py tests the idle timeout).
  ServerProcess server({"--max-in-flight-bytes", std::to_string(budget_mib) + "MiB",
                        "--admission-timeout-ms", "3000", "--stream-idle-timeout-ms", "0"});
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  v1::RegisterNamespaceResponse reg;
  ASSERT_TRUE(Register(stub, Descriptor(8, 8, 128, 64), &reg).ok());  // 2 MiB raw blocks
  std::mt19937_64 rng(4);
  const std::string raw = RandomFp16(reg.raw_block_bytes(), rng);
  const uint64_t rss_before = RssBytes(server.pid());

  std::vector<std::unique_ptr<StalledPut>> streams;
  for (int i = 0; i < streams_total; ++i) {
    std::vector<v1::PutBlocksRequest> half =
        Chunks(reg.namespace_id(), {{Hash(1000 + i), v1::ENCODING_RAW, raw}});
    half.resize(1);  // 1 MiB, then a stall
    streams.push_back(std::make_unique<StalledPut>(stub, std::move(half)));
  }
  // Streams that found no budget within the admission timeout are refused: about all but the
  // ~budget_mib that fit (64 MiB: at most 99 left, as before).
  const int may_hold = budget_mib * 3 / 2 + 3;
  const auto count_done = [&] {
    int n = 0;
    for (auto& s : streams) n += s->done();
    return n;
  };
  uint64_t rss_peak = RssBytes(server.pid());
  // Polled: a bounded server meets the count within seconds of its admission timeout (on a
  // quiet machine); the deadline only ends a failing run.
  const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(60));
  while (count_done() < streams_total - may_hold && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rss_peak = std::max(rss_peak, RssBytes(server.pid()));
  }
  int refused = 0;
  for (auto& s : streams) {
    if (!s->done()) continue;
    const grpc::Status st = s->Wait();
    // Refused by turbokv's budget, or earlier by gRPC's memory quota (RST_STREAM 11,
    // ENHANCE_YOUR_CALM) which the server sizes to the same budget.
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_TRUE(st.error_message().find("max-in-flight-bytes") != std::string::npos ||
                st.error_message().find("RST_STREAM with error code 11") != std::string::npos)
        << st.error_message();
    ++refused;
  }
  EXPECT_GE(refused, streams_total - may_hold) << "refused " << refused;
  std::cout << streams_total << " stalled 1 MiB streams, budget " << budget_mib << " MiB: RSS "
            << rss_before / (1 << 20) << " MiB before, " << rss_peak / (1 << 20)
            << " MiB with them, " << refused << " refused\n";
  // The server holds a few budgets, not the streams' total: 2.5 x (the budget + the 64 MiB
  // that gRPC's memory quota adds to it); 64 MiB: 320 MiB of 500, 16 MiB: 200 MiB of 160 plus
  // TSan's shadow of them.
  // Under ThreadSanitizer twice as much: its shadow of what the server touches is twice that,
  // and its per-thread state grows with the threads gRPC adds under load (measured at 16 MiB:
  // 101-113 MiB over the RSS before on a quiet machine, 179-234 MiB and once 310 MiB while
  // clang-tidy ran beside it in CI; 400 MiB allowed, against 160 MiB of streams plus at least
  // 320 MiB of their shadow if the server held them all).
  const uint64_t bound_mib = uint64_t(budget_mib + 64) * 5 / 2 * (kThreadSanitizer ? 2 : 1);
  EXPECT_LT(rss_peak, rss_before + (bound_mib << 20));
  for (auto& s : streams) s->Cancel();
  for (auto& s : streams) s->Wait();
  ExpectHealthy(stub, 2);
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

// Issue 10, item 3: the same hash put twice in one stream, the earlier copy in a large batch and
// the later one alone, used to come back as the EARLIER bytes (the small batch committed first).
TEST(ServerLimitsTest, TheLaterPutOfAHashInOneStreamWins) {
  ServerProcess server;
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  v1::RegisterNamespaceResponse reg;
  ASSERT_TRUE(Register(stub, Descriptor(2, 2, 64, 16), &reg).ok());
  const uint64_t ns = reg.namespace_id();
  std::mt19937_64 rng(5);
  // Two packed blocks of this namespace, made by the server itself.
  std::vector<Block> seed;
  for (int i = 0; i < 2; ++i) {
    seed.push_back({Hash(90 + i), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
  }
  Put(stub, ns, seed);
  auto packed = Get(stub, ns, {Hash(90), Hash(91)}, v1::ENCODING_PACKED);
  const std::string earlier = packed[Hash(90)], later = packed[Hash(91)];
  ASSERT_FALSE(earlier.empty());
  ASSERT_NE(earlier, later);

  for (int round = 0; round < 5; ++round) {
    const std::string target = Hash(1000 + round);
    std::vector<Block> stream;
    for (int i = 0; i < 63; ++i) {  // slow to encode, batched with the first copy
      stream.push_back(
          {Hash(2000 + 100 * round + i), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
    }
    stream.push_back({target, v1::ENCODING_PACKED, earlier});
    stream.push_back({target, v1::ENCODING_PACKED, later});
    v1::PutBlocksResponse put = Put(stub, ns, stream);
    ASSERT_EQ(put.results_size(), 65);
    for (const auto& r : put.results()) ASSERT_EQ(r.code(), 0) << r.message();
    EXPECT_EQ(Get(stub, ns, {target}, v1::ENCODING_PACKED)[target], later) << "round " << round;
  }
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

TEST(ServerLimitsTest, ConcurrentPutsOfOneHashLeaveOneWholeBlock) {
  ServerProcess server;
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  v1::RegisterNamespaceResponse reg;
  ASSERT_TRUE(Register(stub, Descriptor(8, 8, 128, 64), &reg).ok());  // 2 MiB raw, 2 chunks
  const uint64_t ns = reg.namespace_id();
  std::mt19937_64 rng(6);
  constexpr int kWriters = 4;
  std::vector<Block> seed;
  for (int i = 0; i < kWriters; ++i) {
    seed.push_back({Hash(50 + i), v1::ENCODING_RAW, RandomFp16(reg.raw_block_bytes(), rng)});
  }
  Put(stub, ns, seed);
  std::vector<std::string> hashes;
  for (int i = 0; i < kWriters; ++i) hashes.push_back(Hash(50 + i));
  auto packed = Get(stub, ns, hashes, v1::ENCODING_PACKED);
  std::set<std::string> versions;
  for (const auto& [h, bytes] : packed) versions.insert(bytes);
  ASSERT_EQ(versions.size(), static_cast<size_t>(kWriters));

  const std::string target = Hash(7);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      // Alternate PACKED copies and RAW puts (encoded by the server) of writer w's block.
      for (int i = 0; i < 12; ++i) {
        const bool raw = i % 2 == 1;
        Put(stub, ns,
            {{target, raw ? v1::ENCODING_RAW : v1::ENCODING_PACKED,
              raw ? seed[w].bytes : packed[hashes[w]]}});
      }
    });
  }
  int reads = 0;
  std::thread reader([&] {
    while (!stop.load()) {
      auto got = Get(stub, ns, {target}, v1::ENCODING_PACKED);
      if (got.count(target) == 0) continue;
      EXPECT_EQ(versions.count(got[target]), 1u) << "a torn or mixed block";
      ++reads;
    }
  });
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_GT(reads, 0);
  EXPECT_EQ(versions.count(Get(stub, ns, {target}, v1::ENCODING_PACKED)[target]), 1u);
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

}  // namespace
}  // namespace turbokv::server
