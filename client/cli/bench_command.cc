// `turbokv bench`: a concurrent put/get load against a server.
//
// Registers a namespace ("turbokv-bench", the given shape and preset; no preset: the server's
// --default-preset), then runs
// `concurrency` workers for `seconds`: each worker puts a batch of `batch` blocks under fresh
// block hashes, then gets the same batch back (RAW in the namespace dtype, or PACKED), and
// records both latencies. The blocks come from a pool of synthetic KV with the structure of
// real caches (keys: per-channel offsets and a few outlier channels 10-20x larger; values:
// near-Gaussian with per-channel scales), or from a KV.npy file. Drops the namespace at the
// end unless --keep.
//
// Reported (per direction): blocks/s, logical GB/s (raw bytes in the namespace dtype),
// stored GB/s (packed bytes the server stored / read), latency percentiles per call. Puts and
// gets alternate in every worker, so each direction's rate is its share of the mixed load over
// the whole run; total_*_gb_per_s is their sum.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "commands.h"
#include "kv_layout.h"
#include "npy.h"
#include "turbokv/codec/status_macros.h"
#include "turbokv/codec/types.h"

namespace turbokv::cli {
namespace {

using Client = client::ShardedClient;
using client::DType;

struct BenchArgs {
  double seconds = 10;
  int concurrency = 4;
  int batch = 8;       // blocks per PutBlocks / GetBlocks call
  std::string preset;  // empty: the server's --default-preset
  uint32_t block_tokens = 16;
  uint32_t num_layers = 32;
  uint32_t num_kv_heads = 8;
  uint32_t head_dim = 128;
  std::string dtype = "fp16";
  std::string kv;  // optional KV.npy [L][2][T][H][D]
  bool packed_get = false;
  bool keep = false;
  int pool_blocks = 16;
};

// IEEE binary32 -> binary16, round to nearest even (finite inputs of moderate range).
uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (exp <= 0) {                                              // subnormal or zero
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exponent: ok
  return static_cast<uint16_t>(half);
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// `count` synthetic raw blocks [L][2][bt][H][D] in `dtype`.
std::vector<std::string> SyntheticBlocks(const client::NamespaceDescriptor& d, int count) {
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0.f, 1.f);
  const size_t hd = d.num_kv_heads * d.head_dim;
  // Per (layer, head, channel) structure, shared by all blocks as in a real model.
  std::vector<float> k_offset(d.num_layers * hd), k_scale(d.num_layers * hd),
      v_scale(d.num_layers * hd);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  for (size_t i = 0; i < k_offset.size(); ++i) {
    k_offset[i] = 0.5f * normal(rng);
    k_scale[i] = uni(rng) < 0.03f ? 10.f + 10.f * uni(rng) : 0.5f + uni(rng);
    v_scale[i] = std::exp(0.3f * normal(rng)) * 0.3f;
  }
  const size_t esize = client::DTypeSize(d.dtype);
  std::vector<std::string> out;
  for (int b = 0; b < count; ++b) {
    std::string block(d.raw_block_bytes(), '\0');
    size_t pos = 0;
    for (uint32_t l = 0; l < d.num_layers; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (uint32_t t = 0; t < d.block_tokens; ++t) {
          for (size_t c = 0; c < hd; ++c, ++pos) {
            const size_t i = l * hd + c;
            const float v =
                kv == 0 ? k_offset[i] + k_scale[i] * normal(rng) : v_scale[i] * normal(rng);
            if (d.dtype == DType::kFloat32) {
              std::memcpy(block.data() + pos * esize, &v, 4);
            } else {
              const uint16_t h = d.dtype == DType::kBFloat16 ? FloatToBf16(v) : FloatToHalf(v);
              std::memcpy(block.data() + pos * esize, &h, 2);
            }
          }
        }
      }
    }
    out.push_back(std::move(block));
  }
  return out;
}

// Percentile of sorted samples (nearest rank); 0 when empty.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i =
      std::min(sorted.size() - 1, static_cast<size_t>(std::ceil(p / 100.0 * sorted.size())) - 1);
  return sorted[i];
}

struct Totals {
  std::atomic<uint64_t> put_blocks{0}, put_logical{0}, put_stored{0};
  std::atomic<uint64_t> get_blocks{0}, get_logical{0}, get_stored{0}, get_missing{0};
  std::atomic<uint64_t> put_failed{0};
};

