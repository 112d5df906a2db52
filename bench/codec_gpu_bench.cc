// GPU codec benchmark. Prints one JSON object per line:
//   {"kind": "copy", ...}    device-to-device cudaMemcpy bandwidth in the same run (the anchor)
//   {"kind": "kernels", ...} encode and decode kernels on device-resident batches of N blocks
//                            (no host copies), best of --reps, for each --blocks N
//   {"kind": "host", ...}    CudaCodec::EncodeBatch / DecodeBatch end to end (host memory in
//                            and out, pinned staging, two streams) at the largest N that fits
//                            --host-gib
// "hbm_gbps" counts bytes read plus bytes written by the kernels (raw fp16 in + packed parts out
// for encode; packed parts in + fp16 out for decode), the same measure as the copy's (2 x bytes
// copied / time), so "vs_copy" is their ratio. "fp16_gbps" is raw fp16 bytes per second.
// "bytes_match": the first block's packed bytes (and its decode) equal the CPU codec's.
//   build/bin/codec_gpu_bench [--blocks 16,64,256,1024] [--reps 5] [--host-gib 1] [--device-only 1]
// --device-only 1 prints the device line (or "skipped") and exits.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codec_kernels.h"
#include "gpu_plan.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/cuda_codec.h"
#include "turbokv/codec/float16.h"

using namespace turbokv::codec;
namespace internal = turbokv::codec::internal;

namespace {

#define CHECK_CUDA(expr)                                                       \
  do {                                                                         \
    const cudaError_t e_ = (expr);                                             \
    if (e_ != cudaSuccess) {                                                   \
      std::printf("{\"error\": \"%s: %s\"}\n", #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Best of `reps` runs of f (after one warm-up), in seconds.
  template <class F>
  double Best(int reps, F f) {
    f();
    CHECK_CUDA(cudaDeviceSynchronize());
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      CHECK_CUDA(cudaEventRecord(a));
      f();
      CHECK_CUDA(cudaEventRecord(b));
      CHECK_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
      best = std::min(best, ms / 1e3);
    }
    return best;
  }
};

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::atoi(item.c_str()));
  return v;
}

// Gaussian values with per-vector scales (keys-like), in the codec's dtype.
std::vector<uint8_t> RandomBlock(const BlockShape& shape, uint32_t seed) {
  std::vector<uint8_t> raw(shape.raw_bytes());
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> scale(0.5f, 8.0f);
  float sc = 1;
  for (size_t i = 0; i < shape.num_values(); ++i) {
    if (i % shape.head_dim == 0) sc = scale(rng);
    const uint16_t h = FloatToHalf(normal(rng) * sc);
    std::memcpy(&raw[2 * i], &h, 2);
  }
  return raw;
}

struct DeviceCodebooks {
  std::vector<void*> buffers;
  ~DeviceCodebooks() {
    for (void* p : buffers) cudaFree(p);
  }
  internal::CodebookTables Get(int g, int bits) {
    internal::CodebookTables t;
    const std::vector<uint8_t> bytes = internal::MakeCodebookBlob(**GetCodebook(g, bits), &t);
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, bytes.size()));
    CHECK_CUDA(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    buffers.push_back(p);
    return internal::RebaseCodebook(t, reinterpret_cast<uintptr_t>(p));
  }
};

