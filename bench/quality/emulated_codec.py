"""A numpy port of the turbokv codec (rotation + Lloyd–Max) with options the packed format does
not have, for issue 12's study (``bench/quality/frac_study.py``, ``quantizers.study_rows()``).

What is ported (kernels/src/rotation.cc, codebook.cc, group_math.h; kernels/FORMAT.md, "The
math"): the SplitMix64 sign stream per (seed, layer, K/V), the unnormalized Walsh–Hadamard
transform, the (g, bits) Lloyd–Max codebook of the density (1 − t²)^((g−3)/2) computed exactly
as codebook.cc does (same grid, start and stopping rule, in float64, rounded to fp32), nearest
level by thresholds, norm correction (scale = n / ‖ŷ‖, fp16), no QJL. ``check_against_c_abi``
compares indices and scales with the C ABI's packed bytes and decoded values with its decode.

The study options (none of them is in the format):

* **fractional bits** ``bits + extra / g``: after the rotation every coordinate of a group has
  the same distribution, so the first ``extra`` rotated coordinates of each group are coded
  with the (g, bits + 1) codebook and the other ``g − extra`` with the (g, bits) one
  (``extra`` a multiple of 8 keeps every group whole bytes). The scale is one fp16 per group
  as in the format, with norm correction over the mixed reconstruction.
* **per-channel centring per block**: the mean over the block's tokens of each (head,
  channel) is subtracted before the codec and added back after; the mean is stored in fp16
  (16 bits per channel per block per head) or coded with the codec itself at ``mean_bits``
  and g = head_dim (its own sign stream, kv index 2), counted in the bpv.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

DEFAULT_ROTATION_SEED = 0x7475726B6F6B7631
_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _mix64(z: int) -> int:
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


@functools.cache
def rotation_signs(seed: int, layer: int, kv: int, head_dim: int) -> np.ndarray:
    """float32 [head_dim] of ±1: coordinate j's rotation sign (FORMAT.md, "Rotation signs")."""
    key = _mix64(seed ^ _mix64((layer << 1) | kv))
    return np.array([-1.0 if _mix64(key + (j + 1) * _GAMMA) >> 63 else 1.0
                     for j in range(head_dim)], dtype=np.float32)