absl::Status RunBench(const GlobalOptions& g, const Client& c, const BenchArgs& a) {
  client::NamespaceDescriptor d;
  d.model = "turbokv-bench";
  d.block_tokens = a.block_tokens;
  d.codec.preset = a.preset;
  std::vector<std::string> pool;
  NpyArray kv;
  if (!a.kv.empty()) {
    TURBOKV_ASSIGN_OR_RETURN(kv, ReadNpy(a.kv));
    if (kv.shape.size() != 5 || kv.shape[1] != 2) {
      return absl::InvalidArgumentError(absl::StrCat(a.kv, ": expected a [L][2][T][H][D] array"));
    }
    if (kv.descr == "<f2") {
      d.dtype = DType::kFloat16;
    } else if (kv.descr == "<f4") {
      d.dtype = DType::kFloat32;
    } else if (kv.descr == "<u2") {
      d.dtype = DType::kBFloat16;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(a.kv, ": dtype '", kv.descr, "' is not <f2, <f4 or <u2 (bf16)"));
    }
    d.num_layers = kv.shape[0];
    d.num_kv_heads = kv.shape[3];
    d.head_dim = kv.shape[4];
    const KvShape seq{kv.shape[0], kv.shape[2], kv.shape[3], kv.shape[4], kv.itemsize()};
    TURBOKV_ASSIGN_OR_RETURN(pool, SplitBlocks(kv.data, seq, a.block_tokens));
    if (pool.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(a.kv, " has fewer than ", a.block_tokens, " tokens: no full block"));
    }
  } else {
    TURBOKV_ASSIGN_OR_RETURN(d.dtype, client::ParseDType(a.dtype));
    d.num_layers = a.num_layers;
    d.num_kv_heads = a.num_kv_heads;
    d.head_dim = a.head_dim;
  }
  const client::CallOptions call{absl::Seconds(g.timeout_seconds)};
  TURBOKV_ASSIGN_OR_RETURN(client::NamespaceInfo info, c.RegisterNamespace(d, call));
  if (pool.empty()) pool = SyntheticBlocks(d, std::max(1, a.pool_blocks));
  const uint64_t ns = info.namespace_id;

  Totals totals;
  std::mutex mu;
  absl::Status first_error;
  std::vector<double> put_lat, get_lat;  // milliseconds per call
  std::atomic<bool> stop{false};
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(a.seconds);
  std::random_device rd;
  const uint64_t run_id = (uint64_t{rd()} << 32) ^ rd();

  auto worker = [&](int w) {
    std::vector<double> my_put, my_get;
    std::vector<std::string> hashes(a.batch);
    std::vector<absl::Span<const uint8_t>> spans(a.batch);
    client::GetOptions get;
    get.encoding = a.packed_get ? client::Encoding::kPacked : client::Encoding::kRaw;
    absl::Status err;
    for (uint64_t seq = 0; !stop.load() && absl::Now() < end; ++seq) {
      for (int i = 0; i < a.batch; ++i) {
        // 32-byte hash: run id, worker, sequence, index; unique across runs and workers.
        std::string h(32, '\0');
        const uint64_t f[4] = {run_id, uint64_t(w), seq, uint64_t(i)};
        std::memcpy(h.data(), f, 32);
        hashes[i] = std::move(h);
        const std::string& b = pool[(seq * a.batch + i + w) % pool.size()];
        spans[i] = absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size());
      }
      absl::Time t0 = absl::Now();
      absl::StatusOr<std::vector<client::BlockPutResult>> put =
          c.PutBlocks(ns, hashes, spans, client::Encoding::kRaw, call);
      my_put.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      if (!put.ok()) {
        err = put.status();
        break;
      }
      for (const client::BlockPutResult& r : *put) {
        if (r.status.ok()) {
          totals.put_blocks++;
          totals.put_logical += info.raw_block_bytes;
          totals.put_stored += r.stored_bytes;
        } else {
          totals.put_failed++;
          if (err.ok()) err = r.status;
        }
      }
      if (!err.ok()) break;
      t0 = absl::Now();
      absl::StatusOr<client::GetBlocksResult> got = c.GetBlocks(ns, hashes, get, call);
      my_get.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      if (!got.ok()) {
        err = got.status();
        break;
      }
      for (const auto& b : got->blocks) {
        if (!b) {
          totals.get_missing++;
          continue;
        }
        totals.get_blocks++;
        totals.get_logical += info.raw_block_bytes;
        totals.get_stored += info.packed_block_bytes;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!err.ok() && first_error.ok()) {
      first_error = err;
      stop = true;
    }
    put_lat.insert(put_lat.end(), my_put.begin(), my_put.end());
    get_lat.insert(get_lat.end(), my_get.begin(), my_get.end());
  };

  std::vector<std::thread> threads;
  threads.reserve(a.concurrency);
  for (int w = 0; w < a.concurrency; ++w) threads.emplace_back(worker, w);
  const bool progress = !g.json && isatty(STDOUT_FILENO);
  std::atomic<bool> done{false};
  std::thread reporter([&] {
    while (progress && !done.load() && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(500));
      const double s = absl::ToDoubleSeconds(absl::Now() - start);
      std::printf("\r[%5.1fs/%.0fs] put %8.3f GB/s  get %8.3f GB/s (logical)  %9.0f blocks/s ", s,
                  a.seconds, totals.put_logical.load() / s / 1e9,
                  totals.get_logical.load() / s / 1e9,
                  (totals.put_blocks.load() + totals.get_blocks.load()) / s);
      std::fflush(stdout);
    }
  });
  for (std::thread& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  done = true;
  reporter.join();
  if (progress) std::printf("\n");

  uint64_t dropped = 0;
  if (!a.keep) {
    absl::StatusOr<uint64_t> r = c.DropNamespace(ns, call);
    if (r.ok()) dropped = *r;
    if (!r.ok() && first_error.ok()) first_error = r.status();
  }
  std::sort(put_lat.begin(), put_lat.end());
  std::sort(get_lat.begin(), get_lat.end());
  auto human = [&](const std::vector<double>& lat, uint64_t blocks, uint64_t logical,
                   uint64_t stored) {
    return absl::StrFormat(
        "%.1f blocks/s, %.3f GB/s logical, %.3f GB/s stored, latency p50 %.1f ms p90 %.1f ms "
        "p99 %.1f ms (%d calls)",
        blocks / elapsed, logical / elapsed / 1e9, stored / elapsed / 1e9, Percentile(lat, 50),
        Percentile(lat, 90), Percentile(lat, 99), lat.size());
  };
  auto side = [&](const std::vector<double>& lat, uint64_t blocks, uint64_t logical,
                  uint64_t stored) {
    JsonObject o;
    o.Add("calls", uint64_t{lat.size()})
        .Add("blocks", blocks)
        .Add("blocks_per_s", blocks / elapsed)
        .Add("logical_gb_per_s", logical / elapsed / 1e9)
        .Add("stored_gb_per_s", stored / elapsed / 1e9)
        .Add("p50_ms", Percentile(lat, 50))
        .Add("p90_ms", Percentile(lat, 90))
        .Add("p99_ms", Percentile(lat, 99));
    return o;
  };
  JsonObject o;
  o.Add("namespace_id", client::FormatNamespaceId(ns))
      .Add("preset", a.preset.empty() ? std::string("(server default)") : a.preset)
      .Add("dtype", client::DTypeName(d.dtype))
      .Add("shape", absl::StrFormat("L=%d H=%d D=%d block_tokens=%d", d.num_layers, d.num_kv_heads,
                                    d.head_dim, d.block_tokens))
      .Add("source", a.kv.empty() ? std::string("synthetic") : a.kv)
      .Add("raw_block_bytes", info.raw_block_bytes)
      .Add("packed_block_bytes", info.packed_block_bytes)
      .Add("bits_per_value", info.bits_per_value)
      .Add("concurrency", a.concurrency)
      .Add("batch_blocks", a.batch)
      .Add("get_encoding", a.packed_get ? "packed" : "raw")
      .Add("seconds", elapsed)
      .Add("put", side(put_lat, totals.put_blocks, totals.put_logical, totals.put_stored),
           human(put_lat, totals.put_blocks, totals.put_logical, totals.put_stored))
      .Add("get", side(get_lat, totals.get_blocks, totals.get_logical, totals.get_stored),
           human(get_lat, totals.get_blocks, totals.get_logical, totals.get_stored))
      .Add("total_logical_gb_per_s",
           (totals.put_logical.load() + totals.get_logical.load()) / elapsed / 1e9)
      .Add("total_stored_gb_per_s",
           (totals.put_stored.load() + totals.get_stored.load()) / elapsed / 1e9)
      .Add("get_missing_blocks", totals.get_missing.load())
      .Add("put_failed_blocks", totals.put_failed.load())
      .Add("dropped_blocks", dropped);
  Emit(g, o);
  return first_error;
}

}  // namespace

