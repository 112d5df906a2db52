// AVX2 path: eight groups at a time, one group per 32-bit lane.
//
// Each lane runs exactly the float operations of group_math.h's EncodeGroup / DecodeGroup, in
// the same order (sums in index order, FWHT butterflies in the same sequence, IEEE division and
// square root, no FMA), so the packed bytes and decoded values equal the scalar path's bit for
// bit (tests/unit/codec_isa_test.cc). Groups are transposed in 8x8 tiles so that coordinate j
// of the eight groups sits in one register and every step is a vertical operation.
//
// Not vectorized (the scalar path runs them): raw and fp16 sections, the last (< 8) groups of
// a section, and sections containing non-finite values or scales that overflow fp16 (the
// scalar path then reports the exact position). On CPUs with AVX-512 the encode and decode of
// 1-4-bit sections without QJL start sixteen groups at a time (section_avx512.cc).
#include <cstring>
#include <type_traits>

#include "section_codec.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <cpuid.h>
#include <immintrin.h>

#include "simd_avx2_common.h"  // kLanes, Transpose8x8, LoadRow, StoreRow, FWHT stages
#define TURBOKV_HAVE_AVX2_BUILD 1
#endif

namespace turbokv::codec::internal {

#if TURBOKV_HAVE_AVX2_BUILD

namespace {
// CPUID: AVX2 (leaf 7 EBX bit 5), FMA (leaf 1 ECX bit 12), F16C (leaf 1 ECX bit 29), and the
// OS saving YMM state (OSXSAVE, XCR0 bits 1-2). (clang 14 has no __builtin_cpu_supports("f16c").)
bool DetectAvx2() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c & (1u << 12), f16c = c & (1u << 29), osxsave = c & (1u << 27);
  if (!fma || !f16c || !osxsave) return false;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);
}
}  // namespace

bool Avx2Available() {
  static const bool ok = DetectAvx2();
  return ok;
}

namespace {

// Per-section tables: codebook in registers and sign masks per lane phase.
struct Tables {
  int bits = 0;
  // Binary-search step 2^k probes thresholds[m·2^(k+1) + 2^k − 1], m = idx >> (k+1): at most
  // eight candidates per step for b <= 4, so one permute fetches every lane's threshold.
  __m256 step_thr[4];
  __m256 thr_lo, thr_hi;  // thresholds 0..7 and 8..15 (b <= 4)
  __m256 lev_lo, lev_hi;  // levels 0..7 and 8..15 (b <= 4)
  const float* thresholds = nullptr;
  const float* levels = nullptr;
  // b = 8: Codebook's bucket table (see CodebookBucket).
  const int32_t* bucket_base = nullptr;
  const float* thresholds_padded = nullptr;
  __m256 bucket_lo, bucket_scale, bucket_top;
};

Tables MakeTables(const GroupParams& p, const Codebook* cb) {
  Tables t;
  t.bits = p.bits;
  t.thresholds = p.thresholds;
  t.levels = p.levels;
  if (cb != nullptr && cb->buckets > 0) {
    t.bucket_base = cb->bucket_base.data();
    t.thresholds_padded = cb->thresholds_padded.data();
    t.bucket_lo = _mm256_set1_ps(cb->bucket_lo);
    t.bucket_scale = _mm256_set1_ps(cb->bucket_scale);
    t.bucket_top = _mm256_set1_ps(static_cast<float>(cb->buckets - 1));
  }
  if (p.bits <= 4) {
    float thr[16], lev[16];
    const int n = 1 << p.bits;
    for (int i = 0; i < 16; ++i) {
      thr[i] = i < n - 1 ? p.thresholds[i] : 0.0f;
      lev[i] = i < n ? p.levels[i] : 0.0f;
    }
    t.thr_lo = _mm256_loadu_ps(thr);
    t.thr_hi = _mm256_loadu_ps(thr + 8);
    t.lev_lo = _mm256_loadu_ps(lev);
    t.lev_hi = _mm256_loadu_ps(lev + 8);
    for (int k = 0; k < p.bits; ++k) {
      float cand[8] = {};
      const int step = 1 << k;
      for (int m = 0; m * 2 * step < n && m < 8; ++m)
        cand[m] = p.thresholds[m * 2 * step + step - 1];
      t.step_thr[k] = _mm256_loadu_ps(cand);
    }
  }
  return t;
}

// table[idx] for 8 lanes; idx in [0, 16) for b <= 4.
inline __m256 Lookup16(__m256 lo, __m256 hi, __m256i idx) {
  const __m256 a = _mm256_permutevar8x32_ps(lo, idx);
  const __m256 b = _mm256_permutevar8x32_ps(hi, idx);
  const __m256i use_hi = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7));
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(use_hi));
}

