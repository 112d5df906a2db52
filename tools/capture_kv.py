#!/usr/bin/env python3
"""Captures the KV cache of a real model on real text, in turbokv's raw layout.

Writes ``--out`` as a ``.npy`` of shape ``[num_layers][2][T][num_kv_heads][head_dim]`` (index
0 = K after RoPE, 1 = V; docs/architecture.md, "Terms") in fp16 (default) or fp32, and ``--tokens-out`` as
int32 ``[T]``. A JSON sidecar (``--out`` with ``.json``) records the model, revision, shape and
the command line so a fixture can be traced back to how it was made.

Examples::

    python tools/capture_kv.py --model stories260k --text "Once upon a time" --tokens 4 \\
        --out kv.npy --tokens-out tokens.npy
    python tools/capture_kv.py --model smollm2 --text ../shared/data/wikitext-2/test.txt \\
        --tokens 512 --out kv.npy --tokens-out tokens.npy --dtype fp16

The text is a file path if one exists at that path, else the literal string. A UTF-8 byte-order
mark is dropped. stories260K prompts start with BOS (llama2.c's convention); SmolLM2 prompts do
not (its GGUF says ``add_bos_token = false``); ``--bos``/``--no-bos`` override.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_models():
    """Imports the numpy model package (tools/numpy_llm) of this checkout."""
    sys.path.insert(0, os.path.join(_REPO, "tools"))
    import numpy_llm as models  # noqa: WPS433
    return models


def read_text(text_or_path: str) -> str:
    if os.path.isfile(text_or_path):
        with open(text_or_path, encoding="utf-8") as f:
            text = f.read()
    else:
        text = text_or_path
    return text.lstrip("\ufeff")


def tokenize(model, text: str, num_tokens: int, bos: bool) -> np.ndarray:
    # Encode a prefix of the text long enough for num_tokens (whole files are large).
    chars = max(4096, num_tokens * 16)
    while True:
        ids = model.tokenizer.encode(text[:chars], add_bos=bos)
        if len(ids) > num_tokens or chars >= len(text):
            break
        chars *= 2
    if len(ids) < num_tokens:
        raise SystemExit(f"the text gives only {len(ids)} tokens, {num_tokens} requested")
    return np.asarray(ids[:num_tokens], dtype=np.int32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, choices=["smollm2", "stories260k"])
    ap.add_argument("--model-path", help="checkpoint file (default: cache / shared data)")
    ap.add_argument("--kv-layout", default="hf", choices=["hf", "gguf"],
                    help="SmolLM2 only: K coordinate order (see numpy_llm.gguf_llama)")
    ap.add_argument("--text", required=True, help="a file path, or the text itself")
    ap.add_argument("--tokens", type=int, required=True, help="number of tokens T to capture")
    ap.add_argument("--out", required=True, help="KV .npy [L][2][T][H][D]")
    ap.add_argument("--tokens-out", required=True, help="token ids .npy int32 [T]")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "fp32"])
    bos = ap.add_mutually_exclusive_group()
    bos.add_argument("--bos", dest="bos", action="store_true", default=None)
    bos.add_argument("--no-bos", dest="bos", action="store_false")
    args = ap.parse_args(argv)
    if args.tokens < 1:
        ap.error("--tokens must be >= 1")

    models = import_models()
    t0 = time.perf_counter()
    model = models.load_model(args.model, path=args.model_path, kv_layout=args.kv_layout)
    t_load = time.perf_counter() - t0
    use_bos = args.bos if args.bos is not None else args.model == "stories260k"
    tokens = tokenize(model, read_text(args.text), args.tokens, use_bos)
    t0 = time.perf_counter()
    _, kv = model.prefill(tokens, logits="last")
    t_prefill = time.perf_counter() - t0
    kv = kv.astype(np.float16 if args.dtype == "fp16" else np.float32)
    if not np.all(np.isfinite(kv)):
        raise SystemExit("captured KV has non-finite values (fp16 overflow?)")
    for path in (args.out, args.tokens_out):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.save(args.out, kv)
    np.save(args.tokens_out, tokens)
    meta = {
        "model": model.name, "revision": model.revision, "dtype": args.dtype,
        "layout": "[num_layers][2][T][num_kv_heads][head_dim], 0=K after RoPE, 1=V",
        "shape": list(kv.shape), "num_layers": model.num_layers,
        "num_kv_heads": model.num_kv_heads, "head_dim": model.head_dim,
        "rope_style": model.config.rope_style, "bos": bool(use_bos),
        "command": "python tools/capture_kv.py " + shlex.join(
            sys.argv[1:] if argv is None else argv),
    }
    side = os.path.splitext(args.out)[0] + ".json"
    with open(side, "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"{model.name} ({model.revision}): T={len(tokens)} kv {kv.shape} {kv.dtype} "
          f"{kv.nbytes} bytes -> {args.out}; tokens -> {args.tokens_out}; "
          f"load {t_load:.2f}s prefill {t_prefill:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
