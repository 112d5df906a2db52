// One cell of the side-by-side benchmark (bench/service_vs_redis.sh): turbokv-server or
// redis-server on loopback, one phase, one block size, one concurrency. Prints one JSON line.
//
//   service_vs_redis_bench --system turbokv|redis --target HOST:PORT --phase put|get|prefix|lookup
//       --shape L,H,D,T (fp16 [L][2][T][H][D] blocks) | --kv KV.npy --block-tokens T
//       [--encoding raw|packed] [--concurrency C] [--seconds S] [--preset P] [--tag TEXT]
//
// turbokv's client has one connection per worker (ClientOptions::connections), as Redis's side
// has one per worker; --connections 1 shares one.
// put: each worker stores one block per call under its own ring of keys (bounded memory:
//      rewrites recycle the keys), turbokv PutBlocks RAW (the server encodes) or Redis SET.
// get: a working set is stored first (not timed); each worker then fetches one random block
//      per call: turbokv GetBlocks RAW (decoded) or PACKED, Redis GET of the raw value.
// prefix: 64 blocks (a 1,024-token prefix at 16 tokens per block) fetched in one call:
//      turbokv GetBlocks RAW / PACKED, Redis pipelined GETs; repeated for --seconds.
// lookup: turbokv only: a 1,000-block chain stored, Lookup of the whole chain repeated.
// Logical GB/s counts raw (fp16) block bytes in both systems, so PACKED moves fewer real bytes.
// CPU: the client's own CPU seconds (user + system) over the timed part, and with
// --server-pid the server's (from /proc/PID/stat): CPU per operation stays comparable when the
// machine is shared and wall-clock figures swing with its load.
// Allocator: the bench process keeps freed blocks in glibc's heap (mmap threshold 32 MiB, trim
// threshold 256 MiB) instead of returning each 0.3-8 MiB reply to the kernel and faulting fresh
// zeroed pages in for the next one (~40% of the client's CPU on 2 MiB gets). It applies to both
// systems' clients alike (hiredis's replies and turbokv's blocks); the servers are untouched.
#include <hiredis/hiredis.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "kv_layout.h"
#include "npy.h"
#include "turbokv/client/client.h"

namespace {

namespace tc = turbokv::client;

struct Args {
  std::string system = "turbokv";
  std::string target = "127.0.0.1:50051";
  std::string phase = "put";
  std::string shape;  // L,H,D,T
  std::string kv;
  uint32_t block_tokens = 16;
  std::string encoding = "raw";
  int concurrency = 1;
  double seconds = 3;
  std::string preset = "k4v4-g32";
  std::string tag;
  int server_pid = 0;
  int connections = 0;  // 0: one per worker, as the Redis side has
};

// CPU seconds (user + system) of this process.
double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// CPU seconds (user + system) of process `pid` from /proc; 0 when unreadable.
double ProcessCpuSeconds(int pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state; 14 utime, 15 stime
    if (i == 14) utime = std::stod(f);
    if (i == 15) {
      stime = std::stod(f);
      break;
    }
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  const uint32_t mant = x & 0x7fffff;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7bff);
  return static_cast<uint16_t>(sign | (exp << 10) | (mant >> 13));
}

// Blocks with the structure of real caches: per-channel key offsets and a few outlier channels.
std::vector<std::string> SyntheticBlocks(const tc::NamespaceDescriptor& d, int count) {
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  const size_t hd = size_t{d.num_kv_heads} * d.head_dim;
  std::vector<float> off(d.num_layers * hd), scale(d.num_layers * hd);
  for (size_t i = 0; i < off.size(); ++i) {
    off[i] = 0.5f * normal(rng);
    scale[i] = uni(rng) < 0.03f ? 10.f + 10.f * uni(rng) : 0.5f + uni(rng);
  }
  std::vector<std::string> out;
  for (int b = 0; b < count; ++b) {
    std::string block(d.raw_block_bytes(), '\0');
    size_t pos = 0;
    for (uint32_t l = 0; l < d.num_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (uint32_t t = 0; t < d.block_tokens; ++t) {
          for (size_t c = 0; c < hd; ++c, ++pos) {
            const size_t i = l * hd + c;
            const float v = kv == 0 ? off[i] + scale[i] * normal(rng) : 0.3f * normal(rng);
            const uint16_t h = FloatToHalf(v);
            std::memcpy(block.data() + 2 * pos, &h, 2);
          }
        }
      }
    }
    out.push_back(std::move(block));
  }
  return out;
}

std::string Key(const std::string& tag, uint64_t a, uint64_t b) {
  std::string h(32, '\0');
  const uint64_t f[4] = {std::hash<std::string>()(tag), a, b, 0x7475726b6f6b76};
  std::memcpy(h.data(), f, 32);
  return h;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(p / 100 * v.size())) - 1)];
}

