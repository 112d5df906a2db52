// Encode / decode kernels for group size 64 (all bits, with and without QJL).
#include "codec_kernels.cuh"

namespace turbokv::codec::internal {
TURBOKV_DEFINE_GROUP_LAUNCHER(64)
}  // namespace turbokv::codec::internal
