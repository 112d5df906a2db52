#!/usr/bin/env python3
"""Per-layer perplexity sensitivity (all_kv protocol): how much each layer's K or V costs.

For each all_kv window and each layer l, runs the hooked forward with only layer l's K (or
only its V) through a turbokv codec and every other K and V exact (fp16), and records the NLL
change against the fp16 reference. Summed over layers this is a first-order split of the
all_kv loss by layer and by K/V: if a few layers carry most of it, a per-layer bit allocation
(more bits there, fewer elsewhere) would buy more than a uniform one at the same bpv.
Usage (≈ 2 × layers forwards per window):

  python bench/quality/layer_sensitivity.py --windows 2 --key 5:32 --value 4:64 \\
      --out bench/results/issue12b/layer_sensitivity.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402


def main(argv=None) -> int:
    import quantizers
    import run  # the harness: text, windows
    from forward import forward, token_nll

    from numpy_llm import load_model
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, default=2, help="first N all_kv windows")
    ap.add_argument("--all-windows", type=int, default=33, help="the plan's window count")
    ap.add_argument("--all-tokens", type=int, default=512)
    ap.add_argument("--key", default="5:32", help="bits:group of the keys' codec")
    ap.add_argument("--value", default="4:64", help="bits:group of the values' codec")
    ap.add_argument("--text", default=run.DEFAULT_TEXT)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    kb, kg = (int(x) for x in args.key.split(":"))
    vb, vg = (int(x) for x in args.value.split(":"))
    model = load_model("smollm2")
    with open(args.text, encoding="utf-8") as f:
        ids = np.asarray(model.tokenizer.encode(f.read()), dtype=np.int64)
    L, H, D = model.num_layers, model.num_kv_heads, model.head_dim
    starts = run.window_starts(ids.size, args.all_tokens, args.all_windows)
    row = quantizers.Row("sens", "codec", "study", params=quantizers._p(kb, vb, kg=kg, vg=vg))
    q = quantizers.LayerQuantizer(row, L, H, D)
    to16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    dk = np.zeros((args.windows, L))
    dv = np.zeros((args.windows, L))
    ref = np.zeros(args.windows)
    t0 = time.time()
    for wi in range(args.windows):
        w = ids[starts[wi]:starts[wi] + args.all_tokens]
        targets = w[1:]
        lg, _, _ = forward(model, w, lambda l, k, v: (to16(k), to16(v)))
        ref[wi] = float(np.sum(token_nll(lg[:-1], targets)))
        for l in range(L):
            for j, out in ((0, dk), (1, dv)):
                def hook(li, k, v, l=l, j=j):
                    k, v = to16(k), to16(v)
                    if li != l:
                        return k, v
                    kh, vh = q.layer_kv(li, k, v)
                    return (kh, v) if j == 0 else (k, vh)
                lg_r, _, _ = forward(model, w, hook)
                out[wi, l] = float(np.sum(token_nll(lg_r[:-1], targets))) - ref[wi]
            print("window %d layer %d: dNLL K %+.3f V %+.3f (%.0f s)"
                  % (wi, l, dk[wi, l], dv[wi, l], time.time() - t0), file=sys.stderr, flush=True)
        res = dict(key="%d-bit g=%d" % (kb, kg), value="%d-bit g=%d" % (vb, vg),
                   windows=wi + 1, tokens_per_window=args.all_tokens - 1,
                   ref_nll=ref[:wi + 1].tolist(), dnll_k=dk[:wi + 1].tolist(),
                   dnll_v=dv[:wi + 1].tolist(),
                   # Δppl (%) of quantizing only that layer's K / V, over the windows done
                   dppl_k_pct=(np.expm1(dk[:wi + 1].sum(0) / ((wi + 1) * (args.all_tokens - 1)))
                               * 100).tolist(),
                   dppl_v_pct=(np.expm1(dv[:wi + 1].sum(0) / ((wi + 1) * (args.all_tokens - 1)))
                               * 100).tolist())
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
