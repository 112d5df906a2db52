#include "turbokv/codec/rotation.h"

#include "group_math.h"

namespace turbokv::codec {

uint64_t SplitMix64Mix(uint64_t z) { return internal::Mix64(z); }

uint64_t RotationKey(uint64_t seed, int layer, int kv) {
  return internal::SectionKey(seed, layer, kv);
}

std::vector<float> RotationSigns(uint64_t key, int head_dim) {
  std::vector<float> signs(head_dim);
  for (int j = 0; j < head_dim; ++j) signs[j] = internal::SignNegative(key, j) ? -1.0f : 1.0f;
  return signs;
}

void RotateGroup(float* u, int g, uint64_t key, int sign_offset) {
  for (int j = 0; j < g; ++j)
    u[j] = internal::FlipSign(u[j], internal::SignNegative(key, sign_offset + j));
  internal::FwhtInPlace(u, g);
  const float hs = internal::HadamardScale(g);
  for (int j = 0; j < g; ++j) u[j] = u[j] * hs;
}

void InverseRotateGroup(float* u, int g, uint64_t key, int sign_offset) {
  internal::FwhtInPlace(u, g);
  const float hs = internal::HadamardScale(g);
  for (int j = 0; j < g; ++j) {
    u[j] = internal::FlipSign(u[j] * hs, internal::SignNegative(key, sign_offset + j));
  }
}

}  // namespace turbokv::codec
