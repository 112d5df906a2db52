"""PrefixHasher against the shared vectors (the same file the C++ unit tests check) and the
contract written out with hashlib."""
from __future__ import annotations

import hashlib
import json
import os
import struct

import numpy as np
import pytest

from conftest import CLIENT_PY
from turbokv.hasher import PrefixHasher

VECTORS = os.path.join(CLIENT_PY, "turbokv", "hash_vectors.json")


def _vectors():
    with open(VECTORS) as f:
        return json.load(f)["vectors"]


@pytest.mark.parametrize("v", _vectors(), ids=lambda v: v["name"])
def test_shared_vectors(v):
    h = PrefixHasher(int(v["namespace_id"], 16), bytes.fromhex(v["extra_key_hex"]))
    assert h.root_hash().hex() == v["root_hash"]
    got = h.block_hashes(v["tokens"], v["block_tokens"])
    assert [x.hex() for x in got] == v["block_hashes"]
    assert all(len(x) == 32 for x in got)
    # Same result for numpy inputs of several integer dtypes.
    for dt in (np.int64, np.uint32, np.int32 if max(v["tokens"] or [0]) < 2 ** 31 else np.int64):
        arr = np.asarray(v["tokens"], dtype=dt)
        assert [x.hex() for x in h.block_hashes(arr, v["block_tokens"])] == v["block_hashes"]


def test_vectors_cover_the_edges():
    names = {v["name"] for v in _vectors()}
    assert {"empty_chain", "partial_only", "trailing_partial_dropped", "extra_key",
            "high_namespace_bit"} <= names


def test_pinned_root_and_first_block():
    # h_-1 for namespace 0 is SHA-256 of eight zero bytes.
    assert PrefixHasher(0).root_hash().hex() == (
        "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc")
    ns = 0x0123456789ABCDEF
    root = hashlib.sha256(struct.pack("<Q", ns)).digest()
    want = hashlib.sha256(root + b"\x01\x00\x00\x00\x02\x00\x00\x00").digest()
    assert PrefixHasher(ns).block_hashes([1, 2, 3], 2) == [want]


def test_prefix_property_and_divergence():
    h = PrefixHasher(5)
    a = h.block_hashes(list(range(40)), 8)
    b = h.block_hashes(list(range(20)) + [999] * 20, 8)
    assert len(a) == 5 and len(b) == 5
    assert a[:2] == b[:2] and a[2] != b[2]
    assert h.next_hash(h.next_hash(h.root_hash(), range(8)), range(8, 16)) == a[1]


def test_rejects_bad_input():
    h = PrefixHasher(1)
    with pytest.raises(ValueError):
        h.block_hashes([1, 2], 0)
    with pytest.raises(ValueError):
        h.block_hashes([-1, 2], 1)
    with pytest.raises(ValueError):
        h.block_hashes([2 ** 32], 1)
    with pytest.raises(ValueError):
        h.block_hashes(np.zeros((2, 2), dtype=np.int32), 1)
    with pytest.raises(ValueError):
        h.block_hashes(np.zeros(4, dtype=np.float32), 1)
    with pytest.raises(ValueError):
        PrefixHasher(-1)
    assert h.block_hashes([], 4) == []


def test_bound_hasher_refuses_another_block_size():
    """Hashes of the wrong block size never match and nothing downstream can tell: a hasher
    bound to the namespace's block_tokens refuses them."""
    tokens = np.arange(64)
    h = PrefixHasher(7, block_tokens=16)
    assert h.block_tokens == 16
    assert h.block_hashes(tokens) == h.block_hashes(tokens, 16) == \
        PrefixHasher(7).block_hashes(tokens, 16)
    with pytest.raises(ValueError, match="differs from the namespace's 16"):
        h.block_hashes(tokens, 32)
    with pytest.raises(ValueError, match="block_tokens is required"):
        PrefixHasher(7).block_hashes(tokens)
    with pytest.raises(ValueError):
        PrefixHasher(7, block_tokens=0)


def test_namespace_info_gives_a_bound_hasher():
    from conftest import require_stubs
    require_stubs()
    from turbokv.client import NamespaceInfo
    info = NamespaceInfo(namespace_id=9, created=True, raw_block_bytes=1, packed_block_bytes=1,
                         bits_per_value=8.0, model="m", num_layers=1, num_kv_heads=1,
                         head_dim=8, block_tokens=4, dtype="fp16", descriptor={})
    h = info.prefix_hasher(b"lora")
    assert (h.namespace_id, h.extra_key, h.block_tokens) == (9, b"lora", 4)
    with pytest.raises(ValueError):
        h.block_hashes(np.arange(16), 8)
