"""The Python client against the real turbokv-server binary (fresh data dir per test).

Skipped, with the reason, when the server binary or the gRPC stubs are missing (conftest.py).
Quality bounds come from the codec theory (docs/architecture.md, "The codec", g*MSE of the Lloyd-Max
codebook per group size g and bits b): relative MSE of every K and V section must lie within
[0.6, 1.12] x theory for 2-4 bits (x (pi/2 - 1/g) for a QJL section, see _bounds), which
catches both a broken codec and a silently raw one.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import FIXTURES
from turbokv.errors import StatusCode

pytestmark = pytest.mark.integration

PRESETS = ["k8v4", "k4v4-g32", "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "raw"]

# g * MSE per coordinate of a unit vector, b = 1..4 (the codebook table of docs/architecture.md).
THEORY = {
    8: (0.3224, 0.09477, 0.02606, 0.006870),
    16: (0.3432, 0.1058, 0.03008, 0.008094),
    32: (0.3534, 0.1116, 0.03226, 0.008774),
    64: (0.3584, 0.1145, 0.03339, 0.009132),
    128: (0.3609, 0.1160, 0.03397, 0.009315),
    256: (0.3621, 0.1167, 0.03426, 0.009408),
}


def _fixture(name):
    kv = os.path.join(FIXTURES, "%s_kv_64_fp16.npy" % name)
    tok = os.path.join(FIXTURES, "%s_tokens_64.npy" % name)
    if not (os.path.exists(kv) and os.path.exists(tok)):
        pytest.skip("fixture %s missing" % kv)
    return np.load(kv), np.load(tok)


def _random_kv(L, T, H, D, seed=0):
    """[L][2][T][H][D] fp16 with KV-like structure: K with per-channel offsets and a few
    outlier channels, V near-Gaussian."""
    rng = np.random.default_rng(seed)
    k_scale = np.where(rng.random((L, 1, H, D)) < 0.03, 15.0, 1.0)
    k = rng.normal(0.3, 1.0, (L, T, H, D)) * k_scale + rng.normal(0, 0.5, (L, 1, H, D))
    v = rng.normal(0, 0.3, (L, T, H, D))
    return np.stack([k, v], axis=1).astype(np.float16)


def _blocks(kv, bt):
    """[L][2][T][H][D] -> [n][L][2][bt][H][D] (full blocks only)."""
    L, _, T, H, D = kv.shape
    n = T // bt
    return np.ascontiguousarray(
        kv[:, :, :n * bt].reshape(L, 2, n, bt, H, D).transpose(2, 0, 1, 3, 4, 5))


def _register(c, kv, bt, preset, model="test-model", dtype="fp16", **kw):
    L, _, _, H, D = kv.shape
    return c.register_namespace(model=model, model_revision="r1", num_layers=L, num_kv_heads=H,
                                head_dim=D, block_tokens=bt, dtype=dtype, preset=preset, **kw)


def _put_ok(c, ns, hashes, blocks):
    res = c.put_blocks(ns, hashes, blocks)
    assert len(res) == len(hashes)
    for r in res:
        assert r.code == StatusCode.OK, r.message
        assert r.stored_bytes > 0
    return res


def _rel_mse(x, y):
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    return float(((x - y) ** 2).sum() / (x ** 2).sum())


def _bounds(section):
    """(low, high) relative-MSE bounds for one resolved section codec."""
    bits, g, qjl = section["bits"], section["group_size"], section["qjl"]
    if bits == 0:
        return 0.0, 0.0
    if bits == 16:
        return 0.0, 1e-6  # fp16 storage of fp16 input: exact up to rounding of fp16 output
    if bits == 8:
        return 0.0, 2e-4
    t = THEORY[g][bits - 1]
    if qjl:
        # QJL trades MSE for unbiased inner products. For the residual r and a g x g Gaussian
        # S, r_hat = sqrt(pi/2) ||r|| / g * S^T sign(S r) is unbiased with
        #   E||r_hat||^2 = (pi/2) ||r||^2 / g^2 * (g^2 + g (g - 1) * 2/pi)
        # (diagonal terms ||S_i||^2 ~ g; off-diagonal E[|a_i||a_k|] = 2/pi), so
        #   E||r_hat - r||^2 = (pi/2 - 1/g) ||r||^2: ~1.54x the plain b-bit MSE at g = 32.
        return 0.6 * t, 1.12 * t * (np.pi / 2 - 1.0 / g)
    return 0.6 * t, 1.12 * t


# ---------------------------------------------------------------------------------------------
def test_register_is_idempotent_and_validates(turbokv_client):
    c = turbokv_client
    kv = _random_kv(2, 32, 2, 64)
    a = _register(c, kv, 16, "k4v4-g32")
    b = _register(c, kv, 16, "k4v4-g32")
    assert a.created and not b.created
    assert a.namespace_id == b.namespace_id
    assert a.raw_block_bytes == 2 * 2 * 16 * 2 * 64 * 2
    assert 4.0 < a.bits_per_value < 5.5
    assert a.packed_block_bytes * 8 == pytest.approx(a.bits_per_value * (a.raw_block_bytes / 2))
    other = _register(c, kv, 16, "k3v3-g32")
    assert other.namespace_id != a.namespace_id
    assert other.packed_block_bytes < a.packed_block_bytes
    raw = _register(c, kv, 16, "raw")
    assert raw.packed_block_bytes >= raw.raw_block_bytes
    from turbokv import TurboKVError
    with pytest.raises(TurboKVError) as e:
        c.register_namespace(model="m", num_layers=2, num_kv_heads=2, head_dim=0,
                             block_tokens=16, dtype="fp16", preset="k4v4-g32")
    assert e.value.code == StatusCode.INVALID_ARGUMENT
    with pytest.raises(TurboKVError) as e:
        _register(c, kv, 16, "no-such-preset")
    assert e.value.code == StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_raw_preset_is_bit_exact(turbokv_client, dtype):
    from turbokv import PrefixHasher
    c = turbokv_client
    kv16 = _random_kv(3, 40, 2, 32, seed=1)
    if dtype == "fp16":
        kv = kv16
    elif dtype == "fp32":
        kv = kv16.astype(np.float32) * np.float32(1.000123)
    else:
        kv = (kv16.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    info = _register(c, kv, 8, "raw", dtype=dtype)
    tokens = np.arange(40, dtype=np.int32)
    hashes = PrefixHasher(info.namespace_id).block_hashes(tokens, 8)
    blocks = _blocks(kv, 8)
    _put_ok(c, info.namespace_id, hashes, blocks)
    got = c.get_blocks(info.namespace_id, hashes)
    assert len(got) == 5
    for g, b in zip(got, blocks):
        assert g is not None and g.dtype == b.dtype and g.shape == b.shape
        assert g.tobytes() == b.tobytes()


def test_async_gets_into_caller_buffers(turbokv_client):
    """A connector's pattern: puts and layer-range gets in flight together, fetched into one
    preallocated staging array (fp32 output of an fp16 namespace), then packed blocks into
    caller slots; the raw preset makes every value checkable."""
    from turbokv import PrefixHasher
    c = turbokv_client
    kv = _random_kv(4, 96, 2, 64, seed=3)
    info = _register(c, kv, 16, "raw", model="async")
    ns = info.namespace_id
    hashes = PrefixHasher(ns).block_hashes(np.arange(96), 16)
    blocks = _blocks(kv, 16)
    puts = [c.put_blocks_async(ns, hashes[i:i + 2], blocks[i:i + 2]) for i in range(0, 6, 2)]
    assert all(r.ok for f in puts for r in f.result(timeout=60))
    staging = np.zeros((6, 2, 2, 16, 2, 64), dtype=np.float32)  # layers [1, 3), fp32
    gets = [c.get_blocks_async(ns, hashes[i:i + 3], dtype="fp32", layers=(1, 3),
                               out=staging[i:i + 3]) for i in (0, 3)]
    for f in gets:
        assert all(b is not None and b.base is not None for b in f.result(timeout=60))
    assert np.array_equal(staging, blocks[:, 1:3].astype(np.float32))
    slots = np.zeros((6, info.packed_block_bytes + 64), dtype=np.uint8)
    packed = c.get_packed_blocks(ns, hashes, out=list(slots))
    assert [len(p) for p in packed] == [info.packed_block_bytes] * 6
    assert [p.tobytes() for p in packed] == c.get_packed_blocks(ns, hashes)


def _preset_quality(c, kv, tokens, preset, bt=16):
    from turbokv import PrefixHasher
    info = _register(c, kv, bt, preset, model="quality")
    hashes = PrefixHasher(info.namespace_id).block_hashes(tokens, bt)
    blocks = _blocks(kv, bt)
    assert len(hashes) == len(blocks) > 0
    res = _put_ok(c, info.namespace_id, hashes, blocks)
    assert all(r.stored_bytes == info.packed_block_bytes for r in res)
    got = np.stack(c.get_blocks(info.namespace_id, hashes))
    assert got.dtype == np.float16 and got.shape == blocks.shape
    codec = info.descriptor["codec"]
    out = {}
    for idx, name in ((0, "key"), (1, "value")):
        x = blocks[:, :, idx]
        y = got[:, :, idx]
        mse = _rel_mse(x, y)
        section = codec[name]
        lo, hi = _bounds(section) if section else (0.0, 0.15)
        out[name] = (mse, lo, hi, section)
        if preset == "raw":
            assert np.array_equal(x.view(np.uint16), y.view(np.uint16))
        else:
            assert lo <= mse <= hi, "%s %s: relative MSE %.5f outside [%.5f, %.5f] for %s" % (
                preset, name, mse, lo, hi, section)
    return out


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_round_trips_random_kv(turbokv_client, preset):
    kv = _random_kv(4, 64, 2, 128, seed=3)
    _preset_quality(turbokv_client, kv, np.arange(64, dtype=np.int32), preset)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("fixture", ["smollm2", "stories260k"])
def test_every_preset_round_trips_real_kv(turbokv_client, preset, fixture):
    kv, tokens = _fixture(fixture)
    _preset_quality(turbokv_client, kv, tokens, preset)


def test_lookup_leading_match(turbokv_client):
    from turbokv import PrefixHasher, TurboKVError
    c = turbokv_client
    kv, tokens = _fixture("smollm2")
    info = _register(c, kv, 16, "k4v4-g32")
    ns = info.namespace_id
    h = PrefixHasher(ns)
    chain = h.block_hashes(tokens, 16)
    assert len(chain) == 4
    blocks = _blocks(kv, 16)
    # Nothing stored yet.
    m = c.lookup(ns, chain)
    assert (m.matched_blocks, m.matched_tokens) == (0, 0)
    # Partial: first 2 stored.
    _put_ok(c, ns, chain[:2], blocks[:2])
    m = c.lookup(ns, chain)
    assert (m.matched_blocks, m.matched_tokens) == (2, 32)
    # Full.
    _put_ok(c, ns, chain[2:], blocks[2:])
    m = c.lookup(ns, chain, lease_seconds=30)
    assert (m.matched_blocks, m.matched_tokens) == (4, 64)
    # Diverging after 40 tokens: the first 2 blocks match, block 2 differs.
    div = np.array(tokens, copy=True)
    div[40] += 1
    dchain = h.block_hashes(div, 16)
    assert dchain[:2] == chain[:2] and dchain[2] != chain[2]
    assert c.lookup(ns, dchain).matched_blocks == 2
    # Empty chain, and a chain whose first block is missing (later ones stored): 0.
    assert c.lookup(ns, []).matched_blocks == 0
    assert c.lookup(ns, [b"\x00" * 32] + chain[1:]).matched_blocks == 0
    # A longer prompt extending the stored prefix matches exactly the stored part.
    longer = np.concatenate([tokens, np.arange(100, 132, dtype=tokens.dtype)])
    assert c.lookup(ns, h.block_hashes(longer, 16)).matched_tokens == 64
    # The same tokens under another extra key (or namespace) match nothing.
    assert c.lookup(ns, PrefixHasher(ns, b"lora-1").block_hashes(tokens, 16)).matched_blocks == 0
    with pytest.raises(TurboKVError) as e:
        c.lookup(ns ^ 1, chain)
    assert e.value.code == StatusCode.NOT_FOUND


def test_get_missing_blocks_are_none(turbokv_client):
    from turbokv import PrefixHasher
    c = turbokv_client
    kv = _random_kv(2, 32, 2, 64, seed=4)
    info = _register(c, kv, 16, "k4v4-g32")
    chain = PrefixHasher(info.namespace_id).block_hashes(np.arange(32), 16)
    _put_ok(c, info.namespace_id, chain[1:], _blocks(kv, 16)[1:])
    got = c.get_blocks(info.namespace_id, chain)
    assert got[0] is None and got[1] is not None
    assert c.get_packed_blocks(info.namespace_id, chain)[0] is None
    assert c.get_blocks(info.namespace_id, []) == []


def test_layer_range_equals_slice_of_full_get(turbokv_client):
    from turbokv import PrefixHasher
    c = turbokv_client
    kv, tokens = _fixture("smollm2")
    info = _register(c, kv, 16, "k3v3-g32")
    chain = PrefixHasher(info.namespace_id).block_hashes(tokens, 16)
    _put_ok(c, info.namespace_id, chain, _blocks(kv, 16))
    full = c.get_blocks(info.namespace_id, chain)
    for layers in [(0, 1), (5, 17), (29, 30), range(10, 30), slice(0, 30)]:
        part = c.get_blocks(info.namespace_id, chain, layers=layers)
        sl = slice(layers[0], layers[1]) if isinstance(layers, tuple) else \
            slice(layers.start, layers.stop)
        for p, f in zip(part, full):
            assert p.shape == f[sl].shape
            assert np.array_equal(p.view(np.uint16), f[sl].view(np.uint16))
    with pytest.raises(ValueError):
        c.get_blocks(info.namespace_id, chain, layers=(3, 3))
    with pytest.raises(ValueError):
        c.get_blocks(info.namespace_id, chain, layers=(0, 31))


def test_output_dtypes_agree(turbokv_client):
    from turbokv import PrefixHasher
    c = turbokv_client
    kv, tokens = _fixture("stories260k")
    info = _register(c, kv, 16, "k4v4-g32")
    chain = PrefixHasher(info.namespace_id).block_hashes(tokens, 16)
    _put_ok(c, info.namespace_id, chain, _blocks(kv, 16))
    f16 = np.stack(c.get_blocks(info.namespace_id, chain))
    f32 = np.stack(c.get_blocks(info.namespace_id, chain, dtype="fp32"))
    b16 = np.stack(c.get_blocks(info.namespace_id, chain, dtype="bf16"))
    assert f32.dtype == np.float32 and b16.dtype == np.uint16
    # fp16 output is the fp32 decode rounded to fp16 (within one fp16 ulp).
    np.testing.assert_allclose(f16.astype(np.float32), f32, rtol=2 ** -10, atol=1e-6)
    bf = (b16.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(bf, f32, rtol=2 ** -7, atol=1e-30)


def test_packed_round_trip_and_chunking(turbokv_server):
    """Packed blocks re-put under new hashes decode identically; tiny chunks reassemble."""
    from turbokv import Client, PrefixHasher
    c = Client(turbokv_server.address, timeout=60, max_chunk_bytes=1024)
    kv, tokens = _fixture("smollm2")
    info = _register(c, kv, 16, "k4v3-g32")
    chain = PrefixHasher(info.namespace_id).block_hashes(tokens, 16)
    _put_ok(c, info.namespace_id, chain, _blocks(kv, 16))  # ~360 chunks per block
    packed = c.get_packed_blocks(info.namespace_id, chain)
    assert all(p is not None and len(p) == info.packed_block_bytes for p in packed)
    other = PrefixHasher(info.namespace_id, b"copy").block_hashes(tokens, 16)
    res = c.put_packed_blocks(info.namespace_id, other, packed)
    assert all(r.ok for r in res), [r.message for r in res]
    a = c.get_blocks(info.namespace_id, chain)
    b = c.get_blocks(info.namespace_id, other)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()
    # A corrupted packed block is refused, per block.
    bad = bytearray(packed[0])
    bad[len(bad) // 2] ^= 0xFF
    res = c.put_packed_blocks(info.namespace_id, [b"\x01" * 32], [bytes(bad)])
    assert res[0].code != StatusCode.OK
    c.close()


def test_blocks_larger_than_one_chunk(turbokv_client):
    from turbokv import PrefixHasher
    c = turbokv_client
    kv = _random_kv(32, 32, 8, 128, seed=5)  # block of 16 tokens = 2 MiB fp16
    for preset in ("raw", "k4v4-g32"):
        info = _register(c, kv, 16, preset, model="big")
        assert info.raw_block_bytes == 2 << 20
        chain = PrefixHasher(info.namespace_id).block_hashes(np.arange(32), 16)
        blocks = _blocks(kv, 16)
        _put_ok(c, info.namespace_id, chain, blocks)
        got = c.get_blocks(info.namespace_id, chain)
        if preset == "raw":
            assert all(g.tobytes() == b.tobytes() for g, b in zip(got, blocks))
        else:
            assert _rel_mse(blocks, np.stack(got)) < 0.0097
        packed = c.get_packed_blocks(info.namespace_id, chain)
        assert [len(p) for p in packed] == [info.packed_block_bytes] * 2


def test_delete_drop_and_stats(turbokv_client):
    from turbokv import PrefixHasher, TurboKVError
    c = turbokv_client
    kv, tokens = _fixture("stories260k")
    info = _register(c, kv, 16, "k4v4-g32")
    ns = info.namespace_id
    chain = PrefixHasher(ns).block_hashes(tokens, 16)
    _put_ok(c, ns, chain, _blocks(kv, 16))
    s = c.stats()
    mine = [n for n in s.namespaces if n.namespace_id == ns]
    assert len(mine) == 1 and s.namespace(ns) == mine[0]
    assert mine[0].blocks == 4
    assert mine[0].logical_bytes == 4 * info.raw_block_bytes
    assert mine[0].stored_bytes >= 4 * info.packed_block_bytes
    assert mine[0].descriptor["num_layers"] == 5
    assert s.blocks >= 4 and s.codec_backend and s.nodes is None
    assert c.delete_blocks(ns, chain[2:] + [b"\x07" * 32]) == 2
    assert c.lookup(ns, chain).matched_blocks == 2
    assert c.drop_namespace(ns) == 2
    with pytest.raises(TurboKVError) as e:
        c.lookup(ns, chain)
    assert e.value.code == StatusCode.NOT_FOUND


def test_stats_follows_pages_and_shapes_come_from_every_page(tmp_path):
    """A server paging Stats 2 namespaces at a time: a fresh Client (no register_namespace in
    it) can put and get into each of 5 namespaces (shapes found through stats(), pages 1-3),
    and stats() lists all 5 with their blocks and bytes; so does ShardedClient."""
    from conftest import ServerProcess, find_server_binary
    from turbokv import Client, PrefixHasher, ShardedClient
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    srv = ServerProcess(binary, str(tmp_path / "data"), str(tmp_path / "server.log"),
                        extra_args=["--max-stats-namespaces", "2"]).start()
    try:
        with Client(srv.address, timeout=60) as setup:
            infos = [setup.register_namespace(model="paged-%d" % i, num_layers=2 + i,
                                              num_kv_heads=2, head_dim=32, block_tokens=16,
                                              preset="raw") for i in range(5)]
        ids = sorted(info.namespace_id for info in infos)
        c = Client(srv.address, timeout=60)
        for i, info in enumerate(infos):
            ns = info.namespace_id
            kv = _random_kv(2 + i, 16 * (i + 1), 2, 32, seed=i)  # i + 1 blocks
            chain = PrefixHasher(ns).block_hashes(np.arange(16 * (i + 1)), 16)
            blocks = _blocks(kv, 16)
            _put_ok(c, ns, chain, blocks)
            got = c.get_blocks(ns, chain)
            assert [g.tobytes() for g in got] == [b.tobytes() for b in blocks]
        s = c.stats()
        assert sorted(n.namespace_id for n in s.namespaces) == ids  # 3 pages, no duplicates
        for i, info in enumerate(infos):
            n = s.namespace(info.namespace_id)
            assert n is not None and n.descriptor["num_layers"] == 2 + i
            assert n.blocks == i + 1
            assert n.logical_bytes == (i + 1) * info.raw_block_bytes
            assert n.stored_bytes >= (i + 1) * info.packed_block_bytes
        assert s.blocks == 15  # server-wide totals (the first page's), not per page
        assert s.logical_bytes == sum(n.logical_bytes for n in s.namespaces)
        c.close()
        with ShardedClient(srv.address, timeout=60) as sc:
            ss = sc.stats()
            assert sorted(n.namespace_id for n in ss.namespaces) == ids
            assert ss.blocks == 15
            got = sc.get_blocks(infos[4].namespace_id,
                                PrefixHasher(infos[4].namespace_id).block_hashes(
                                    np.arange(80), 16))
            assert all(g is not None for g in got) and len(got) == 5
    finally:
        srv.stop()


def test_put_validation(turbokv_client):
    from turbokv import PrefixHasher, TurboKVError
    c = turbokv_client
    kv = _random_kv(2, 16, 2, 64)
    info = _register(c, kv, 16, "k4v4-g32")
    ns = info.namespace_id
    chain = PrefixHasher(ns).block_hashes(np.arange(16), 16)
    blocks = _blocks(kv, 16)
    with pytest.raises(ValueError):
        c.put_blocks(ns, chain, blocks.astype(np.float32))  # wrong dtype
    with pytest.raises(ValueError):
        c.put_blocks(ns, chain, blocks[:, :1])  # wrong shape
    with pytest.raises(ValueError):
        c.put_blocks(ns, chain + chain, blocks)  # lengths differ
    assert c.put_blocks(ns, [], []) == []
    # A 4-byte hash is outside 8..32: refused by the server (per block or for the call).
    try:
        res = c.put_blocks(ns, [b"abcd"], blocks)
        assert res[0].code == StatusCode.INVALID_ARGUMENT
    except TurboKVError as e:
        assert e.code == StatusCode.INVALID_ARGUMENT
    # NaN is refused with INVALID_ARGUMENT, per block.
    nan = blocks.copy()
    nan[0, 0, 0, 0, 0, 0] = np.nan
    try:
        res = c.put_blocks(ns, chain, nan)
        assert res[0].code == StatusCode.INVALID_ARGUMENT, res[0]
    except TurboKVError as e:
        assert e.code == StatusCode.INVALID_ARGUMENT
    with pytest.raises(TurboKVError) as e:
        c.put_blocks(ns ^ 0xFF, chain, blocks)
    assert e.value.code == StatusCode.NOT_FOUND


def test_argument_errors_name_the_argument():
    """Checked before any RPC (no server here): the message names the argument and the range,
    instead of protobuf's "Value out of range: -1" / "string argument without an encoding"."""
    from conftest import require_stubs
    require_stubs()
    from turbokv import Client, ShardedClient
    h = [b"\x01" * 32]
    blocks = np.zeros((1, 1, 2, 16, 1, 64), np.float16)
    for c in (Client("127.0.0.1:1", timeout=5.0), ShardedClient("127.0.0.1:1,127.0.0.1:2")):
        cases = [
            (lambda: c.lookup(-1, h), ValueError, "namespace_id must be in [0, 2^64), got -1"),
            (lambda: c.lookup(1 << 64, h), ValueError, "namespace_id must be in [0, 2^64)"),
            (lambda: c.lookup(1, h, lease_seconds=-5), ValueError,
             "lease_seconds must be in [0, 2^32), got -5"),
            (lambda: c.lookup(1, ["ab" * 16]), TypeError, "hashes[0] must be bytes"),
            (lambda: c.put_blocks(1, ["abc"], blocks), TypeError, "hashes[0] must be bytes"),
            (lambda: c.get_blocks(-2, h), ValueError, "namespace_id must be in [0, 2^64)"),
            (lambda: c.get_packed_blocks(1, b"\x01" * 32), TypeError,
             "hashes must be a sequence of bytes"),
            (lambda: c.delete_blocks(1.5, h), TypeError, "namespace_id must be an int, got float"),
            (lambda: c.drop_namespace(-1), ValueError, "namespace_id must be in [0, 2^64)"),
            (lambda: c.register_namespace("m", -2, 1, 64, 16), ValueError,
             "num_layers must be in [0, 2^32), got -2"),
            (lambda: c.register_namespace("m", 2, 1, 64, 1 << 32), ValueError,
             "block_tokens must be in [0, 2^32), got 4294967296"),
            (lambda: c.register_namespace("m", 2, 1, 64, 16, ttl_seconds=-1), ValueError,
             "ttl_seconds must be in [0, 2^32), got -1"),
        ]
        for call, exc, message in cases:
            with pytest.raises(exc) as e:
                call()
            assert message in str(e.value), (type(c).__name__, str(e.value))
        c.close()


