"""Per-channel structure of real keys and what it costs the codec (issue 12, item 1).

For SmolLM2-135M on WikiText-2 windows (the all_kv windows of run.py, keys after RoPE, cast to
fp16 as the namespace stores them), per layer:

* per-channel mean and RMS of the keys, before and after the codec's rotation (random signs +
  normalized Walsh-Hadamard per group of g, kernels/FORMAT.md "The math"): the share of key
  energy in the per-channel mean (over the window and over each 16-token block), and how peaked
  the channel RMS profile is (max / median channel RMS);
* the attention-logit error of the codec on the keys (q . (k_hat - k) / sqrt(d), centred per
  query row over the keys it attends to, since softmax ignores a per-row constant) and the share
  of it that per-block per-channel centering removes: quantize k - mu_b (mu_b the block's
  per-channel mean, kept exact) and add mu_b back;
* attention KL(exact || quantized keys) per layer for the codec, the centred codec, and the
  codec with the layer kept at 8 bits.

Also runs on the committed 64-token fixture without the model (--fixture): statistics only.

Usage:
  python bench/quality/channel_stats.py --windows 4 --out /tmp/channel_stats.json
  python bench/quality/channel_stats.py --fixture tests/fixtures/smollm2_kv_64_fp16.npy
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, HERE)

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
ROTATION_SEED = 0x7475726B6F6B7631
BLOCK = 16


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def signs(layer: int, kv: int, head_dim: int) -> np.ndarray:
    """+-1 per head-vector coordinate (FORMAT.md, "Rotation signs")."""
    key = mix64(ROTATION_SEED ^ mix64((layer << 1) | kv))
    return np.array([-1.0 if mix64((key + (j + 1) * GAMMA) & M64) >> 63 else 1.0
                     for j in range(head_dim)])


def hadamard(g: int) -> np.ndarray:
    h = np.array([[1.0]])
    while h.shape[0] < g:
        h = np.block([[h, h], [h, -h]])
    return h / math.sqrt(g)


def rotate(x: np.ndarray, layer: int, kv: int, g: int) -> np.ndarray:
    """x [..., D] -> the codec's rotated coordinates (orthonormal, per group of g)."""
    D = x.shape[-1]
    y = (x * signs(layer, kv, D)).reshape(x.shape[:-1] + (D // g, g))
    return (y @ hadamard(g)).reshape(x.shape)


def channel_stats(k: np.ndarray) -> dict:
    """k [T][H][D] float64: energy share of the per-channel mean (window, 16-token blocks) and
    the channel RMS profile (per head, then averaged)."""
    T, H, D = k.shape
    e = float(np.mean(np.sum(k ** 2, -1)))
    mu = k.mean(0)  # [H][D]
    share_win = float(np.mean(np.sum(mu ** 2, -1))) / e
    nb = T // BLOCK
    kb = k[:nb * BLOCK].reshape(nb, BLOCK, H, D)
    mub = kb.mean(1)
    share_blk = float(np.mean(np.sum(mub ** 2, -1))) / e
    rms = np.sqrt(np.mean(k ** 2, 0))  # [H][D]
    peak = float(np.mean(rms.max(-1) / np.median(rms, -1)))
    # share of energy in the top 4 channels (per head)
    top4 = float(np.mean(np.sort(rms ** 2, -1)[:, -4:].sum(-1) / (rms ** 2).sum(-1)))
    # |mean| / rms of the channel, averaged over channels weighted by energy
    return dict(mean_share_window=share_win, mean_share_block16=share_blk,
                rms_peak_over_median=peak, top4_channel_energy=top4)


def fixture_report(path: str) -> dict:
    kv = np.load(path).astype(np.float64)  # [L][2][T][H][D]
    L = kv.shape[0]
    out = []
    for l in range(L):
        k = kv[l, 0]
        row = dict(layer=l, before=channel_stats(k))
        for g in (32, 64):
            row["after_g%d" % g] = channel_stats(rotate(k, l, 0, g))
        row["v_before"] = channel_stats(kv[l, 1])
        out.append(row)
    return dict(source=path, tokens=int(kv.shape[2]), layers=out)


def centred_rows_mse(q: np.ndarray, err: np.ndarray, group: int) -> float:
    """Mean over heads/queries of Var_t<=i (q_i . err_t / sqrt(d)): the softmax-relevant logit
    error. q [T][nh][D], err [T][nkv][D]."""
    T, nh, hd = q.shape
    nkv = err.shape[1]
    qh = q.reshape(T, nkv, group, hd).transpose(1, 2, 0, 3)
    eh = err.transpose(1, 2, 0)[:, None]
    s = np.matmul(qh, eh) / math.sqrt(hd)  # [nkv][group][T][T]
    mask = np.arange(T)[None, :] <= np.arange(T)[:, None]
    cnt = mask.sum(-1)
    s = np.where(mask, s, 0.0)
    mean = s.sum(-1) / cnt
    var = (np.where(mask, s ** 2, 0.0).sum(-1) / cnt) - mean ** 2
    return float(np.mean(var[..., 1:]))  # row 0 has one key: no relative error


def raw_rows_mse(q: np.ndarray, err: np.ndarray, group: int) -> float:
    T, nh, hd = q.shape
    nkv = err.shape[1]
    qh = q.reshape(T, nkv, group, hd).transpose(1, 2, 0, 3)
    eh = err.transpose(1, 2, 0)[:, None]
    s = np.matmul(qh, eh) / math.sqrt(hd)
    mask = np.arange(T)[None, :] <= np.arange(T)[:, None]
    return float(np.sum(np.where(mask, s ** 2, 0.0)) / (mask.sum() * s.shape[0] * s.shape[1]))


MEAN_BLOCK = BLOCK  # tokens per stored key mean (--mean-block)


def block_means(k: np.ndarray) -> np.ndarray:
    T, H, D = k.shape
    b = MEAN_BLOCK
    nb = T // b
    mub = k[:nb * b].reshape(nb, b, H, D).mean(1, keepdims=True)
    return np.broadcast_to(mub, (nb, b, H, D)).reshape(nb * b, H, D)


def model_report(args) -> dict:
    import quantizers
    from forward import attention_kl, attention_probs, forward
    from run import window_starts

    from numpy_llm import load_model
    model = load_model("smollm2", path=args.model_path)
    with open(args.text, encoding="utf-8") as f:
        ids = np.asarray(model.tokenizer.encode(f.read()), dtype=np.int64)
    L, H, D = model.num_layers, model.num_kv_heads, model.head_dim
    group = model.config.num_heads // H
    rows = {r.name: r for r in quantizers.all_rows()}
    codecs = {}
    for name in args.rows.split(","):
        codecs[name] = quantizers.LayerQuantizer(rows[name], L, H, D)
    k8 = quantizers.LayerQuantizer(rows["k8v4"], L, H, D)
    starts = window_starts(ids.size, args.tokens, 33)[args.first_window:args.first_window + args.windows]
    acc = {}
    t0 = time.time()
    for wi, s0 in enumerate(starts):
        toks = ids[s0:s0 + args.tokens]
        _, kv, qs = forward(model, toks, keep_queries=True)
        for l in range(L):
            k = kv[l, 0].astype(np.float16).astype(np.float64)
            v = kv[l, 1].astype(np.float16).astype(np.float32)
            q = qs[l].astype(np.float64)
            a = acc.setdefault(l, {})

            def add(key, val):
                a[key] = a.get(key, 0.0) + val / len(starts)

            for kk, vv in channel_stats(k).items():
                add("before." + kk, vv)
            for g in (32, 64):
                for kk, vv in channel_stats(rotate(k, l, 0, g)).items():
                    add("after_g%d.%s" % (g, kk), vv)
            p = attention_probs(q, k, group)
            for name, qz in codecs.items():
                kh, _ = qz.layer_kv(l, k.astype(np.float32), v)
                kh = kh.astype(np.float64)
                mu = block_means(k)
                kc, _ = qz.layer_kv(l, (k - mu).astype(np.float32), v)
                kc = kc.astype(np.float64) + mu
                # channel-mean-only error: quantize with the mean removed from the *error*
                add(name + ".logit_var", centred_rows_mse(q, kh - k, group))
                add(name + ".logit_var_centred", centred_rows_mse(q, kc - k, group))
                add(name + ".logit_mse", raw_rows_mse(q, kh - k, group))
                add(name + ".logit_mse_centred", raw_rows_mse(q, kc - k, group))
                add(name + ".rel_mse", float(np.sum((kh - k) ** 2) / np.sum(k ** 2)))
                add(name + ".rel_mse_centred", float(np.sum((kc - k) ** 2) / np.sum(k ** 2)))
                add(name + ".kl", attention_kl(p, attention_probs(q, kh, group)))
                add(name + ".kl_centred", attention_kl(p, attention_probs(q, kc, group)))
            k8h, _ = k8.layer_kv(l, k.astype(np.float32), v)
            add("k8.kl", attention_kl(p, attention_probs(q, k8h.astype(np.float64), group)))
        print("window %d/%d done (%.0fs)" % (wi + 1, len(starts), time.time() - t0), flush=True)
    return dict(windows=len(starts), tokens=args.tokens, starts=[int(s) for s in starts],
                rows=list(codecs), layers=[dict(layer=l, **acc[l]) for l in range(L)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixture", default="", help="KV .npy [L][2][T][H][D]: statistics only")
    ap.add_argument("--text", default=os.path.join(REPO, "..", "shared", "data", "wikitext-2",
                                                   "test.txt"))
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--first-window", type=int, default=0, help="of run.py's 33 all_kv windows")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--rows", default="k4v4-g32,turbo4 (k4v4-g64)")
    ap.add_argument("--mean-block", type=int, default=BLOCK,
                    help="tokens per centring mean (16: a 16-token block; 256: LMCache's chunk)")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    global MEAN_BLOCK
    MEAN_BLOCK = args.mean_block
    rep = fixture_report(args.fixture) if args.fixture else model_report(args)
    text = json.dumps(rep, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
