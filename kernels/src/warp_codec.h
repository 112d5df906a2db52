// The CUDA backend's per-warp encode and decode of quantized sections, written once for nvcc
// (the kernels in kernels/cuda/codec_kernels.cu) and for g++ (tests/unit/codec_warp_test.cc runs
// the same functions on a 32-lane emulator and compares bytes with the CPU codec).
//
// Structure (what an extension touches):
//   TileShape<kG>     which coordinates of which group each lane holds.
//   Fwht / ChainSum   the cross-lane Walsh–Hadamard butterflies (xor shuffles) and the serial
//                     sums in the canonical index order of group_math.h.
//   EncodeTile /      one warp tile = TileShape::kGroupsPerTile consecutive groups of one
//   DecodeTile        section: load, rotate, quantize (or dequantize), store. A new per-group
//                     option adds a field to SectionArgs and a step here, guarded by
//                     `if constexpr` on a template flag like kQjl.
//   DispatchGroupCodec  the run-time (g, bits, qjl) -> template switch.
//
// Lane layout. A lane holds kValuesPerLane = min(g, 32) coordinates of one group, so a group
// spans kLanesPerGroup = g / kValuesPerLane lanes (1 for g <= 32; 2, 4, 8 for g = 64, 128, 256)
// and a head vector spans head_dim / kValuesPerLane lanes: a fraction of a warp. Lane position p
// within its group, register r: coordinate ((r / 8) * kLanesPerGroup + p) * 8 + r % 8, i.e.
// 8-coordinate chunks dealt round-robin to the group's lanes, so each chunk is one 16-byte
// load of fp16/bf16 input and the lanes of a group read contiguous memory.
// Why not 8 coordinates per lane (a warp per 256 coordinates) as in FlashInfer-style
// Hadamard kernels: the codec's sums of squares are serial in coordinate order (that order is
// what makes the bytes identical to the CPU's), so a group spread over L lanes costs L
// dependent rounds per sum with L − 1 lanes idle. Keeping L small keeps those sums cheap; the
// butterflies that cross lanes (h >= 8 when L > 1) are xor shuffles.
//
// Butterflies: stage h of group_math.h's FwhtInPlace pairs coordinates j and j + h. Coordinate
// bits 0-2 are the register within a chunk (in-register stages h = 1, 2, 4), the next log2(L)
// bits the lane position (shuffle stages h = 8 .. 4L), the rest the chunk (in-register stages
// h = 8L .. g/2). Stages run in increasing h as on the CPU. The upper element of a pair gets
// partner − mine, computed as partner + (−mine): the same IEEE result.
//
// Sums: ChainSum adds the group's terms one by one in coordinate order, passing the running
// sum from lane to lane (a broadcast shuffle per 8 coordinates), exactly SumSquares' order.
//
// All arithmetic is IEEE binary32, no FMA (-fmad=false / -ffp-contract=off).
#ifndef TURBOKV_KERNELS_SRC_WARP_CODEC_H_
#define TURBOKV_KERNELS_SRC_WARP_CODEC_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "group_math.h"
#include "turbokv/codec/types.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define TURBOKV_UNROLL _Pragma("unroll")
#define TURBOKV_NO_UNROLL _Pragma("unroll 1")
#else
#define TURBOKV_UNROLL
#define TURBOKV_NO_UNROLL
#endif

