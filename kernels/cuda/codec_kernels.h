// Launchers of the CUDA codec kernels (internal to the CUDA backend and its benchmark).
// Each takes a stream and returns the launch's cudaError_t; the kernels' per-warp code is
// kernels/src/warp_codec.h, their arguments kernels/src/gpu_plan.h.
#ifndef TURBOKV_KERNELS_CUDA_CODEC_KERNELS_H_
#define TURBOKV_KERNELS_CUDA_CODEC_KERNELS_H_

#include <cuda_runtime.h>

#include "gpu_plan.h"

namespace turbokv::codec::internal {

// Threads per CTA of the group kernels: four warps, each walking tiles grid-stride.
inline constexpr int kCodecCtaThreads = 128;

// Encodes every tile of `a` (one (g, bits, qjl); many sections x blocks): raw values ->
// aligned packed parts, a.errors[block] = 1 for blocks with bad input. `max_ctas` caps the
// grid (the kernel loops over tiles); pass a few times the SM count.
cudaError_t LaunchEncodeGroups(const GroupLaunch& a, int max_ctas, cudaStream_t stream);
// Decodes every tile of `a`: aligned packed parts -> values of a.dtype.
cudaError_t LaunchDecodeGroups(const GroupLaunch& a, int max_ctas, cudaStream_t stream);
// Decodes the unquantized sections of `a` (no-op when a.num_sections == 0).
cudaError_t LaunchDecodePlain(const PlainLaunch& a, int max_ctas, cudaStream_t stream);

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_CUDA_CODEC_KERNELS_H_
