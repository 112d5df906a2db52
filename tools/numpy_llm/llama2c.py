"""Karpathy's llama2.c checkpoint and tokenizer formats (e.g. stories260K).

Checkpoint (``model.bin``, the "legacy" export of llama2.c ``export.py``; layout from ``run.c``
``read_checkpoint`` / ``memory_map_weights``): seven int32 — dim, hidden_dim, n_layers, n_heads,
n_kv_heads, vocab_size (negative: the classifier is not tied and follows the RoPE tables),
seq_len — then float32 tensors stored ``[out, in]``: token embeddings ``[vocab, dim]``;
rms_att ``[L, dim]``; wq ``[L, dim, dim]``; wk, wv ``[L, kv_dim, dim]``; wo ``[L, dim, dim]``;
rms_ffn ``[L, dim]``; w1 ``[L, hidden, dim]``; w2 ``[L, dim, hidden]``; w3 ``[L, hidden, dim]``;
rms_final ``[dim]``; two unused RoPE tables ``seq_len * head_dim/2`` each; then the classifier
``[vocab, dim]`` if untied. RMSNorm eps 1e-5, RoPE base 10000 on adjacent pairs.

Tokenizer (``tokenizer.bin``, ``run.c`` ``build_tokenizer``): int32 max_token_length, then per
token: float32 score, int32 byte length, bytes. Encoding is llama2.c's ``encode``: a dummy-prefix
space token, one token per UTF-8 code point (or ``<0xXX>`` byte-fallback tokens at id byte+3),
then repeatedly merge the adjacent pair whose concatenation is in the vocabulary with the highest
score (SentencePiece BPE semantics).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from collections.abc import Sequence

import numpy as np

from .llama import LayerWeights, LlamaConfig, LlamaModel, Tokenizer

_BYTE_PIECE = re.compile(rb"^<0x([0-9A-Fa-f]{2})>$")


class Llama2cTokenizer(Tokenizer):
    """llama2.c SentencePiece-style BPE tokenizer (BOS = 1, EOS = 2)."""

    def __init__(self, path: str, vocab_size: int):
        with open(path, "rb") as f:
            data = f.read()
        (self.max_token_length,) = struct.unpack_from("<i", data, 0)
        off = 4
        self.pieces: list[bytes] = []
        self.scores: list[float] = []
        for _ in range(vocab_size):
            score, n = struct.unpack_from("<fi", data, off)
            off += 8
            self.pieces.append(data[off:off + n])
            off += n
            self.scores.append(score)
        if off != len(data):
            raise ValueError(f"{path}: {len(data) - off} trailing bytes after {vocab_size} tokens")
        self._lookup: dict[bytes, int] = {}
        for i, p in enumerate(self.pieces):
            self._lookup.setdefault(p, i)
        self.vocab_size = vocab_size
        self.bos_id = 1
        self.eos_id = 2

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of ``text`` (llama2.c ``encode`` with bos=add_bos, eos=0)."""
        ids: list[int] = [self.bos_id] if add_bos else []
        if not text:
            return ids
        toks: list[int] = [self._lookup[b" "]]
        for ch in text:
            b = ch.encode("utf-8")
            tid = self._lookup.get(b)
            if tid is not None:
                toks.append(tid)
            else:
                toks.extend(x + 3 for x in b)
        while True:
            best, best_i, best_id = -1e10, -1, -1
            for i in range(len(toks) - 1):
                tid = self._lookup.get(self.pieces[toks[i]] + self.pieces[toks[i + 1]])
                if tid is not None and self.scores[tid] > best:
                    best, best_i, best_id = self.scores[tid], i, tid
            if best_i < 0:
                break
            toks[best_i:best_i + 2] = [best_id]
        return ids + toks

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` as llama2.c ``decode`` prints it: the space that starts the piece right
        after BOS is dropped (the dummy prefix), ``<0xXX>`` pieces become raw bytes, BOS/EOS are
        dropped. Without a BOS the text keeps its leading space, so decoded continuations can be
        appended to a prompt as they are."""
        out = bytearray()
        prev = -1
        for t in ids:
            t = int(t)
            if t in (self.bos_id, self.eos_id):
                prev = t
                continue
            piece = self.pieces[t]
            if prev == self.bos_id and piece.startswith(b" "):
                piece = piece[1:]
            m = _BYTE_PIECE.match(piece)
            out += bytes([int(m.group(1), 16)]) if m else piece
            prev = t
        return out.decode("utf-8", errors="replace")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_llama2c(model_path: str, tokenizer_path: str = None, name: str = None) -> LlamaModel:
    """Loads a llama2.c ``model.bin`` (and ``tokenizer.bin`` beside it unless given).

    ``revision`` is ``"sha256:<first 16 hex of the checkpoint>-rope-interleaved"``; the KV this
    model produces is in llama2.c's native (adjacent-pair RoPE) coordinate order.
    """
    if tokenizer_path is None:
        tokenizer_path = os.path.join(os.path.dirname(os.path.abspath(model_path)),
                                      "tokenizer.bin")
    raw = np.fromfile(model_path, dtype=np.uint8)
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack_from("<7i", raw, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    head_dim = dim // n_heads
    kv_dim = n_kv * head_dim
    w = raw[28:].view(np.float32) if (raw.size - 28) % 4 == 0 else None
    if w is None:
        raise ValueError(f"{model_path}: payload is not a whole number of float32")
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        if off + n > w.size:
            raise ValueError(f"{model_path}: truncated (need {off + n} floats, have {w.size})")
        a = w[off:off + n].reshape(shape)
        off += n
        return a

    emb = take(vocab, dim)
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    rms_final = take(dim)
    take(seq_len * head_dim // 2)  # freq_cis_real (unused)
    take(seq_len * head_dim // 2)  # freq_cis_imag (unused)
    classifier = None if shared else take(vocab, dim)
    if off != w.size:
        raise ValueError(f"{model_path}: {w.size - off} trailing floats; header may be wrong")

    config = LlamaConfig(dim=dim, hidden_dim=hidden, num_layers=n_layers, num_heads=n_heads,
                         num_kv_heads=n_kv, head_dim=head_dim, vocab_size=vocab,
                         rope_base=10000.0, rope_style="interleaved", rms_eps=1e-5,
                         max_seq_len=seq_len)
    layers = [LayerWeights.from_out_in(rms_att[l], wq[l], wk[l], wv[l], wo[l], rms_ffn[l],
                                       w1[l], w2[l], w3[l]) for l in range(n_layers)]
    tok = Llama2cTokenizer(tokenizer_path, vocab)
    if name is None:
        name = os.path.basename(os.path.dirname(os.path.abspath(model_path))) or "llama2c"
    revision = f"sha256:{file_sha256(model_path)[:16]}-rope-interleaved"
    return LlamaModel(name, revision, config, emb.copy(), layers, rms_final.copy(),
                      None if classifier is None else classifier.copy(), tok)
