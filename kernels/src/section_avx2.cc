// AVX2 path (placeholder until the vectorized kernels land): reports "not handled" so the
// scalar path runs.
#include "section_codec.h"

namespace turbokv::codec::internal {

bool Avx2Available() { return false; }
bool EncodeSectionAvx2(const SectionJob&, const uint8_t*, uint8_t*, EncodeError*) { return false; }
bool DecodeSectionAvx2(const SectionJob&, const uint8_t*, DType, uint8_t*) { return false; }

}  // namespace turbokv::codec::internal
