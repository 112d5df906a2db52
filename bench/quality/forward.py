"""The model's forward pass with a hook on every K and V entering attention.

``LlamaModel.prefill`` (tools/numpy_llm/llama.py) has no hook, so this module
repeats its layer loop operation for operation (same numpy calls, same order), adding
``kv_hook(layer, k, v) -> (k, v)`` between computing a layer's K (after RoPE) / V and using
them, and optionally returning each layer's queries (after RoPE) for attention statistics.
With the identity hook the logits equal ``prefill``'s bit for bit (checked by the harness).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from numpy_llm.llama import KV_K, KV_V, _silu, _softmax_inplace, rms_norm

KvHook = Callable[[int, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def forward(model, tokens: Sequence[int], kv_hook: KvHook | None = None,
            keep_queries: bool = False):
    """Full-sequence forward (no past KV) of ``tokens`` with every layer's K/V passed
    through ``kv_hook`` before attention.

    Returns ``(logits [T][vocab] f32, kv [L][2][T][H][D] f32 as the hook returned it,
    queries)`` where queries is a list of ``[T][num_heads][head_dim]`` per layer, or None.
    """
    c = model.config
    toks = np.asarray(tokens, dtype=np.int64).reshape(-1)
    T = int(toks.size)
    S = T
    kv = np.empty(model.kv_shape(S), dtype=np.float32)
    pos = np.arange(0, S, dtype=np.float64)
    ang = pos[:, None] * model._inv_freq[None, :]
    cos = np.cos(ang).astype(np.float32)[:, None, :]
    sin = np.sin(ang).astype(np.float32)[:, None, :]
    mask = np.arange(S)[None, :] > (np.arange(0, S)[:, None])
    scale = np.float32(1.0 / math.sqrt(c.head_dim))
    nh, nkv, hd = c.num_heads, c.num_kv_heads, c.head_dim
    group = nh // nkv
    rows = max(1, min(T, model.attention_chunk_floats // max(1, nh * S)))
    q_cols, k_cols = nh * hd, nkv * hd
    queries: list[np.ndarray] | None = [] if keep_queries else None

    x = model.tok_embeddings[toks]
    for li, w in enumerate(model.layers):
        h = rms_norm(x, w.attn_norm, c.rms_eps)
        qkv = h @ w.wqkv
        q = model._rope(qkv[:, :q_cols].reshape(T, nh, hd), cos, sin)
        kv[li, KV_K] = model._rope(qkv[:, q_cols:q_cols + k_cols].reshape(T, nkv, hd), cos, sin)
        kv[li, KV_V] = qkv[:, q_cols + k_cols:].reshape(T, nkv, hd)
        if kv_hook is not None:
            kv[li, KV_K], kv[li, KV_V] = kv_hook(li, kv[li, KV_K], kv[li, KV_V])
        if queries is not None:
            queries.append(q)
        qh = q.reshape(T, nkv, group, hd).transpose(1, 2, 0, 3)
        kh = kv[li, KV_K].transpose(1, 2, 0)[:, None]
        vh = kv[li, KV_V].transpose(1, 0, 2)[:, None]
        att = np.empty((nkv, group, T, hd), dtype=np.float32)
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
    out = rms_norm(x, model.final_norm, c.rms_eps) @ model._classifier_t
    return out.astype(np.float32, copy=False), kv, queries


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """NLL (nats, float64) of targets[i] under logits[i]; logits [N][vocab]."""
    lg = logits.astype(np.float64)
    m = lg.max(-1, keepdims=True)
    lse = np.log(np.sum(np.exp(lg - m), -1)) + m[:, 0]
    return lse - lg[np.arange(len(targets)), np.asarray(targets)]


def attention_probs(q: np.ndarray, k: np.ndarray, group: int) -> np.ndarray:
    """Causal softmax(q k^T / sqrt(d)) per query head: q [T][nh][D], k [T][nkv][D] ->
    [nkv][group][T][T] float64."""
    T, nh, hd = q.shape
    nkv = k.shape[1]
    qh = q.reshape(T, nkv, group, hd).transpose(1, 2, 0, 3).astype(np.float64)
    kh = k.transpose(1, 2, 0)[:, None].astype(np.float64)
    s = np.matmul(qh, kh) / math.sqrt(hd)
    s[..., np.arange(T)[None, :] > np.arange(T)[:, None]] = -np.inf
    s -= s.max(-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(-1, keepdims=True)
    return s


def attention_kl(p: np.ndarray, q: np.ndarray) -> float:
    """Mean over query rows and heads of KL(p || q) in nats (p, q from attention_probs)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(p > 0, p * (np.log(p) - np.log(np.maximum(q, 1e-300))), 0.0)
    return float(np.mean(np.sum(t, -1)))
