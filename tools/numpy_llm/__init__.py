"""Real models for turbokv demos and quality measurements (numpy, float32, CPU only).

Not part of the client package: the demo (tools/demo), the quality harness (bench/quality),
tools/capture_kv.py and the tests import it as ``numpy_llm`` with ``<repo>/tools`` on sys.path.
Every model is a :class:`LlamaModel` with one interface::

    sys.path.insert(0, "<repo>/tools")
    from numpy_llm import load_model
    model = load_model("smollm2")            # or "stories260k"
    ids = model.tokenizer.encode("Hello")
    logits, kv = model.prefill(ids)          # logits [T, vocab] f32; kv [L][2][T][H][D] f32
    logits2, kv2 = model.prefill(more_ids, past_kv=kv)   # continue after the stored prefix

``kv`` is turbokv's raw layout (docs/architecture.md, "Terms"): ``[num_layers][2][T][num_kv_heads]
[head_dim]``, index 0 = K after RoPE, 1 = V; callers cast it to the namespace dtype (fp16).
``model.name`` / ``model.revision`` identify the weights and the K coordinate convention for a
namespace; ``num_layers``, ``num_kv_heads``, ``head_dim``, ``vocab_size`` give the shape.

This package needs only numpy (plus ``gguf`` and ``tokenizers`` for SmolLM2) and never
imports the gRPC client.
"""

from __future__ import annotations

import os

from .fetch import ModelUnavailable, cache_dir, ensure_smollm2
from .gguf_llama import GgufBpeTokenizer, format_chatml, load_gguf_llama
from .llama import KV_K, KV_V, LayerWeights, LlamaConfig, LlamaModel, Tokenizer
from .llama2c import Llama2cTokenizer, load_llama2c

MODEL_NAMES = ("smollm2", "stories260k")

#: Where stories260K lives in the shared development data (not shipped with the project).
DEFAULT_STORIES260K = os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                   "shared", "data", "stories260K", "model.bin")


def default_stories260k_path() -> str:
    """``$TURBOKV_STORIES260K`` or ``<repo>/../shared/data/stories260K/model.bin``."""
    return os.path.normpath(os.environ.get("TURBOKV_STORIES260K") or DEFAULT_STORIES260K)


def load_model(name: str, path: str | None = None, cache: str | None = None,
               kv_layout: str = "hf", download: bool = True) -> LlamaModel:
    """Loads ``"smollm2"`` (SmolLM2-135M-Instruct, fetched into the cache if ``path`` is None)
    or ``"stories260k"`` (a llama2.c ``model.bin``; ``tokenizer.bin`` beside it).

    Raises:
      ModelUnavailable: SmolLM2 is neither at ``path`` nor cached, and cannot be downloaded.
      FileNotFoundError: the stories260K checkpoint is not there.
      ValueError: unknown name.
    """
    key = name.lower()
    if key == "smollm2":
        p = path or str(ensure_smollm2(cache, download=download))
        return load_gguf_llama(p, kv_layout=kv_layout, name="SmolLM2-135M-Instruct")
    if key == "stories260k":
        p = path or default_stories260k_path()
        if not os.path.exists(p):
            raise FileNotFoundError(f"stories260K checkpoint not found at {p} "
                                    f"(set --model-path or $TURBOKV_STORIES260K)")
        return load_llama2c(p, name="stories260K")
    raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES}")


__all__ = [
    "KV_K", "KV_V", "MODEL_NAMES", "GgufBpeTokenizer", "LayerWeights", "Llama2cTokenizer",
    "LlamaConfig", "LlamaModel", "ModelUnavailable", "Tokenizer", "cache_dir",
    "default_stories260k_path", "ensure_smollm2", "format_chatml", "load_gguf_llama",
    "load_llama2c", "load_model",
]