// NearestLevel for 8 lanes: the same binary search, threshold fetched per lane.
template <int kBits>
inline __m256i Quantize(const Tables& t, __m256 y) {
  if constexpr (kBits == 8) {
    if (t.bucket_base != nullptr) {
      // Bucket lookup (Codebook::bucket_base): the same float operations as CodebookBucket;
      // max(f, 0) returns 0 for NaN lanes (zero groups), so indices stay valid.
      __m256 f = _mm256_mul_ps(_mm256_sub_ps(y, t.bucket_lo), t.bucket_scale);
      f = _mm256_min_ps(_mm256_max_ps(f, _mm256_setzero_ps()), t.bucket_top);
      const __m256i base = _mm256_i32gather_epi32(t.bucket_base, _mm256_cvttps_epi32(f), 4);
      const __m256 t0 = _mm256_i32gather_ps(t.thresholds_padded, base, 4);
      const __m256 t1 =
          _mm256_i32gather_ps(t.thresholds_padded, _mm256_add_epi32(base, _mm256_set1_epi32(1)), 4);
      const __m256i gt0 = _mm256_castps_si256(_mm256_cmp_ps(y, t0, _CMP_GT_OQ));
      const __m256i gt1 = _mm256_castps_si256(_mm256_cmp_ps(y, t1, _CMP_GT_OQ));
      return _mm256_sub_epi32(_mm256_sub_epi32(base, gt0), gt1);
    }
  }
  __m256i idx = _mm256_setzero_si256();
  for (int k = kBits - 1; k >= 0; --k) {
    __m256 thr;
    if constexpr (kBits <= 4) {
      thr = k == kBits - 1 ? t.step_thr[k]
                           : _mm256_permutevar8x32_ps(t.step_thr[k], _mm256_srli_epi32(idx, k + 1));
    } else {
      thr = _mm256_i32gather_ps(t.thresholds,
                                _mm256_add_epi32(idx, _mm256_set1_epi32((1 << k) - 1)), 4);
    }
    const __m256i gt = _mm256_castps_si256(_mm256_cmp_ps(y, thr, _CMP_GT_OQ));
    idx = _mm256_add_epi32(idx, _mm256_and_si256(gt, _mm256_set1_epi32(1 << k)));
  }
  return idx;
}

template <int kBits>
inline __m256 Level(const Tables& t, __m256i idx) {
  if constexpr (kBits <= 3) return _mm256_permutevar8x32_ps(t.lev_lo, idx);
  if constexpr (kBits == 4) return Lookup16(t.lev_lo, t.lev_hi, idx);
  return _mm256_i32gather_ps(t.levels, idx, 4);
}

// Bit-packing of g indices per lane into 32-bit words (LSB first, as PackIndices), then the
// words of each lane are written to its group's index bytes.
template <int kBits>
inline void PackLanes(const __m256i* idx, int g, uint8_t* out, size_t index_bytes) {
  alignas(32) uint32_t words[kMaxGroupSize * 8 / 32 + 1][kLanes];
  __m256i acc = _mm256_setzero_si256();
  int w = 0, off = 0;
  for (int j = 0; j < g; ++j) {
    acc = _mm256_or_si256(acc, _mm256_sll_epi32(idx[j], _mm_cvtsi32_si128(off)));
    off += kBits;
    if (off >= 32) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(words[w++]), acc);
      off -= 32;
      // Bits of idx[j] that did not fit go to the next word.
      acc = off > 0 ? _mm256_srl_epi32(idx[j], _mm_cvtsi32_si128(kBits - off))
                    : _mm256_setzero_si256();
    }
  }
  if (off > 0) _mm256_store_si256(reinterpret_cast<__m256i*>(words[w++]), acc);
  const size_t whole = index_bytes / 4;
  for (int l = 0; l < kLanes; ++l) {
    uint8_t* p = out + l * index_bytes;
    for (size_t k = 0; k < whole; ++k) std::memcpy(p + 4 * k, &words[k][l], 4);
    if (whole < static_cast<size_t>(w))
      std::memcpy(p + 4 * whole, &words[whole][l], index_bytes - 4 * whole);
  }
}