def fwht(v: np.ndarray) -> np.ndarray:
    """Unnormalized Walsh–Hadamard transform along the last axis (Sylvester order), fp32."""
    v = np.array(v, dtype=np.float32, copy=True)
    g = v.shape[-1]
    h = 1
    while h < g:
        s = v.reshape(v.shape[:-1] + (g // (2 * h), 2, h))
        a = s[..., 0, :].copy()
        b = s[..., 1, :]
        s[..., 0, :] = a + b
        s[..., 1, :] = a - b
        h *= 2
    return v


_GRID = 1000000


class _Density:
    """codebook.cc's Density: (1 − t²)^k on [0, 1], cumulative trapezoid on a uniform grid."""

    def __init__(self, k: float):
        self.k, self.h = k, 1.0 / _GRID
        t = np.arange(_GRID + 1, dtype=np.float64) * self.h
        self.raw = self._raw(t)
        self.cum = np.concatenate([[0.0], np.cumsum(0.5 * self.h * (self.raw[:-1] + self.raw[1:]))])
        self.norm = 0.5 / self.cum[-1]
        self.moment0 = -1.0 / (2.0 * (k + 1.0))

    def _raw(self, t):
        s = 1.0 - t * t
        with np.errstate(divide="ignore"):
            return np.where(s <= 0.0, 0.0, np.exp(self.k * np.log(np.maximum(s, 1e-300))))

    def eval(self, t):
        t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0)
        i = np.minimum((t / self.h).astype(np.int64), _GRID - 1)
        s = 1.0 - t * t
        raw = self._raw(t)
        mass = self.norm * (self.cum[i] + 0.5 * (t - i * self.h) * (self.raw[i] + raw))
        moment = self.norm * (-raw * s / (2.0 * (self.k + 1.0)) - self.moment0)
        return mass, moment


@functools.cache
def codebook(g: int, bits: int):
    """(levels fp32 [2^bits], thresholds fp32 [2^bits − 1]) as codebook.cc computes them."""
    d = _Density((g - 3) / 2.0)
    m = (1 << bits) // 2
    comp = _Density((g - 3) / 6.0)
    target = 0.5 * (np.arange(m) + 0.5) / m
    lo, hi = np.zeros(m), np.ones(m)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        below = comp.eval(mid)[0] < target
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    c = 0.5 * (lo + hi)
    tol = 1e-11 if bits == 8 else 1e-14
    for _ in range(200000):
        tau = np.concatenate([[0.0], 0.5 * (c[:-1] + c[1:]), [1.0]])
        mass, moment = d.eval(tau)
        nxt = (moment[1:] - moment[:-1]) / (mass[1:] - mass[:-1])
        moved = np.max(np.abs(nxt - c))
        c = nxt
        if moved < tol:
            break
    levels = np.concatenate([-c[::-1], c])
    thr = 0.5 * (levels[:-1] + levels[1:])
    thr[m - 1] = 0.0
    return levels.astype(np.float32), thr.astype(np.float32)


@dataclasses.dataclass(frozen=True)
class SectionSpec:
    """One section's quantizer: ``bits`` + ``extra``/``g`` bits per value (``extra`` rotated
    coordinates per group at bits + 1), one fp16 scale per group, norm correction on."""
    bits: int
    g: int = 64
    extra: int = 0

    def value_bits(self) -> float:
        """Bits per value of the section: indices plus the fp16 scale."""
        return self.bits + self.extra / self.g + 16.0 / self.g

    def label(self) -> str:
        frac = self.bits + self.extra / self.g
        return ("%g" % frac) + ("-g%d" % self.g)


def sum_squares(v: np.ndarray) -> np.ndarray:
    """Σ v_i² along the last axis in index order, in fp32 (group_math.h's SumSquares: not
    numpy's pairwise sum, whose other order can move a scale by an fp16 ulp)."""
    s = np.zeros(v.shape[:-1], dtype=np.float32)
    for i in range(v.shape[-1]):
        s = s + v[..., i] * v[..., i]
    return s


def quantize_section(x: np.ndarray, spec: SectionSpec, signs: np.ndarray) -> np.ndarray:
    """x: [..., head_dim] fp32 (fp16 values) -> decoded fp32 (before the output cast).

    signs: the section's rotation signs [head_dim]."""
    g = spec.g
    D = x.shape[-1]
    shp = x.shape
    u = (x.astype(np.float32) * signs).reshape(-1, D // g, g)
    xs = x.astype(np.float32).reshape(-1, D // g, g)
    ss = sum_squares(xs)
    w = fwht(u)
    hs = np.float32(1.0 / np.sqrt(g))
    n = np.sqrt(ss).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = (hs / n).astype(np.float32)
    zero = (ss == 0) | ~np.isfinite(c)
    c = np.where(zero, 0.0, c).astype(np.float32)
    y = w * c[..., None]
    lv, th = codebook(g, spec.bits)
    yh = lv[np.searchsorted(th, y, side="left")]  # #{i: y > th_i}; ties to the lower level
    if spec.extra:
        lv1, th1 = codebook(g, spec.bits + 1)
        e = spec.extra
        yh[..., :e] = lv1[np.searchsorted(th1, y[..., :e], side="left")]
    yn = np.sqrt(sum_squares(yh))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(zero, 0.0, n / yn).astype(np.float16).astype(np.float32)
    z = fwht(yh)
    out = (z * (scale * hs)[..., None]).reshape(-1, D) * signs
    return out.reshape(shp).astype(np.float32)


def block_means(x: np.ndarray, block_tokens: int) -> np.ndarray:
    """x [T][H][D] -> per-block per-(head, channel) mean broadcast to [T][H][D], fp16 values."""
    out = np.empty_like(x, dtype=np.float32)
    for t0 in range(0, x.shape[0], block_tokens):
        out[t0:t0 + block_tokens] = x[t0:t0 + block_tokens].astype(np.float64).mean(0)
    return out.astype(np.float16).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class EmuCodec:
    """K and V section specs plus optional K centring; bpv counted like the format's blocks."""
    key: SectionSpec
    value: SectionSpec
    centre_keys: bool = False
    mean_bits: int = 16  # the key means: fp16 (16), or this codec at g = head_dim (8, 6)
    seed: int = DEFAULT_ROTATION_SEED

    def _mean_value_bits(self, head_dim: int) -> float:
        return 16.0 if self.mean_bits == 16 else self.mean_bits + 16.0 / head_dim

    def bpv(self, num_layers: int, num_kv_heads: int, head_dim: int, block_tokens: int) -> float:
        """Packed bits per value of one block: the format's header (56 + 8L + 4 bytes) and
        checksum (8), sections at their bits, and the fp16 key means when centring."""
        header_bytes = 56 + 4 * num_layers + 4 * (num_layers + 1) + 8
        n = block_tokens * num_kv_heads * head_dim  # values per section
        bits = num_layers * n * (self.key.value_bits() + self.value.value_bits())
        if self.centre_keys:
            bits += num_layers * num_kv_heads * head_dim * self._mean_value_bits(head_dim)
        return (bits + 8 * header_bytes) / (2 * num_layers * n)

    def layer_kv(self, layer: int, k: np.ndarray, v: np.ndarray, block_tokens: int):
        D = k.shape[-1]
        mu = block_means(k, block_tokens) if self.centre_keys else None
        if mu is not None and self.mean_bits != 16:  # one mean vector per block and head
            first = mu[::block_tokens]
            q = quantize_section(first, SectionSpec(self.mean_bits, D),
                                 rotation_signs(self.seed, layer, 2, D))
            q = q.astype(np.float16).astype(np.float32)
            mu = np.repeat(q, block_tokens, axis=0)[:k.shape[0]]
        kc = k if mu is None else (k - mu).astype(np.float16).astype(np.float32)
        kh = quantize_section(kc, self.key, rotation_signs(self.seed, layer, 0, D))
        vh = quantize_section(v, self.value, rotation_signs(self.seed, layer, 1, D))
        if mu is not None:  # fp32 decode, as the codec rows of all_kv (prefix reuse casts)
            kh = kh + mu
        return kh, vh


def check_against_c_abi(n_vectors: int = 512, head_dim: int = 64, seed: int = 1,
                        configs=((4, 64), (5, 64), (4, 32), (5, 32), (3, 64), (6, 64))) -> dict:
    """Encodes random fp16 vectors with the C ABI and with this port (extra = 0); returns, per
    (bits, g), the index and scale mismatches and the max decoded difference."""
    from turbokv.codec import CodecParams, LocalCodec
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n_vectors, 1, head_dim)) *
         rng.uniform(0.1, 4.0, (n_vectors, 1, 1))).astype(np.float16)
    x[:, :, :8] += np.float16(3.0)  # a shared mean, like real keys
    res = {}
    for bits, g in configs:
        for layer in (0, 7):
            p = CodecParams(key_bits=bits, key_group_size=g, value_bits=bits, value_group_size=g,
                            norm_correction=True)
            c = LocalCodec(layer + 1, n_vectors, 1, head_dim, p)
            blk = np.zeros(c.shape, np.float16)
            blk[layer, 0] = x
            blk[layer, 1] = x
            packed = c.encode(blk)
            dec = c.decode(packed, "fp32")[layer]
            G = head_dim // g
            for kv in (0, 1):
                ours = quantize_section(x.astype(np.float32),
                                        SectionSpec(bits, g), rotation_signs(
                                            DEFAULT_ROTATION_SEED, layer, kv, head_dim))
                # section offsets from the layer offset table
                hb = 56 + 4 * (layer + 1)
                off = int(np.frombuffer(packed, "<u4", count=1, offset=hb + 4 * layer)[0])
                sec = n_vectors * G * 2 + n_vectors * head_dim * bits // 8
                off += kv * sec
                scales = np.frombuffer(packed, "<u2", count=n_vectors * G, offset=off)
                idx_bytes = np.frombuffer(packed, np.uint8, count=sec - 2 * n_vectors * G,
                                          offset=off + 2 * n_vectors * G)
                bitsarr = np.unpackbits(idx_bytes, bitorder="little").reshape(-1, bits)
                idx = (bitsarr * (1 << np.arange(bits))).sum(1).reshape(n_vectors, G, g)
                # ours: recompute indices
                u = (x.astype(np.float32) * rotation_signs(DEFAULT_ROTATION_SEED, layer, kv,
                                                           head_dim)).reshape(-1, G, g)
                xs = x.astype(np.float32).reshape(-1, G, g)
                ss = sum_squares(xs)
                y = fwht(u) * (np.float32(1 / np.sqrt(g)) / np.sqrt(ss))[..., None]
                lv, th = codebook(g, bits)
                our_idx = np.searchsorted(th, y, side="left")
                yh = lv[our_idx]
                our_scale = (np.sqrt(ss) / np.sqrt(sum_squares(yh))).astype(np.float16)
                res["b%d-g%d-l%d-%s" % (bits, g, layer, "KV"[kv])] = dict(
                    index_mismatches=int(np.sum(our_idx != idx)), indices=int(idx.size),
                    scale_mismatches=int(np.sum(our_scale.view(np.uint16).reshape(-1) != scales)),
                    max_abs_decoded_diff=float(np.max(np.abs(ours - dec[kv]))),
                    max_abs_value=float(np.max(np.abs(dec[kv]))))
    return res
