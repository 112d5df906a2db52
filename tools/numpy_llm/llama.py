"""A Llama-architecture decoder in numpy (float32), shared by every model turbokv ships.

The forward pass follows the Llama reference (Touvron et al. 2023; Meta's ``llama/model.py``) and
Karpathy's llama2.c ``run.c``, which it reproduces operation for operation:

* RMSNorm: ``x * w / sqrt(mean(x^2) + eps)``.
* Grouped-query attention (Ainslie et al. 2023): ``num_heads // num_kv_heads`` query heads share
  one KV head; query head ``h`` reads KV head ``h // group``.
* RoPE (Su et al. 2021) with ``theta_i = base^(-2i/head_dim)``, ``i = 0 .. head_dim/2 - 1``, in
  one of two coordinate conventions (see :data:`ROPE_STYLES`).
* SwiGLU feed-forward: ``w2(silu(w1 x) * w3 x)``.
* Causal softmax attention scaled by ``1/sqrt(head_dim)``; final RMSNorm; linear classifier.

All math is float32 (the attention softmax included). Weights are held transposed (``[in, out]``)
and Q/K/V and gate/up are fused so that one layer is four BLAS calls.

KV layout (docs/architecture.md, "Terms"): ``[num_layers][2][T][num_kv_heads][head_dim]``,
index 0 = K *after* RoPE, index 1 = V. This is what :meth:`LlamaModel.prefill` returns and what
it accepts as ``past_kv``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

#: ``"interleaved"``: rotate adjacent pairs ``(x[2i], x[2i+1])`` — llama2.c ``run.c``, Meta's
#: original ``apply_rotary_emb`` (complex view), and llama.cpp's "normal" rope on GGUF weights
#: whose Q/K rows were permuted by ``convert_hf_to_gguf.py``.
#: ``"half"``: rotate ``(x[i], x[i + head_dim/2])`` — Hugging Face ``rotate_half`` / GPT-NeoX,
#: i.e. what vLLM and transformers compute on Hugging Face checkpoints.
ROPE_STYLES = ("interleaved", "half")

KV_K = 0
KV_V = 1


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Architecture hyper-parameters.

    Attributes:
      dim: model width (residual stream size).
      hidden_dim: SwiGLU inner size.
      num_layers: decoder blocks.
      num_heads: query heads.
      num_kv_heads: KV heads (``num_heads`` must be a multiple).
      head_dim: per-head size; ``num_heads * head_dim`` is the attention width.
      vocab_size: classifier rows.
      rope_base: RoPE theta base (10000 for llama2.c, 100000 for SmolLM2).
      rope_style: one of :data:`ROPE_STYLES`; must match how the Q/K weight rows are ordered.
      rms_eps: RMSNorm epsilon.
      max_seq_len: the context the model was trained for (informational; not enforced).
    """

    dim: int
    hidden_dim: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rope_base: float
    rope_style: str
    rms_eps: float
    max_seq_len: int

    def validate(self) -> None:
        if self.rope_style not in ROPE_STYLES:
            raise ValueError(f"rope_style {self.rope_style!r} is not one of {ROPE_STYLES}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")


@dataclasses.dataclass
class LayerWeights:
    """One decoder block, float32, matrices transposed to ``[in, out]``.

    Attributes:
      attn_norm: ``[dim]``.
      wqkv: ``[dim, (num_heads + 2 * num_kv_heads) * head_dim]`` — Q, then K, then V columns.
      wo: ``[num_heads * head_dim, dim]``.
      ffn_norm: ``[dim]``.
      w13: ``[dim, 2 * hidden_dim]`` — gate (w1) columns, then up (w3) columns.
      w2: ``[hidden_dim, dim]`` (down projection).
    """

    attn_norm: np.ndarray
    wqkv: np.ndarray
    wo: np.ndarray
    ffn_norm: np.ndarray
    w13: np.ndarray
    w2: np.ndarray

    @staticmethod
    def from_out_in(attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3) -> LayerWeights:
        """Builds a layer from checkpoint-style ``[out, in]`` matrices (PyTorch ``nn.Linear``)."""
        f32 = lambda a: np.ascontiguousarray(np.asarray(a, dtype=np.float32))
        return LayerWeights(
            attn_norm=f32(attn_norm),
            wqkv=f32(np.concatenate([wq, wk, wv], axis=0).T),
            wo=f32(np.asarray(wo).T),
            ffn_norm=f32(ffn_norm),
            w13=f32(np.concatenate([w1, w3], axis=0).T),
            w2=f32(np.asarray(w2).T),
        )


