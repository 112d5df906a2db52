// turbokv-codec: evaluate the TurboQuant codec on random vectors or real KV (.npy).
//
//   turbokv-codec eval --source random --vectors 100000 --head-dim 128 --group-size 32 \
//       --bits 3 [--norm-correction off] [--qjl] --seed 7 --json
//   turbokv-codec eval --source kv.npy --preset k4v4-g32 --json
//
// Prints one JSON object (or a readable summary): quality (rel_mse, mean_cosine, per K/V),
// bits per value measured from the packed bytes, single-thread encode/decode GB/s of fp16
// source bytes, and in the same run memcpy and zstd-1 on the same bytes as baselines.
#include <zstd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/npy.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/codebook.h"
#include "turbokv/codec/float16.h"

namespace turbokv::tools {
namespace {

using codec::BlockCodec;
using codec::BlockShape;
using codec::CodecSpec;
using codec::DType;

struct EvalArgs {
  std::string source = "random";
  long vectors = 100000;
  int head_dim = 128;
  int group_size = 32;
  int bits = 4;
  std::string preset;
  std::string norm_correction = "on";
  bool qjl = false;
  uint64_t seed = 7;
  bool json = false;
  std::string isa = "auto";
  int layers = 4;         // random source: block shape
  int block_tokens = 16;  // block shape (random source; npy: its T is split into blocks)
  int num_kv_heads = 8;   // random source
  double min_seconds = 0.3;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn repeatedly for at least min_seconds; returns seconds per call (best of the runs).
template <typename Fn>
double TimeIt(Fn fn, double min_seconds) {
  double best = 1e30, total = 0;
  int runs = 0;
  while (total < min_seconds || runs < 3) {
    const double t0 = Now();
    fn();
    const double dt = Now() - t0;
    best = std::min(best, dt);
    total += dt;
    ++runs;
  }
  return best;
}

// Raw blocks [n][L][2][T][H][D] in fp16, built from the source.
struct Workload {
  BlockShape shape;
  std::vector<std::vector<uint8_t>> blocks;
  std::string description;
};

// The evaluation keeps every block in memory: refuse shapes whose blocks would not fit.
constexpr size_t kMaxEvalBlockBytes = size_t{1} << 30;

absl::Status CheckEvalShape(const BlockShape& shape) {
  if (absl::Status s = codec::ValidateShape(shape); !s.ok()) return s;
  if (shape.raw_bytes() > kMaxEvalBlockBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a block of this shape is ", shape.raw_bytes(),
        " bytes; turbokv-codec eval handles blocks up to ", kMaxEvalBlockBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Workload> RandomWorkload(const EvalArgs& a) {
  Workload w;
  w.shape = {a.layers, a.block_tokens, a.num_kv_heads, a.head_dim, DType::kFloat16};
  if (absl::Status s = CheckEvalShape(w.shape); !s.ok()) return s;
  const size_t per_block = w.shape.num_values() / a.head_dim;
  const size_t nblocks = (static_cast<size_t>(a.vectors) + per_block - 1) / per_block;
  std::mt19937_64 rng(a.seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> log_norm(std::log(0.1), std::log(100.0));
  std::vector<double> z(a.head_dim);
  for (size_t b = 0; b < nblocks; ++b) {
    std::vector<uint8_t> raw(w.shape.raw_bytes());
    for (size_t v = 0; v < per_block; ++v) {
      double ss = 0;
      for (double& x : z) {
        x = normal(rng);
        ss += x * x;
      }
      const double scale = std::exp(log_norm(rng)) / std::sqrt(ss);
      for (int j = 0; j < a.head_dim; ++j) {
        const uint16_t h = codec::FloatToHalf(static_cast<float>(z[j] * scale));
        std::memcpy(&raw[2 * (v * a.head_dim + j)], &h, 2);
      }
    }
    w.blocks.push_back(std::move(raw));
  }
  w.description =
      absl::StrCat("random Gaussian directions, norms log-uniform in [0.1, 100], seed ", a.seed);
  return w;
}

float ToFloat(const cli::NpyArray& a, size_t i) {
  uint16_t h;
  if (a.descr == "<f4") {
    float f;
    std::memcpy(&f, &a.data[4 * i], 4);
    return f;
  }
  std::memcpy(&h, &a.data[2 * i], 2);
  return a.descr == "<f2" ? codec::HalfToFloat(h) : codec::BFloat16ToFloat(h);
}

// A raw-layout [L][2][T][H][D] .npy split into blocks of block_tokens tokens (fp16).
absl::StatusOr<Workload> NpyWorkload(const EvalArgs& a) {
  absl::StatusOr<cli::NpyArray> arr = cli::ReadNpy(a.source);
  if (!arr.ok()) return arr.status();
  const auto& s = arr->shape;
  if (s.size() != 5 || s[1] != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        a.source, ": expected the raw layout [num_layers][2][T][num_kv_heads][head_dim], got ",
        s.size(), " dimensions"));
  }
  Workload w;
  if (arr->descr != "<f2" && arr->descr != "<f4" && arr->descr != "<u2") {
    return absl::InvalidArgumentError(
        absl::StrCat(a.source, ": dtype ", arr->descr,
                     " is not supported; expected <f2, <f4 or <u2 (bf16 bits)"));
  }
  // The raw layout's dimension names, [L][2][T][H][D], as in the messages below.
  const int64_t L = s[0], T = s[2], H = s[3], D = s[4];  // NOLINT(readability-identifier-naming)
  const int bt = static_cast<int>(std::min<int64_t>(a.block_tokens, T));
  w.shape = {static_cast<int>(L), bt, static_cast<int>(H), static_cast<int>(D), DType::kFloat16};
  if (absl::Status s = CheckEvalShape(w.shape); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(a.source, ": ", s.message()));
  }
  const int64_t nblocks = T / bt;
  if (nblocks == 0) return absl::InvalidArgumentError(absl::StrCat(a.source, " has no tokens"));
  for (int64_t b = 0; b < nblocks; ++b) {
    std::vector<uint8_t> raw(w.shape.raw_bytes());
    size_t o = 0;
    for (int64_t l = 0; l < L; ++l)
      for (int64_t kv = 0; kv < 2; ++kv)
        for (int64_t t = b * bt; t < (b + 1) * bt; ++t)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < D; ++d) {
              const size_t src = (((l * 2 + kv) * T + t) * H + h) * D + d;
              const uint16_t v = codec::FloatToHalf(ToFloat(*arr, src));
              std::memcpy(&raw[2 * o++], &v, 2);
            }
    w.blocks.push_back(std::move(raw));
  }
  w.description = absl::StrCat(a.source, " (", arr->descr, " [", L, "][2][", T, "][", H, "][", D,
                               "]) as fp16, ", nblocks, " blocks of ", bt, " tokens",
                               T % bt ? absl::StrCat(", last ", T % bt, " tokens dropped") : "");
  return w;
}

struct Quality {
  double err[2] = {0, 0}, ref[2] = {0, 0};  // by K/V
  double cos_sum = 0;
  size_t vectors = 0;
};

void Accumulate(const BlockShape& shape, const std::vector<uint8_t>& raw,
                const std::vector<uint8_t>& decoded_f32, Quality* q) {
  const size_t D = shape.head_dim;  // NOLINT(readability-identifier-naming): head_dim
  const size_t per_section = shape.vectors_per_section();
  const size_t nvec = shape.num_values() / D;
  for (size_t v = 0; v < nvec; ++v) {
    const int kv = static_cast<int>((v / per_section) % 2);
    double xx = 0, yy = 0, xy = 0, e = 0;
    for (size_t j = 0; j < D; ++j) {
      uint16_t h;
      std::memcpy(&h, &raw[2 * (v * D + j)], 2);
      float y;
      std::memcpy(&y, &decoded_f32[4 * (v * D + j)], 4);
      const double x = codec::HalfToFloat(h);
      xx += x * x;
      yy += double(y) * y;
      xy += x * y;
      e += (x - y) * (x - y);
    }
    q->err[kv] += e;
    q->ref[kv] += xx;
    q->cos_sum += (xx > 0 && yy > 0) ? xy / std::sqrt(xx * yy) : (xx == 0 && yy == 0 ? 1.0 : 0.0);
    ++q->vectors;
  }
}

// num / den, or NaN when den is 0 (the relative error of an all-zero input is undefined).
double Ratio(double num, double den) { return den == 0 ? NAN : num / den; }

// A JSON number, or null when `v` is not finite (JSON has no NaN or Inf).
// `fixed`: six digits after the point (%.6f), else six significant digits (%.6g).
std::string JsonNumber(double v, bool fixed = false) {
  if (!std::isfinite(v)) return "null";
  return fixed ? absl::StrFormat("%.6f", v) : absl::StrFormat("%.6g", v);
}

int RunEval(const EvalArgs& a) {
  absl::StatusOr<Workload> w = a.source == "random" ? RandomWorkload(a) : NpyWorkload(a);
  if (!w.ok()) {
    std::fprintf(stderr, "turbokv-codec: %s\n", w.status().ToString().c_str());
    return 2;
  }
  CodecSpec spec;
  std::string config;
  if (!a.preset.empty()) {
    absl::StatusOr<CodecSpec> p = codec::PresetSpec(a.preset, w->shape.head_dim);
    if (!p.ok()) {
      std::fprintf(stderr, "turbokv-codec: %s\n", p.status().ToString().c_str());
      return 2;
    }
    spec = *p;
    config = a.preset;
  } else {
    spec.key = spec.value = {a.bits, a.group_size, a.qjl};
    config = absl::StrCat("b", a.bits, "-g", a.group_size, a.qjl ? "-qjl" : "");
  }
  if (a.norm_correction != "on" && a.norm_correction != "off") {
    std::fprintf(stderr, "turbokv-codec: --norm-correction must be on or off\n");
    return 2;
  }
  spec.norm_correction = a.norm_correction == "on";
  codec::CpuIsa isa = codec::CpuIsa::kAuto;
  if (a.isa == "scalar") isa = codec::CpuIsa::kScalar;
  if (a.isa == "avx2") isa = codec::CpuIsa::kAvx2;
  if (a.isa == "avx512") isa = codec::CpuIsa::kAvx512;
  if (isa == codec::CpuIsa::kAuto) isa = codec::DetectCpuIsa();

  absl::StatusOr<BlockCodec> c = BlockCodec::Create(w->shape, spec);
  if (!c.ok()) {
    std::fprintf(stderr, "turbokv-codec: %s\n", c.status().ToString().c_str());
    return 2;
  }
  const size_t n = w->blocks.size();
  std::vector<std::vector<uint8_t>> packed(n, std::vector<uint8_t>(c->packed_bytes()));
  std::vector<uint8_t> decoded(c->shape().raw_bytes_as(DType::kFloat32));
  Quality q;
  for (size_t b = 0; b < n; ++b) {
    absl::Status s = c->Encode(w->blocks[b], absl::MakeSpan(packed[b]), isa);
    if (s.ok()) s = c->Decode(packed[b], DType::kFloat32, {}, absl::MakeSpan(decoded), isa);
    if (!s.ok()) {
      std::fprintf(stderr, "turbokv-codec: block %zu: %s\n", b, s.ToString().c_str());
      return 1;
    }
    Accumulate(w->shape, w->blocks[b], decoded, &q);
  }
  const double rel_mse = Ratio(q.err[0] + q.err[1], q.ref[0] + q.ref[1]);
  const double rel_mse_k = Ratio(q.err[0], q.ref[0]);
  const double rel_mse_v = Ratio(q.err[1], q.ref[1]);
  const double mean_cosine = Ratio(q.cos_sum, static_cast<double>(q.vectors));
  const double raw_bytes = static_cast<double>(n * c->raw_bytes());
  const double bpv = BitsPerValue(c->packed_bytes(), w->shape);

  // Theory: g·MSE of the (g, b) codebook, for the unprotected K section.
  double theory_k = NAN;
  if (spec.key.quantized()) {
    absl::StatusOr<const codec::Codebook*> cb =
        codec::GetCodebook(spec.key.group_size, spec.key.bits);
    if (cb.ok()) theory_k = (*cb)->g_mse;
  }

  // Speed: single thread, fp16 source bytes per second.
  std::vector<uint8_t> out16(c->raw_bytes());
  const double t_enc = TimeIt(
      [&] {
        for (size_t b = 0; b < n; ++b)
          (void)c->Encode(w->blocks[b], absl::MakeSpan(packed[b]), isa);
      },
      a.min_seconds);
  const double t_dec = TimeIt(
      [&] {
        for (size_t b = 0; b < n; ++b)
          (void)c->Decode(packed[b], DType::kFloat16, {}, absl::MakeSpan(out16), isa);
      },
      a.min_seconds);
  std::vector<uint8_t> copy(c->raw_bytes());
  const double t_memcpy = TimeIt(
      [&] {
        for (size_t b = 0; b < n; ++b) std::memcpy(copy.data(), w->blocks[b].data(), copy.size());
      },
      a.min_seconds);
  std::vector<uint8_t> z(ZSTD_compressBound(c->raw_bytes()));
  ZSTD_CCtx* zc = ZSTD_createCCtx();
  double zstd_bytes = 0;
  const double t_zstd = TimeIt(
      [&] {
        zstd_bytes = 0;
        for (size_t b = 0; b < n; ++b) {
          zstd_bytes += ZSTD_compressCCtx(zc, z.data(), z.size(), w->blocks[b].data(),
                                          w->blocks[b].size(), 1);
        }
      },
      a.min_seconds);
  ZSTD_freeCCtx(zc);

  const double gb = raw_bytes / 1e9;
  const std::string isa_name = codec::CpuIsaName(isa);
  if (a.json) {
    // Ratios of zero by zero (an all-zero input) are undefined: JSON null, never "nan".
    std::printf(
        "{\"source\": \"%s\", \"config\": \"%s\", \"norm_correction\": %s, \"vectors\": %zu, "
        "\"head_dim\": %d, \"blocks\": %zu, \"block_shape\": [%d, 2, %d, %d, %d], "
        "\"rel_mse\": %s, \"rel_mse_k\": %s, \"rel_mse_v\": %s, \"theory_g_mse_k\": %s, "
        "\"mean_cosine\": %s, \"bits_per_value\": %.6f, \"packed_block_bytes\": %zu, "
        "\"raw_block_bytes\": %zu, \"compression_ratio\": %.4f, \"isa\": \"%s\", "
        "\"encode_gbps\": %.3f, \"decode_gbps\": %.3f, \"memcpy_gbps\": %.3f, "
        "\"zstd1_gbps\": %.3f, \"zstd1_ratio\": %.4f}\n",
        a.source.c_str(), config.c_str(), spec.norm_correction ? "true" : "false", q.vectors,
        w->shape.head_dim, n, w->shape.num_layers, w->shape.block_tokens, w->shape.num_kv_heads,
        w->shape.head_dim, JsonNumber(rel_mse).c_str(), JsonNumber(rel_mse_k).c_str(),
        JsonNumber(rel_mse_v).c_str(), JsonNumber(theory_k).c_str(),
        JsonNumber(mean_cosine, /*fixed=*/true).c_str(), bpv, c->packed_bytes(), c->raw_bytes(),
        static_cast<double>(c->raw_bytes()) / c->packed_bytes(), isa_name.c_str(), gb / t_enc,
        gb / t_dec, gb / t_memcpy, gb / t_zstd, raw_bytes / zstd_bytes);
  } else {
    std::printf("source        %s\n", w->description.c_str());
    std::printf("codec         %s, norm correction %s, %s\n", config.c_str(),
                spec.norm_correction ? "on" : "off", isa_name.c_str());
    std::printf("vectors       %zu x %d in %zu blocks\n", q.vectors, w->shape.head_dim, n);
    std::printf("rel_mse       %.6g  (K %.6g, V %.6g; theory g*MSE %.6g)\n", rel_mse, rel_mse_k,
                rel_mse_v, theory_k);
    std::printf("mean_cosine   %.6f\n", mean_cosine);
    std::printf("bpv           %.4f  (%zu packed bytes per %zu raw fp16 bytes, %.2fx)\n", bpv,
                c->packed_bytes(), c->raw_bytes(),
                static_cast<double>(c->raw_bytes()) / c->packed_bytes());
    std::printf("encode        %.3f GB/s   decode %.3f GB/s   (1 thread, fp16 bytes)\n", gb / t_enc,
                gb / t_dec);
    std::printf("baselines     memcpy %.3f GB/s   zstd-1 %.3f GB/s at ratio %.3fx\n", gb / t_memcpy,
                gb / t_zstd, raw_bytes / zstd_bytes);
  }
  return 0;
}

}  // namespace
}  // namespace turbokv::tools

