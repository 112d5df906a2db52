// Encode / decode kernels for group size 16 (all bits, with and without QJL).
#include "codec_kernels.cuh"

namespace turbokv::codec::internal {
TURBOKV_DEFINE_GROUP_LAUNCHER(16)
}  // namespace turbokv::codec::internal
