// Encode / decode kernels for group size 128 (all bits, with and without QJL).
#include "codec_kernels.cuh"

namespace turbokv::codec::internal {
TURBOKV_DEFINE_GROUP_LAUNCHER(128)
}  // namespace turbokv::codec::internal
