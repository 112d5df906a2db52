"""Prefix hashing of token sequences into block hashes.

The contract (identical in every client language; client/include/turbokv/client/
prefix_hasher.h is the normative text, ``hash_vectors.json`` beside this file holds the test
vectors both the C++ and the Python tests check)::

    h_{-1} = SHA-256(namespace_id as 8 bytes little-endian)
    h_i    = SHA-256(h_{i-1} || tokens of block i as uint32 little-endian || extra_key)

Only full blocks are hashed: ``len(tokens) // block_tokens`` hashes of 32 bytes each; a
trailing partial block gets none. Token ids must lie in ``[0, 2**32)``.

Hashes made with another block size than the namespace's never match anything (nothing can
tell from the hashes). Bind the hasher to the namespace: ``NamespaceInfo.prefix_hasher()`` (or
``PrefixHasher(ns_id, block_tokens=...)``); it then refuses any other block size.
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import numpy as np

HASH_BYTES = 32

TokenLike = Sequence[int] | np.ndarray


class PrefixHasher:
    """Computes the prefix chain of a token sequence for one namespace.

    Args:
      namespace_id: the u64 namespace id returned by ``Client.register_namespace``.
      extra_key: bytes the KV depends on besides namespace and tokens (LoRA id, multimodal
        input hash, ...), appended to every block. Default ``b""``.
      block_tokens: the namespace's tokens per block. When set, ``block_hashes`` uses it and
        refuses any other value (hashes of another block size never match). Default None
        (``block_hashes`` then needs it on every call).

    Immutable and thread-safe.
    """

    def __init__(self, namespace_id: int, extra_key: bytes = b"", *,
                 block_tokens: int | None = None):
        if not 0 <= int(namespace_id) < 2 ** 64:
            raise ValueError("namespace_id %r is not a u64" % (namespace_id,))
        if block_tokens is not None and int(block_tokens) < 1:
            raise ValueError("block_tokens must be >= 1, got %r" % (block_tokens,))
        self._namespace_id = int(namespace_id)
        self._extra_key = bytes(extra_key)
        self._block_tokens = None if block_tokens is None else int(block_tokens)

    @property
    def namespace_id(self) -> int:
        return self._namespace_id

    @property
    def extra_key(self) -> bytes:
        return self._extra_key

    @property
    def block_tokens(self) -> int | None:
        """The bound block size (None: unbound)."""
        return self._block_tokens

    def root_hash(self) -> bytes:
        """h_{-1}: SHA-256 of the namespace id as 8 little-endian bytes (32 bytes)."""
        return hashlib.sha256(struct.pack("<Q", self._namespace_id)).digest()

    def next_hash(self, prev: bytes, block: TokenLike) -> bytes:
        """h_i from h_{i-1} (``prev``, 32 bytes) and one block's tokens."""
        return hashlib.sha256(bytes(prev) + _tokens_le(block) + self._extra_key).digest()

    def block_hashes(self, tokens: TokenLike, block_tokens: int | None = None) -> list[bytes]:
        """The prefix chain of ``tokens``: ``len(tokens) // block_tokens`` 32-byte hashes.

        Args:
          tokens: 1-D ints in [0, 2**32) (list, tuple or numpy array of any integer dtype).
          block_tokens: tokens per block (the namespace's ``block_tokens``), >= 1; optional
            when the hasher is bound, and then it must equal the bound value.
        Raises:
          ValueError: block_tokens missing (unbound hasher), other than the bound value,
            or < 1; tokens not 1-D, or an id outside [0, 2**32).
        """
        if block_tokens is None:
            if self._block_tokens is None:
                raise ValueError("block_tokens is required: pass the namespace's block_tokens "
                                 "or bind it (NamespaceInfo.prefix_hasher())")
            block_tokens = self._block_tokens
        elif self._block_tokens is not None and int(block_tokens) != self._block_tokens:
            raise ValueError("block_tokens %d differs from the namespace's %d: such hashes never "
                             "match" % (int(block_tokens), self._block_tokens))
        if int(block_tokens) < 1:
            raise ValueError("block_tokens must be >= 1, got %r" % (block_tokens,))
        bt = int(block_tokens)
        le = _tokens_le(tokens)
        n = len(le) // (4 * bt)
        out = []
        h = self.root_hash()
        for i in range(n):
            h = hashlib.sha256(h + le[i * 4 * bt:(i + 1) * 4 * bt] + self._extra_key).digest()
            out.append(h)
        return out


def _tokens_le(tokens: TokenLike) -> bytes:
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError("tokens must be 1-D, got shape %s" % (arr.shape,))
    if arr.size == 0:
        return b""
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError("tokens must be integers, got dtype %s" % arr.dtype)
    if arr.dtype.kind == "i" and int(arr.min()) < 0:
        raise ValueError("token ids must be >= 0 (got %d)" % int(arr.min()))
    if int(arr.max()) >= 2 ** 32:
        raise ValueError("token ids must be < 2**32 (got %d)" % int(arr.max()))
    return arr.astype("<u4").tobytes()