template <int kBits>
inline void UnpackLanes(const uint8_t* in, size_t index_bytes, int g, __m256i* idx) {
  alignas(32) uint32_t words[kMaxGroupSize * 8 / 32 + 2][kLanes];
  const int nw = static_cast<int>((index_bytes + 3) / 4);
  const size_t whole = index_bytes / 4;  // words fully inside the group's bytes
  if (whole == static_cast<size_t>(nw)) {
    // Whole words: gather word k of the 8 groups straight into a register (no scalar stores
    // that a vector load would have to wait for).
    const __m256i stride = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                              _mm256_set1_epi32(static_cast<int>(index_bytes)));
    for (int k = 0; k < nw; ++k) {
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(words[k]),
          _mm256_i32gather_epi32(reinterpret_cast<const int*>(in + 4 * k), stride, 1));
    }
  } else
    for (int l = 0; l < kLanes; ++l) {
      const uint8_t* p = in + l * index_bytes;
      for (size_t k = 0; k < whole; ++k) std::memcpy(&words[k][l], p + 4 * k, 4);
      if (whole < static_cast<size_t>(nw)) {
        uint32_t last = 0;  // a partial last word (g·bits not a multiple of 32) is zero-padded
        std::memcpy(&last, p + 4 * whole, index_bytes - 4 * whole);
        words[whole][l] = last;
      }
    }
  const __m256i mask = _mm256_set1_epi32((1 << kBits) - 1);
  int w = 0, off = 0;
  __m256i cur = _mm256_load_si256(reinterpret_cast<const __m256i*>(words[0]));
  for (int j = 0; j < g; ++j) {
    __m256i v = _mm256_srl_epi32(cur, _mm_cvtsi32_si128(off));
    off += kBits;
    if (off >= 32) {
      off -= 32;
      ++w;
      if (w < nw) cur = _mm256_load_si256(reinterpret_cast<const __m256i*>(words[w]));
      if (off > 0) v = _mm256_or_si256(v, _mm256_sll_epi32(cur, _mm_cvtsi32_si128(kBits - off)));
    }
    idx[j] = _mm256_and_si256(v, mask);
  }
}

// Sign masks (0 or 0x80000000) for coordinate j of each lane, for each lane phase, built once
// per codec (BlockCodec::SectionPlan::lane_sign_masks). Lane l of a batch starting at group i
// holds group-in-vector k = (i + l) mod G.
struct SignTable {
  int groups_per_vector = 1;
  int g = 0;
  const uint32_t* masks = nullptr;  // [G phases][g][8]
  const uint32_t* For(size_t first_group, int j) const {
    const int phase = static_cast<int>(first_group % groups_per_vector);
    return &masks[(static_cast<size_t>(phase) * g + j) * kLanes];
  }
};

SignTable MakeSigns(const SectionJob& job) {
  SignTable s;
  s.g = job.params.g;
  s.groups_per_vector = job.head_dim / s.g;
  s.masks = job.lane_sign_masks;
  return s;
}

inline __m256 ApplySign(__m256 v, const uint32_t* mask) {
  return _mm256_xor_ps(v, _mm256_loadu_ps(reinterpret_cast<const float*>(mask)));
}

// QJL sign bits of row i for 8 lanes as float masks (all ones = +1): bit i of each lane's
// g/8 bytes, lanes' bytes at `bits + lane·(g/8)`.
template <int kG>
inline void QjlRowMasks(const uint8_t* bits, __m256* masks) {
  for (int b = 0; b < kG / 8; ++b) {
    const __m256i bytes =
        _mm256_setr_epi32(bits[b], bits[kG / 8 + b], bits[2 * (kG / 8) + b], bits[3 * (kG / 8) + b],
                          bits[4 * (kG / 8) + b], bits[5 * (kG / 8) + b], bits[6 * (kG / 8) + b],
                          bits[7 * (kG / 8) + b]);
    for (int k = 0; k < 8; ++k) {
      const __m256i bit = _mm256_set1_epi32(1 << k);
      masks[8 * b + k] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(bytes, bit), bit));
    }
  }
}