// One connection per worker for Redis (it serves one command at a time per connection).
struct Redis {
  redisContext* c = nullptr;
  explicit Redis(const std::string& target) {
    const size_t colon = target.rfind(':');
    c = redisConnect(target.substr(0, colon).c_str(), std::stoi(target.substr(colon + 1)));
    if (c == nullptr || c->err) {
      std::fprintf(stderr, "redis connect %s failed\n", target.c_str());
      std::exit(1);
    }
  }
  ~Redis() { redisFree(c); }
  void Set(const std::string& key, const std::string& value) {
    auto* r = static_cast<redisReply*>(
        redisCommand(c, "SET %b %b", key.data(), key.size(), value.data(), value.size()));
    if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
      std::fprintf(stderr, "redis SET failed\n");
      std::exit(1);
    }
    freeReplyObject(r);
  }
  size_t Get(const std::string& key) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size()));
    const size_t n = r != nullptr && r->type == REDIS_REPLY_STRING ? r->len : 0;
    if (r != nullptr) freeReplyObject(r);
    return n;
  }
  size_t PipelinedGet(const std::vector<std::string>& keys) {
    for (const std::string& k : keys) redisAppendCommand(c, "GET %b", k.data(), k.size());
    size_t bytes = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      void* reply = nullptr;
      if (redisGetReply(c, &reply) != REDIS_OK) std::exit(1);
      auto* r = static_cast<redisReply*>(reply);
      if (r->type == REDIS_REPLY_STRING) bytes += r->len;
      freeReplyObject(r);
    }
    return bytes;
  }
};

