// Randomized Hadamard rotation (docs/architecture.md, codec step 2; kernels/FORMAT.md "Rotation").
//
// y = H_g · D · u: D is a diagonal of ±1 signs, applied *before* the orthonormal
// Walsh–Hadamard transform H_g (Sylvester order, scaled by 1/sqrt(g)). The signs are a
// counter-based SplitMix64 stream (Steele, Lea, Flood 2014) keyed by (seed, layer, K/V), so
// any implementation in any language reproduces them bit for bit:
//   key     = Mix(seed ^ Mix((layer << 1) | kv))                     kv: 0 = K, 1 = V
//   sign(j) = −1 if Mix(key + (j + 1) · 0x9E3779B97F4A7C15) has bit 63 set, else +1
// where Mix is SplitMix64's finalizer and j is the coordinate's index in the head vector.
#ifndef TURBOKV_CODEC_ROTATION_H_
#define TURBOKV_CODEC_ROTATION_H_

#include <cstdint>
#include <vector>

namespace turbokv::codec {

// SplitMix64's output finalizer (variant 13 of Stafford's mixers).
uint64_t SplitMix64Mix(uint64_t z);
// The key of the sign stream of one (seed, layer, kv) section.
uint64_t RotationKey(uint64_t seed, int layer, int kv);
// Signs for coordinates 0..head_dim−1: +1.0f or −1.0f.
std::vector<float> RotationSigns(uint64_t key, int head_dim);

// In place on one group of g floats (g a power of two): u <- H_g · D · u, where D holds
// the signs of coordinates [sign_offset, sign_offset + g) of the stream `key`.
void RotateGroup(float* u, int g, uint64_t key, int sign_offset);
// The exact inverse: u <- D · H_g · u (H_g is symmetric and orthonormal, D is its own inverse).
void InverseRotateGroup(float* u, int g, uint64_t key, int sign_offset);

}  // namespace turbokv::codec

#endif  // TURBOKV_CODEC_ROTATION_H_
