// Encode / decode kernels for group size 32 (all bits, with and without QJL).
#include "codec_kernels.cuh"

namespace turbokv::codec::internal {
TURBOKV_DEFINE_GROUP_LAUNCHER(32)
}  // namespace turbokv::codec::internal
