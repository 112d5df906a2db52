// SelfTestCudaCodec (cuda_codec.h): the device's bytes against the CPU's on fixed blocks.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "turbokv/codec/cuda_codec.h"
#include "turbokv/codec/float16.h"

namespace turbokv::codec {
namespace {

// Deterministic values in about [-4, 4) (SplitMix64), with the first group all zero.
std::vector<uint8_t> FixedBlock(const BlockShape& shape) {
  std::vector<uint8_t> raw(shape.raw_bytes(), 0);
  uint64_t z = 0x5EEDF00DULL;
  for (size_t i = 32; i < shape.num_values(); ++i) {
    z += 0x9E3779B97F4A7C15ULL;
    uint64_t r = z;
    r = (r ^ (r >> 30)) * 0xBF58476D1CE4E5B9ULL;
    r = (r ^ (r >> 27)) * 0x94D049BB133111EBULL;
    r ^= r >> 31;
    const float v =
        static_cast<float>(static_cast<int64_t>(r >> 40) - (int64_t{1} << 23)) / (1 << 21);
    if (shape.dtype == DType::kFloat32) {
      std::memcpy(&raw[4 * i], &v, 4);
    } else {
      const uint16_t h = shape.dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
      std::memcpy(&raw[2 * i], &h, 2);
    }
  }
  return raw;
}

std::string FirstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] != b[i])
      return absl::StrCat("byte ", i, " of ", a.size(), " (", a[i], " vs CPU ", b[i], ")");
  }
  return a.size() == b.size() ? "" : "sizes";
}

}  // namespace

absl::Status SelfTestCudaCodec(CudaCodec& cuda) {
  struct Case {
    const char* preset;
    int head_dim;
    DType dtype;
    int protected_last;  // 8-bit layers (g = largest power of two dividing head_dim)
  };
  const Case cases[] = {
      {"k4v4-g32", 128, DType::kFloat16, 0},    {"k8v4", 128, DType::kBFloat16, 1},
      {"k3v2-g32-qjl", 64, DType::kFloat32, 0}, {"k3v3-g32", 256, DType::kFloat16, 1},
      {"k4v3-g32", 80, DType::kFloat16, 0},
  };
  for (const Case& c : cases) {
    const BlockShape shape{2, 4, 2, c.head_dim, c.dtype};
    absl::StatusOr<CodecSpec> spec = PresetSpec(c.preset, c.head_dim);
    if (!spec.ok()) return spec.status();
    spec->protected_last_layers = c.protected_last;
    absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *spec);
    if (!codec.ok()) return codec.status();
    const std::string what =
        absl::StrCat(c.preset, " head_dim ", c.head_dim, " ", std::string(DTypeName(c.dtype)));
    const std::vector<uint8_t> raw = FixedBlock(shape);
    std::vector<uint8_t> cpu(codec->packed_bytes()), gpu(codec->packed_bytes());
    if (absl::Status s = codec->Encode(raw, absl::MakeSpan(cpu), CpuIsa::kScalar); !s.ok())
      return s;
    const absl::Span<const uint8_t> in[] = {raw};
    const absl::Span<uint8_t> out[] = {absl::MakeSpan(gpu)};
    absl::Status block[1];
    if (absl::Status s = cuda.EncodeBatch(*codec, in, out, block); !s.ok()) return s;
    if (!block[0].ok()) {
      return absl::InternalError(
          absl::StrCat("self-test encode of ", what, " failed: ", block[0].ToString()));
    }
    if (const std::string d = FirstDifference(gpu, cpu); !d.empty()) {
      return absl::InternalError(
          absl::StrCat("self-test: packed ", what, " differs from the CPU at ", d));
    }
    for (DType out_dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      const size_t bytes = *codec->DecodedBytes(out_dtype, {});
      std::vector<uint8_t> want(bytes), got(bytes);
      if (absl::Status s = codec->Decode(cpu, out_dtype, {}, absl::MakeSpan(want), CpuIsa::kScalar);
          !s.ok()) {
        return s;
      }
      const absl::Span<const uint8_t> packed[] = {cpu};
      const absl::Span<uint8_t> outs[] = {absl::MakeSpan(got)};
      if (absl::Status s = cuda.DecodeBatch(*codec, packed, out_dtype, {}, outs, block); !s.ok())
        return s;
      if (!block[0].ok()) {
        return absl::InternalError(
            absl::StrCat("self-test decode of ", what, " failed: ", block[0].ToString()));
      }
      if (const std::string d = FirstDifference(got, want); !d.empty()) {
        return absl::InternalError(absl::StrCat("self-test: ", what, " decoded to ",
                                                std::string(DTypeName(out_dtype)),
                                                " differs from the CPU at ", d));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace turbokv::codec
