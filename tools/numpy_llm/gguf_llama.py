"""Llama-architecture GGUF checkpoints (SmolLM2-135M-Instruct) read with the PyPI ``gguf`` package.

Conventions and their sources:

* Tensor names (``token_embd``, ``blk.N.attn_q`` ...) and metadata keys (``llama.block_count``,
  ``llama.rope.freq_base`` ...) are llama.cpp's GGUF spec (ggml ``docs/gguf.md``,
  ``gguf-py/gguf/constants.py``). A GGUF tensor of shape ``[ne0=in, ne1=out]`` is a row-major
  ``[out, in]`` matrix; quantized blocks (Q4_1, Q8_0, ...) are dequantized to float32 with
  ``gguf.quants.dequantize``. No ``output.weight`` means tied embeddings.
* ``convert_hf_to_gguf.py`` (``LlamaModel.permute``) reorders the rows of attn_q / attn_k per
  head from Hugging Face's ``[2][head_dim/2]`` (rotate-half RoPE) to ``[head_dim/2][2]`` so that
  llama.cpp's "normal" RoPE on adjacent pairs gives the same attention. Both layouts produce the
  same logits; they differ in the coordinate order of K inside each head:

  - ``kv_layout="hf"`` (default): the permutation is undone and RoPE is rotate-half. K equals
    what transformers / vLLM compute and cache for the Hugging Face checkpoint, which is the
    KV a turbokv client offloads in production.
  - ``kv_layout="gguf"``: rows are left as stored and RoPE is adjacent-pair (llama.cpp's KV).

  The layout is part of ``model.revision`` so that the two never share a turbokv namespace.
* Tokenizer: GPT-2 byte-level BPE from ``tokenizer.ggml.tokens`` / ``tokenizer.ggml.merges``,
  built with the PyPI ``tokenizers`` package. The pre-tokenizer for ``tokenizer.ggml.pre =
  "smollm"`` is llama.cpp's (``llama-vocab.cpp``): split digits one by one, then the GPT-2 regex —
  in ``tokenizers`` terms ``Sequence([Digits(individual_digits=True),
  ByteLevel(add_prefix_space=False)])``, as in SmolLM2's own ``tokenizer.json``. Control tokens
  (``token_type == 3``, e.g. ``<|im_start|>``) are matched as special tokens in the text.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import numpy as np

from .llama import LayerWeights, LlamaConfig, LlamaModel, Tokenizer

KV_LAYOUTS = ("hf", "gguf")
_CONTROL = 3  # llama.cpp LLAMA_TOKEN_TYPE_CONTROL


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise KeyError(f"GGUF metadata {key!r} is missing")
        return default
    return f.contents()


class GgufBpeTokenizer(Tokenizer):
    """Byte-level BPE from GGUF metadata (``tokenizer.ggml.model == "gpt2"``)."""

    def __init__(self, tokens: list[str], merges: list[str], token_types: Sequence[int],
                 bos_id: int, eos_id: int, chat_template: str = ""):
        try:
            from tokenizers import AddedToken, decoders, models, pre_tokenizers
            from tokenizers import Tokenizer as HfTokenizer
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("the SmolLM2 tokenizer needs the PyPI package `tokenizers`") from e
        vocab: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        pairs = []
        for m in merges:
            a, sep, b = m.partition(" ")
            if not sep or " " in b:
                raise ValueError(f"malformed merge {m!r}")
            pairs.append((a, b))
        bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
        tok = HfTokenizer(bpe)
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        tok.decoder = decoders.ByteLevel()
        specials = [tokens[i] for i, t in enumerate(token_types) if int(t) == _CONTROL]
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        self._tok = tok
        self.special_tokens = specials
        self.vocab_size = len(tokens)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.chat_template = chat_template

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if add_bos else []) + list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)


SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def format_chatml(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True,
                  default_system: str | None = SMOLLM2_DEFAULT_SYSTEM) -> str:
    """SmolLM2's chat template (GGUF ``tokenizer.chat_template``, ChatML) rendered in Python:
    ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, a default system message when
    the first message is not a system one, and ``<|im_start|>assistant\\n`` to prompt a reply."""
    out = []
    if messages and messages[0]["role"] != "system" and default_system is not None:
        out.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
    for m in messages:
        out.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def _unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undoes convert_hf_to_gguf.py ``permute``: per head, rows ``[hd/2][2]`` -> ``[2][hd/2]``."""
    out, inp = w.shape
    return w.reshape(n_head, out // n_head // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def _sha256_prefix(path: str, n: int = 16) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:n]


def load_gguf_llama(path: str, kv_layout: str = "hf", name: str | None = None) -> LlamaModel:
    """Loads a ``general.architecture == "llama"`` GGUF file as a float32 :class:`LlamaModel`.

    Args:
      path: the ``.gguf`` file.
      kv_layout: ``"hf"`` or ``"gguf"`` (module docstring); decides the K coordinate order.
      name: model id; default the file name without ``.gguf`` and the quantization suffix.

    ``revision`` is ``"sha256:<16 hex of the file>-kv-<layout>"``.
    """
    try:
        import gguf
        from gguf import quants
    except ImportError as e:  # pragma: no cover
        raise ImportError("reading GGUF needs the PyPI package `gguf`") from e
    if kv_layout not in KV_LAYOUTS:
        raise ValueError(f"kv_layout {kv_layout!r} is not one of {KV_LAYOUTS}")
    r = gguf.GGUFReader(path)
    arch = _field(r, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}, only 'llama' is supported")
    n_layers = int(_field(r, "llama.block_count"))
    dim = int(_field(r, "llama.embedding_length"))
    n_heads = int(_field(r, "llama.attention.head_count"))
    n_kv = int(_field(r, "llama.attention.head_count_kv"))
    head_dim = dim // n_heads
    rope_dims = int(_field(r, "llama.rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise ValueError(f"partial RoPE ({rope_dims} of {head_dim} dims) is not supported")

    tensors = {t.name: t for t in r.tensors}

    def get(name_: str) -> np.ndarray:
        t = tensors.get(name_)
        if t is None:
            raise KeyError(f"{path}: tensor {name_!r} is missing")
        a = quants.dequantize(t.data, t.tensor_type)
        return np.asarray(a, dtype=np.float32)

    emb = get("token_embd.weight")
    vocab = emb.shape[0]
    layers = []
    hidden = None
    for l in range(n_layers):
        p = f"blk.{l}."
        wq, wk = get(p + "attn_q.weight"), get(p + "attn_k.weight")
        if kv_layout == "hf":
            wq, wk = _unpermute_rows(wq, n_heads), _unpermute_rows(wk, n_kv)
        w1 = get(p + "ffn_gate.weight")
        hidden = w1.shape[0]
        layers.append(LayerWeights.from_out_in(
            get(p + "attn_norm.weight"), wq, wk, get(p + "attn_v.weight"),
            get(p + "attn_output.weight"), get(p + "ffn_norm.weight"), w1,
            get(p + "ffn_down.weight"), get(p + "ffn_up.weight")))
    classifier = get("output.weight") if "output.weight" in tensors else None
    config = LlamaConfig(
        dim=dim, hidden_dim=int(hidden), num_layers=n_layers, num_heads=n_heads,
        num_kv_heads=n_kv, head_dim=head_dim, vocab_size=vocab,
        rope_base=float(_field(r, "llama.rope.freq_base", 10000.0)),
        rope_style="half" if kv_layout == "hf" else "interleaved",
        rms_eps=float(_field(r, "llama.attention.layer_norm_rms_epsilon")),
        max_seq_len=int(_field(r, "llama.context_length")))
    model_kind = _field(r, "tokenizer.ggml.model")
    if model_kind != "gpt2":
        raise ValueError(f"tokenizer model {model_kind!r} is not supported (only 'gpt2' BPE)")
    tok = GgufBpeTokenizer(
        tokens=list(_field(r, "tokenizer.ggml.tokens")),
        merges=list(_field(r, "tokenizer.ggml.merges")),
        token_types=list(_field(r, "tokenizer.ggml.token_type")),
        bos_id=int(_field(r, "tokenizer.ggml.bos_token_id")),
        eos_id=int(_field(r, "tokenizer.ggml.eos_token_id")),
        chat_template=str(_field(r, "tokenizer.chat_template", "")))
    if name is None:
        name = os.path.basename(path)
        name = name[:-5] if name.endswith(".gguf") else name
        name = name.split(".Q")[0]
    revision = f"sha256:{_sha256_prefix(path)}-kv-{kv_layout}"
    return LlamaModel(name, revision, config, emb, layers, get("output_norm.weight"),
                      classifier, tok)
