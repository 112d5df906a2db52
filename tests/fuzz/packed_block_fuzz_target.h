// The packed-block parser fuzz target, shared by the libFuzzer binary and the replay test.
// Whatever the bytes, parsing, checksum verification, value validation and decoding must return
// a status and never read or write out of bounds (checked under ASan/UBSan); a block that passes
// ValidatePackedValues decodes to finite fp32 values.
#ifndef TURBOKV_TESTS_FUZZ_PACKED_BLOCK_FUZZ_TARGET_H_
#define TURBOKV_TESTS_FUZZ_PACKED_BLOCK_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
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
  const bool valid = codec->ValidatePackedValues(in).ok();
  for (DType out : {DType::kFloat32, DType::kFloat16}) {
    std::vector<uint8_t> buf(*codec->DecodedBytes(out, {}));
    const bool decoded = codec->Decode(in, out, {}, absl::MakeSpan(buf)).ok();
    // A block the value check accepts decodes to finite fp32 (what GetBlocks RAW serves).
    if (decoded && valid && out == DType::kFloat32) {
      for (size_t i = 0; i < buf.size(); i += 4) {
        uint32_t w;
        std::memcpy(&w, &buf[i], 4);
        if ((w & 0x7F800000u) == 0x7F800000u) __builtin_trap();
      }
    }
    const int layers = info->shape.num_layers;
    std::vector<uint8_t> part(*codec->DecodedBytes(out, {layers - 1, layers}));
    (void)codec->Decode(in, out, {layers - 1, layers}, absl::MakeSpan(part), CpuIsa::kScalar);
  }
}

}  // namespace turbokv::codec::fuzz

#endif  // TURBOKV_TESTS_FUZZ_PACKED_BLOCK_FUZZ_TARGET_H_
