// The put and get pipelines (server/service/put_pipeline.h, get_pipeline.h) driven in-process
// through their interleavings, deterministically: the codec and I/O pools are queues that run
// a task when the test says, the store is a map that fails on cue, the adapter is a fake Host
// that records what the pipeline asked of gRPC. The codec, the namespace and the in-flight
// budget are the real ones. No sockets, no sleeps (the one wait is for the budget's own
// admission timeout to fire).
#include <cmath>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/service/get_pipeline.h"
#include "server/service/put_pipeline.h"

namespace turbokv::server {
namespace {

using std::chrono::steady_clock;

// Runs queued tasks when told, on the test's thread.
class ManualPool {
 public:
  SubmitFn fn() {
    return [this](CodecPool::Task task, CodecPool::OnException) {
      if (full) return absl::ResourceExhaustedError("test pool is full");
      tasks_.push_back(std::move(task));
      return absl::OkStatus();
    };
  }
  size_t queued() const { return tasks_.size(); }
  bool RunOne(bool newest_first = false) {
    if (tasks_.empty()) return false;
    CodecPool::Task t;
    if (newest_first) {
      t = std::move(tasks_.back());
      tasks_.pop_back();
    } else {
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    t();
    return true;
  }
  void RunAll(bool newest_first = false) {
    while (RunOne(newest_first)) {
    }
  }
  bool full = false;

 private:
  std::deque<CodecPool::Task> tasks_;
};

// Stores values; fails the puts of the hashes in `fail_put` and every fetch while fetch_error.
// A memory-only fetch (would_block set) serves only when every stored block asked for is in
// `cached` (the read cache).
struct FakeStore {
  std::map<std::string, std::string> values;
  std::set<std::string> cached;
  std::map<std::string, absl::Status> fail_put;
  absl::Status fetch_error;
  std::vector<size_t> commit_sizes;  // blocks per commit, in commit order
  std::vector<std::string> commit_order;
  int fetches = 0;         // fetches that may read
  int cached_fetches = 0;  // memory-only ones

  CommitFn commit() {
    return [this](uint64_t, absl::Span<const BlockStore::BlockWrite> blocks,
                  BlockStore::ChainCursor*) {
      std::vector<absl::Status> out;
      commit_sizes.push_back(blocks.size());
      for (const auto& w : blocks) {
        auto it = fail_put.find(std::string(w.hash));
        out.push_back(it == fail_put.end() ? absl::OkStatus() : it->second);
        if (out.back().ok()) values[std::string(w.hash)] = std::string(w.value);
        commit_order.emplace_back(w.hash);
      }
      return out;
    };
  }
  FetchFn fetch() {
    return [this](uint64_t, absl::Span<const std::string_view> hashes, BlockStore::ChainCursor*,
                  bool* would_block) -> absl::StatusOr<std::vector<std::optional<PinnedValue>>> {
      ++(would_block != nullptr ? cached_fetches : fetches);
      if (!fetch_error.ok()) return fetch_error;
      if (would_block != nullptr) {
        *would_block = false;
        for (std::string_view h : hashes) {
          if (values.count(std::string(h)) != 0 && cached.count(std::string(h)) == 0) {
            *would_block = true;
            return std::vector<std::optional<PinnedValue>>(hashes.size());
          }
        }
      }
      std::vector<std::optional<PinnedValue>> out;
      for (std::string_view h : hashes) {
        auto it = values.find(std::string(h));
        if (it == values.end()) {
          out.emplace_back();
          continue;
        }
        auto owner = std::make_shared<std::string>(it->second);
        out.push_back(PinnedValue{owner, *owner});
      }
      return out;
    };
  }
};

class Fixture : public ::testing::Test {
 protected:
  Fixture() : metrics_(registry_, "cpu", 1 << 30), budget_(64 << 20) {
    backend_ = *SelectCodecBackend(CodecBackendKind::kCpu);
    constexpr uint64_t kId = 0x5eed;
    ns_ = std::make_shared<const Namespace>(
        Namespace{kId,
                  "",
                  {},
                  *codec::BlockCodec::Create(codec::BlockShape{2, 4, 2, 64, codec::DType::kFloat32},
                                             *codec::PresetSpec("k4v4-g32", 64), kId)});
    limits_.admission_timeout_ms = 60000;
    limits_.stream_idle_timeout_ms = 0;
  }

