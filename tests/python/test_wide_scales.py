"""Blocks whose group norms are beyond fp16's range (kernels/FORMAT.md, "Wide scales") through
the real server: PUT RAW stores them (never refused for being large), GET RAW returns them
within the codec's usual error, GET PACKED returns bytes the local codec decodes to the same
values and that PUT PACKED accepts again; a damaged wide scale is DATA_LOSS (checksum).
"""
from __future__ import annotations

import numpy as np
import pytest

from test_client_integration import _blocks, _put_ok, _register, _rel_mse
from turbokv.errors import StatusCode

pytestmark = pytest.mark.integration

BF16_MAX = float(np.array([0x7F7F0000], dtype=np.uint32).view(np.float32)[0])


def _large_kv(L=2, T=32, H=2, D=64, seed=0):
    """fp32 [L][2][T][H][D]: ordinary values, K heads of 12,000s (group norm 67,882 at g = 32),
    V heads near the bf16 maximum, and one head of alternating +-3e4."""
    rng = np.random.default_rng(seed)
    kv = rng.normal(0, 2.0, (L, 2, T, H, D)).astype(np.float32)
    kv[:, 0, ::3, 0, :] = 12000.0
    kv[0, 1, 5 % T, 1, :] = np.where(np.arange(D) % 2, 0.9, -0.7) * BF16_MAX
    kv[L - 1, 0, 7, 1, :] = np.where(np.arange(D) % 2, 3e4, -3e4)
    return kv


def _to_bf16(x):
    """fp32 -> bf16 bit patterns (round to nearest even)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("preset,bound", [("k4v4-g32", 0.02), ("k8v4", 0.02), ("k3v2-g32-qjl", 0.2)])
def test_large_blocks_round_trip_through_the_server(turbokv_client, dtype, preset, bound):
    from turbokv import PrefixHasher
    from turbokv.codec import LocalCodec
    c = turbokv_client
    kv32 = _large_kv()
    kv = kv32 if dtype == "fp32" else _to_bf16(kv32)
    ref = kv32 if dtype == "fp32" else _from_bf16(kv)
    bt = 8
    info = _register(c, kv, bt, preset, dtype=dtype, model="wide-" + dtype + preset)
    ns = info.namespace_id
    L, _, T, H, D = kv.shape
    hashes = PrefixHasher(ns).block_hashes(np.arange(T, dtype=np.int32), bt)
    blocks = _blocks(kv, bt)
    refs = _blocks(ref, bt)
    _put_ok(c, ns, hashes, blocks)  # PUT RAW: stored, not refused

    got = c.get_blocks(ns, hashes, dtype="fp32")
    assert all(g is not None for g in got)
    for g, r in zip(got, refs):
        assert np.isfinite(g).all()
        assert _rel_mse(r, g) < bound
        big = np.abs(r) >= 1e4
        assert _rel_mse(r[big], g[big]) < bound
    # bf16 and fp16 outputs are finite too (wide groups are clamped to the dtype's range).
    for out in ("bf16", "fp16"):
        for g in c.get_blocks(ns, hashes, dtype=out):
            vals = _from_bf16(g) if out == "bf16" else g.astype(np.float32)
            assert np.isfinite(vals).all(), out

    packed = c.get_packed_blocks(ns, hashes)
    codec = LocalCodec.from_preset(preset, L, bt, H, D, dtype=dtype, namespace_id=ns)
    try:
        for p, g in zip(packed, got):
            assert codec.decode(p).tobytes() == g.tobytes()
    finally:
        codec.close()
    # The packed bytes pass the server's value check (wide scales are values, not poison).
    other = PrefixHasher(ns, b"copy").block_hashes(np.arange(T, dtype=np.int32), bt)
    res = c.put_packed_blocks(ns, other, packed)
    assert all(r.ok for r in res), [r.message for r in res]
    assert [x.tobytes() for x in c.get_blocks(ns, other, dtype="fp32")] == [g.tobytes() for g in got]


def test_damaged_wide_scale_is_data_loss(turbokv_client):
    from turbokv import PrefixHasher
    c = turbokv_client
    kv = _large_kv(L=1, T=8)
    info = _register(c, kv, 8, "k4v4-g32", dtype="fp32", model="wide-damaged")
    ns = info.namespace_id
    hashes = PrefixHasher(ns).block_hashes(np.arange(8, dtype=np.int32), 8)
    _put_ok(c, ns, hashes, _blocks(kv, 8))
    packed = bytearray(c.get_packed_blocks(ns, hashes)[0])
    header = 56 + 4 * 1 + 4 * 2
    assert packed[header + 1] & 0x80, "layer 0 K group 0 (the 12,000s) has a wide scale"
    packed[header + 1] ^= 0x80
    res = c.put_packed_blocks(ns, [b"\x02" * 32], [bytes(packed)])
    assert res[0].code == StatusCode.DATA_LOSS, res[0].message
