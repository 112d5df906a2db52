// Encode / decode kernels for group size 256 (all bits, with and without QJL).
#include "codec_kernels.cuh"

namespace turbokv::codec::internal {
TURBOKV_DEFINE_GROUP_LAUNCHER(256)
}  // namespace turbokv::codec::internal
