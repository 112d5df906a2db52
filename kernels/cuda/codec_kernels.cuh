// The codec kernels, templated on group size, bits and QJL (kernels/src/warp_codec.h has the
// per-warp code and its lane layout). Included by one codec_kernels_g<G>.cu per group size, so
// that the 60 template instances compile in parallel.
#ifndef TURBOKV_KERNELS_CUDA_CODEC_KERNELS_CUH_
#define TURBOKV_KERNELS_CUDA_CODEC_KERNELS_CUH_

#include <algorithm>

#include "codec_kernels.h"
#include "gpu_plan.h"
#include "warp_codec.h"

namespace turbokv::codec::internal {

inline constexpr int kCodecCtaWarps = kCodecCtaThreads / kWarpLanes;

// The (g, bits) codebook in shared memory: every tile of a launch uses the same one.
template <int kBits>
struct SharedCodebook {
  float levels[1 << kBits];
  float thresholds[(1 << kBits) + 1];
  int32_t bucket_base[kMaxDeviceBuckets];

  __device__ CodebookTables Load(const CodebookTables& global) {
    for (int i = threadIdx.x; i < (1 << kBits); i += blockDim.x) levels[i] = global.levels[i];
    for (int i = threadIdx.x; i < (1 << kBits) + 1; i += blockDim.x) {
      thresholds[i] = global.thresholds_padded[i];
    }
    for (int i = threadIdx.x; i < global.buckets; i += blockDim.x)
      bucket_base[i] = global.bucket_base[i];
    __syncthreads();
    CodebookTables t = global;
    t.levels = levels;
    t.thresholds_padded = thresholds;
    t.bucket_base = bucket_base;
    return t;
  }
};

// QJL sections stage the residual in shared memory (per warp).
template <int kG, bool kQjl>
constexpr int ScratchFloats() {
  return kQjl ? kCodecCtaWarps * QjlScratchFloats<kG>() : 1;
}

template <int kG, int kBits, bool kQjl>
__global__ void __launch_bounds__(kCodecCtaThreads) EncodeGroupsKernel(GroupLaunch a) {
  __shared__ SharedCodebook<kBits> codebook;
  __shared__ float scratch[ScratchFloats<kG, kQjl>()];
  const CodebookTables tables = codebook.Load(a.codebook);
  const int warp = static_cast<int>(threadIdx.x) / kWarpLanes;
  float* warp_scratch = kQjl ? scratch + warp * QjlScratchFloats<kG>() : scratch;
  const uint64_t tiles = LaunchTiles(a);
  for (uint64_t id = static_cast<uint64_t>(blockIdx.x) * kCodecCtaWarps + warp; id < tiles;
       id += static_cast<uint64_t>(gridDim.x) * kCodecCtaWarps) {
    const TileCoord t = TileOf(id, a.num_sections, a.tiles_per_section);
    const DeviceSection s = a.sections[t.section];
    EncodeTile<kG, kBits, kQjl>(DeviceWarp{}, tables, s.args,
                                TileIoFor(a, s, t, TileShape<kG>::kGroupsPerTile), warp_scratch);
  }
}

template <int kG, int kBits, bool kQjl>
__global__ void __launch_bounds__(kCodecCtaThreads) DecodeGroupsKernel(GroupLaunch a) {
  __shared__ SharedCodebook<kBits> codebook;
  const CodebookTables tables = codebook.Load(a.codebook);
  const int warp = static_cast<int>(threadIdx.x) / kWarpLanes;
  const uint64_t tiles = LaunchTiles(a);
  for (uint64_t id = static_cast<uint64_t>(blockIdx.x) * kCodecCtaWarps + warp; id < tiles;
       id += static_cast<uint64_t>(gridDim.x) * kCodecCtaWarps) {
    const TileCoord t = TileOf(id, a.num_sections, a.tiles_per_section);
    const DeviceSection s = a.sections[t.section];
    DecodeTile<kG, kBits, kQjl>(DeviceWarp{}, tables, s.args,
                                TileIoFor(a, s, t, TileShape<kG>::kGroupsPerTile));
  }
}

inline unsigned GridFor(uint64_t tiles, int max_ctas) {
  const uint64_t ctas = (tiles + kCodecCtaWarps - 1) / kCodecCtaWarps;
  return static_cast<unsigned>(
      std::max<uint64_t>(1, std::min<uint64_t>(ctas, static_cast<uint64_t>(max_ctas))));
}

// The (bits, qjl) switch for one group size; defined in codec_kernels_g<kG>.cu.
template <int kG>
cudaError_t LaunchGroupsForG(const GroupLaunch& a, bool encode, int max_ctas, cudaStream_t stream);

template <int kG>
struct GroupLauncher {
  const GroupLaunch& a;
  bool encode;
  int max_ctas;
  cudaStream_t stream;

  template <int kBits, bool kQjl>
  cudaError_t Launch() const {
    const unsigned grid = GridFor(LaunchTiles(a), max_ctas);
    if (encode) {
      EncodeGroupsKernel<kG, kBits, kQjl><<<grid, kCodecCtaThreads, 0, stream>>>(a);
    } else {
      DecodeGroupsKernel<kG, kBits, kQjl><<<grid, kCodecCtaThreads, 0, stream>>>(a);
    }
    return cudaGetLastError();
  }
  cudaError_t Run() const {
    switch (a.bits * 2 + (a.qjl ? 1 : 0)) {
      case 2:
        return Launch<1, false>();
      case 3:
        return Launch<1, true>();
      case 4:
        return Launch<2, false>();
      case 5:
        return Launch<2, true>();
      case 6:
        return Launch<3, false>();
      case 7:
        return Launch<3, true>();
      case 8:
        return Launch<4, false>();
      case 9:
        return Launch<4, true>();
      case 10:
        return Launch<5, false>();
      case 11:
        return Launch<5, true>();
      case 12:
        return Launch<6, false>();
      case 13:
        return Launch<6, true>();
      case 16:
        return Launch<8, false>();
      case 17:
        return Launch<8, true>();
      default:
        return cudaErrorInvalidValue;
    }
  }
};

#define TURBOKV_DEFINE_GROUP_LAUNCHER(G)                                           \
  template <>                                                                      \
  cudaError_t LaunchGroupsForG<G>(const GroupLaunch& a, bool encode, int max_ctas, \
                                  cudaStream_t stream) {                           \
    return GroupLauncher<G>{a, encode, max_ctas, stream}.Run();                    \
  }

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_CUDA_CODEC_KERNELS_CUH_