def test_retries_then_unavailable_and_deadline():
    """No server: UNAVAILABLE after bounded retries, within the deadline."""
    import time

    from conftest import require_stubs
    require_stubs()
    from turbokv import Client, TurboKVError
    c = Client("127.0.0.1:1", timeout=5.0, max_attempts=3)
    t0 = time.monotonic()
    with pytest.raises(TurboKVError) as e:
        c.stats()
    assert e.value.code in (StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED)
    assert time.monotonic() - t0 < 6.0
    with pytest.raises(ValueError):
        Client("")
    with pytest.raises(ValueError):
        Client("x:1", max_chunk_bytes=(1 << 20) + 1)


def test_server_restart_keeps_blocks_and_id(turbokv_server):
    """Blocks and namespace ids survive a server restart on the same data dir."""
    from turbokv import Client, PrefixHasher
    kv, tokens = _fixture("stories260k")
    c = Client(turbokv_server.address, timeout=60)
    info = _register(c, kv, 16, "k4v4-g32")
    chain = PrefixHasher(info.namespace_id).block_hashes(tokens, 16)
    _put_ok(c, info.namespace_id, chain, _blocks(kv, 16))
    before = c.get_blocks(info.namespace_id, chain)
    c.close()
    turbokv_server.stop()
    turbokv_server.start()
    c = Client(turbokv_server.address, timeout=60)
    again = _register(c, kv, 16, "k4v4-g32")
    assert again.namespace_id == info.namespace_id and not again.created
    assert c.lookup(info.namespace_id, chain).matched_blocks == 4
    after = c.get_blocks(info.namespace_id, chain)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(before, after))
    c.close()


