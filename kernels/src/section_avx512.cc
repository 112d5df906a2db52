// AVX-512 encode and decode: sixteen groups at a time (one per 32-bit lane of a zmm register), for
// quantized sections of 1-4 bits without QJL. Each lane performs DecodeGroup's float
// operations in DecodeGroup's order — the same as the 8-lane AVX2 path — so the output is
// identical to the scalar path's (tests/unit/codec_isa_test.cc). The 16-entry codebook fits
// one register, so a level lookup is a single vpermps.
#include <cstring>
#include <type_traits>

#include "section_codec.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX2__) && defined(__F16C__)
#include <cpuid.h>
#include <immintrin.h>

#include "simd_avx2_common.h"
#define TURBOKV_HAVE_AVX512_BUILD 1
#endif

namespace turbokv::codec::internal {

#if TURBOKV_HAVE_AVX512_BUILD

namespace {

// CPUID leaf 7 EBX: AVX512F bit 16, AVX512DQ bit 17, AVX512VL bit 31; XCR0 must enable the
// opmask and both ZMM state components (bits 5-7) besides SSE/AVX (bits 1-2).
bool DetectAvx512() {
  if (!Avx2Available()) return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(b & (1u << 16)) || !(b & (1u << 17)) || !(b & (1u << 31))) return false;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xE6u) == 0xE6u;
}

constexpr int kLanes16 = 16;

template <int kBits>
inline void UnpackLanes16(const uint8_t* in, size_t index_bytes, int g, __m512i* idx) {
  alignas(64) uint32_t words[kMaxGroupSize * 8 / 32 + 2][kLanes16];
  const int nw = static_cast<int>((index_bytes + 3) / 4);
  const size_t whole = index_bytes / 4;
  if (whole == static_cast<size_t>(nw)) {
    const __m512i stride =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(index_bytes)));
    for (int k = 0; k < nw; ++k) {
      _mm512_store_si512(words[k], _mm512_i32gather_epi32(stride, in + 4 * k, 1));
    }
  } else {
    for (int l = 0; l < kLanes16; ++l) {
      const uint8_t* p = in + l * index_bytes;
      for (size_t k = 0; k < whole; ++k) std::memcpy(&words[k][l], p + 4 * k, 4);
      uint32_t last = 0;
      std::memcpy(&last, p + 4 * whole, index_bytes - 4 * whole);
      words[whole][l] = last;
    }
  }
  const __m512i mask = _mm512_set1_epi32((1 << kBits) - 1);
  int w = 0, off = 0;
  __m512i cur = _mm512_load_si512(words[0]);
  for (int j = 0; j < g; ++j) {
    __m512i v = _mm512_srl_epi32(cur, _mm_cvtsi32_si128(off));
    off += kBits;
    if (off >= 32) {
      off -= 32;
      ++w;
      if (w < nw) cur = _mm512_load_si512(words[w]);
      if (off > 0) v = _mm512_or_si512(v, _mm512_sll_epi32(cur, _mm_cvtsi32_si128(kBits - off)));
    }
    idx[j] = _mm512_and_si512(v, mask);
  }
}

