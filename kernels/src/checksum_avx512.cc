// xxHash3-64 with xxhash.h's AVX-512 inner loop (checksum_simd.h); this file is compiled with
// the AVX-512 flags (kernels/CMakeLists.txt) and only entered after the run-time CPU check.
#include "checksum_simd.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#define XXH_INLINE_ALL  // every xxhash function static to this file: no clash with libxxhash
#include "xxhash.h"
#define TURBOKV_HAVE_CHECKSUM_BUILD 1
#endif

namespace turbokv::codec::internal {

#if TURBOKV_HAVE_CHECKSUM_BUILD
uint64_t ChecksumAvx512(const uint8_t* data, size_t size) { return XXH3_64bits(data, size); }
bool HaveChecksumAvx512Build() { return true; }
#else
uint64_t ChecksumAvx512(const uint8_t*, size_t) { return 0; }
bool HaveChecksumAvx512Build() { return false; }
#endif

}  // namespace turbokv::codec::internal