double CopyBandwidth(int reps) {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  Timer timer;
  const double t =
      timer.Best(reps, [&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
  std::printf("{\"kind\": \"copy\", \"bytes\": %zu, \"seconds\": %.6f, \"hbm_gbps\": %.1f}\n",
              bytes, t, 2.0 * bytes / t / 1e9);
  std::fflush(stdout);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / t / 1e9;
}

double g_copy_hbm_gbps = 0;

void KernelCase(const char* name, const BlockShape& shape, const char* preset,
                const std::vector<int>& sizes, int reps, int sm_count) {
  const BlockCodec codec = *BlockCodec::Create(shape, *PresetSpec(preset, shape.head_dim));
  const internal::GpuPlan plan = internal::MakeGpuPlan(codec);
  void* blob = nullptr;
  CHECK_CUDA(cudaMalloc(&blob, plan.blob.size()));
  const std::vector<uint8_t> host_blob =
      internal::MaterializeBlob(plan, codec, reinterpret_cast<uintptr_t>(blob));
  CHECK_CUDA(cudaMemcpy(blob, host_blob.data(), host_blob.size(), cudaMemcpyHostToDevice));
  DeviceCodebooks codebooks;
  const int layers = shape.num_layers;
  std::vector<internal::GroupLaunch> enc = internal::MakeLaunches(
      plan, codec, reinterpret_cast<uintptr_t>(blob), 0, layers, 0, shape.dtype);
  std::vector<internal::GroupLaunch> dec = internal::MakeLaunches(
      plan, codec, reinterpret_cast<uintptr_t>(blob), 0, layers, 0, DType::kFloat16);
  for (auto* list : {&enc, &dec}) {
    for (internal::GroupLaunch& a : *list) a.codebook = codebooks.Get(a.group_size, a.bits);
  }
  internal::PlainLaunch plain = internal::MakePlainLaunch(
      plan, codec, reinterpret_cast<uintptr_t>(blob), 0, layers, 0, DType::kFloat16);

  // Eight distinct random blocks, repeated to fill the batch.
  std::vector<std::vector<uint8_t>> distinct;
  distinct.reserve(8);
  for (int i = 0; i < 8; ++i) distinct.push_back(RandomBlock(shape, 11 + i));
  const int max_n = *std::max_element(sizes.begin(), sizes.end());
  const size_t raw_bytes = codec.raw_bytes(), aligned = plan.aligned_block_bytes;
  uint8_t *raw = nullptr, *packed = nullptr, *out = nullptr;
  uint32_t* errors = nullptr;
  CHECK_CUDA(cudaMalloc(&raw, max_n * raw_bytes));
  CHECK_CUDA(cudaMalloc(&packed, max_n * aligned));
  CHECK_CUDA(cudaMalloc(&out, max_n * raw_bytes));
  CHECK_CUDA(cudaMalloc(&errors, max_n * sizeof(uint32_t)));
  for (int i = 0; i < max_n; ++i) {
    CHECK_CUDA(
        cudaMemcpy(raw + i * raw_bytes, distinct[i % 8].data(), raw_bytes, cudaMemcpyHostToDevice));
  }
  CHECK_CUDA(cudaMemset(errors, 0, max_n * sizeof(uint32_t)));

  // Bytes each kernel really touches: the quantized parts, not the aligned padding.
  size_t parts = 0;
  for (const internal::AlignedSection& s : plan.sections) {
    if (s.codec.quantized()) parts += s.packed.bytes;
  }
  const size_t plain_bytes = codec.packed_bytes() - parts;  // header, checksum, plain sections
  Timer timer;
  for (int n : sizes) {
    auto run_encode = [&] {
      for (internal::GroupLaunch a : enc) {
        a.blocks = n;
        a.values = raw;
        a.aligned = packed;
        a.errors = errors;
        CHECK_CUDA(internal::LaunchEncodeGroups(a, sm_count * 16, nullptr));
      }
    };
    auto run_decode = [&] {
      for (internal::GroupLaunch a : dec) {
        a.blocks = n;
        a.values = out;
        a.aligned = packed;
        CHECK_CUDA(internal::LaunchDecodeGroups(a, sm_count * 16, nullptr));
      }
      if (plain.num_sections > 0) {
        internal::PlainLaunch p = plain;
        p.blocks = n;
        p.values = out;
        p.aligned = packed;
        CHECK_CUDA(internal::LaunchDecodePlain(p, sm_count * 16, nullptr));
      }
    };
    const double te = timer.Best(reps, run_encode);
    const double td = timer.Best(reps, run_decode);

    // Byte check of block 0 (and of block n - 1, which exercises the last tiles).
    bool match = true;
    for (int i : {0, n - 1}) {
      std::vector<uint8_t> got_aligned(aligned), got(codec.packed_bytes()),
          want(codec.packed_bytes());
      CHECK_CUDA(
          cudaMemcpy(got_aligned.data(), packed + i * aligned, aligned, cudaMemcpyDeviceToHost));
      internal::AlignedToPacked(plan, got_aligned.data(), got.data());
      uint32_t flag = 0;
      CHECK_CUDA(cudaMemcpy(&flag, errors + i, 4, cudaMemcpyDeviceToHost));
      match = match && flag == 0 &&
              internal::FinishPackedBlock(codec, distinct[i % 8], absl::MakeSpan(got)).ok() &&
              codec.Encode(distinct[i % 8], absl::MakeSpan(want)).ok() && got == want;
      std::vector<uint8_t> dec_got(raw_bytes), dec_want(raw_bytes);
      CHECK_CUDA(
          cudaMemcpy(dec_got.data(), out + i * raw_bytes, raw_bytes, cudaMemcpyDeviceToHost));
      match = match && codec.Decode(want, DType::kFloat16, {}, absl::MakeSpan(dec_want)).ok() &&
              dec_got == dec_want;
    }
    const double fp16 = static_cast<double>(n) * raw_bytes;
    const double enc_moved = static_cast<double>(n) * (raw_bytes + parts);
    const double dec_moved = static_cast<double>(n) * (parts + plain_bytes + raw_bytes);
    std::printf(
        "{\"kind\": \"kernels\", \"shape\": \"%s\", \"preset\": \"%s\", \"blocks\": %d, "
        "\"raw_mib\": %.1f, "
        "\"encode_seconds\": %.6f, \"encode_fp16_gbps\": %.1f, \"encode_hbm_gbps\": %.1f, "
        "\"encode_vs_copy\": %.3f, "
        "\"decode_seconds\": %.6f, \"decode_fp16_gbps\": %.1f, \"decode_hbm_gbps\": %.1f, "
        "\"decode_vs_copy\": %.3f, "
        "\"bytes_match\": %s}\n",
        name, preset, n, fp16 / (1 << 20), te, fp16 / te / 1e9, enc_moved / te / 1e9,
        enc_moved / te / 1e9 / g_copy_hbm_gbps, td, fp16 / td / 1e9, dec_moved / td / 1e9,
        dec_moved / td / 1e9 / g_copy_hbm_gbps, match ? "true" : "false");
    std::fflush(stdout);
  }
  cudaFree(raw);
  cudaFree(packed);
  cudaFree(out);
  cudaFree(errors);
  cudaFree(blob);
}

void HostCase(const char* name, const BlockShape& shape, const char* preset, double host_gib,
              int reps) {
  absl::StatusOr<std::unique_ptr<CudaCodec>> gpu = CudaCodec::Create();
  const BlockCodec codec = *BlockCodec::Create(shape, *PresetSpec(preset, shape.head_dim));
  const int n = std::max(1, static_cast<int>(host_gib * (1 << 30) / codec.raw_bytes()));
  std::vector<std::vector<uint8_t>> distinct;
  distinct.reserve(8);
  for (int i = 0; i < 8; ++i) distinct.push_back(RandomBlock(shape, 11 + i));
  std::vector<std::vector<uint8_t>> packed(n, std::vector<uint8_t>(codec.packed_bytes()));
  std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(codec.raw_bytes()));
  std::vector<absl::Span<const uint8_t>> in;
  std::vector<absl::Span<uint8_t>> pk, outs;
  in.reserve(n);
  pk.reserve(n);
  outs.reserve(n);
  for (int i = 0; i < n; ++i) {
    in.emplace_back(distinct[i % 8]);
    pk.push_back(absl::MakeSpan(packed[i]));
    outs.push_back(absl::MakeSpan(out[i]));
  }
  std::vector<absl::Span<const uint8_t>> pkc(packed.begin(), packed.end());
  std::vector<absl::Status> st(n);
  double enc = 1e30, dec = 1e30, enc_kernel = 0, dec_kernel = 0;
  for (int r = 0; r <= reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = (*gpu)->EncodeBatch(codec, in, pk, absl::MakeSpan(st));
    const double te = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::printf("{\"error\": \"%s\"}\n", s.ToString().c_str());
      return;
    }
    if (r > 0 && te < enc) {
      enc = te;
      enc_kernel = (*gpu)->last_kernel_seconds();
    }
    t0 = std::chrono::steady_clock::now();
    s = (*gpu)->DecodeBatch(codec, pkc, DType::kFloat16, {}, outs, absl::MakeSpan(st));
    const double td = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) {
      std::printf("{\"error\": \"%s\"}\n", s.ToString().c_str());
      return;
    }
    if (r > 0 && td < dec) {
      dec = td;
      dec_kernel = (*gpu)->last_kernel_seconds();
    }
  }
  std::vector<uint8_t> want(codec.packed_bytes());
  const bool match = codec.Encode(distinct[0], absl::MakeSpan(want)).ok() && want == packed[0];
  const double gb = static_cast<double>(n) * codec.raw_bytes() / 1e9;
  std::printf(
      "{\"kind\": \"host\", \"shape\": \"%s\", \"preset\": \"%s\", \"blocks\": %d, "
      "\"encode_fp16_gbps\": %.2f, "
      "\"decode_fp16_gbps\": %.2f, \"encode_kernel_seconds\": %.4f, \"decode_kernel_seconds\": "
      "%.4f, "
      "\"host_threads\": 1, \"bytes_match\": %s}\n",
      name, preset, n, gb / enc, gb / dec, enc_kernel, dec_kernel, match ? "true" : "false");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes{16, 64, 256, 1024};
  int reps = 5;
  double host_gib = 1.0;
  bool device_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--blocks") sizes = ParseList(argv[i + 1]);
    if (a == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--host-gib") host_gib = std::atof(argv[i + 1]);
    if (a == "--device-only") device_only = std::atoi(argv[i + 1]) != 0;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("{\"kind\": \"skipped\", \"reason\": \"no CUDA device\"}\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"kind\": \"device\", \"name\": \"%s\", \"sm\": %d, \"multiprocessors\": %d}\n",
              prop.name, prop.major * 10 + prop.minor, prop.multiProcessorCount);
  std::fflush(stdout);
  if (device_only) return 0;
  g_copy_hbm_gbps = CopyBandwidth(reps);
  struct Case {
    const char* name;
    BlockShape shape;
    const char* preset;
  };
  // Llama-3-8B's KV block at vLLM's 16 tokens (2 MiB of fp16) and SmolLM2-135M's.
  const Case cases[] = {
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k4v4-g32"},
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k3v3-g32"},
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k8v4"},
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k3v2-g32-qjl"},
      {"smollm2-135m", {30, 16, 3, 64, DType::kFloat16}, "k4v4-g32"},
  };
  for (const Case& c : cases)
    KernelCase(c.name, c.shape, c.preset, sizes, reps, prop.multiProcessorCount);
  if (host_gib > 0) {
    HostCase("llama3-8b", cases[0].shape, "k4v4-g32", host_gib, 2);
    HostCase("llama3-8b", cases[0].shape, "k8v4", host_gib, 2);
  }
  return 0;
}