// kOut: the output dtype as a constant, so StoreRow's switch is resolved at compile time
// instead of once per stored row.
template <int kBits, int kG, DType kOut>
void DecodeBatches16Typed(const SectionJob& job, const SectionLayout& lay, size_t full,
                          const uint8_t* src, uint8_t* out) {
  const GroupParams& p = job.params;
  constexpr int g = kG;
  const int groups_per_vector = job.head_dim / g;
  const size_t index_bytes = static_cast<size_t>(g) * kBits / 8;
  float lev[16] = {};
  for (int i = 0; i < (1 << kBits); ++i) lev[i] = p.levels[i];
  const __m512 levels = _mm512_loadu_ps(lev);
  const __m512 hs = _mm512_set1_ps(HadamardScale(g));
  // Lane l of a batch at group i is group-in-vector (i + l) mod G: lanes 0-7 use the 8-lane
  // table at phase i mod G, lanes 8-15 at phase (i + 8) mod G.
  auto signs = [&](size_t i, int j) {
    const uint32_t* lo = job.lane_sign_masks + ((i % groups_per_vector) * g + j) * kLanes;
    const uint32_t* hi = job.lane_sign_masks + (((i + 8) % groups_per_vector) * g + j) * kLanes;
    return _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm256_loadu_ps(reinterpret_cast<const float*>(lo))),
        _mm256_loadu_ps(reinterpret_cast<const float*>(hi)), 1);
  };
  alignas(64) __m512 x[kMaxGroupSize];
  alignas(64) __m512i idx[kMaxGroupSize];
  for (size_t i = 0; i < full; i += kLanes16) {
    UnpackLanes16<kBits>(src + lay.indices + i * index_bytes, index_bytes, g, idx);
    for (int jc = 0; jc < g; jc += kLanes) {
      __m512 tile[kLanes];
      for (int c = 0; c < kLanes; ++c) tile[c] = _mm512_permutexvar_ps(idx[jc + c], levels);
      FwhtStageA(tile);
      for (int c = 0; c < kLanes; ++c) x[jc + c] = tile[c];
    }
    const __m512 m = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(
                                       reinterpret_cast<const __m256i*>(src + lay.scales + 2 * i))),
                                   hs);
    FwhtStageB<kG>(
        x, [&](int j, __m512 z) { return _mm512_xor_ps(_mm512_mul_ps(z, m), signs(i, j)); });
    for (int jc = 0; jc < g; jc += kLanes) {
      for (int half = 0; half < 2; ++half) {
        __m256 tile[kLanes];
        for (int c = 0; c < kLanes; ++c) {
          tile[c] =
              half == 0 ? _mm512_castps512_ps256(x[jc + c]) : _mm512_extractf32x8_ps(x[jc + c], 1);
        }
        Transpose8x8(tile);
        for (int l = 0; l < kLanes; ++l) StoreRow(out, kOut, (i + 8 * half + l) * g + jc, tile[l]);
      }
    }
  }
}

template <int kBits, int kG>
void DecodeBatches16(const SectionJob& job, const SectionLayout& lay, size_t full,
                     const uint8_t* src, DType out_dtype, uint8_t* out) {
  switch (out_dtype) {
    case DType::kFloat16:
      return DecodeBatches16Typed<kBits, kG, DType::kFloat16>(job, lay, full, src, out);
    case DType::kBFloat16:
      return DecodeBatches16Typed<kBits, kG, DType::kBFloat16>(job, lay, full, src, out);
    case DType::kFloat32:
      return DecodeBatches16Typed<kBits, kG, DType::kFloat32>(job, lay, full, src, out);
  }
}

// Sixteen groups as 16-lane registers: coordinate j of group i + l in lane l (two 8x8
// transposes per tile, lanes 0-7 and 8-15).
// The encoder's constant-count loops are unrolled (#pragma GCC unroll): at -O2 GCC kept them as
// loops over stack arrays; unrolled, the tiles stay in registers (k4v4-g32 d128 encode 14-24%
// less CPU in codec_bench, AMD EPYC, AVX-512). The operations and their order are unchanged.
inline void LoadTile16(const uint8_t* src, DType dtype, size_t first_group, int g, int jc,
                       __m512* tile) {
  __m256 lo[kLanes], hi[kLanes];
#pragma GCC unroll 8
  for (int l = 0; l < kLanes; ++l) {
    lo[l] = LoadRow(src, dtype, (first_group + l) * g + jc);
    hi[l] = LoadRow(src, dtype, (first_group + 8 + l) * g + jc);
  }
  Transpose8x8(lo);
  Transpose8x8(hi);
  for (int c = 0; c < kLanes; ++c)
    tile[c] = _mm512_insertf32x8(_mm512_castps256_ps512(lo[c]), hi[c], 1);
}