void AddBenchCommand(CLI::App& app, Action* action) {
  CLI::App* b = app.add_subcommand("bench",
                                   "concurrent put/get load; prints throughput and "
                                   "latency percentiles");
  auto a = std::make_shared<BenchArgs>();
  b->add_option("--seconds", a->seconds, "how long the load runs")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  b->add_option("--concurrency", a->concurrency, "workers, each a put/get loop")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  b->add_option("--batch", a->batch, "blocks per call")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  b->add_option("--preset", a->preset,
                absl::StrCat("codec preset: ", absl::StrJoin(codec::PresetNames(), ", "),
                             " (empty: the server's --default-preset)"));
  b->add_option("--block-tokens", a->block_tokens, "tokens per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  b->add_option("--num-layers", a->num_layers, "layers per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  b->add_option("--num-kv-heads", a->num_kv_heads, "KV heads per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  b->add_option("--head-dim", a->head_dim, "values per head")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  b->add_option("--dtype", a->dtype, "dtype of the synthetic blocks: fp16, bf16 or fp32")
      ->capture_default_str();
  b->add_option("--kv", a->kv,
                "use blocks of this KV.npy [L][2][T][H][D] instead of "
                "synthetic ones (sets the shape and dtype)")
      ->check(CLI::ExistingFile);
  b->add_option("--pool-blocks", a->pool_blocks, "distinct synthetic blocks")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  b->add_flag("--packed-get", a->packed_get, "get PACKED blocks instead of decoded RAW");
  b->add_flag("--keep", a->keep, "keep the bench namespace and its blocks");
  b->callback([a, action] {
    *action = [a](const GlobalOptions& g, const Client& c) { return RunBench(g, c, *a); };
  });
}

}  // namespace turbokv::cli