#ifndef TURBOKV_VERSION
#define TURBOKV_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  using turbokv::tools::EvalArgs;
  CLI::App app{"turbokv-codec: evaluate the TurboQuant KV codec (quality, bpv, speed)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "turbokv-codec " TURBOKV_VERSION);
  EvalArgs a;
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Encode and decode vectors; print rel_mse, mean_cosine, bpv and GB/s next to memcpy "
      "and zstd-1");
  eval->add_option("--source", a.source,
                   "\"random\" or a raw-layout .npy [num_layers][2][T][num_kv_heads][head_dim] "
                   "(fp16, fp32, or bf16 as uint16)")
      ->capture_default_str();
  eval->add_option("--vectors", a.vectors,
                   "random: number of head vectors (rounded up to whole blocks)")
      ->capture_default_str()
      ->check(CLI::Range(1L, 1000000000L));
  eval->add_option("--head-dim", a.head_dim, "random: head_dim")
      ->capture_default_str()
      ->check(CLI::Range(8, 4096));
  eval->add_option("--group-size", a.group_size, "group size g (8..256, power of two)")
      ->capture_default_str();
  eval->add_option("--bits", a.bits, "bits per coordinate: 1, 2, 3, 4, 8 (16 = fp16, 0 = raw)")
      ->capture_default_str();
  eval->add_option("--preset", a.preset, "a named preset (overrides --bits/--group-size/--qjl)");
  eval->add_option("--norm-correction", a.norm_correction, "on|off")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  eval->add_flag("--qjl", a.qjl, "add the 1-bit QJL residual");
  eval->add_option("--seed", a.seed, "random: seed of the vectors")->capture_default_str();
  eval->add_flag("--json", a.json, "print one JSON object");
  eval->add_option("--isa", a.isa, "CPU path: auto|scalar|avx2|avx512")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "scalar", "avx2", "avx512"}));
  eval->add_option("--num-layers", a.layers, "random: layers per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  eval->add_option("--block-tokens", a.block_tokens, "tokens per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  eval->add_option("--num-kv-heads", a.num_kv_heads, "random: KV heads per block")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  eval->add_option("--min-seconds", a.min_seconds, "least time spent timing each measurement")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return turbokv::tools::RunEval(a);
}