// The packed indices of sixteen groups from their 16-lane index registers (idx[j], lane l =
// group l): each group's g * kBits bits, little-endian, LSB first (PackIndices), stored at
// out + l * index_bytes. The 32-bit words of every lane are built in registers; a group of 4
// words (g * kBits = 128: k4 g32, k2 g64, k1 g128) is written by a 16x4 word transpose in
// registers, other sizes through a stack buffer.
template <int kBits, int kG>
inline void PackLanes16(const __m512i* idx, uint8_t* out) {
  constexpr size_t index_bytes = static_cast<size_t>(kG) * kBits / 8;
  constexpr int nw = static_cast<int>((index_bytes + 3) / 4);
  __m512i wv[nw];
  __m512i acc = _mm512_setzero_si512();
  int w = 0, off = 0;
#pragma GCC unroll 32
  for (int j = 0; j < kG; ++j) {
    acc = _mm512_or_si512(acc, _mm512_sll_epi32(idx[j], _mm_cvtsi32_si128(off)));
    off += kBits;
    if (off >= 32) {
      wv[w++] = acc;
      off -= 32;
      acc = off > 0 ? _mm512_srl_epi32(idx[j], _mm_cvtsi32_si128(kBits - off))
                    : _mm512_setzero_si512();
    }
  }
  if (off > 0) wv[w++] = acc;
  if constexpr (index_bytes == 16) {
    // Per 128-bit lane q: the rows (lanes) 4q .. 4q+3, then a 4x4 transpose of 128-bit lanes.
    const __m512i t0 = _mm512_unpacklo_epi32(wv[0], wv[1]);
    const __m512i t1 = _mm512_unpackhi_epi32(wv[0], wv[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(wv[2], wv[3]);
    const __m512i t3 = _mm512_unpackhi_epi32(wv[2], wv[3]);
    const __m512i r0 = _mm512_unpacklo_epi64(t0, t2);  // lane q: group 4q
    const __m512i r1 = _mm512_unpackhi_epi64(t0, t2);  // group 4q + 1
    const __m512i r2 = _mm512_unpacklo_epi64(t1, t3);  // group 4q + 2
    const __m512i r3 = _mm512_unpackhi_epi64(t1, t3);  // group 4q + 3
    const __m512i a0 = _mm512_shuffle_i32x4(r0, r1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i a1 = _mm512_shuffle_i32x4(r0, r1, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i a2 = _mm512_shuffle_i32x4(r2, r3, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i a3 = _mm512_shuffle_i32x4(r2, r3, _MM_SHUFFLE(3, 1, 3, 1));
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(a0, a2, _MM_SHUFFLE(2, 0, 2, 0)));        // 0-3
    _mm512_storeu_si512(out + 64, _mm512_shuffle_i32x4(a1, a3, _MM_SHUFFLE(2, 0, 2, 0)));   // 4-7
    _mm512_storeu_si512(out + 128, _mm512_shuffle_i32x4(a0, a2, _MM_SHUFFLE(3, 1, 3, 1)));  // 8-11
    _mm512_storeu_si512(out + 192, _mm512_shuffle_i32x4(a1, a3, _MM_SHUFFLE(3, 1, 3, 1)));  // 12-15
  } else {
    alignas(64) uint32_t words[nw][kLanes16];
    for (int k = 0; k < nw; ++k) _mm512_store_si512(words[k], wv[k]);
    constexpr size_t whole = index_bytes / 4;
    for (int l = 0; l < kLanes16; ++l) {
      uint8_t* p = out + l * index_bytes;
      for (size_t k = 0; k < whole; ++k) std::memcpy(p + 4 * k, &words[k][l], 4);
      if constexpr (whole < static_cast<size_t>(nw)) {
        std::memcpy(p + 4 * whole, &words[whole][l], index_bytes - 4 * whole);
      }
    }
  }
}

// Sign-mask tables of the 16-lane encoder: the batch of groups i .. i+15 (i a multiple of 16)
// needs, per coordinate j, lanes 0-7 from the 8-lane table at phase i mod G and lanes 8-15 at
// phase (i + 8) mod G (G = head_dim / g groups per head vector). i mod G repeats with period
// P = G / gcd(G, 16) batches, so the P x g combined registers are built once per section.
constexpr int kMaxSignRegisters = 256;  // P * g <= head_dim; larger sections use the AVX2 path

int SignPhases(int groups_per_vector) {
  int a = groups_per_vector, b = kLanes16;
  while (b != 0) {
    const int t = a % b;
    a = b;
    b = t;
  }
  return groups_per_vector / a;
}

// EncodeGroup for sixteen groups at a time (1-4 bits, no QJL); the same operations in the same
// order as the scalar and 8-lane paths. False when a value is not finite or a scale overflows
// fp16 (the caller then lets the scalar path report it).
template <int kBits, int kG>
bool EncodeBatches16(const SectionJob& job, const SectionLayout& lay, size_t full,
                     const uint8_t* src, uint8_t* dst) {
  const GroupParams& p = job.params;
  constexpr int g = kG;
  const int groups_per_vector = job.head_dim / g;
  constexpr size_t index_bytes = static_cast<size_t>(g) * kBits / 8;
  constexpr int n = 1 << kBits;
  float lev[16] = {}, thr[16] = {};
  for (int i = 0; i < n; ++i) lev[i] = p.levels[i];
  for (int i = 0; i + 1 < n; ++i) thr[i] = p.thresholds[i];
  const __m512 levels = _mm512_loadu_ps(lev);
  const __m512 thresholds = _mm512_loadu_ps(thr);
  // NearestLevel's first two probes do not depend on the lane's earlier steps beyond one bit:
  // thresholds[2^(b-1) - 1] for all lanes, then one of two (a blend instead of a lookup).
  constexpr int kTop = 1 << (kBits - 1);
  const __m512 thr_first = _mm512_set1_ps(thr[kTop - 1]);
  const __m512 thr_second_lo = _mm512_set1_ps(kBits >= 2 ? thr[kTop / 2 - 1] : 0.0f);
  const __m512 thr_second_hi = _mm512_set1_ps(kBits >= 2 ? thr[kTop + kTop / 2 - 1] : 0.0f);
  const __m512 hs = _mm512_set1_ps(HadamardScale(g));
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  const int phases = SignPhases(groups_per_vector);
  alignas(64) __m512 sign_table[kMaxSignRegisters];
  for (int ph = 0; ph < phases; ++ph) {
    const size_t i = static_cast<size_t>(ph) * kLanes16;
    for (int j = 0; j < g; ++j) {
      const uint32_t* lo = job.lane_sign_masks + ((i % groups_per_vector) * g + j) * kLanes;
      const uint32_t* hi = job.lane_sign_masks + (((i + 8) % groups_per_vector) * g + j) * kLanes;
      sign_table[ph * g + j] = _mm512_insertf32x8(
          _mm512_castps256_ps512(_mm256_loadu_ps(reinterpret_cast<const float*>(lo))),
          _mm256_loadu_ps(reinterpret_cast<const float*>(hi)), 1);
    }
  }
  alignas(64) __m512 x[kMaxGroupSize];
  alignas(64) __m512i idx[kMaxGroupSize];
  __mmask16 bad = 0;
  int phase = 0;
  for (size_t i = 0; i < full; i += kLanes16) {
    const __m512* signs = sign_table + phase * g;
    if (++phase == phases) phase = 0;
    __m512 ss = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int jc = 0; jc < g; jc += kLanes) {
      __m512 tile[kLanes];
      LoadTile16(src, job.source, i, g, jc, tile);
#pragma GCC unroll 8
      for (int c = 0; c < kLanes; ++c) {
        const __m512i e = _mm512_and_si512(_mm512_castps_si512(tile[c]), exp_mask);
        bad |= _mm512_cmpeq_epi32_mask(e, exp_mask);
        ss = _mm512_add_ps(ss, _mm512_mul_ps(tile[c], tile[c]));
        tile[c] = _mm512_xor_ps(tile[c], signs[jc + c]);
      }
      FwhtStageA(tile);
      for (int c = 0; c < kLanes; ++c) x[jc + c] = tile[c];
    }
    FwhtStageB<kG>(x);
    const __m512 nrm = _mm512_sqrt_ps(ss);
    const __m512 cs = _mm512_div_ps(hs, nrm);
    const __mmask16 zero_group =
        _mm512_cmp_ps_mask(ss, _mm512_setzero_ps(), _CMP_EQ_OQ) |
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(cs), exp_mask), exp_mask);
    __m512 yy = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < g; ++j) {
      const __m512 y = _mm512_mul_ps(x[j], cs);
      // NearestLevel: the same binary search (y > thresholds[q + step - 1] adds step).
      const __mmask16 gt = _mm512_cmp_ps_mask(y, thr_first, _CMP_GT_OQ);
      __m512i q = _mm512_maskz_mov_epi32(gt, _mm512_set1_epi32(kTop));
      if constexpr (kBits >= 2) {
        const __m512 t = _mm512_mask_blend_ps(gt, thr_second_lo, thr_second_hi);
        q = _mm512_mask_add_epi32(q, _mm512_cmp_ps_mask(y, t, _CMP_GT_OQ), q,
                                  _mm512_set1_epi32(kTop / 2));
      }
      for (int k = kBits - 3; k >= 0; --k) {
        const __m512i probe = _mm512_add_epi32(q, _mm512_set1_epi32((1 << k) - 1));
        const __mmask16 gk =
            _mm512_cmp_ps_mask(y, _mm512_permutexvar_ps(probe, thresholds), _CMP_GT_OQ);
        q = _mm512_mask_add_epi32(q, gk, q, _mm512_set1_epi32(1 << k));
      }
      idx[j] = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~zero_group), q);
      const __m512 lv = _mm512_permutexvar_ps(q, levels);
      yy = _mm512_add_ps(yy, _mm512_mul_ps(lv, lv));
    }
    __m512 scale = p.norm_correction ? _mm512_div_ps(nrm, _mm512_sqrt_ps(yy)) : nrm;
    scale = _mm512_maskz_mov_ps(static_cast<__mmask16>(~zero_group), scale);  // +0 for zero groups
    const __m256i scale_h = _mm512_cvtps_ph(scale, _MM_FROUND_TO_NEAREST_INT);
    const __m256i h_exp = _mm256_and_si256(scale_h, _mm256_set1_epi16(0x7C00));
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(h_exp, _mm256_set1_epi16(0x7C00))) != 0)
      return false;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + lay.scales + 2 * i), scale_h);
    PackLanes16<kBits, kG>(idx, dst + lay.indices + i * index_bytes);
  }
  return bad == 0;
}

}  // namespace