def test_bf16_namespace_lossy_round_trip(turbokv_client):
    """bf16 travels as uint16 bit patterns both ways; quality matches the fp16 path."""
    from turbokv import PrefixHasher
    c = turbokv_client
    kv, tokens = _fixture("smollm2")
    bits = (kv.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # truncate to bf16
    info = _register(c, bits, 16, "k4v4-g32", dtype="bf16")
    chain = PrefixHasher(info.namespace_id).block_hashes(tokens, 16)
    blocks = _blocks(bits, 16)
    _put_ok(c, info.namespace_id, chain, list(blocks))  # a list of [L][2][T][H][D] arrays
    got = np.stack(c.get_blocks(info.namespace_id, chain))
    assert got.dtype == np.uint16 and got.shape == blocks.shape

    def f32(b):
        return (b.astype(np.uint32) << 16).view(np.float32)

    for idx in (0, 1):
        mse = _rel_mse(f32(blocks[:, :, idx]), f32(got[:, :, idx]))
        assert 0.6 * THEORY[32][3] <= mse <= 1.12 * THEORY[32][3] + 2e-4, mse


def test_reregistering_without_ttl_keeps_the_ttl(turbokv_client):
    """ttl_seconds is a policy of the namespace, not part of its id: a client that registers
    without it (another worker, a restart) must not turn expiry off."""
    c = turbokv_client
    kv = _random_kv(2, 16, 2, 64)
    a = _register(c, kv, 16, "k4v4-g32", ttl_seconds=3600)
    assert a.descriptor["ttl_seconds"] == 3600
    b = _register(c, kv, 16, "k4v4-g32")
    assert b.namespace_id == a.namespace_id and not b.created
    assert b.descriptor["ttl_seconds"] == 3600
    assert c.stats().namespace(a.namespace_id).descriptor["ttl_seconds"] == 3600
    z = _register(c, kv, 16, "k4v4-g32", ttl_seconds=0)  # explicitly: never expire
    assert z.descriptor["ttl_seconds"] == 0
    fresh = _register(c, kv, 16, "k4v4-g32", model="never-registered")
    assert fresh.created and fresh.descriptor["ttl_seconds"] == 0
