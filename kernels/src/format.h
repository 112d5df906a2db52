// Internal: packed block format v1 header and checksum (kernels/FORMAT.md).
#ifndef TURBOKV_KERNELS_SRC_FORMAT_H_
#define TURBOKV_KERNELS_SRC_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "turbokv/codec/block_codec.h"

namespace turbokv::codec::internal {

inline constexpr uint8_t kMagic[4] = {'T', 'K', 'V', 'B'};
inline constexpr uint16_t kFormatVersion = 1;
inline constexpr size_t kFixedHeaderBytes = 56;
inline constexpr size_t kChecksumBytes = 8;
inline constexpr size_t kMaxPackedBytes = 0xFFFFFFFFu;  // offsets are uint32
inline constexpr uint16_t kFlagNormCorrection = 1u << 0;

// Fixed header + layer codec table (4 bytes a layer) + layer offsets (4 bytes, num_layers + 1).
inline size_t HeaderBytes(int num_layers) {
  return kFixedHeaderBytes + 4 * static_cast<size_t>(num_layers) +
         4 * (static_cast<size_t>(num_layers) + 1);
}

std::vector<uint8_t> WriteHeader(const BlockCodec& codec);

// xxHash3-64 (seed 0) of `bytes`.
uint64_t Checksum(absl::Span<const uint8_t> bytes);

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_SRC_FORMAT_H_