  PipelineEnv Env() {
    PipelineEnv env;
    env.codec = codec_.fn();
    env.io = io_.fn();
    env.commit = store_.commit();
    env.fetch = store_.fetch();
    env.metrics = &metrics_;
    env.backend = &backend_;
    env.limits = limits_;
    return env;
  }
  std::function<absl::StatusOr<std::shared_ptr<const Namespace>>(uint64_t)> Resolve() {
    return [ns = ns_](uint64_t id) -> absl::StatusOr<std::shared_ptr<const Namespace>> {
      if (id != ns->id) return absl::NotFoundError("no such namespace");
      return ns;
    };
  }
  // A RAW block of finite values (a NaN at `nan_at` when given).
  std::string RawBlock(int seed, long nan_at = -1) const {
    std::vector<float> v(ns_->codec.raw_bytes() / sizeof(float));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.1f * float(i) + float(seed));
    if (nan_at >= 0) v[static_cast<size_t>(nan_at)] = std::nanf("");
    return std::string(reinterpret_cast<const char*>(v.data()), ns_->codec.raw_bytes());
  }
  std::string PackedBlock(int seed) const {
    const std::string raw = RawBlock(seed);
    std::string packed(ns_->codec.packed_bytes(), '\0');
    EXPECT_TRUE(ns_->codec
                    .Encode({reinterpret_cast<const uint8_t*>(raw.data()), raw.size()},
                            {reinterpret_cast<uint8_t*>(packed.data()), packed.size()})
                    .ok());
    return packed;
  }

  prometheus::Registry registry_;
  Metrics metrics_;
  CodecBackend backend_;
  LimitOptions limits_;
  ByteBudget budget_;
  std::shared_ptr<const Namespace> ns_;
  ManualPool codec_, io_;
  FakeStore store_;
};

class PutHost : public PutPipeline::Host {
 public:
  void StartRead(v1::PutBlocksRequest* into) override { read = into; }
  void Finish(const absl::Status& s, std::vector<v1::BlockResult> r) override {
    status = s;
    results = std::move(r);
    done.set_value();
  }
  void ArmTimer(steady_clock::time_point when) override { timer = when; }
  void Cancel() override { ++cancels; }
  std::shared_ptr<void> Pin() override { return nullptr; }

  v1::PutBlocksRequest* read = nullptr;  // the pending read's target
  std::optional<absl::Status> status;
  std::vector<v1::BlockResult> results;
  std::promise<void> done;
  std::optional<steady_clock::time_point> timer;
  int cancels = 0;
};

class PutPipelineTest : public Fixture {
 protected:
  PutPipeline::Call Call() {
    PutPipeline::Call call;
    call.resolve = Resolve();
    call.lease = BudgetLease(&budget_, "tenant");
    return call;
  }
  // Delivers one chunk through the pending read.
  void Send(PutPipeline& p, const std::string& hash, const std::string& block, size_t offset,
            size_t bytes, v1::Encoding encoding = v1::ENCODING_RAW) {
    ASSERT_NE(host_.read, nullptr) << "no read pending";
    v1::PutBlocksRequest& m = *std::exchange(host_.read, nullptr);
    m.Clear();
    m.set_namespace_id(ns_->id);
    m.set_block_hash(hash);
    m.set_offset(offset);
    if (offset == 0) {
      m.set_encoding(encoding);
      m.set_block_bytes(block.size());
    }
    m.set_data(block.substr(offset, bytes));
    p.OnRead(true);
  }
  void End(PutPipeline& p) {
    ASSERT_NE(host_.read, nullptr);
    host_.read = nullptr;
    p.OnRead(false);
  }
  static std::string Hash(char c) { return std::string(16, c); }

