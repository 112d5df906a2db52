// Google Benchmark for the codec hot paths: encode and decode of one block per iteration,
// per preset, per head_dim, per CPU path. bytes_per_second counts fp16 source bytes.
//   build/bin/codec_bench --benchmark_filter='k4v4-g32'
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/float16.h"

namespace turbokv::codec {
namespace {

const char* const kPresets[] = {"k8v4", "k4v4-g32", "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "raw"};

struct Fixture {
  BlockCodec codec;
  std::vector<uint8_t> raw, packed, out;
};

Fixture Make(const std::string& preset, int head_dim) {
  // 32 layers x 16 tokens x 8 KV heads: a Llama-3-8B block of vLLM's size.
  const BlockShape shape{32, 16, 8, head_dim, DType::kFloat16};
  Fixture f{*BlockCodec::Create(shape, *PresetSpec(preset, head_dim)), {}, {}, {}};
  f.raw.resize(shape.raw_bytes());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < shape.num_values(); ++i) {
    const uint16_t h = FloatToHalf(normal(rng));
    std::memcpy(&f.raw[2 * i], &h, 2);
  }
  f.packed.resize(f.codec.packed_bytes());
  f.out.resize(shape.raw_bytes());
  (void)f.codec.Encode(f.raw, absl::MakeSpan(f.packed));
  return f;
}

void BM_Encode(benchmark::State& state, const std::string& preset, int head_dim, CpuIsa isa) {
  if (isa != CpuIsa::kScalar && (DetectCpuIsa() == CpuIsa::kScalar ||
                                 (isa == CpuIsa::kAvx512 && DetectCpuIsa() != CpuIsa::kAvx512))) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  Fixture f = Make(preset, head_dim);
  for (auto _ : state) {
    absl::Status s = f.codec.Encode(f.raw, absl::MakeSpan(f.packed), isa);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.raw.size()));
  state.counters["bpv"] = f.codec.bits_per_value();
}

void BM_Decode(benchmark::State& state, const std::string& preset, int head_dim, CpuIsa isa) {
  if (isa != CpuIsa::kScalar && (DetectCpuIsa() == CpuIsa::kScalar ||
                                 (isa == CpuIsa::kAvx512 && DetectCpuIsa() != CpuIsa::kAvx512))) {
    state.SkipWithError("CPU lacks this instruction set");
    return;
  }
  Fixture f = Make(preset, head_dim);
  for (auto _ : state) {
    absl::Status s = f.codec.Decode(f.packed, DType::kFloat16, {}, absl::MakeSpan(f.out), isa);
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * f.out.size()));
}

int Register() {
  for (const char* preset : kPresets) {
    for (int head_dim : {64, 128}) {
      for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kScalar}) {
        const std::string suffix =
            std::string(preset) + "/d" + std::to_string(head_dim) + "/" + CpuIsaName(isa);
        benchmark::RegisterBenchmark(("Encode/" + suffix).c_str(), BM_Encode, preset, head_dim, isa)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("Decode/" + suffix).c_str(), BM_Decode, preset, head_dim, isa)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace turbokv::codec

BENCHMARK_MAIN();
