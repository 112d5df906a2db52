// GPU codec benchmark: large batches through CudaCodec, kernel time only (cudaEvent) and end
// to end (with host<->device copies). Prints one JSON object per line.
//   build/bin/codec_gpu_bench [--blocks N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/cuda_codec.h"
#include "turbokv/codec/float16.h"

using namespace turbokv::codec;

int main(int argc, char** argv) {
  int blocks = 512;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--blocks") blocks = std::atoi(argv[i + 1]);
  }
  absl::StatusOr<std::unique_ptr<CudaCodec>> gpu = CudaCodec::Create(0);
  if (!gpu.ok()) {
    std::printf("{\"skipped\": \"%s\"}\n", std::string(gpu.status().message()).c_str());
    return 0;
  }
  struct Case { const char* name; BlockShape shape; const char* preset; };
  const Case cases[] = {
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k4v4-g32"},
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k3v3-g32"},
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k8v4"},
      {"llama3-8b", {32, 16, 8, 128, DType::kFloat16}, "k3v2-g32-qjl"},
      {"smollm2-135m", {30, 16, 3, 64, DType::kFloat16}, "k4v4-g32"},
  };
  for (const Case& c : cases) {
    BlockCodec codec = *BlockCodec::Create(c.shape, *PresetSpec(c.preset, c.shape.head_dim));
    std::vector<std::vector<uint8_t>> raw(blocks, std::vector<uint8_t>(codec.raw_bytes()));
    std::vector<std::vector<uint8_t>> packed(blocks, std::vector<uint8_t>(codec.packed_bytes()));
    std::vector<std::vector<uint8_t>> out(blocks, std::vector<uint8_t>(codec.raw_bytes()));
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (auto& r : raw) {
      for (size_t i = 0; i < r.size() / 2; ++i) {
        const uint16_t h = FloatToHalf(normal(rng));
        std::memcpy(&r[2 * i], &h, 2);
      }
    }
    std::vector<absl::Span<const uint8_t>> in(raw.begin(), raw.end());
    std::vector<absl::Span<uint8_t>> pk;
    for (auto& p : packed) pk.push_back(absl::MakeSpan(p));
    std::vector<absl::Span<const uint8_t>> pkc(packed.begin(), packed.end());
    std::vector<absl::Span<uint8_t>> outs;
    for (auto& o : out) outs.push_back(absl::MakeSpan(o));
    double enc_kernel = 1e30, dec_kernel = 1e30, enc_e2e = 1e30, dec_e2e = 1e30;
    for (int rep = 0; rep < 4; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      absl::Status s = (*gpu)->EncodeBatch(codec, in, pk);
      auto t1 = std::chrono::steady_clock::now();
      if (!s.ok()) {
        std::printf("{\"error\": \"%s\"}\n", s.ToString().c_str());
        return 1;
      }
      if (rep > 0) enc_kernel = std::min(enc_kernel, (*gpu)->last_kernel_seconds());
      if (rep > 0) enc_e2e = std::min(enc_e2e, std::chrono::duration<double>(t1 - t0).count());
      t0 = std::chrono::steady_clock::now();
      s = (*gpu)->DecodeBatch(codec, pkc, DType::kFloat16, {}, outs);
      t1 = std::chrono::steady_clock::now();
      if (!s.ok()) {
        std::printf("{\"error\": \"%s\"}\n", s.ToString().c_str());
        return 1;
      }
      if (rep > 0) dec_kernel = std::min(dec_kernel, (*gpu)->last_kernel_seconds());
      if (rep > 0) dec_e2e = std::min(dec_e2e, std::chrono::duration<double>(t1 - t0).count());
    }
    // The CPU must agree on the first block (a cheap sanity check inside the benchmark).
    std::vector<uint8_t> cpu(codec.packed_bytes());
    (void)codec.Encode(raw[0], absl::MakeSpan(cpu));
    const double gb = static_cast<double>(blocks) * codec.raw_bytes() / 1e9;
    // Bytes the kernels move: fp16 in + packed out (encode), packed in + fp16 out (decode).
    const double moved = static_cast<double>(blocks) * (codec.raw_bytes() + codec.packed_bytes()) / 1e9;
    std::printf(
        "{\"device\": \"%s\", \"shape\": \"%s\", \"preset\": \"%s\", \"blocks\": %d, \"fp16_gb\": %.3f, "
        "\"encode_kernel_gbps\": %.1f, \"decode_kernel_gbps\": %.1f, \"encode_kernel_hbm_gbps\": %.1f, "
        "\"decode_kernel_hbm_gbps\": %.1f, \"encode_e2e_gbps\": %.2f, \"decode_e2e_gbps\": %.2f, "
        "\"cpu_bytes_match\": %s}\n",
        (*gpu)->DeviceName().c_str(), c.name, c.preset, blocks, gb, gb / enc_kernel, gb / dec_kernel,
        moved / enc_kernel, moved / dec_kernel, gb / enc_e2e, gb / dec_e2e,
        cpu == packed[0] ? "true" : "false");
    std::fflush(stdout);
  }
  return 0;
}