// y_hat'_c = level_c + (coef · residual) · Σ_i (±S[i][c]), the sum over i in order
// (ReconstructRotated). Returns Σ_c y_hat'_c² in index order when `sum_squares`.
template <int kG>
inline __m256 QjlReconstruct(const GroupParams& p, const __m256* masks, __m256 residual,
                             __m256* y_hat, bool sum_squares) {
  const __m256 k = _mm256_mul_ps(_mm256_set1_ps(p.qjl_coef), residual);
  __m256 yy = _mm256_setzero_ps();
  for (int c = 0; c < kG; ++c) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < kG; ++i) {
      const __m256 s = _mm256_set1_ps(p.qjl[i * kG + c]);
      const __m256 ns = _mm256_set1_ps(-p.qjl[i * kG + c]);
      acc = _mm256_add_ps(acc, _mm256_blendv_ps(ns, s, masks[i]));
    }
    y_hat[c] = _mm256_add_ps(y_hat[c], _mm256_mul_ps(k, acc));
    if (sum_squares) yy = _mm256_add_ps(yy, _mm256_mul_ps(y_hat[c], y_hat[c]));
  }
  return yy;
}

// EncodeGroup step 4 for 8 groups: r = residuals (in), levels (in, becomes y_hat'); writes the
// fp16 residual norms and the sign bits; returns ||y_hat'||². `keep`: lanes that are not zero
// groups (zero groups store residual 0 and bits 0).
template <int kG>
inline __m256 EncodeQjl(const GroupParams& p, const __m256* r, __m256* levels, __m256 keep,
                        uint8_t* residual_out, uint8_t* bits_out) {
  __m256 rr = _mm256_setzero_ps();
  for (int j = 0; j < kG; ++j) rr = _mm256_add_ps(rr, _mm256_mul_ps(r[j], r[j]));
  alignas(16) uint16_t res[8];  // fp16 ||r||; 0 for zero groups
  _mm_store_si128(reinterpret_cast<__m128i*>(res),
                  _mm256_cvtps_ph(_mm256_sqrt_ps(rr), _MM_FROUND_TO_NEAREST_INT));
  const int keep_bits = _mm256_movemask_ps(keep);
  for (int l = 0; l < kLanes; ++l) {
    if (!(keep_bits & (1 << l))) res[l] = 0;
  }
  std::memcpy(residual_out, res, sizeof(res));
  alignas(32) uint8_t lane_bits[kLanes][kG / 8] = {};
  __m256 masks[kG];
  for (int i = 0; i < kG; ++i) {
    __m256 acc = _mm256_setzero_ps();
    for (int c = 0; c < kG; ++c)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(p.qjl[i * kG + c]), r[c]));
    masks[i] = _mm256_and_ps(_mm256_cmp_ps(acc, _mm256_setzero_ps(), _CMP_GE_OQ), keep);
    const int m = _mm256_movemask_ps(masks[i]);
    for (int l = 0; l < kLanes; ++l) {
      lane_bits[l][i >> 3] =
          static_cast<uint8_t>(lane_bits[l][i >> 3] | (((m >> l) & 1) << (i & 7)));
    }
  }
  std::memcpy(bits_out, lane_bits, sizeof(lane_bits));
  const __m256 residual = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(res)));
  return QjlReconstruct<kG>(p, masks, residual, levels, /*sum_squares=*/true);
}

// DecodeGroup's y_hat' for 8 groups: y_hat holds the levels on entry.
template <int kG>
inline void DecodeQjl(const GroupParams& p, const uint8_t* residuals, const uint8_t* bits,
                      __m256* y_hat) {
  __m256 masks[kG];
  QjlRowMasks<kG>(bits, masks);
  const __m256 residual =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(residuals)));
  QjlReconstruct<kG>(p, masks, residual, y_hat, /*sum_squares=*/false);
}

