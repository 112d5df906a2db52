// Reactor lifetimes under cancellation (issue 9), end to end on the real turbokv-server binary
// through the generated stub: many clients at once cancel PutBlocks streams after a few chunks
// (encode tasks still queued on the codec pool, commits on the I/O pool), cancel GetBlocks RAW
// calls after their first message (decode tasks queued), and let deadlines pass mid-stream,
// against a small in-flight budget (so some calls are waiting for budget when they go). The
// server must stay up and keep serving every stored block's exact bytes.
//
// A streaming reactor used to be deleted by gRPC's OnDone while a pool task that had just
// finished the call's last piece of work was still running the reactor's code (the unlocked
// tail of Settle/Pump): a use after free that killed the server with SIGSEGV under load
// (bench/service_vs_redis.sh). Reactors are now reference-counted (server/service/
// reactor_ref.h). The race window is small, so this test is most telling in the sanitizer
// builds (tools/tsan.sh runs it under ThreadSanitizer; -DTURBOKV_SANITIZE=address,undefined
// for AddressSanitizer); in a plain build it checks that nothing cancelled corrupts or loses
// what was stored.
#include <fcntl.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server_process.h"

namespace turbokv::server {
namespace {

using testing::Hash;
using testing::NewClient;
using testing::RandomFp16;
using testing::Scaled;
using testing::ServerProcess;

// Smaller than the client library's 1 MiB, so a 2 MiB block takes four messages and a cancel
// can land between any two of them (a section split across chunks is the carried path).
constexpr size_t kTestChunk = size_t{512} << 10;
constexpr int kStoredBlocks = 8;

std::vector<v1::PutBlocksRequest> Chunks(uint64_t ns, const std::string& hash,
                                         const std::string& raw) {
  std::vector<v1::PutBlocksRequest> out;
  for (size_t offset = 0; offset < raw.size(); offset += kTestChunk) {
    v1::PutBlocksRequest& m = out.emplace_back();
    m.set_namespace_id(ns);
    m.set_block_hash(hash);
    m.set_encoding(v1::ENCODING_RAW);
    m.set_block_bytes(raw.size());
    m.set_offset(offset);
    m.set_data(raw.substr(offset, kTestChunk));
  }
  return out;
}

// Sends `messages` (all when `send` covers them) and finishes; with `cancel`, cancels after
// `send` messages instead of closing the stream.
grpc::Status Put(v1::TurboKV::Stub& stub, const std::vector<v1::PutBlocksRequest>& messages,
                 size_t send, bool cancel, std::chrono::milliseconds timeout,
                 v1::PutBlocksResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto writer = stub.PutBlocks(&ctx, resp);
  for (size_t i = 0; i < send && i < messages.size(); ++i) {
    if (!writer->Write(messages[i])) break;
  }
  if (cancel) {
    ctx.TryCancel();
  } else {
    writer->WritesDone();
  }
  return writer->Finish();
}

// Reads the blocks of `hashes` (concatenated chunks per hash); with `cancel_after` > 0,
// cancels after that many messages.
grpc::Status Get(v1::TurboKV::Stub& stub, uint64_t ns, const std::vector<std::string>& hashes,
                 v1::Encoding encoding, int cancel_after, std::chrono::milliseconds timeout,
                 std::map<std::string, std::string>* out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::GetBlocksRequest req;
  req.set_namespace_id(ns);
  for (const std::string& h : hashes) req.add_block_hashes(h);
  req.set_encoding(encoding);
  auto reader = stub.GetBlocks(&ctx, req);
  v1::GetBlocksResponse m;
  int messages = 0;
  while (reader->Read(&m)) {
    if (m.found()) (*out)[m.block_hash()] += m.data();
    if (cancel_after > 0 && ++messages == cancel_after) {
      ctx.TryCancel();
      break;
    }
  }
  return reader->Finish();
}

bool Running(pid_t pid) {
  int status = 0;
  return pid > 0 && waitpid(pid, &status, WNOHANG) == 0;
}

TEST(ServerLifetimeTest, ManyClientsCancellingMidStreamLeaveTheServerServingCorrectBytes) {
  // A budget of a few blocks, so that some calls wait for it when they are cancelled.
  ServerProcess server({"--max-in-flight-bytes", "24MiB", "--admission-timeout-ms", "2000"});
  ASSERT_TRUE(server.Start()) << server.Log();
  auto& stub = server.stub();
  v1::RegisterNamespaceResponse reg;
  {
    grpc::ClientContext ctx;
    v1::RegisterNamespaceRequest req;
    v1::NamespaceDescriptor* d = req.mutable_namespace_descriptor();
    d->set_model("test/lifetime");
    d->set_dtype(v1::DTYPE_FP16);
    d->set_num_layers(8);
    d->set_num_kv_heads(8);
    d->set_head_dim(128);
    d->set_block_tokens(64);  // 2 MiB raw blocks, 128 KiB sections
    ASSERT_TRUE(stub.RegisterNamespace(&ctx, req, &reg).ok());
  }
  const uint64_t ns = reg.namespace_id();
  ASSERT_EQ(reg.raw_block_bytes(), 2u << 20);
  // The deadline of calls meant to finish (the expiring ones keep theirs: 1-30 ms).
  const std::chrono::milliseconds kLong = Scaled(std::chrono::seconds(60));

  // The blocks every client reads, stored first; what the server returns for them now is what
  // it must return at the end.
  std::mt19937_64 rng(9);
  std::vector<std::string> hashes;
  for (int i = 0; i < kStoredBlocks; ++i) {
    hashes.push_back(Hash(i));
    v1::PutBlocksResponse resp;
    const std::string raw = RandomFp16(reg.raw_block_bytes(), rng);
    const auto messages = Chunks(ns, hashes.back(), raw);
    ASSERT_TRUE(Put(stub, messages, messages.size(), false, kLong, &resp).ok());
    ASSERT_EQ(resp.results_size(), 1);
    ASSERT_EQ(resp.results(0).code(), 0) << resp.results(0).message();
  }
  std::map<std::string, std::string> packed, decoded;
  ASSERT_TRUE(Get(stub, ns, hashes, v1::ENCODING_PACKED, 0, kLong, &packed).ok());
  ASSERT_TRUE(Get(stub, ns, hashes, v1::ENCODING_RAW, 0, kLong, &decoded).ok());
  ASSERT_EQ(packed.size(), hashes.size());
  ASSERT_EQ(decoded.size(), hashes.size());

  constexpr int kClients = 12;
  constexpr int kRounds = 10;
  std::atomic<int> cancelled{0}, expired{0}, whole{0}, wrong{0};
  std::mutex mu;
  std::vector<std::string> unexpected;  // statuses no scenario should produce
  std::vector<std::string> cancelled_puts;
  auto note = [&](const char* what, const grpc::Status& s) {
    std::lock_guard<std::mutex> l(mu);
    unexpected.push_back(std::string(what) + ": " + std::to_string(s.error_code()) + " " +
                         s.error_message());
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = NewClient(server.port());
      std::mt19937_64 r(100 + c);
      const std::string raw = RandomFp16(reg.raw_block_bytes(), r);
      for (int round = 0; round < kRounds; ++round) {
        const std::string hash = Hash(1000 + c * kRounds + round);
        const auto messages = Chunks(ns, hash, raw);
        std::map<std::string, std::string> got;
        grpc::Status s;
        switch ((c + round) % 5) {
          case 0: {  // a put cancelled after 1..3 of its 4 chunks
            v1::PutBlocksResponse resp;
            s = Put(*client, messages, 1 + r() % 3, true, kLong, &resp);
            // (RESOURCE_EXHAUSTED: no budget within the admission timeout, before the cancel.)
            if (s.error_code() != grpc::StatusCode::CANCELLED &&
                s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
              note("cancelled put", s);
            }
            std::lock_guard<std::mutex> l(mu);
            cancelled_puts.push_back(hash);
            ++cancelled;
            break;
          }
          case 1:  // a RAW get of every block cancelled after 1..4 messages
            s = Get(*client, ns, hashes, v1::ENCODING_RAW, 1 + static_cast<int>(r() % 4), kLong,
                    &got);
            if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED &&
                s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
              note("cancelled get", s);
            }
            ++cancelled;
            break;
          case 2: {  // a whole put whose deadline passes while it is in flight
            v1::PutBlocksResponse resp;
            s = Put(*client, messages, messages.size(), false,
                    std::chrono::milliseconds(1 + r() % 20), &resp);
            if (!s.ok() && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
                s.error_code() != grpc::StatusCode::CANCELLED &&
                s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
              note("expiring put", s);
            }
            std::lock_guard<std::mutex> l(mu);
            cancelled_puts.push_back(hash);
            ++expired;
            break;
          }
          case 3:  // a RAW get whose deadline passes mid-stream; what came is correct
            s = Get(*client, ns, hashes, v1::ENCODING_RAW, 0,
                    std::chrono::milliseconds(1 + r() % 30), &got);
            if (s.ok()) {
              for (const auto& [h, bytes] : got) wrong += bytes != decoded.at(h);
            } else if (s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
                       s.error_code() != grpc::StatusCode::CANCELLED &&
                       s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
              note("expiring get", s);
            }
            ++expired;
            break;
          default:  // whole gets, both encodings: exact bytes
            s = Get(*client, ns, hashes, v1::ENCODING_PACKED, 0, kLong, &got);
            if (!s.ok() && s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
              note("packed get", s);
            } else if (s.ok()) {
              for (const std::string& h : hashes) wrong += got[h] != packed.at(h);
            }
            got.clear();
            s = Get(*client, ns, hashes, v1::ENCODING_RAW, 0, kLong, &got);
            if (!s.ok() && s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
              note("raw get", s);
            } else if (s.ok()) {
              for (const std::string& h : hashes) wrong += got[h] != decoded.at(h);
            }
            ++whole;
        }
        if (!Running(server.pid())) return;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  std::cout << "cancelled " << cancelled << ", expired " << expired << ", whole " << whole
            << " calls\n";

  ASSERT_TRUE(Running(server.pid())) << "the server died:\n" << server.Log();
  EXPECT_EQ(wrong.load(), 0);
  for (const std::string& u : unexpected) ADD_FAILURE() << u;

  // Everything stored still comes back exactly; a cancelled put left no part of its block.
  std::map<std::string, std::string> got;
  ASSERT_TRUE(Get(stub, ns, hashes, v1::ENCODING_PACKED, 0, kLong, &got).ok());
  for (const std::string& h : hashes) EXPECT_TRUE(got[h] == packed.at(h)) << "packed block";
  got.clear();
  ASSERT_TRUE(Get(stub, ns, hashes, v1::ENCODING_RAW, 0, kLong, &got).ok());
  for (const std::string& h : hashes) EXPECT_TRUE(got[h] == decoded.at(h)) << "decoded block";
  got.clear();
  ASSERT_TRUE(Get(stub, ns, cancelled_puts, v1::ENCODING_PACKED, 0, kLong, &got).ok());
  for (const auto& [h, bytes] : got) EXPECT_EQ(bytes.size(), reg.packed_block_bytes());

  // Nothing is left holding the budget: a whole block goes in at once.
  v1::PutBlocksResponse resp;
  const auto messages = Chunks(ns, Hash(99), RandomFp16(reg.raw_block_bytes(), rng));
  ASSERT_TRUE(Put(stub, messages, messages.size(), false, kLong, &resp).ok());
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).code(), 0) << resp.results(0).message();
  ASSERT_EQ(server.Stop(SIGTERM), 0) << server.Log();
}

// A second turbokv-server started on a data directory another one is serving must change
// nothing there and say who holds it. It used to release the first server's disk reserve
// (and could run the damaged-file repair) before RocksDB's own LOCK refused it, with only
// RocksDB's "lock file ... Resource temporarily unavailable" to explain why.
TEST(ServerLifetimeTest, ASecondServerOnTheSameDataDirChangesNothingAndNamesTheHolder) {
  ServerProcess first;
  ASSERT_TRUE(first.Start()) << first.Log();
  const std::string reserve = first.data_dir() + "/RESERVE";
  ASSERT_TRUE(std::filesystem::exists(reserve)) << "the first server took no disk reserve";
  const auto reserve_bytes = std::filesystem::file_size(reserve);

  const std::string log = first.data_dir() + "/../second.log";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> args = {ServerProcess::BinaryPath(),
                                     "--data-dir",
                                     first.data_dir(),
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--metrics-listen",
                                     ""};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  for (int i = 0; i < 3000 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (waitpid(pid, &status, WNOHANG) == 0 && !WIFEXITED(status)) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the second server did not exit";
  }
  std::ifstream in(log);
  const std::string second((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << second;
  EXPECT_NE(WEXITSTATUS(status), 0) << second;
  const std::string holder = "(pid " + std::to_string(first.pid()) + ")";
  EXPECT_NE(second.find("is in use by another turbokv-server " + holder), std::string::npos)
      << second;
  EXPECT_EQ(second.find("released the disk reserve"), std::string::npos) << second;
  ASSERT_TRUE(std::filesystem::exists(reserve)) << "the second server removed the reserve";
  EXPECT_EQ(std::filesystem::file_size(reserve), reserve_bytes);

  // The first server still serves.
  auto client = NewClient(first.port());
  grpc::ClientContext ctx;
  ctx.set_deadline(testing::DeadlineIn(std::chrono::seconds(10)));
  v1::StatsRequest req;
  v1::StatsResponse resp;
  EXPECT_TRUE(client->Stats(&ctx, req, &resp).ok());
  EXPECT_EQ(first.Stop(SIGTERM), 0) << first.Log();
  // Once it is gone the directory opens again.
  ASSERT_TRUE(first.Start()) << first.Log();
}

}  // namespace
}  // namespace turbokv::server
