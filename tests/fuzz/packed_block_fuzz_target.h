// The packed-block parser fuzz target, shared by the libFuzzer binary and the replay test.
// Whatever the bytes, parsing, checksum verification and decoding must return a status and
// never read or write out of bounds (checked under ASan/UBSan).
#ifndef TURBOKV_TESTS_FUZZ_PACKED_BLOCK_FUZZ_TARGET_H_
#define TURBOKV_TESTS_FUZZ_PACKED_BLOCK_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "turbokv/codec/block_codec.h"

namespace turbokv::codec::fuzz {

inline void FuzzPackedBlock(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  (void)VerifyPackedChecksum(in);
  absl::StatusOr<PackedBlockInfo> info = ParsePackedBlock(in);
  if (!info.ok()) return;
  // Keep decodes small so the fuzzer stays fast; the header limits allow huge shapes.
  if (info->shape.num_values() > (1u << 20)) return;
  absl::StatusOr<BlockCodec> codec = BlockCodec::FromPacked(in);
  if (!codec.ok()) return;
  if (codec->packed_bytes() != size) __builtin_trap();  // parser and codec must agree
  for (DType out : {DType::kFloat32, DType::kFloat16}) {
    std::vector<uint8_t> buf(*codec->DecodedBytes(out, {}));
    (void)codec->Decode(in, out, {}, absl::MakeSpan(buf));
    const int layers = info->shape.num_layers;
    std::vector<uint8_t> part(*codec->DecodedBytes(out, {layers - 1, layers}));
    (void)codec->Decode(in, out, {layers - 1, layers}, absl::MakeSpan(part), CpuIsa::kScalar);
  }
}

}  // namespace turbokv::codec::fuzz

#endif  // TURBOKV_TESTS_FUZZ_PACKED_BLOCK_FUZZ_TARGET_H_