class Tokenizer:
    """Interface every model tokenizer implements."""

    bos_id: int
    eos_id: int
    vocab_size: int

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """``x * weight / sqrt(mean(x^2, -1) + eps)``; x ``[T, dim]`` float32."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=np.float32)
    return (x * (1.0 / np.sqrt(ms + np.float32(eps)))) * weight


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _softmax_inplace(x: np.ndarray) -> np.ndarray:
    x -= np.max(x, axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= np.sum(x, axis=-1, keepdims=True)
    return x


class LlamaModel:
    """A Llama decoder with numpy float32 math and turbokv's raw KV layout.

    Attributes (the interface the demo, the capture tool and the quality harness use):
      name: model id for a turbokv namespace, e.g. ``"stories260K"``.
      revision: identifies the exact weights *and* the KV coordinate convention, e.g.
        ``"sha256:0db7e64f1b2c...-rope-interleaved"``; two models with equal (name, revision)
        produce interchangeable KV.
      config: :class:`LlamaConfig`.
      num_layers, num_kv_heads, head_dim, vocab_size: shortcuts into ``config``.
      tokenizer: a :class:`Tokenizer` (``encode(text, add_bos) -> list[int]``, ``decode(ids)``).
    """

    #: Largest attention score tensor of one chunk of query rows, in floats (128 MiB).
    attention_chunk_floats = 1 << 25

    def __init__(self, name: str, revision: str, config: LlamaConfig,
                 tok_embeddings: np.ndarray, layers: list[LayerWeights], final_norm: np.ndarray,
                 classifier: np.ndarray | None, tokenizer: Tokenizer):
        """
        Args:
          tok_embeddings: ``[vocab_size, dim]`` float32.
          layers: ``num_layers`` :class:`LayerWeights`.
          final_norm: ``[dim]``.
          classifier: ``[vocab_size, dim]`` (``[out, in]``), or None for tied embeddings.
        """
        config.validate()
        self.name = name
        self.revision = revision
        self.config = config
        self.tokenizer = tokenizer
        self.tok_embeddings = np.ascontiguousarray(tok_embeddings, dtype=np.float32)
        self.layers = layers
        self.final_norm = np.asarray(final_norm, dtype=np.float32)
        cls = self.tok_embeddings if classifier is None else classifier
        self._classifier_t = np.ascontiguousarray(np.asarray(cls, dtype=np.float32).T)
        self.tied_embeddings = classifier is None
        half = config.head_dim // 2
        # theta_i = base^(-2i/head_dim), computed in float64 then rounded once.
        self._inv_freq = 1.0 / (config.rope_base ** (np.arange(half, dtype=np.float64) * 2.0 /
                                                     config.head_dim))
        if len(layers) != config.num_layers:
            raise ValueError(f"{len(layers)} layers given, config says {config.num_layers}")

    # -- shape shortcuts -------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    @property
    def num_kv_heads(self) -> int:
        return self.config.num_kv_heads

    @property
    def num_heads(self) -> int:
        return self.config.num_heads

    @property
    def head_dim(self) -> int:
        return self.config.head_dim

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def kv_shape(self, num_tokens: int) -> tuple[int, int, int, int, int]:
        """``(num_layers, 2, num_tokens, num_kv_heads, head_dim)``."""
        c = self.config
        return (c.num_layers, 2, num_tokens, c.num_kv_heads, c.head_dim)

    def __repr__(self) -> str:
        c = self.config
        return (f"LlamaModel({self.name} {self.revision}: layers={c.num_layers} dim={c.dim} "
                f"heads={c.num_heads}/{c.num_kv_heads}x{c.head_dim} vocab={c.vocab_size})")

    # -- forward ---------------------------------------------------------------------------------
    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Rotates x ``[T, heads, head_dim]`` by per-position angles; cos/sin ``[T, 1, hd/2]``."""
        if self.config.rope_style == "interleaved":
            x0 = x[..., 0::2]
            x1 = x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2] = x0 * cos - x1 * sin
            out[..., 1::2] = x0 * sin + x1 * cos
            return out
        half = self.config.head_dim // 2
        x0 = x[..., :half]
        x1 = x[..., half:]
        return np.concatenate([x0 * cos - x1 * sin, x1 * cos + x0 * sin], axis=-1)

    def prefill(self, tokens: Sequence[int], past_kv: np.ndarray | None = None,
                logits: str = "all") -> tuple[np.ndarray, np.ndarray]:
        """Runs the decoder over ``tokens`` placed after ``past_kv``'s positions.

        Args:
          tokens: ``T >= 1`` token ids (int).
          past_kv: KV of the ``P`` preceding tokens, ``[num_layers][2][P][num_kv_heads][head_dim]``
            (K after RoPE), any float dtype (fp16 from a turbokv GetBlocks is cast to float32);
            None means ``P = 0``. Positions of ``tokens`` are ``P .. P+T-1``.
          logits: ``"all"`` returns ``[T, vocab_size]``; ``"last"`` returns ``[1, vocab_size]``
            for the last token only (skips most of the classifier cost).

        Returns:
          ``(logits, kv)``: logits float32 as above; kv float32
          ``[num_layers][2][P+T][num_kv_heads][head_dim]`` — ``past_kv`` (cast) followed by the
          new tokens' K (after RoPE) and V. ``kv[:, :, P:]`` is the part this call computed.
          Prefill of ``tokens[P:]`` given the KV of ``tokens[:P]`` equals a full prefill to float
          rounding.
        """
        c = self.config
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if toks.size == 0:
            raise ValueError("prefill needs at least one token")
        if toks.min() < 0 or toks.max() >= c.vocab_size:
            raise ValueError(f"token ids must be in [0, {c.vocab_size}), got "
                             f"[{toks.min()}, {toks.max()}]")
        if logits not in ("all", "last"):
            raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
        T = int(toks.size)
        if past_kv is None:
            P = 0
        else:
            past_kv = np.asarray(past_kv)
            expect = self.kv_shape(past_kv.shape[2] if past_kv.ndim == 5 else -1)
            if past_kv.ndim != 5 or past_kv.shape != expect:
                raise ValueError(f"past_kv shape {past_kv.shape} does not match the model's raw "
                                 f"layout [L={c.num_layers}][2][P][H={c.num_kv_heads}]"
                                 f"[D={c.head_dim}]")
            P = int(past_kv.shape[2])
        S = P + T
        kv = np.empty(self.kv_shape(S), dtype=np.float32)
        if P:
            kv[:, :, :P] = past_kv

        pos = np.arange(P, S, dtype=np.float64)
        ang = pos[:, None] * self._inv_freq[None, :]
        cos = np.cos(ang).astype(np.float32)[:, None, :]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        # mask[i, j] is True where query P+i must not see key j (j > P+i).
        mask = np.arange(S)[None, :] > (np.arange(P, S)[:, None])
        scale = np.float32(1.0 / math.sqrt(c.head_dim))
        nh, nkv, hd = c.num_heads, c.num_kv_heads, c.head_dim
        group = nh // nkv
        rows = max(1, min(T, self.attention_chunk_floats // max(1, nh * S)))
        q_cols, k_cols = nh * hd, nkv * hd

        x = self.tok_embeddings[toks]  # [T, dim] (fancy indexing copies)
        for li, w in enumerate(self.layers):
            h = rms_norm(x, w.attn_norm, c.rms_eps)
            qkv = h @ w.wqkv
            q = self._rope(qkv[:, :q_cols].reshape(T, nh, hd), cos, sin)
            kv[li, KV_K, P:] = self._rope(qkv[:, q_cols:q_cols + k_cols].reshape(T, nkv, hd),
                                          cos, sin)
            kv[li, KV_V, P:] = qkv[:, q_cols + k_cols:].reshape(T, nkv, hd)
            # [nkv, group, T, hd] x [nkv, 1, hd, S] -> [nkv, group, T, S]
            qh = q.reshape(T, nkv, group, hd).transpose(1, 2, 0, 3)
            kh = kv[li, KV_K].transpose(1, 2, 0)[:, None]
            vh = kv[li, KV_V].transpose(1, 0, 2)[:, None]
            att = np.empty((nkv, group, T, hd), dtype=np.float32)
            # Query rows in chunks bound the [nkv, group, rows, S] score tensor.
            for r0 in range(0, T, rows):
                r1 = min(T, r0 + rows)
                scores = np.matmul(qh[:, :, r0:r1], kh)
                scores *= scale
                scores[..., mask[r0:r1]] = -np.inf
                att[:, :, r0:r1] = np.matmul(_softmax_inplace(scores), vh)
            att = att.transpose(2, 0, 1, 3).reshape(T, nh * hd)
            x = x + att @ w.wo
            h = rms_norm(x, w.ffn_norm, c.rms_eps)
            gu = h @ w.w13
            x = x + (_silu(gu[:, :c.hidden_dim]) * gu[:, c.hidden_dim:]) @ w.w2
        if logits == "last":
            x = x[-1:]
        out = rms_norm(x, self.final_norm, c.rms_eps) @ self._classifier_t
        return out.astype(np.float32, copy=False), kv

    # -- helpers built on prefill -----------------------------------------------------------------
    def generate_greedy(self, tokens: Sequence[int], max_new_tokens: int,
                        past_kv: np.ndarray | None = None,
                        stop_ids: Sequence[int] | None = None,
                        on_token: Callable[[int], None] | None = None) -> list[int]:
        """Greedy (argmax) decoding: prefill ``tokens`` then one token per step with the KV cache.

        Returns the generated ids (without the prompt); stops after ``max_new_tokens`` or on a
        token in ``stop_ids`` (default: the tokenizer's EOS), which is not included.
        """
        stop = set(stop_ids) if stop_ids is not None else {self.tokenizer.eos_id}
        out: list[int] = []
        lg, kv = self.prefill(tokens, past_kv=past_kv, logits="last")
        for _ in range(max_new_tokens):
            nxt = int(np.argmax(lg[-1]))
            if nxt in stop:
                break
            out.append(nxt)
            if on_token is not None:
                on_token(nxt)
            lg, kv = self.prefill([nxt], past_kv=kv, logits="last")
        return out

    def nll(self, tokens: Sequence[int], past_kv: np.ndarray | None = None) -> np.ndarray:
        """NLL (nats) of each of ``tokens[1:]`` given what precedes it; float64 ``[T-1]``."""
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
        lg, _ = self.prefill(toks[:-1], past_kv=past_kv)
        lg = lg.astype(np.float64)
        lse = np.log(np.sum(np.exp(lg - lg.max(-1, keepdims=True)), -1)) + lg.max(-1)
        return lse - lg[np.arange(len(toks) - 1), toks[1:]]

    def perplexity(self, tokens: Sequence[int]) -> float:
        """``exp(mean NLL)`` of ``tokens[1:]`` in one window (no striding)."""
        return float(np.exp(np.mean(self.nll(tokens))))

    def prefill_flops(self, num_past: int, num_new: int, logits: str = "last") -> float:
        """Multiply-add FLOPs (2 per MAC) of :meth:`prefill` for ``num_new`` tokens after
        ``num_past``: the linear layers, attention scores and weighted sums (causal, so the token at
        position p attends to p+1 keys), and the classifier for ``"last"`` or ``"all"`` rows.
        Norms, RoPE and softmax are ignored (well under 1%)."""
        c = self.config
        lin = (c.dim * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim  # qkv
               + c.num_heads * c.head_dim * c.dim  # wo
               + 3 * c.dim * c.hidden_dim)  # w1, w3, w2
        n, p = int(num_new), int(num_past)
        keys = n * p + n * (n + 1) // 2  # sum over new tokens of keys visited
        per_layer = 2.0 * lin * n + 2.0 * 2.0 * c.num_heads * c.head_dim * keys
        rows = n if logits == "all" else (1 if n else 0)
        return c.num_layers * per_layer + 2.0 * c.dim * c.vocab_size * rows