namespace turbokv::codec::internal {

// ---- Lane layout ------------------------------------------------------------------------

inline constexpr int kWarpLanes = 32;

template <int kG>
struct TileShape {
  static constexpr int kValuesPerLane = kG < 32 ? kG : 32;
  static constexpr int kLanesPerGroup = kG / kValuesPerLane;
  static constexpr int kGroupsPerTile = kWarpLanes / kLanesPerGroup;
  static constexpr int kChunks = kValuesPerLane / 8;  // 8-coordinate chunks per lane
  static constexpr int kMaskWords = (kG + 31) / 32;   // QJL sign bits of a group, as words
  // Coordinate within the group of register r of lane position p.
  static constexpr int Coord(int p, int r) { return ((r / 8) * kLanesPerGroup + p) * 8 + r % 8; }
};

// Which tile a flat work index names: tiles run fastest, then sections, then blocks.
struct TileCoord {
  uint32_t block;
  uint32_t section;  // index into the launch's section list
  uint32_t tile;
};
TURBOKV_HD TileCoord TileOf(uint64_t id, uint32_t sections, uint32_t tiles_per_section) {
  TileCoord t;
  t.tile = static_cast<uint32_t>(id % tiles_per_section);
  const uint64_t rest = id / tiles_per_section;
  t.section = static_cast<uint32_t>(rest % sections);
  t.block = static_cast<uint32_t>(rest / sections);
  return t;
}

// ---- What a tile reads and writes ------------------------------------------------------------

// The (g, bits) codebook as the kernels read it (shared memory on the device).
struct CodebookTables {
  const float* levels = nullptr;             // [2^bits]
  const float* thresholds_padded = nullptr;  // [2^bits + 1]: thresholds, then +inf, +inf
  const int32_t* bucket_base = nullptr;      // [buckets] (Codebook::bucket_base)
  int buckets = 0;                           // 0: binary search over the thresholds
  float bucket_lo = 0;
  float bucket_scale = 0;
};

// Per-section constants (device memory, cached per codec by the CUDA backend).
struct SectionArgs {
  const uint8_t* signs = nullptr;  // [head_dim / 8]: bit b of byte c = sign of coordinate 8c+b
  const float* qjl = nullptr;      // [g][g] row-major QJL matrix S (QJL sections)
  float qjl_coef = 0;              // (float)(sqrt(pi/2) / g)
  bool norm_correction = true;
  int groups_per_vector = 1;  // head_dim / g
};

// One section of one block in the backend's aligned packed layout (cuda_plan.h): every part
// starts on a 16-byte boundary.
struct PackedParts {
  uint8_t* scales = nullptr;     // fp16 [groups]
  uint8_t* residuals = nullptr;  // fp16 [groups] (QJL)
  uint8_t* indices = nullptr;    // [groups][g * bits / 8]
  uint8_t* qjl_bits = nullptr;   // [groups][g / 8] (QJL)
};

struct TileIo {
  const uint8_t* values_in = nullptr;  // encode: the section's raw values [groups][g]
  uint8_t* values_out = nullptr;       // decode: the section's output values [groups][g]
  DType dtype = DType::kFloat16;       // dtype of values_in / values_out
  PackedParts parts;                   // encode writes them, decode reads them
  size_t first_group = 0;              // the tile's first group within the section
  size_t groups = 0;                   // groups in the section
  uint32_t* error = nullptr;           // encode: set to 1 on bad input (the block fails)
};

// ---- Memory helpers (vector loads on the device, memcpy on the host) ------------------------

struct alignas(16) Bytes16 {
  uint32_t w[4];
};

TURBOKV_HD Bytes16 Load16(const uint8_t* p) {
  Bytes16 b;
#if defined(__CUDA_ARCH__)
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  b.w[0] = v.x;
  b.w[1] = v.y;
  b.w[2] = v.z;
  b.w[3] = v.w;
#else
  memcpy(b.w, p, 16);
#endif
  return b;
}

TURBOKV_HD void Store16(uint8_t* p, const Bytes16& b) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint4*>(p) = make_uint4(b.w[0], b.w[1], b.w[2], b.w[3]);
#else
  memcpy(p, b.w, 16);
#endif
}

TURBOKV_HD uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
TURBOKV_HD void StoreU16(uint8_t* p, uint16_t v) { memcpy(p, &v, 2); }

// Exact fp16 -> fp32 (hardware conversion on the device).
TURBOKV_HD float HalfBitsToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return HalfToFloat(h);
#endif
}

// fp32 -> fp16 / bf16, round to nearest even: FloatToHalf / FloatToBFloat16 bit for bit. The
// device converts in hardware and keeps the software NaN pattern (hardware NaNs are canonical).
TURBOKV_HD uint16_t FloatToHalfBits(float f) {
#if defined(__CUDA_ARCH__)
  const uint16_t h = __half_as_ushort(__float2half_rn(f));
  const uint16_t nan = static_cast<uint16_t>(((FloatBits(f) >> 16) & 0x8000u) | 0x7E00u);
  return f != f ? nan : h;
#else
  return FloatToHalf(f);
#endif
}
TURBOKV_HD uint16_t FloatToBFloat16Bits(float f) { return FloatToBFloat16(f); }

TURBOKV_HD size_t ValueBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

