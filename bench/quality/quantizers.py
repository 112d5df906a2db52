"""KV quantizers compared by the quality harness: turbokv codecs and the baselines.

Every quantizer maps one layer's keys or values, float32 ``[T][num_kv_heads][head_dim]``
already rounded to fp16 (the namespace dtype), to what the cache would hand back (float32).

* turbokv rows use the codec library through its C ABI (``turbokv.codec.LocalCodec``): the
  bytes are exactly what the server stores; bpv comes from the packed block size at
  block_tokens 16 (header and checksum included).
* ``fp8-e4m3``: vLLM's fp8 KV cache: one scale per tensor (per layer, K and V separately),
  scale = amax / 448, values rounded to the nearest e4m3 number (round half to even,
  3 mantissa bits, subnormals below 2^-6). bpv 8 (the per-layer scales are per model, not per
  block).
* ``kivi-{2,4}``: KIVI (Liu et al. 2024) style asymmetric integer quantization: keys grouped
  per channel over 32 consecutive tokens, values per token over 32 consecutive channels,
  min/max scale and zero-point in fp16. bpv = b + 2*16/32 = b + 1. KIVI's full-precision
  window of recent tokens is not emulated (the seeds found it does not move perplexity).
* ``vllm-tq-*`` (emulated): vLLM's TurboQuant ``--kv-cache-dtype`` presets (``turboquant_k8v4``,
  ``_4bit_nc``, ``_k3v4_nc``, ``_3bit_nc``; vLLM's ``TurboQuantConfig``) at their published
  layout: keys TurboQuant-MSE with one fp16 norm per head vector (here the turbokv codec at
  g = head_dim, norm correction on for ``_nc``, off for k8v4's FP8 keys, which are a plain e4m3
  cast without rotation or scale), values uniform min/max per head vector (fp16 scale and zero
  point), and the first and last 2 layers uncompressed (fp16; "boundary protection"). bpv:
  key ``d*kb/8 + 2`` bytes (FP8: ``d``), value ``d*vb/8 + 4`` bytes per head vector and token,
  slot rounded up to an even size; protected layers 16.
* ``emu ...`` (issue 12 study, ``frac_study_rows``): ``emulated_codec.EmuCodec``, a numpy port
  of the codec (equal to it bit for bit) with fractional bits and per-block key centring,
  options the packed format does not have.
* ``turbo3`` / ``turbo4``: the llama.cpp fork formats, emulated as one-norm-per-head codecs:
  the turbokv codec with g = head_dim (64 here) at 3 / 4 bits for K and V, norm correction on,
  no QJL, i.e. 3.25 / 4.25 bpv at head_dim 64 (3.125 / 4.125 at head_dim 128).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from turbokv.codec import CodecParams, LocalCodec, preset_params

BLOCK_TOKENS = 16


# -- baselines ---------------------------------------------------------------------------------
def fp8_e4m3_round(x: np.ndarray) -> np.ndarray:
    """Nearest e4m3 (fn) value of x (|x| <= 448 assumed; saturates), round half to even."""
    a = np.abs(x).astype(np.float64)
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -30)))
    e = np.maximum(e, -6.0)  # subnormals share the step of the smallest normal binade
    step = np.exp2(e - 3.0)
    q = np.round(a / step) * step  # np.round: half to even
    q = np.minimum(q, 448.0)
    return (np.sign(x) * q).astype(np.float32)


def fp8_per_tensor(x: np.ndarray) -> np.ndarray:
    amax = float(np.max(np.abs(x)))
    if amax == 0.0:
        return x.astype(np.float32)
    scale = np.float32(amax / 448.0)
    return fp8_e4m3_round(x / scale) * scale


def _minmax_quant(x: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """Asymmetric min/max quantization along ``axis`` (the group axis), fp16 scale and zero."""
    lo = np.min(x, axis=axis, keepdims=True).astype(np.float16).astype(np.float32)
    hi = np.max(x, axis=axis, keepdims=True)
    levels = (1 << bits) - 1
    scale = ((hi - lo) / levels).astype(np.float16).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.round((x - lo) / safe), 0, levels)
    return (q * scale + lo).astype(np.float32)


def kivi(x: np.ndarray, bits: int, is_key: bool, group: int = 32) -> np.ndarray:
    """x: [T][H][D] float32. Keys: per channel, groups of ``group`` tokens (a trailing partial
    group is its own group); values: per token, groups of ``group`` channels."""
    T, H, D = x.shape
    if is_key:
        out = np.empty_like(x)
        for t0 in range(0, T, group):
            out[t0:t0 + group] = _minmax_quant(x[t0:t0 + group], bits, axis=0)
        return out
    g = min(group, D)
    y = x.reshape(T, H, D // g, g)
    return _minmax_quant(y, bits, axis=3).reshape(T, H, D)


# -- rows --------------------------------------------------------------------------------------
@dataclasses.dataclass
class Row:
    """One configuration under test.

    kind: "codec" (turbokv codec: ``preset`` name or explicit ``params``), "fp8", "kivi",
    "fp32" (no KV rounding at all; all_kv only: the model's own perplexity).
    """
    name: str
    kind: str
    family: str  # "turbokv preset", "turbokv ablation", "community (emulated)", "baseline"
    preset: str | None = None
    params: CodecParams | None = None
    bits: int = 0
    note: str = ""
    emu: object | None = None  # kind "emu": an emulated_codec.EmuCodec (numpy port)
    emu_block_tokens: int = 16    # kind "emu": block size of its bpv and of its key means

    def codec_params(self, head_dim: int) -> CodecParams:
        return self.params if self.params is not None else preset_params(self.preset, head_dim)


def _p(kb, vb, g=32, kq=False, vq=False, nc=True, kg=None, vg=None) -> CodecParams:
    return CodecParams(key_bits=kb, key_group_size=kg or g, key_qjl=kq, value_bits=vb,
                       value_group_size=vg or g, value_qjl=vq, norm_correction=nc)


def all_rows() -> list[Row]:
    """Every row of the evaluation, in report order."""
    rows = [Row(p, "codec", "turbokv preset", preset=p)
            for p in ("raw", "k8v6", "k6v6", "k6v5", "k8v4", "k6v4", "k5v4", "k4v4-g32",
                      "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "k3v2")]
    # Ablations at 2 and 3 bits: norm correction on/off x QJL (on K, as the preset) on/off.
    # k3v3-g32 (correction on, no QJL) and k2qjl-v2-g32 (= k3v2-g32-qjl) are presets above.
    for b in (3, 2):
        for qjl in (False, True):
            for nc in (True, False):
                if nc and (b == 3 and not qjl or b == 2 and qjl):
                    continue
                name = "k%d%s-v%d-g32%s" % (b, "qjl" if qjl else "", b, "" if nc else "-nonc")
                name = name.replace("k%d-v%d" % (b, b), "k%dv%d" % (b, b))
                rows.append(Row(name, "codec", "turbokv ablation", params=_p(b, b, 32, kq=qjl,
                                                                               nc=nc)))
    # Group size: one norm per 64-d head (g = 64) against block-32, at 3 and 4 bits.
    rows.append(Row("turbo3 (k3v3-g64)", "codec", "community (emulated)", params=_p(3, 3, 64),
                    note="llama.cpp-fork turbo3 emulated: one fp16 norm per 64-d head, 3-bit"))
    rows.append(Row("turbo4 (k4v4-g64)", "codec", "community (emulated)", params=_p(4, 4, 64),
                    note="llama.cpp-fork turbo4 emulated: one fp16 norm per 64-d head, 4-bit"))
    rows.append(Row("k3v3-g64-nonc", "codec", "turbokv ablation", params=_p(3, 3, 64, nc=False)))
    for name, kb, vb, nc in VLLM_TQ:
        rows.append(Row(name, "vllmtq", "community (emulated)", bits=kb * 10 + vb,
                        params=_p(kb, vb, 64, nc=nc),
                        note="vLLM TurboQuant preset emulated: K %s, V %d-bit min/max per "
                             "vector, first/last 2 layers fp16" % (
                                 "fp8 e4m3" if kb == 8 else "%d-bit TurboQuant g=d" % kb, vb)))
    rows.append(Row("fp8-e4m3", "fp8", "baseline", bits=8))
    rows.append(Row("kivi-4", "kivi", "baseline", bits=4))
    rows.append(Row("kivi-2", "kivi", "baseline", bits=2))
    return rows


# Issue 12 study rows (selected by name with --rows; not part of the default run). The seed
# rows repeat k4v4-g32 / turbo4 with another rotation seed, to tell a property of g = 64 from
# the luck of one fixed rotation. "kcentred" emulates per-block per-channel key centering: the
# mean of each 16-token block's keys per head and channel is subtracted before the codec and
# added back after (kept in fp16: + 16 * head_dim bits per block, layer and KV head = +0.5 bpv
# at 16-token blocks, +0.03 at 256); values as the codec. Not a format option yet.
SEED2 = 0x5EED5EED5EED0002

# vLLM's TurboQuant presets: (row name, key bits, value bits, norm correction).
VLLM_TQ = [("vllm-tq k8v4 (emulated)", 8, 4, False), ("vllm-tq 4bit_nc (emulated)", 4, 4, True),
           ("vllm-tq k3v4_nc (emulated)", 3, 4, True), ("vllm-tq 3bit_nc (emulated)", 3, 3, True)]
VLLM_TQ_BOUNDARY = 2  # first and last layers kept uncompressed (capped at num_layers / 2)


def vllm_tq_bpv(kb: int, vb: int, head_dim: int, num_layers: int) -> float:
    key = head_dim if kb == 8 else -(-head_dim * kb // 8) + 2
    slot = key + (-(-head_dim * vb // 8) + 4)
    slot += slot % 2
    n = min(VLLM_TQ_BOUNDARY, num_layers // 2)
    packed = slot * 8.0 / (2 * head_dim)
    return ((num_layers - 2 * n) * packed + 2 * n * 16.0) / num_layers


def study_rows() -> list[Row]:
    return [
        # Issue 12: the same bpv as turbo4 (k4v4-g64, 4.26) with the bit moved from V to K.
        Row("k5v3-g64", "codec", "issue-12 study", params=_p(5, 3, 64),
            note="K 5-bit, V 3-bit, g = 64: turbo4's bpv, one bit moved from V to K"),
        Row("k4v4-g32-seed2", "codec", "issue-12 study",
            params=dataclasses.replace(_p(4, 4, 32), rotation_seed=SEED2)),
        Row("turbo4-seed2 (k4v4-g64)", "codec", "issue-12 study",
            params=dataclasses.replace(_p(4, 4, 64), rotation_seed=SEED2)),
        Row("k4v4-g32-kcentred (emulated)", "centred", "issue-12 study", params=_p(4, 4, 32),
            note="per-16-token-block per-channel key mean removed before the codec, fp16"),
        Row("k4v3-g32-kcentred (emulated)", "centred", "issue-12 study", params=_p(4, 3, 32),
            note="per-16-token-block per-channel key mean removed before the codec, fp16"),
    ]


def _emu_row(name: str, key, value, centre: bool = False, block_tokens: int = 16,
             mean_bits: int = 16) -> Row:
    from emulated_codec import EmuCodec, SectionSpec
    c = EmuCodec(SectionSpec(*key), SectionSpec(*value), centre_keys=centre, mean_bits=mean_bits)
    means = "fp16" if mean_bits == 16 else "%d-bit codec" % mean_bits
    note = "numpy port of the codec: K %s, V %s%s, %d-token blocks" % (
        c.key.label(), c.value.label(),
        ", keys centred per block (%s means)" % means if centre else "", block_tokens)
    return Row(name, "emu", "issue-12 study", note=note, emu=c, emu_block_tokens=block_tokens)


def frac_study_rows() -> list[Row]:
    """Issue 12's fractional-bit study (bench/quality/emulated_codec.py): (bits, g, extra)
    per section; ``extra`` rotated coordinates per group at bits + 1."""
    return [
        # the numpy port of the preset k5v4 (must equal the codec row's NLL)
        _emu_row("emu k5v4 (port check)", (5, 32, 0), (4, 64, 0)),
        # 16-token blocks, <= 5.0 bpv: K + V fractional bits 9.375 at g = 64 scales
        _emu_row("emu k5-g64 v4.375-g64", (5, 64, 0), (4, 64, 24)),
        _emu_row("emu k5.25-g64 v4.125-g64", (5, 64, 16), (4, 64, 8)),
        _emu_row("emu k5-g32 v4.125-g64", (5, 32, 0), (4, 64, 8)),
        _emu_row("emu k5.125-g64 v4.25-g64", (5, 64, 8), (4, 64, 16)),
        _emu_row("emu k4.75-g64 v4.625-g64", (4, 64, 48), (4, 64, 40)),
        _emu_row("emu k5.375-g64 v4-g64", (5, 64, 24), (4, 64, 0)),
        # 256-token blocks (LMCache's chunk), keys centred per block (fp16 means, counted)
        _emu_row("emu kc5-g64 v4.375-g64 @256", (5, 64, 0), (4, 64, 24), True, 256),
        _emu_row("emu kc5.25-g64 v4.125-g64 @256", (5, 64, 16), (4, 64, 8), True, 256),
        _emu_row("emu kc4.5-g64 v4.5-g64 @256", (4, 64, 32), (4, 64, 32), True, 256),
        _emu_row("emu kc4.125-g64 v4.25-g64 @256", (4, 64, 8), (4, 64, 16), True, 256),
        _emu_row("emu kc4-g64 v4.5-g64 @256", (4, 64, 0), (4, 64, 32), True, 256),
        # 16-token blocks, keys centred with the block mean coded at 6 bits (g = 64)
        _emu_row("emu kc4-g64 m6 v4.625-g64", (4, 64, 0), (4, 64, 40), True, 16, 6),
        _emu_row("emu kc4.25-g64 m6 v4.625-g64", (4, 64, 16), (4, 64, 40), True, 16, 6),
        _emu_row("emu kc4.5-g64 m6 v4.5-g64", (4, 64, 32), (4, 64, 32), True, 16, 6),
        _emu_row("emu kc4.25-g64 m6 v4.75-g64", (4, 64, 16), (4, 64, 48), True, 16, 6),
        _emu_row("emu kc4-g64 m6 v4.125-g64", (4, 64, 0), (4, 64, 8), True, 16, 6),
    ]


def block_key_means(k: np.ndarray) -> np.ndarray:
    """k [T][H][D] -> the per-16-token-block per-channel mean, broadcast to [T][H][D] (fp16
    values; a partial last block has its own mean)."""
    out = np.empty_like(k)
    for t0 in range(0, k.shape[0], BLOCK_TOKENS):
        out[t0:t0 + BLOCK_TOKENS] = k[t0:t0 + BLOCK_TOKENS].mean(0, keepdims=True)
    return out.astype(np.float16).astype(np.float32)


def baseline_bpv(row: Row, head_dim: int) -> float:
    if row.kind == "fp8":
        return 8.0
    if row.kind == "kivi":
        return row.bits + 2 * 16 / 32
    if row.kind == "fp32":
        return 32.0
    raise ValueError(row.kind)


class LayerQuantizer:
    """Applies one row to one layer's K or V: ``q(layer, kv, x[T][H][D]) -> x_hat``.

    For codec rows the layer is encoded inside a block of ``layer + 1`` layers (the others
    zero) so that the rotation signs and QJL matrix of that layer are the ones the server uses
    (they are keyed by layer index); blocks are ``T`` tokens long, which gives the same bytes
    per head vector as 16-token blocks (the codec works on head vectors independently).
    """

    def __init__(self, row: Row, num_layers: int, num_kv_heads: int, head_dim: int):
        self.row = row
        self.L, self.H, self.D = num_layers, num_kv_heads, head_dim
        self._codecs: dict[tuple, LocalCodec] = {}
        if row.kind == "vllmtq":
            self.params = row.params
            kb, vb = divmod(row.bits, 10)
            self.bpv = vllm_tq_bpv(kb, vb, head_dim, num_layers)
            self.packed_block_bytes = None
        elif row.kind in ("codec", "centred"):
            self.params = row.codec_params(head_dim)
            ref = LocalCodec(num_layers, BLOCK_TOKENS, num_kv_heads, head_dim, self.params)
            self.bpv = ref.bits_per_value
            self.packed_block_bytes = ref.packed_bytes
            if row.kind == "centred":  # + one fp16 key mean per block, layer, head, channel
                self.bpv += 16.0 * head_dim / (2 * BLOCK_TOKENS * head_dim)
                self.packed_block_bytes += 2 * num_layers * num_kv_heads * head_dim
        elif row.kind == "emu":
            self.params = None
            self.bpv = row.emu.bpv(num_layers, num_kv_heads, head_dim, row.emu_block_tokens)
            self.packed_block_bytes = None
        else:
            self.params = None
            self.bpv = baseline_bpv(row, head_dim)
            self.packed_block_bytes = None

    def _codec(self, layer: int, T: int) -> LocalCodec:
        n = self.L if self.params.protected_last_layers else layer + 1
        key = (n, T)
        c = self._codecs.get(key)
        if c is None:
            c = LocalCodec(n, T, self.H, self.D, self.params)
            self._codecs[key] = c
        return c

    def layer_kv(self, layer: int, k: np.ndarray, v: np.ndarray):
        """k, v: [T][H][D] float32 (fp16-representable). Returns (k_hat, v_hat) float32."""
        r = self.row
        if r.kind == "centred":
            mu = block_key_means(k)
            kc = (k - mu).astype(np.float16).astype(np.float32)
            kh, vh = self._codec_kv(layer, kc, v)
            return kh + mu, vh
        if r.kind == "codec":
            T = k.shape[0]
            c = self._codec(layer, T)
            block = np.zeros(c.shape, dtype=np.float16)
            block[layer, 0] = k
            block[layer, 1] = v
            out = c.decode(c.encode(block), "fp32", layers=(layer, layer + 1))
            return out[0, 0], out[0, 1]
        if r.kind == "vllmtq":
            n = min(VLLM_TQ_BOUNDARY, self.L // 2)
            if layer < n or layer >= self.L - n:
                return k, v  # boundary layers: fp16 (the inputs are fp16 already)
            kb, vb = divmod(r.bits, 10)
            if kb == 8:
                kh = fp8_e4m3_round(k)
            else:
                kh, _ = self._codec_kv(layer, k, v)
            return kh, _minmax_quant(v, vb, axis=2)
        if r.kind == "fp8":
            return fp8_per_tensor(k), fp8_per_tensor(v)
        if r.kind == "kivi":
            return kivi(k, r.bits, True), kivi(v, r.bits, False)
        if r.kind == "fp32":
            return k, v
        if r.kind == "emu":
            return r.emu.layer_kv(layer, k, v, r.emu_block_tokens)
        raise ValueError(r.kind)

    def _codec_kv(self, layer: int, k: np.ndarray, v: np.ndarray):
        T = k.shape[0]
        c = self._codec(layer, T)
        block = np.zeros(c.shape, dtype=np.float16)
        block[layer, 0] = k
        block[layer, 1] = v
        out = c.decode(c.encode(block), "fp32", layers=(layer, layer + 1))
        return out[0, 0], out[0, 1]

    def full_kv(self, kv: np.ndarray) -> np.ndarray:
        """kv: [L][2][T][H][D] (fp16 values) -> float32 of the same shape, layer by layer."""
        if self.row.kind == "codec" and kv.shape[0] == self.L:
            c = self._codec(self.L - 1, kv.shape[2])  # all layers, one block of T tokens
            return c.decode(c.encode(kv.astype(np.float16)), "fp32")
        out = np.empty(kv.shape, dtype=np.float32)
        for l in range(kv.shape[0]):
            out[l, 0], out[l, 1] = self.layer_kv(l, kv[l, 0].astype(np.float32),
                                                 kv[l, 1].astype(np.float32))
        if self.row.kind == "emu":  # what GetBlocks RAW fp16 would return
            out = out.astype(np.float16).astype(np.float32)
        return out