// Encodes groups [0, full) of a section, eight at a time (EncodeGroup, lane by lane). False:
// a non-finite value or a scale that overflows fp16 was seen (the scalar path then reports it).
template <int kBits, int kG>
bool EncodeBatches(const SectionJob& job, const SectionLayout& lay, size_t begin, size_t full,
                   const uint8_t* src, uint8_t* dst) {
  const GroupParams& p = job.params;
  constexpr int g = kG;
  const size_t index_bytes = static_cast<size_t>(g) * kBits / 8;
  const Tables t = MakeTables(p, job.codebook);
  const SignTable signs = MakeSigns(job);
  const __m256 hs = _mm256_set1_ps(HadamardScale(g));
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);

  alignas(32) __m256 x[kMaxGroupSize];
  alignas(32) __m256 lv[kMaxGroupSize];
  alignas(32) __m256i idx[kMaxGroupSize];
  __m256i bad = _mm256_setzero_si256();
  for (size_t i = begin; i < full; i += kLanes) {
    // Pass 1, per tile of 8 coordinates: load and transpose (lane l = group i + l), check
    // finiteness, accumulate Σx² in index order, apply the signs and FWHT stages 1, 2, 4.
    __m256 ss = _mm256_setzero_ps();
    for (int jc = 0; jc < g; jc += kLanes) {
      __m256 tile[kLanes];
      for (int l = 0; l < kLanes; ++l) tile[l] = LoadRow(src, job.source, (i + l) * g + jc);
      Transpose8x8(tile);
      for (int c = 0; c < kLanes; ++c) {
        const __m256i e = _mm256_and_si256(_mm256_castps_si256(tile[c]), exp_mask);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp_mask));
        ss = _mm256_add_ps(ss, _mm256_mul_ps(tile[c], tile[c]));
        tile[c] = ApplySign(tile[c], signs.For(i, jc + c));
      }
      FwhtStageA(tile);
      for (int c = 0; c < kLanes; ++c) x[jc + c] = tile[c];
    }
    // Pass 2: the remaining FWHT stages, column by column.
    FwhtStageB<kG>(x);
    // Pass 3, in index order: normalize, quantize, accumulate ||y_hat||².
    const __m256 n = _mm256_sqrt_ps(ss);
    const __m256 c = _mm256_div_ps(hs, n);
    const __m256i c_exp = _mm256_and_si256(_mm256_castps_si256(c), exp_mask);
    const __m256 zero_group =
        _mm256_or_ps(_mm256_cmp_ps(ss, _mm256_setzero_ps(), _CMP_EQ_OQ),
                     _mm256_castsi256_ps(_mm256_cmpeq_epi32(c_exp, exp_mask)));
    const __m256i keep =
        _mm256_castps_si256(_mm256_xor_ps(zero_group, _mm256_castsi256_ps(_mm256_set1_epi32(-1))));
    __m256 yy = _mm256_setzero_ps();
    if (p.qjl == nullptr) {
      for (int j = 0; j < g; ++j) {
        const __m256i q = Quantize<kBits>(t, _mm256_mul_ps(x[j], c));
        idx[j] = _mm256_and_si256(q, keep);
        const __m256 lv = Level<kBits>(t, q);
        yy = _mm256_add_ps(yy, _mm256_mul_ps(lv, lv));
      }
    } else {
      // QJL (EncodeGroup steps 4-5): x[j] becomes the residual r_j, lv[j] keeps the level.
      for (int j = 0; j < g; ++j) {
        const __m256 y = _mm256_mul_ps(x[j], c);
        const __m256i q = Quantize<kBits>(t, y);
        idx[j] = _mm256_and_si256(q, keep);
        lv[j] = Level<kBits>(t, q);
        x[j] = _mm256_sub_ps(y, lv[j]);
      }
      yy = EncodeQjl<kG>(p, x, lv, _mm256_castsi256_ps(keep), dst + lay.residuals + 2 * i,
                         dst + lay.qjl_bits + i * (g / 8));
    }
    __m256 scale = p.norm_correction ? _mm256_div_ps(n, _mm256_sqrt_ps(yy)) : n;
    scale = _mm256_andnot_ps(zero_group, scale);  // +0 for zero groups
    const __m128i scale_h = _mm256_cvtps_ph(scale, _MM_FROUND_TO_NEAREST_INT);
    const __m128i h_exp = _mm_and_si128(scale_h, _mm_set1_epi16(0x7C00));
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(h_exp, _mm_set1_epi16(0x7C00))) != 0) return false;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + lay.scales + 2 * i), scale_h);
    PackLanes<kBits>(idx, kG, dst + lay.indices + i * index_bytes, index_bytes);
  }
  return _mm256_testz_si256(bad, bad);
}

