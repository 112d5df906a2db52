// The group-size switch of the codec launchers, and the plain-section decode kernel.
#include <algorithm>

#include "codec_kernels.cuh"

namespace turbokv::codec::internal {

template <>
cudaError_t LaunchGroupsForG<8>(const GroupLaunch&, bool, int, cudaStream_t);
template <>
cudaError_t LaunchGroupsForG<16>(const GroupLaunch&, bool, int, cudaStream_t);
template <>
cudaError_t LaunchGroupsForG<32>(const GroupLaunch&, bool, int, cudaStream_t);
template <>
cudaError_t LaunchGroupsForG<64>(const GroupLaunch&, bool, int, cudaStream_t);
template <>
cudaError_t LaunchGroupsForG<128>(const GroupLaunch&, bool, int, cudaStream_t);
template <>
cudaError_t LaunchGroupsForG<256>(const GroupLaunch&, bool, int, cudaStream_t);

namespace {

cudaError_t LaunchGroups(const GroupLaunch& a, bool encode, int max_ctas, cudaStream_t stream) {
  if (LaunchTiles(a) == 0) return cudaSuccess;
  switch (a.group_size) {
    case 8:
      return LaunchGroupsForG<8>(a, encode, max_ctas, stream);
    case 16:
      return LaunchGroupsForG<16>(a, encode, max_ctas, stream);
    case 32:
      return LaunchGroupsForG<32>(a, encode, max_ctas, stream);
    case 64:
      return LaunchGroupsForG<64>(a, encode, max_ctas, stream);
    case 128:
      return LaunchGroupsForG<128>(a, encode, max_ctas, stream);
    case 256:
      return LaunchGroupsForG<256>(a, encode, max_ctas, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// Grid-stride over 8-value chunks of every plain section of every block.
__global__ void __launch_bounds__(256) DecodePlainKernel(PlainLaunch a) {
  const uint64_t items = PlainItems(a);
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    DecodePlainItem(a, i);
  }
}

}  // namespace

cudaError_t LaunchEncodeGroups(const GroupLaunch& a, int max_ctas, cudaStream_t stream) {
  return LaunchGroups(a, /*encode=*/true, max_ctas, stream);
}

cudaError_t LaunchDecodeGroups(const GroupLaunch& a, int max_ctas, cudaStream_t stream) {
  return LaunchGroups(a, /*encode=*/false, max_ctas, stream);
}

cudaError_t LaunchDecodePlain(const PlainLaunch& a, int max_ctas, cudaStream_t stream) {
  const uint64_t items = PlainItems(a);
  if (items == 0) return cudaSuccess;
  const uint64_t ctas =
      std::min<uint64_t>((items + 255) / 256, static_cast<uint64_t>(std::max(1, max_ctas)));
  DecodePlainKernel<<<static_cast<unsigned>(ctas), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace turbokv::codec::internal