bool Avx512Available() {
  static const bool ok = DetectAvx512();
  return ok;
}

namespace {
// How many leading groups of the section the 16-lane path handles (0: it does not apply).
size_t Avx512Groups(const SectionJob& job, const SectionLayout& lay) {
  if (!Avx512Available() || !job.codec.quantized() || job.codec.qjl || job.codec.bits > 4 ||
      job.lane_sign_masks == nullptr) {
    return 0;
  }
  return lay.groups / kLanes16 * kLanes16;
}
}  // namespace

size_t DecodeSectionAvx512(const SectionJob& job, const SectionLayout& lay, const uint8_t* src,
                           DType out_dtype, uint8_t* out) {
  const size_t full = Avx512Groups(job, lay);
  if (full == 0) return 0;
  const bool ok = DispatchBitsAndGroup(job.params.bits, job.params.g, [&](auto bits, auto group) {
    if constexpr (decltype(bits)::value > 4) {
      return false;
    } else {
      DecodeBatches16<decltype(bits)::value, decltype(group)::value>(job, lay, full, src, out_dtype,
                                                                     out);
      return true;
    }
  });
  return ok ? full : 0;
}

int64_t EncodeSectionAvx512(const SectionJob& job, const SectionLayout& lay, const uint8_t* src,
                            uint8_t* dst) {
  const size_t full = Avx512Groups(job, lay);
  if (full == 0) return 0;
  if (SignPhases(job.head_dim / job.params.g) * job.params.g > kMaxSignRegisters) return 0;
  const bool ok = DispatchBitsAndGroup(job.params.bits, job.params.g, [&](auto bits, auto group) {
    if constexpr (decltype(bits)::value > 4) {
      return false;
    } else {
      return EncodeBatches16<decltype(bits)::value, decltype(group)::value>(job, lay, full, src,
                                                                            dst);
    }
  });
  return ok ? static_cast<int64_t>(full) : -1;
}

#else  // no AVX-512 build

bool Avx512Available() { return false; }
size_t DecodeSectionAvx512(const SectionJob&, const SectionLayout&, const uint8_t*, DType,
                           uint8_t*) {
  return 0;
}
int64_t EncodeSectionAvx512(const SectionJob&, const SectionLayout&, const uint8_t*, uint8_t*) {
  return 0;
}

#endif

}  // namespace turbokv::codec::internal