// Decodes groups [0, full) (DecodeGroup, lane by lane).
template <int kBits, int kG>
void DecodeBatches(const SectionJob& job, const SectionLayout& lay, size_t begin, size_t full,
                   const uint8_t* src, DType out_dtype, uint8_t* out) {
  const GroupParams& p = job.params;
  constexpr int g = kG;
  const size_t index_bytes = static_cast<size_t>(g) * kBits / 8;
  const Tables t = MakeTables(p, job.codebook);
  const SignTable signs = MakeSigns(job);
  const __m256 hs = _mm256_set1_ps(HadamardScale(g));
  alignas(32) __m256 x[kMaxGroupSize];
  alignas(32) __m256i idx[kMaxGroupSize];
  for (size_t i = begin; i < full; i += kLanes) {
    UnpackLanes<kBits>(src + lay.indices + i * index_bytes, index_bytes, kG, idx);
    if (p.qjl == nullptr) {
      for (int jc = 0; jc < g; jc += kLanes) {
        __m256 tile[kLanes];
        for (int c = 0; c < kLanes; ++c) tile[c] = Level<kBits>(t, idx[jc + c]);
        FwhtStageA(tile);
        for (int c = 0; c < kLanes; ++c) x[jc + c] = tile[c];
      }
    } else {
      for (int j = 0; j < g; ++j) x[j] = Level<kBits>(t, idx[j]);
      DecodeQjl<kG>(p, src + lay.residuals + 2 * i, src + lay.qjl_bits + i * (g / 8), x);
      for (int jc = 0; jc < g; jc += kLanes) FwhtStageA(&x[jc]);
    }
    // Remaining FWHT stages, then x_j = ±(z_j · m), column by column while in registers.
    const __m256 m = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                                       reinterpret_cast<const __m128i*>(src + lay.scales + 2 * i))),
                                   hs);
    FwhtStageB<kG>(
        x, [&](int j, __m256 z) { return ApplySign(_mm256_mul_ps(z, m), signs.For(i, j)); });
    for (int jc = 0; jc < g; jc += kLanes) {
      __m256 tile[kLanes];
      for (int c = 0; c < kLanes; ++c) tile[c] = x[jc + c];
      Transpose8x8(tile);
      for (int l = 0; l < kLanes; ++l) StoreRow(out, out_dtype, (i + l) * g + jc, tile[l]);
    }
  }
}

}  // namespace

bool EncodeSectionAvx2(const SectionJob& job, const uint8_t* src, uint8_t* dst, EncodeError* err,
                       bool allow_avx512) {
  if (!Avx2Available() || !job.codec.quantized() || job.lane_sign_masks == nullptr) {
    return false;
  }
  const GroupParams& p = job.params;
  const int g = p.g;
  const SectionLayout lay = LayoutOf(job.codec, job.vectors, job.head_dim, job.source);
  const size_t full = lay.groups / kLanes * kLanes;
  const int64_t done = allow_avx512 ? EncodeSectionAvx512(job, lay, src, dst) : 0;
  if (done < 0) return false;
  const bool ok = DispatchBitsAndGroup(p.bits, g, [&](auto bits, auto group) {
    return EncodeBatches<decltype(bits)::value, decltype(group)::value>(
        job, lay, static_cast<size_t>(done), full, src, dst);
  });
  if (!ok) return false;
  // The remaining (< 8) groups take the scalar path (identical math); on a non-finite value
  // or a scale beyond fp16 the caller reruns the whole section on it, which reports the
  // position or writes the wide scales (group_math.h).
  if (EncodeGroupsScalar(job, lay, full, lay.groups, src, dst).kind != EncodeError::kNone)
    return false;
  err->kind = EncodeError::kNone;
  return true;
}

bool DecodeSectionAvx2(const SectionJob& job, const uint8_t* src, DType out_dtype, uint8_t* out,
                       bool allow_avx512) {
  if (!Avx2Available() || !job.codec.quantized() || job.lane_sign_masks == nullptr) {
    return false;
  }
  const GroupParams& p = job.params;
  const int g = p.g;
  const SectionLayout lay = LayoutOf(job.codec, job.vectors, job.head_dim, job.source);
  // Wide scales (rare: group norms beyond fp16) take the scalar path, the definition.
  if (HasWideScale(src + lay.scales, lay.groups)) return false;
  const size_t full = lay.groups / kLanes * kLanes;
  const size_t done = allow_avx512 ? DecodeSectionAvx512(job, lay, src, out_dtype, out) : 0;
  const bool ok = DispatchBitsAndGroup(p.bits, g, [&](auto bits, auto group) {
    DecodeBatches<decltype(bits)::value, decltype(group)::value>(job, lay, done, full, src,
                                                                 out_dtype, out);
    return true;
  });
  if (!ok) return false;
  DecodeGroupsScalar(job, lay, full, lay.groups, src, out_dtype, out);
  return true;
}

#else  // no AVX2 build

bool Avx2Available() { return false; }
bool EncodeSectionAvx2(const SectionJob&, const uint8_t*, uint8_t*, EncodeError*, bool) {
  return false;
}
bool DecodeSectionAvx2(const SectionJob&, const uint8_t*, DType, uint8_t*, bool) { return false; }

#endif

}  // namespace turbokv::codec::internal