void Die(const absl::Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  // As turbokv-server does (server/main.cc): no debug-mode deadlock detection on the absl
  // mutexes inside the gRPC client.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  Args a;
  CLI::App app{"one cell of bench/service_vs_redis.sh", "service_vs_redis_bench"};
  app.add_option("--system", a.system)->check(CLI::IsMember({"turbokv", "redis"}));
  app.add_option("--target", a.target);
  app.add_option("--phase", a.phase)->check(CLI::IsMember({"put", "get", "prefix", "lookup"}));
  app.add_option("--shape", a.shape, "L,H,D,T of fp16 blocks");
  app.add_option("--kv", a.kv, "KV.npy [L][2][T][H][D] fp16 to cut blocks from");
  app.add_option("--block-tokens", a.block_tokens);
  app.add_option("--encoding", a.encoding)->check(CLI::IsMember({"raw", "packed"}));
  app.add_option("--concurrency", a.concurrency);
  app.add_option("--seconds", a.seconds);
  app.add_option("--preset", a.preset);
  app.add_option("--tag", a.tag, "distinguishes the keys of runs");
  app.add_option("--server-pid", a.server_pid, "report this process's CPU over the timed part");
  app.add_option("--connections", a.connections,
                 "turbokv client connections (ClientOptions::connections); 0 = one per worker, "
                 "as Redis gets one per worker")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);

  tc::NamespaceDescriptor d;
  d.model = "bench/service-vs-redis";
  d.dtype = tc::DType::kFloat16;
  d.codec.preset = a.preset;
  std::vector<std::string> pool;
  if (!a.kv.empty()) {
    auto kv = turbokv::cli::ReadNpy(a.kv);
    if (!kv.ok()) Die(kv.status(), "--kv");
    d.num_layers = kv->shape[0];
    d.num_kv_heads = kv->shape[3];
    d.head_dim = kv->shape[4];
    d.block_tokens = a.block_tokens;
    const turbokv::cli::KvShape seq{kv->shape[0], kv->shape[2], kv->shape[3], kv->shape[4], 2};
    auto blocks = turbokv::cli::SplitBlocks(kv->data, seq, a.block_tokens);
    if (!blocks.ok()) Die(blocks.status(), "--kv");
    pool = *std::move(blocks);
  } else {
    std::vector<std::string> p = absl::StrSplit(a.shape, ',');
    if (p.size() != 4) {
      std::fprintf(stderr, "--shape L,H,D,T\n");
      return 2;
    }
    d.num_layers = std::stoul(p[0]);
    d.num_kv_heads = std::stoul(p[1]);
    d.head_dim = std::stoul(p[2]);
    d.block_tokens = std::stoul(p[3]);
    if (a.phase == "lookup") d.num_layers = 2;  // tiny blocks: only the index matters
    pool = SyntheticBlocks(d, 8);
  }
  const uint64_t block_bytes = d.raw_block_bytes();

  std::unique_ptr<tc::Client> client;
  uint64_t ns = 0;
  const int workers = a.phase == "prefix" || a.phase == "lookup" ? 1 : a.concurrency;
  if (a.system == "turbokv") {
    tc::ClientOptions options;
    options.connections = a.connections > 0 ? a.connections : std::clamp(workers, 1, 64);
    auto c = tc::Client::Connect(a.target, options);
    if (!c.ok()) Die(c.status(), "connect");
    client = *std::move(c);
    auto info = client->RegisterNamespace(d);
    if (!info.ok()) Die(info.status(), "register");
    ns = info->namespace_id;
  }
  const tc::Encoding get_encoding =
      a.encoding == "packed" ? tc::Encoding::kPacked : tc::Encoding::kRaw;
  auto span = [](const std::string& s) {
    return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  auto put_one = [&](Redis* r, const std::string& key, const std::string& value) {
    if (r != nullptr) return r->Set(key, value);
    const absl::Span<const uint8_t> s = span(value);
    auto res = client->PutBlocks(ns, absl::MakeConstSpan(&key, 1), absl::MakeConstSpan(&s, 1));
    if (!res.ok()) Die(res.status(), "put");
    if (!(*res)[0].status.ok()) Die((*res)[0].status, "put block");
  };

  // The working set of get / prefix / lookup phases, stored before the clock starts.
  const int set_blocks =
      a.phase == "lookup" ? 1000
      : a.phase == "prefix"
          ? 64
          : static_cast<int>(std::clamp<uint64_t>((uint64_t{256} << 20) / block_bytes, 8, 256));
  std::vector<std::string> set_keys;
  if (a.phase != "put") {
    std::unique_ptr<Redis> r;
    if (a.system == "redis") r = std::make_unique<Redis>(a.target);
    std::vector<std::string> batch_keys;
    std::vector<absl::Span<const uint8_t>> batch;
    for (int i = 0; i < set_blocks; ++i) {
      set_keys.push_back(Key(a.tag + "set", i, 0));
      const std::string& v = pool[i % pool.size()];
      if (r != nullptr) {
        r->Set(set_keys.back(), v);
        continue;
      }
      batch_keys.push_back(set_keys.back());
      batch.push_back(span(v));
      if (batch.size() == 16 || i + 1 == set_blocks) {
        auto res = client->PutBlocks(ns, batch_keys, batch);
        if (!res.ok()) Die(res.status(), "put set");
        batch_keys.clear();
        batch.clear();
      }
    }
  }

  std::atomic<uint64_t> bytes{0}, ops{0};
  std::vector<std::vector<double>> lat(a.concurrency);
  const absl::Time end = absl::Now() + absl::Seconds(a.seconds);
  const absl::Time start = absl::Now();
  const double client_cpu0 = SelfCpuSeconds();
  const double server_cpu0 = ProcessCpuSeconds(a.server_pid);
  auto worker = [&](int w) {
    std::unique_ptr<Redis> r;
    if (a.system == "redis") r = std::make_unique<Redis>(a.target);
    std::mt19937_64 rng(w + 1);
    const uint64_t ring =
        std::max<uint64_t>(4, (uint64_t{256} << 20) / block_bytes / a.concurrency);
    tc::GetOptions get;
    get.encoding = get_encoding;
    for (uint64_t seq = 0; absl::Now() < end; ++seq) {
      const absl::Time t0 = absl::Now();
      uint64_t logical = block_bytes;
      if (a.phase == "put") {
        put_one(r.get(), Key(a.tag, w, seq % ring), pool[(seq + w) % pool.size()]);
      } else if (a.phase == "get") {
        const std::string& key = set_keys[rng() % set_keys.size()];
        if (r != nullptr) {
          if (r->Get(key) != block_bytes) Die(absl::InternalError("short GET"), "get");
        } else {
          auto got = client->GetBlocks(ns, absl::MakeConstSpan(&key, 1), get);
          if (!got.ok()) Die(got.status(), "get");
          if (!got->blocks[0].has_value()) Die(absl::NotFoundError("block missing"), "get");
        }
      } else if (a.phase == "prefix") {
        logical = block_bytes * set_keys.size();
        if (r != nullptr) {
          if (r->PipelinedGet(set_keys) != logical) Die(absl::InternalError("short"), "prefix");
        } else {
          auto got = client->GetBlocks(ns, set_keys, get);
          if (!got.ok()) Die(got.status(), "prefix");
        }
      } else {  // lookup
        auto m = client->Lookup(ns, set_keys);
        if (!m.ok() || m->matched_blocks != set_keys.size()) Die(m.status(), "lookup");
        logical = 0;
      }
      lat[w].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      bytes += logical;
      ++ops;
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (int w = 0; w < workers; ++w) threads.emplace_back(worker, w);
  for (auto& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const double client_cpu = SelfCpuSeconds() - client_cpu0;
  const double server_cpu = ProcessCpuSeconds(a.server_pid) - server_cpu0;
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  if (client != nullptr) (void)client->DropNamespace(ns);
  std::printf(
      "{\"system\": \"%s\", \"phase\": \"%s\", \"encoding\": \"%s\", \"block_bytes\": %llu, "
      "\"concurrency\": %d, \"ops\": %llu, \"seconds\": %.3f, \"logical_gb_per_s\": %.4f, "
      "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"client_cpu_s\": %.3f, \"server_cpu_s\": %.3f, "
      "\"tag\": \"%s\"}\n",
      a.system.c_str(), a.phase.c_str(), a.encoding.c_str(),
      static_cast<unsigned long long>(block_bytes), workers,
      static_cast<unsigned long long>(ops.load()), elapsed, bytes.load() / elapsed / 1e9,
      Percentile(all, 50), Percentile(all, 99), client_cpu, server_cpu, a.tag.c_str());
  return 0;
}
