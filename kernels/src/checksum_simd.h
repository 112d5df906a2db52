// Internal: xxHash3-64 (seed 0) compiled for AVX2 and for AVX-512 (checksum_avx2.cc,
// checksum_avx512.cc), entered only after the run-time CPU checks of section_codec.h.
//
// Debian's libxxhash is built for baseline x86-64 (its XXH3 runs SSE2) and was 12% of the
// server's CPU on 2 MiB PACKED gets; these are the same algorithm from the same xxhash.h
// (XXH_INLINE_ALL), so every variant returns the same 64 bits for the same bytes.
#ifndef TURBOKV_KERNELS_SRC_CHECKSUM_SIMD_H_
#define TURBOKV_KERNELS_SRC_CHECKSUM_SIMD_H_

#include <cstddef>
#include <cstdint>

namespace turbokv::codec::internal {

// 0 when the library was built without that instruction set (then never called).
uint64_t ChecksumAvx2(const uint8_t* data, size_t size);    // requires Avx2Available()
uint64_t ChecksumAvx512(const uint8_t* data, size_t size);  // requires Avx512Available()
bool HaveChecksumAvx2Build();
bool HaveChecksumAvx512Build();

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_SRC_CHECKSUM_SIMD_H_