// Eight consecutive values of `dtype` starting at p (16-byte aligned) as floats.
TURBOKV_HD void LoadChunk(const uint8_t* p, DType dtype, float* out) {
  if (dtype == DType::kFloat32) {
    const Bytes16 a = Load16(p), b = Load16(p + 16);
    for (int i = 0; i < 4; ++i) {
      out[i] = BitsFloat(a.w[i]);
      out[4 + i] = BitsFloat(b.w[i]);
    }
    return;
  }
  const Bytes16 a = Load16(p);
  for (int i = 0; i < 8; ++i) {
    const uint16_t h = static_cast<uint16_t>(a.w[i / 2] >> (16 * (i % 2)));
    out[i] = dtype == DType::kFloat16 ? HalfBitsToFloat(h) : BFloat16ToFloat(h);
  }
}

TURBOKV_HD void StoreChunk(uint8_t* p, DType dtype, const float* in) {
  if (dtype == DType::kFloat32) {
    Bytes16 a, b;
    for (int i = 0; i < 4; ++i) {
      a.w[i] = FloatBits(in[i]);
      b.w[i] = FloatBits(in[4 + i]);
    }
    Store16(p, a);
    Store16(p + 16, b);
    return;
  }
  Bytes16 a;
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo =
        dtype == DType::kFloat16 ? FloatToHalfBits(in[2 * i]) : FloatToBFloat16Bits(in[2 * i]);
    const uint16_t hi = dtype == DType::kFloat16 ? FloatToHalfBits(in[2 * i + 1])
                                                 : FloatToBFloat16Bits(in[2 * i + 1]);
    a.w[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  Store16(p, a);
}

// `n` (<= 8) little-endian bytes of `v` at p, in the widest stores p's alignment allows
// (kAlign: a power of two that divides p's address).
template <int kAlign>
TURBOKV_HD void StoreBytes(uint8_t* p, uint64_t v, int n) {
  if (kAlign >= 8 && n == 8) {
    memcpy(p, &v, 8);
  } else if (kAlign >= 4 && n == 4) {
    const uint32_t w = static_cast<uint32_t>(v);
    memcpy(p, &w, 4);
  } else if (kAlign >= 2 && n == 2) {
    StoreU16(p, static_cast<uint16_t>(v));
  } else {
    for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
  }
}

template <int kAlign>
TURBOKV_HD uint64_t LoadBytes(const uint8_t* p, int n) {
  if (kAlign >= 8 && n == 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
  }
  if (kAlign >= 4 && n == 4) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
  }
  if (kAlign >= 2 && n == 2) return LoadU16(p);
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

TURBOKV_HD void SetFlag(uint32_t* flag) {
#if defined(__CUDA_ARCH__)
  atomicExch(flag, 1u);
#else
  *flag = 1u;
#endif
}

// ---- Warp primitives -------------------------------------------------------------------------
//
// A Warp type provides: int lane() const; float ShflXor(float, int lane_mask) const;
// uint32_t ShflXor(uint32_t, int) const; float Shfl(float, int src_lane) const; void Sync() const.
// Every lane must call them in the same order (full-warp collectives).

#if defined(__CUDACC__)
struct DeviceWarp {
  __device__ __forceinline__ int lane() const { return static_cast<int>(threadIdx.x & 31u); }
  __device__ __forceinline__ float ShflXor(float v, int m) const {
    return __shfl_xor_sync(0xFFFFFFFFu, v, m);
  }
  __device__ __forceinline__ uint32_t ShflXor(uint32_t v, int m) const {
    return __shfl_xor_sync(0xFFFFFFFFu, v, m);
  }
  __device__ __forceinline__ float Shfl(float v, int src) const {
    return __shfl_sync(0xFFFFFFFFu, v, src);
  }
  __device__ __forceinline__ void Sync() const { __syncwarp(); }
};
#endif

// ---- The per-group steps, lane-distributed ----------------------------------------------------

// Index of the nearest level (NearestLevel's result), by the codebook's bucket table when it
// has one: exact for every y because bucket() is monotone and no bucket holds more than two
// thresholds (Codebook::bucket_base).
template <int kBits>
TURBOKV_HD int Quantize(const CodebookTables& cb, float y) {
  if (cb.buckets > 0) {
    float f = (y - cb.bucket_lo) * cb.bucket_scale;
    if (!(f > 0.0f)) f = 0.0f;  // also NaN
    const float top = static_cast<float>(cb.buckets - 1);
    if (f > top) f = top;
    const int base = cb.bucket_base[static_cast<int>(f)];
    return base + (y > cb.thresholds_padded[base] ? 1 : 0) +
           (y > cb.thresholds_padded[base + 1] ? 1 : 0);
  }
  return NearestLevel(y, cb.thresholds_padded, kBits);
}

// In-place FwhtInPlace of each group, its coordinates spread as TileShape says.
template <int kG, class Warp>
TURBOKV_HD void Fwht(const Warp& w, float (&v)[TileShape<kG>::kValuesPerLane], int p) {
  using S = TileShape<kG>;
  constexpr int kIn = kG < 8 ? kG : 8;
  TURBOKV_UNROLL
  for (int h = 1; h < kIn; h <<= 1) {
    TURBOKV_UNROLL
    for (int k = 0; k < S::kChunks; ++k) {
      TURBOKV_UNROLL
      for (int i = 0; i < 8; ++i) {
        if (i & h) continue;
        const float a = v[k * 8 + i], b = v[k * 8 + i + h];
        v[k * 8 + i] = a + b;
        v[k * 8 + i + h] = a - b;
      }
    }
  }
  TURBOKV_UNROLL
  for (int m = 1; m < S::kLanesPerGroup; m <<= 1) {
    const bool upper = (p & m) != 0;
    TURBOKV_UNROLL
    for (int r = 0; r < S::kValuesPerLane; ++r) {
      const float partner = w.ShflXor(v[r], m);
      v[r] = (upper ? -v[r] : v[r]) + partner;
    }
  }
  TURBOKV_UNROLL
  for (int d = 1; d < S::kChunks; d <<= 1) {
    TURBOKV_UNROLL
    for (int k = 0; k < S::kChunks; ++k) {
      if (k & d) continue;
      TURBOKV_UNROLL
      for (int i = 0; i < 8; ++i) {
        const float a = v[k * 8 + i], b = v[(k + d) * 8 + i];
        v[k * 8 + i] = a + b;
        v[(k + d) * 8 + i] = a - b;
      }
    }
  }
}

// Σ term(c) over the group's coordinates c = 0 .. g−1 in that order, one addition at a time
// (SumSquares' order). `term(r)` gives this lane's term for its register r. Every lane of the
// group returns the sum.
template <int kG, class Warp, class Term>
TURBOKV_HD float ChainSum(const Warp& w, int p, int base_lane, const Term& term) {
  using S = TileShape<kG>;
  float s = 0.0f;
  if constexpr (S::kLanesPerGroup == 1) {
    (void)w;
    (void)p;
    (void)base_lane;
    TURBOKV_UNROLL
    for (int r = 0; r < S::kValuesPerLane; ++r) s = s + term(r);
  } else {
    TURBOKV_UNROLL
    for (int k = 0; k < S::kChunks; ++k) {
      TURBOKV_UNROLL
      for (int q = 0; q < S::kLanesPerGroup; ++q) {
        // Lane q of the group continues the sum over its chunk k; the others compute a value
        // nobody uses (all lanes must reach the shuffle).
        float t = s;
        TURBOKV_UNROLL
        for (int i = 0; i < 8; ++i) t = t + term(k * 8 + i);
        s = w.Shfl(t, base_lane + q);
      }
    }
  }
  return s;
}

// The group's QJL sign bits as kMaskWords words (bit c of the group = bit c % 32 of word c / 32),
// OR-ed together from the lanes that each set their own coordinates' bits.
template <int kG, class Warp>
TURBOKV_HD void GatherMask(const Warp& w, uint32_t (&mask)[TileShape<kG>::kMaskWords]) {
  using S = TileShape<kG>;
  TURBOKV_UNROLL
  for (int m = 1; m < S::kLanesPerGroup; m <<= 1) {
    TURBOKV_UNROLL
    for (int i = 0; i < S::kMaskWords; ++i) mask[i] |= w.ShflXor(mask[i], m);
  }
}

// mask |= byte << coord for a coordinate that is a multiple of 8 (constant indices only, so
// the mask stays in registers).
template <int kWords>
TURBOKV_HD void OrByte(uint32_t (&mask)[kWords], int coord, uint32_t byte) {
  TURBOKV_UNROLL
  for (int wi = 0; wi < kWords; ++wi) {
    if ((coord >> 5) == wi) mask[wi] |= byte << (coord & 31);
  }
}

// y_hat'_c = levels[idx_c] + (qjl_coef · residual_norm) · Σ_i (±S[i][c]) for this lane's
// coordinates (ReconstructRotated), into v.
template <int kG, bool kQjl>
TURBOKV_HD void Reconstruct(const CodebookTables& cb, const SectionArgs& sec, int p,
                            const uint8_t (&idx)[TileShape<kG>::kValuesPerLane],
                            const uint32_t (&mask)[TileShape<kG>::kMaskWords], float residual_norm,
                            float (&v)[TileShape<kG>::kValuesPerLane]) {
  using S = TileShape<kG>;
  TURBOKV_UNROLL
  for (int r = 0; r < S::kValuesPerLane; ++r) v[r] = cb.levels[idx[r]];
  if constexpr (kQjl) {
    const float k = sec.qjl_coef * residual_norm;
    TURBOKV_UNROLL
    for (int r = 0; r < S::kValuesPerLane; ++r) {
      const int c = S::Coord(p, r);
      float acc = 0.0f;
      TURBOKV_UNROLL
      for (int wi = 0; wi < S::kMaskWords; ++wi) {
        const uint32_t word = mask[wi];
        TURBOKV_NO_UNROLL
        for (int b = 0; b < 32 && wi * 32 + b < kG; ++b) {
          const float s = sec.qjl[(wi * 32 + b) * kG + c];
          acc = acc + (((word >> b) & 1u) ? s : -s);
        }
      }
      v[r] = v[r] + k * acc;
    }
  } else {
    (void)sec;
    (void)p;
    (void)mask;
    (void)residual_norm;
  }
}

// Flips the signs of this lane's coordinates (D of the rotation). gk: the group's index within
// its head vector.
template <int kG>
TURBOKV_HD void ApplySigns(const SectionArgs& sec, int gk, int p,
                           float (&v)[TileShape<kG>::kValuesPerLane]) {
  using S = TileShape<kG>;
  TURBOKV_UNROLL
  for (int k = 0; k < S::kChunks; ++k) {
    const uint32_t bits = sec.signs[gk * (kG / 8) + k * S::kLanesPerGroup + p];
    TURBOKV_UNROLL
    for (int i = 0; i < 8; ++i) v[k * 8 + i] = FlipSign(v[k * 8 + i], ((bits >> i) & 1u) != 0);
  }
}

// Byte alignment of the indices of chunk k of lane p, within a part that starts 16-aligned.
template <int kG, int kBits>
struct IndexStore {
  static constexpr int kGroupBytes = kG * kBits / 8;
  // L == 1: the lane holds the whole group, kGroupBytes contiguous bytes.
  static constexpr int kWholeAlign = kGroupBytes % 16 == 0  ? 16
                                     : kGroupBytes % 8 == 0 ? 8
                                     : kGroupBytes % 4 == 0 ? 4
                                     : kGroupBytes % 2 == 0 ? 2
                                                            : 1;
  // Per chunk: kBits bytes at a multiple of kBits.
  static constexpr int kChunkAlign = kBits == 8 ? 8 : kBits == 4 ? 4 : kBits == 2 ? 2 : 1;
};

// ---- Encode ----------------------------------------------------------------------------------

template <int kG>
constexpr int QjlScratchFloats() {
  return kWarpLanes * (TileShape<kG>::kValuesPerLane + 1);
}

// Encodes one tile (group_math.h's EncodeGroup for each of its groups). `scratch`: this warp's
// QjlScratchFloats<kG>() floats of shared memory (QJL sections only).
template <int kG, int kBits, bool kQjl, class Warp>
TURBOKV_HD void EncodeTile(const Warp& w, const CodebookTables& cb, const SectionArgs& sec,
                           const TileIo& io, float* scratch) {
  using S = TileShape<kG>;
  constexpr int kE = S::kValuesPerLane;
  constexpr int kL = S::kLanesPerGroup;
  const int lane = w.lane();
  const int p = lane % kL;
  const int base_lane = lane - p;
  const size_t gi = io.first_group + static_cast<size_t>(lane / kL);
  const bool active = gi < io.groups;
  const size_t value_bytes = ValueBytes(io.dtype);

  // 1. Load (8 coordinates per 16-byte load for fp16/bf16) and check finiteness.
  float v[kE];
  bool finite = true;
  TURBOKV_UNROLL
  for (int k = 0; k < S::kChunks; ++k) {
    if (active) {
      const size_t coord = gi * kG + static_cast<size_t>(k * kL + p) * 8;
      LoadChunk(io.values_in + coord * value_bytes, io.dtype, &v[k * 8]);
    } else {
      TURBOKV_UNROLL
      for (int i = 0; i < 8; ++i) v[k * 8 + i] = 0.0f;
    }
  }
  TURBOKV_UNROLL
  for (int r = 0; r < kE; ++r) finite = finite && IsFiniteFloat(v[r]);
  if (!finite) SetFlag(io.error);

  // 2. ss = Σ x_j² in index order; w = FWHT(D·x).
  const float ss = ChainSum<kG>(w, p, base_lane, [&](int r) { return v[r] * v[r]; });
  const int gk = active ? static_cast<int>(gi % static_cast<size_t>(sec.groups_per_vector)) : 0;
  ApplySigns<kG>(sec, gk, p, v);
  Fwht<kG>(w, v, p);

  // 3. Normalize and quantize.
  const float n = sqrtf(ss);
  const float c = HadamardScale(kG) / n;
  const bool zero = ss == 0.0f || !IsFiniteFloat(c);
  uint8_t idx[kE];
  TURBOKV_UNROLL
  for (int r = 0; r < kE; ++r) {
    v[r] = v[r] * c;
    idx[r] = zero ? 0 : static_cast<uint8_t>(Quantize<kBits>(cb, v[r]));
  }

  // 4. QJL: r = y − levels[idx]; sign bit i = (Σ_c S[i][c] r_c >= 0); residual = fp16(‖r‖).
  uint32_t mask[S::kMaskWords];
  TURBOKV_UNROLL
  for (int i = 0; i < S::kMaskWords; ++i) mask[i] = 0;
  uint16_t residual = 0;
  float residual_norm = 0.0f;
  if constexpr (kQjl) {
    TURBOKV_UNROLL
    for (int r = 0; r < kE; ++r) v[r] = v[r] - cb.levels[idx[r]];
    // Stage r in shared memory ([lane][kE + 1]: the padding keeps the column reads below
    // free of bank conflicts) so that every lane can read its whole group in order.
    constexpr int kStride = kE + 1;
    w.Sync();  // the previous tile's readers are done with scratch
    TURBOKV_UNROLL
    for (int r = 0; r < kE; ++r) scratch[lane * kStride + r] = v[r];
    w.Sync();
    TURBOKV_UNROLL
    for (int k = 0; k < S::kChunks; ++k) {
      uint32_t byte = 0;
      TURBOKV_UNROLL
      for (int ii = 0; ii < 8; ++ii) {
        const int i = S::Coord(p, k * 8 + ii);
        const float* row = sec.qjl + i * kG;
        float acc = 0.0f;
        TURBOKV_NO_UNROLL
        for (int cc = 0; cc < kG; ++cc) {
          const int chunk = cc / 8;
          const float rc = scratch[(base_lane + chunk % kL) * kStride + (chunk / kL) * 8 + cc % 8];
          acc = acc + row[cc] * rc;
        }
        if (acc >= 0.0f) byte |= 1u << ii;
      }
      OrByte(mask, (k * kL + p) * 8, byte);
    }
    GatherMask<kG>(w, mask);
    const float rr = ChainSum<kG>(w, p, base_lane, [&](int r) { return v[r] * v[r]; });
    residual = FloatToHalf(sqrtf(rr));
    residual_norm = HalfToFloat(residual);
    if (zero) {
      residual = 0;
      TURBOKV_UNROLL
      for (int i = 0; i < S::kMaskWords; ++i) mask[i] = 0;
    }
  }

  // 5. scale = n / ‖y_hat'‖ with norm correction, else n.
  float scale = n;
  if (sec.norm_correction) {
    Reconstruct<kG, kQjl>(cb, sec, p, idx, mask, residual_norm, v);
    const float yn = sqrtf(ChainSum<kG>(w, p, base_lane, [&](int r) { return v[r] * v[r]; }));
    scale = n / yn;
  }
  // A scale beyond fp16 flags the block: the host encodes it again on the CPU, which writes
  // the group's wide scale (group_math.h; rare, and the CPU's bytes are the definition).
  const uint16_t scale_h = zero ? 0 : FloatToHalf(scale);
  if (active && (scale_h & 0x7C00u) == 0x7C00u) SetFlag(io.error);
  if (!active) return;

  // 6. Store: scale (and residual), packed indices, sign bits.
  if (p == 0) {
    StoreU16(io.parts.scales + 2 * gi, scale_h);
    if constexpr (kQjl) StoreU16(io.parts.residuals + 2 * gi, residual);
  }
  using IS = IndexStore<kG, kBits>;
  uint8_t* group_idx = io.parts.indices + gi * IS::kGroupBytes;
  if constexpr (kL == 1 && IS::kGroupBytes % 16 == 0) {
    // The whole group in 16-byte stores: word t holds indices [t * 32 / kBits, ...).
    TURBOKV_UNROLL
    for (int b = 0; b < IS::kGroupBytes / 16; ++b) {
      Bytes16 out;
      TURBOKV_UNROLL
      for (int t = 0; t < 4; ++t) {
        uint32_t word = 0;
        const int first_bit = (b * 4 + t) * 32;
        TURBOKV_UNROLL
        for (int r = 0; r < kE; ++r) {
          const int bit = r * kBits;
          if (bit + kBits <= first_bit || bit >= first_bit + 32) continue;
          const int shift = bit - first_bit;
          word |= shift >= 0 ? static_cast<uint32_t>(idx[r]) << shift
                             : static_cast<uint32_t>(idx[r]) >> (-shift);
        }
        out.w[t] = word;
      }
      Store16(group_idx + 16 * b, out);
    }
  } else {
    TURBOKV_UNROLL
    for (int k = 0; k < S::kChunks; ++k) {
      uint64_t bits = 0;
      TURBOKV_UNROLL
      for (int i = 0; i < 8; ++i) bits |= static_cast<uint64_t>(idx[k * 8 + i]) << (i * kBits);
      StoreBytes<IS::kChunkAlign>(group_idx + (k * kL + p) * kBits, bits, kBits);
    }
  }
  if constexpr (kQjl) {
    if (p == 0) {
      uint8_t* dst = io.parts.qjl_bits + gi * (kG / 8);
      TURBOKV_UNROLL
      for (int b = 0; b < kG / 8; ++b) dst[b] = static_cast<uint8_t>(mask[b / 4] >> (8 * (b % 4)));
    }
  }
}

// ---- Decode ----------------------------------------------------------------------------------

// Decodes one tile (group_math.h's DecodeGroup for each of its groups) into io.values_out.
template <int kG, int kBits, bool kQjl, class Warp>
TURBOKV_HD void DecodeTile(const Warp& w, const CodebookTables& cb, const SectionArgs& sec,
                           const TileIo& io) {
  using S = TileShape<kG>;
  constexpr int kE = S::kValuesPerLane;
  constexpr int kL = S::kLanesPerGroup;
  (void)w;
  const int lane = w.lane();
  const int p = lane % kL;
  const size_t gi = io.first_group + static_cast<size_t>(lane / kL);
  const bool active = gi < io.groups;
  const size_t g_load = active ? gi : 0;  // inactive lanes decode group 0 and store nothing

  using IS = IndexStore<kG, kBits>;
  const uint8_t* group_idx = io.parts.indices + g_load * IS::kGroupBytes;
  uint8_t idx[kE];
  constexpr uint32_t kIdxMask = (1u << kBits) - 1u;
  if constexpr (kL == 1 && IS::kGroupBytes % 16 == 0) {
    static_assert(32 % kBits == 0, "an index must not straddle two words here");
    TURBOKV_UNROLL
    for (int b = 0; b < IS::kGroupBytes / 16; ++b) {
      const Bytes16 in = Load16(group_idx + 16 * b);
      TURBOKV_UNROLL
      for (int r = 0; r < kE; ++r) {
        const int bit = r * kBits - b * 128;
        if (bit < 0 || bit >= 128) continue;
        idx[r] = static_cast<uint8_t>((in.w[bit / 32] >> (bit % 32)) & kIdxMask);  // kBits | 32
      }
    }
  } else {
    TURBOKV_UNROLL
    for (int k = 0; k < S::kChunks; ++k) {
      const uint64_t bits = LoadBytes<IS::kChunkAlign>(group_idx + (k * kL + p) * kBits, kBits);
      TURBOKV_UNROLL
      for (int i = 0; i < 8; ++i)
        idx[k * 8 + i] = static_cast<uint8_t>((bits >> (i * kBits)) & kIdxMask);
    }
  }
  const uint16_t scale_h = LoadU16(io.parts.scales + 2 * g_load);
  uint32_t mask[S::kMaskWords];
  TURBOKV_UNROLL
  for (int i = 0; i < S::kMaskWords; ++i) mask[i] = 0;
  float residual_norm = 0.0f;
  if constexpr (kQjl) {
    residual_norm = HalfToFloat(LoadU16(io.parts.residuals + 2 * g_load));
    const uint8_t* src = io.parts.qjl_bits + g_load * (kG / 8);
    TURBOKV_UNROLL
    for (int b = 0; b < kG / 8; ++b) mask[b / 4] |= static_cast<uint32_t>(src[b]) << (8 * (b % 4));
  }

  float v[kE];
  Reconstruct<kG, kQjl>(cb, sec, p, idx, mask, residual_norm, v);
  Fwht<kG>(w, v, p);
  // A wide scale (group_math.h): bf16 · 2^72, and the result clamped to the output dtype.
  const bool wide = IsWideScale(scale_h);
  const float m = (wide ? BFloat16ToFloat(static_cast<uint16_t>(scale_h & 0x7FFFu))
                        : HalfBitsToFloat(scale_h)) *
                  HadamardScale(kG);
  TURBOKV_UNROLL
  for (int r = 0; r < kE; ++r) v[r] = v[r] * m;
  if (wide) {
    const float limit = io.dtype == DType::kFloat16    ? kMaxHalf
                        : io.dtype == DType::kBFloat16 ? kMaxBFloat16
                                                       : kMaxFloat;
    TURBOKV_UNROLL
    for (int r = 0; r < kE; ++r) v[r] = ClampMagnitude(v[r] * WideUp(), limit);
  }
  const int gk = static_cast<int>(g_load % static_cast<size_t>(sec.groups_per_vector));
  ApplySigns<kG>(sec, gk, p, v);
  if (!active) return;
  const size_t value_bytes = ValueBytes(io.dtype);
  TURBOKV_UNROLL
  for (int k = 0; k < S::kChunks; ++k) {
    const size_t coord = gi * kG + static_cast<size_t>(k * kL + p) * 8;
    StoreChunk(io.values_out + coord * value_bytes, io.dtype, &v[k * 8]);
  }
}

// ---- Run-time -> compile-time switch ---------------------------------------------------------

// Calls f.template operator()<kG, kBits, kQjl>() for the section codec's (g, bits, qjl);
// returns false (and calls nothing) for a combination the format does not have.
template <class F>
bool DispatchGroupCodec(int g, int bits, bool qjl, F&& f) {
  auto by_bits = [&](auto g_const) -> bool {
    constexpr int kG = decltype(g_const)::value;
    auto by_qjl = [&](auto bits_const) -> bool {
      constexpr int kBits = decltype(bits_const)::value;
      if (qjl) {
        f.template operator()<kG, kBits, true>();
      } else {
        f.template operator()<kG, kBits, false>();
      }
      return true;
    };
    switch (bits) {
      case 1:
        return by_qjl(std::integral_constant<int, 1>{});
      case 2:
        return by_qjl(std::integral_constant<int, 2>{});
      case 3:
        return by_qjl(std::integral_constant<int, 3>{});
      case 4:
        return by_qjl(std::integral_constant<int, 4>{});
      case 5:
        return by_qjl(std::integral_constant<int, 5>{});
      case 6:
        return by_qjl(std::integral_constant<int, 6>{});
      case 8:
        return by_qjl(std::integral_constant<int, 8>{});
      default:
        return false;
    }
  };
  switch (g) {
    case 8:
      return by_bits(std::integral_constant<int, 8>{});
    case 16:
      return by_bits(std::integral_constant<int, 16>{});
    case 32:
      return by_bits(std::integral_constant<int, 32>{});
    case 64:
      return by_bits(std::integral_constant<int, 64>{});
    case 128:
      return by_bits(std::integral_constant<int, 128>{});
    case 256:
      return by_bits(std::integral_constant<int, 256>{});
    default:
      return false;
  }
}

}  // namespace turbokv::codec::internal

#endif  // TURBOKV_KERNELS_SRC_WARP_CODEC_H_