  PutHost host_;
};

TEST_F(PutPipelineTest, CommitsInStreamOrderWhateverOrderTheEncodesFinishIn) {
  PutPipeline p(Env(), Call(), &host_);
  p.Start();
  const std::string a = RawBlock(1), b = RawBlock(2), c = PackedBlock(3);
  const size_t half = a.size() / 2 + 100;  // a section split across two chunks
  Send(p, Hash('a'), a, 0, half);
  Send(p, Hash('a'), a, half, a.size() - half);
  Send(p, Hash('b'), b, 0, b.size());
  Send(p, Hash('c'), c, 0, c.size(), v1::ENCODING_PACKED);
  End(p);
  EXPECT_GT(codec_.queued(), 3u);  // sections of a and b, the check of c
  EXPECT_EQ(io_.queued(), 0u);     // nothing is ready before its encodes
  EXPECT_GT(budget_.in_use(), 0u);
  codec_.RunAll(/*newest_first=*/true);
  // One commit in flight: the ready prefix, in stream order.
  ASSERT_EQ(io_.queued(), 1u);
  io_.RunAll();
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_TRUE(host_.status->ok()) << *host_.status;
  ASSERT_EQ(host_.results.size(), 3u);
  for (const auto& r : host_.results) {
    EXPECT_EQ(r.code(), 0) << r.message();
    EXPECT_EQ(r.stored_bytes(), ns_->codec.packed_bytes());
  }
  EXPECT_EQ(store_.commit_order, (std::vector<std::string>{Hash('a'), Hash('b'), Hash('c')}));
  EXPECT_EQ(store_.values[Hash('c')], c);
  EXPECT_EQ(store_.values[Hash('a')], PackedBlock(1));  // streamed sections = whole encode
  EXPECT_EQ(budget_.in_use(), 0u);                      // every block's share went back
}

TEST_F(PutPipelineTest, CancelMidBlockSkipsQueuedWorkAndCommitsNothing) {
  PutPipeline p(Env(), Call(), &host_);
  p.Start();
  const std::string a = RawBlock(1), b = RawBlock(2);
  Send(p, Hash('a'), a, 0, a.size());
  Send(p, Hash('b'), b, 0, b.size() / 2);  // b is half in when the client cancels
  const uint64_t held = budget_.in_use();
  EXPECT_GE(held, a.size() + b.size() / 2);
  p.OnCancel();
  EXPECT_FALSE(host_.status.has_value());  // the pending read and the encodes are still out
  End(p);                                  // gRPC ends the pending read
  EXPECT_FALSE(host_.status.has_value());
  codec_.RunAll();
  io_.RunAll();
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(store_.commit_order.empty());
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PutPipelineTest, TheDefaultDeadlineCancelsTheCall) {
  PutPipeline::Call call = Call();
  call.default_deadline = steady_clock::now();  // already due
  call.deadline = std::chrono::system_clock::now() - std::chrono::seconds(1);
  PutPipeline p(Env(), std::move(call), &host_);
  p.Start();
  ASSERT_TRUE(host_.timer.has_value());  // the adapter's watchdog entry
  const std::string a = RawBlock(1);
  Send(p, Hash('a'), a, 0, a.size());
  p.OnTimer();  // the watchdog fires
  EXPECT_EQ(host_.cancels, 1);
  End(p);  // TryCancel ends the pending read, then OnCancel comes
  p.OnCancel();
  codec_.RunAll();  // past the deadline: the encodes skip their work
  io_.RunAll();
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(host_.status->message().find("--default-deadline-ms"), std::string::npos);
  EXPECT_TRUE(store_.values.empty());
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PutPipelineTest, NoBudgetWithinTheAdmissionTimeoutFailsTheCall) {
  limits_.admission_timeout_ms = 1;
  BudgetLease hog(&budget_, "other");
  ASSERT_TRUE(hog.Acquire(budget_.limit(), std::chrono::milliseconds(1), nullptr));
  PutPipeline p(Env(), Call(), &host_);
  std::future<void> done = host_.done.get_future();
  p.Start();
  EXPECT_EQ(host_.read, nullptr);  // nothing is read without budget
  done.wait();                     // the budget's timer fails the wait
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kResourceExhausted) << *host_.status;
  EXPECT_EQ(budget_.tenant_in_use("tenant"), 0u);
  EXPECT_EQ(budget_.rejected(), 1u);
}

TEST_F(PutPipelineTest, ATenantOverItsShareWaitsWhileAnotherTenantReads) {
  ByteBudget shared(16 << 20, /*tenant_share=*/0.5);
  BudgetLease other_tenant(&shared, "tenant");
  ASSERT_TRUE(other_tenant.Acquire(8 << 20, std::chrono::seconds(60), nullptr));  // its share
  PutPipeline::Call mine = Call();
  mine.lease = BudgetLease(&shared, "tenant");
  PutPipeline p(Env(), std::move(mine), &host_);
  p.Start();
  EXPECT_EQ(host_.read, nullptr);  // the tenant's share is spent: the stream waits
  PutHost other;
  PutPipeline::Call theirs = Call();
  theirs.lease = BudgetLease(&shared, "someone-else");
  PutPipeline q(Env(), std::move(theirs), &other);
  q.Start();
  EXPECT_NE(other.read, nullptr);  // another tenant reads at once
  other_tenant.Release(8 << 20);   // the share frees up: the waiting stream reads
  EXPECT_NE(host_.read, nullptr);
  End(p);
  other.read = nullptr;
  q.OnRead(false);
  EXPECT_TRUE(host_.status->ok());
  EXPECT_TRUE(other.status->ok());
  EXPECT_EQ(shared.in_use(), 0u);
}

TEST_F(PutPipelineTest, StoreAndCodecErrorsArePerBlockResults) {
  store_.fail_put[Hash('b')] = absl::UnavailableError("disk went away");
  PutPipeline p(Env(), Call(), &host_);
  p.Start();
  const std::string a = RawBlock(1), b = RawBlock(2);
  const std::string nan = RawBlock(3, /*nan_at=*/5);
  std::string bad_packed = PackedBlock(4);
  bad_packed.back() ^= 1;  // fails its checksum
  Send(p, Hash('a'), a, 0, a.size());
  Send(p, Hash('b'), b, 0, b.size());
  Send(p, Hash('n'), nan, 0, nan.size());
  Send(p, Hash('p'), bad_packed, 0, bad_packed.size(), v1::ENCODING_PACKED);
  End(p);
  codec_.RunAll();
  io_.RunAll();
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_TRUE(host_.status->ok());
  ASSERT_EQ(host_.results.size(), 4u);
  EXPECT_EQ(host_.results[0].code(), 0);
  EXPECT_EQ(host_.results[1].code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(host_.results[1].message(), "disk went away");
  EXPECT_EQ(host_.results[2].code(), static_cast<int>(absl::StatusCode::kInvalidArgument))
      << host_.results[2].message();
  EXPECT_EQ(host_.results[3].code(), static_cast<int>(absl::StatusCode::kDataLoss))
      << host_.results[3].message();
  EXPECT_EQ(store_.values.size(), 1u);
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PutPipelineTest, AFullPoolRefusesTheBlockNotTheStream) {
  PutPipeline p(Env(), Call(), &host_);
  p.Start();
  const std::string a = RawBlock(1), b = RawBlock(2);
  codec_.full = true;
  Send(p, Hash('a'), a, 0, a.size());
  codec_.full = false;
  Send(p, Hash('b'), b, 0, b.size());
  End(p);
  codec_.RunAll();
  io_.RunAll();
  ASSERT_TRUE(host_.status.has_value() && host_.status->ok());
  EXPECT_EQ(host_.results[0].code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(host_.results[1].code(), 0);
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PutPipelineTest, AnUnknownNamespaceFailsTheStream) {
  PutPipeline p(Env(), Call(), &host_);
  p.Start();
  ASSERT_NE(host_.read, nullptr);
  host_.read->set_namespace_id(999);
  host_.read = nullptr;
  p.OnRead(true);
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(budget_.in_use(), 0u);
}

class GetHost : public GetPipeline::Host {
 public:
  void StartWrite(const v1::GetBlocksResponse& fields, const Payload& data, bool l) override {
    writes.push_back(fields);
    bodies.emplace_back(data.data, data.size);
    last = l;
    if (l) done = true;
  }
  void Finish(const absl::Status& s) override {
    status = s;
    done = true;
  }
  void ArmTimer(steady_clock::time_point when) override { timer = when; }
  void Cancel() override { ++cancels; }
  std::shared_ptr<void> Pin() override { return nullptr; }

  std::vector<v1::GetBlocksResponse> writes;
  std::vector<std::string> bodies;
  bool last = false;
  bool done = false;
  std::optional<absl::Status> status;
  std::optional<steady_clock::time_point> timer;
  int cancels = 0;
};

class GetPipelineTest : public Fixture {
 protected:
  GetPipeline::Call Call() {
    GetPipeline::Call call;
    call.resolve = Resolve();
    call.lease = BudgetLease(&budget_, "tenant");
    return call;
  }
  v1::GetBlocksRequest Request(const std::vector<std::string>& hashes,
                               v1::Encoding encoding = v1::ENCODING_PACKED) {
    v1::GetBlocksRequest r;
    r.set_namespace_id(ns_->id);
    for (const auto& h : hashes) r.add_block_hashes(h);
    r.set_encoding(encoding);
    return r;
  }
  GetHost host_;
};

TEST_F(GetPipelineTest, ReadsOnTheIoPoolDecodesOnTheCodecPoolAndWritesInOrder) {
  const std::string a(16, 'a'), b(16, 'b'), missing(16, 'm');
  store_.values[a] = PackedBlock(1);
  store_.values[b] = PackedBlock(2);
  GetPipeline p(Env(), Call(), &host_);
  p.Start(Request({a, missing, b}, v1::ENCODING_RAW));
  EXPECT_EQ(store_.fetches, 0);         // no read (nor checksum) on the calling thread
  EXPECT_EQ(store_.cached_fetches, 0);  // RAW: never tried from the read cache
  EXPECT_GT(budget_.in_use(), 0u);
  ASSERT_EQ(io_.queued(), 1u);
  io_.RunAll();
  EXPECT_EQ(store_.fetches, 1);
  EXPECT_TRUE(host_.writes.empty());  // nothing goes out before its decode
  codec_.RunAll(/*newest_first=*/true);
  for (int i = 0; i < 100 && !host_.done; ++i) p.OnWriteDone(true);
  ASSERT_TRUE(host_.done);
  std::string a_raw, b_raw;
  for (size_t i = 0; i < host_.writes.size(); ++i) {
    if (host_.writes[i].index() == 0) a_raw += host_.bodies[i];
    if (host_.writes[i].index() == 2) b_raw += host_.bodies[i];
  }
  const auto& w = host_.writes;
  ASSERT_GE(w.size(), 3u);
  EXPECT_TRUE(host_.last);  // the last message went with the status
  EXPECT_EQ(w[0].index(), 0u);
  EXPECT_FALSE(w[1].found());
  EXPECT_EQ(w[1].index(), 1u);
  EXPECT_EQ(w.back().index(), 2u);
  std::string want(ns_->codec.raw_bytes(), '\0');
  const std::string& packed = store_.values[a];
  ASSERT_TRUE(ns_->codec
                  .Decode({reinterpret_cast<const uint8_t*>(packed.data()), packed.size()},
                          codec::DType::kFloat32, {0, 2},
                          {reinterpret_cast<uint8_t*>(want.data()), want.size()})
                  .ok());
  EXPECT_EQ(a_raw, want);
  EXPECT_EQ(b_raw.size(), ns_->codec.raw_bytes());
  EXPECT_GT(budget_.in_use(), 0u);  // the last message's bytes, until gRPC is done with it
  p.OnDone();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(GetPipelineTest, APackedCallOfCachedBlocksIsServedOnTheCallingThread) {
  const std::string a(16, 'a'), b(16, 'b'), missing(16, 'm');
  store_.values[a] = PackedBlock(1);
  store_.values[b] = PackedBlock(2);
  store_.cached = {a, b};
  GetPipeline p(Env(), Call(), &host_);
  p.Start(Request({a, missing, b}));
  // Served from memory within Start: no I/O task, the first message already written.
  EXPECT_EQ(store_.cached_fetches, 1);
  EXPECT_EQ(store_.fetches, 0);
  EXPECT_EQ(io_.queued(), 0u);
  ASSERT_EQ(host_.writes.size(), 1u);
  for (int i = 0; i < 100 && !host_.done; ++i) p.OnWriteDone(true);
  ASSERT_TRUE(host_.done);
  ASSERT_EQ(host_.writes.size(), 3u);
  EXPECT_EQ(host_.bodies[0], store_.values[a]);
  EXPECT_FALSE(host_.writes[1].found());
  EXPECT_EQ(host_.bodies[2], store_.values[b]);
  EXPECT_TRUE(host_.last);
  p.OnDone();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(GetPipelineTest, ABlockNotInTheReadCacheSendsTheWholeCallToTheIoPool) {
  const std::string a(16, 'a'), b(16, 'b');
  store_.values[a] = PackedBlock(1);
  store_.values[b] = PackedBlock(2);
  store_.cached = {a};
  GetPipeline p(Env(), Call(), &host_);
  p.Start(Request({a, b}));
  EXPECT_EQ(store_.cached_fetches, 1);
  EXPECT_TRUE(host_.writes.empty());
  ASSERT_EQ(io_.queued(), 1u);
  io_.RunAll();
  EXPECT_EQ(store_.fetches, 1);
  for (int i = 0; i < 100 && !host_.done; ++i) p.OnWriteDone(true);
  ASSERT_TRUE(host_.done);
  ASSERT_EQ(host_.writes.size(), 2u);
  EXPECT_EQ(host_.bodies[0], store_.values[a]);
  EXPECT_EQ(host_.bodies[1], store_.values[b]);
  p.OnDone();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(GetPipelineTest, AStoreErrorFailsTheCall) {
  store_.fetch_error = absl::UnavailableError("rocksdb is closing");
  GetPipeline p(Env(), Call(), &host_);
  p.Start(Request({std::string(16, 'a')}));
  io_.RunAll();
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(host_.writes.empty());
  p.OnDone();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(GetPipelineTest, CancelMidStreamDropsWhatWasNotSent) {
  std::vector<std::string> hashes;
  for (char c = 'a'; c < 'e'; ++c) {
    hashes.emplace_back(16, c);
    store_.values[hashes.back()] = PackedBlock(c);
  }
  GetPipeline p(Env(), Call(), &host_);
  p.Start(Request(hashes));
  io_.RunAll();
  ASSERT_EQ(host_.writes.size(), 1u);
  p.OnCancel();
  EXPECT_FALSE(host_.status.has_value());  // the write in flight ends first
  p.OnWriteDone(false);
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(host_.writes.size(), 1u);
  p.OnDone();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(GetPipelineTest, TheDefaultDeadlineCancelsTheCallAndAnUnknownNamespaceIsRefused) {
  GetPipeline::Call call = Call();
  call.default_deadline = steady_clock::now();
  store_.values[std::string(16, 'a')] = PackedBlock(1);  // stored, not in the read cache
  GetPipeline p(Env(), std::move(call), &host_);
  p.Start(Request({std::string(16, 'a')}));
  ASSERT_TRUE(host_.timer.has_value());
  p.OnTimer();
  EXPECT_EQ(host_.cancels, 1);
  io_.RunAll();  // the fetch queued before the deadline skips its read
  EXPECT_EQ(store_.fetches, 0);
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kDeadlineExceeded);
  p.OnDone();
  EXPECT_EQ(budget_.in_use(), 0u);

  GetHost refused;
  GetPipeline q(Env(), Call(), &refused);
  v1::GetBlocksRequest r = Request({std::string(16, 'a')});
  r.set_namespace_id(7);
  q.Start(r);
  ASSERT_TRUE(refused.status.has_value());
  EXPECT_EQ(refused.status->code(), absl::StatusCode::kNotFound);
}

TEST_F(GetPipelineTest, ABlockThatDoesNotDecodeIsAnInternalError) {
  const std::string packed = PackedBlock(1);
  store_.values[std::string(16, 'a')] = packed.substr(0, packed.size() - 1);  // cut short
  GetPipeline p(Env(), Call(), &host_);
  p.Start(Request({std::string(16, 'a')}, v1::ENCODING_RAW));
  io_.RunAll();
  codec_.RunAll();
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kInternal) << *host_.status;
  EXPECT_NE(host_.status->message().find("passed its checksum but does not decode"),
            std::string::npos);
  EXPECT_TRUE(host_.writes.empty());
  p.OnDone();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(GetPipelineTest, TooManyHashesAreRefused) {
  limits_.max_hashes_per_call = 1;
  GetPipeline p(Env(), Call(), &host_);
  p.Start(Request({std::string(16, 'a'), std::string(16, 'b')}));
  ASSERT_TRUE(host_.status.has_value());
  EXPECT_EQ(host_.status->code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace turbokv::server
