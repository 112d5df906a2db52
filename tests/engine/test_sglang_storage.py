"""``TurboKVStorage`` (turbokv.integrations.sglang) against SGLang's own host pool code and a
real ``turbokv-server``, without an SGLang server.

The host pools here are sglang 0.5.23's ``MHATokenToKVPoolHost``, built on CPU by SGLang's own
constructors over a CPU ``MHATokenToKVPool`` (tests/engine/sglang_pools.py; not pinned); the
page accessors called (``get_data_page``, ``get_dummy_flat_data_page``,
``set_from_flat_data_page``) are SGLang's. Runs on the engine venv's torch with SGLang's wheel
on the path (``$BUILD/sglang-api/0.5.23``, tools/setup_engines.sh) or in the full SGLang venv.

Covered: every MHA layout turbokv maps, both of SGLang's interfaces (zero-copy ``batch_*_v1``
with host indices, page-copy ``batch_get`` / ``batch_set`` with flat pages) between every pair
of layouts, ``batch_exists`` as a leading run, namespace identity (TP rank, page size, cache
salt, dtype), refusals, and a dead server (misses, the pool untouched, no exception).
"""
from __future__ import annotations

import itertools
import time

import pytest

from conftest import ServerProcess

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")

from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, PoolName  # noqa: E402

from sglang_pools import T, host_pool, indices, page_tensor  # noqa: E402
from turbokv.integrations.sglang import TurboKVStorage, block_hash  # noqa: E402
from turbokv.integrations.sglang_layout import LAYOUTS  # noqa: E402

KEYS = ["%064x" % (0x5A17 + i) for i in range(5)]


def config(server: str, tp_rank: int = 0, tp_size: int = 1, mla: bool = False, **extra):
    cfg = dict({"backend_name": "turbokv", "module_path": "turbokv.integrations.sglang",
                "class_name": "TurboKVStorage", "server": server, "preset": "raw",
                "model": "unit-model", "retry_after_s": 0.05}, **extra)
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                attn_cp_rank=0, attn_cp_size=1, is_mla_model=mla,
                                enable_storage_metrics=True, is_page_first_layout=False,
                                model_name="unit-model-path", extra_config=cfg)


def storage(server: str, pool, **kw) -> TurboKVStorage:
    s = TurboKVStorage(config(server, **kw), {})
    s.register_mem_pool_host(pool)
    return s


@pytest.fixture(scope="module")
def server(tmp_path_factory, server_binary):
    tmp = tmp_path_factory.mktemp("sglang-storage")
    s = ServerProcess(server_binary, str(tmp / "data"), str(tmp / "server.log")).start()
    yield s
    s.stop()


def test_block_hash_is_the_key_digest():
    assert block_hash("ab" * 32) == bytes.fromhex("ab" * 32)
    assert len(block_hash("not-hex")) == 32 and block_hash("x") != block_hash("y")


@pytest.mark.parametrize("writer,reader", list(itertools.product(LAYOUTS, LAYOUTS)))
def test_pages_round_trip_between_layouts_and_interfaces(server, writer, reader):
    """A writes pages 1, 4, 2 of its pool (zero-copy); B (another layout) reads them into its
    pages 0, 5, 7 with the zero-copy call and into flat pages with ``batch_get``."""
    extra = {"cache_salt": "rt-%s-%s" % (writer, reader)}
    a_pool, b_pool = host_pool(writer, seed=1), host_pool(reader, seed=2)
    a = storage(server.address, a_pool, **extra)
    assert a.batch_set_v1(KEYS[:3], indices([1, 4, 2])) == [True] * 3
    assert a.batch_set_v1(KEYS[:3], indices([1, 4, 2])) == [True] * 3   # already stored
    b = storage(server.address, b_pool, **extra)
    assert b.batch_exists(KEYS) == 3
    assert b.batch_get_v1(KEYS[:3], indices([0, 5, 7])) == [True] * 3
    for src, dst in ((1, 0), (4, 5), (2, 7)):
        assert torch.equal(page_tensor(b_pool, dst * T), page_tensor(a_pool, src * T))
    # Page-copy interface: SGLang's dummy flat pages, then its set_from_flat_data_page.
    targets = [b_pool.get_dummy_flat_data_page() for _ in range(3)]
    got = b.batch_get(KEYS[:3], targets)
    assert all(t is not None for t in got)
    for i, (src, dst) in enumerate(((1, 3), (4, 6), (2, 1))):
        b_pool.set_from_flat_data_page(dst * T, got[i])
        assert torch.equal(page_tensor(b_pool, dst * T), page_tensor(a_pool, src * T))
    a.close()
    b.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_page_copy_set_stores_what_zero_copy_reads(server, layout):
    pool = host_pool(layout, seed=3)
    s = storage(server.address, pool, cache_salt="flat-" + layout)
    flat = [pool.get_data_page(i * T) for i in (6, 3)]     # SGLang's flat pages
    assert s.batch_set(KEYS[:2], flat) is True
    other = host_pool(layout, seed=4)
    r = storage(server.address, other, cache_salt="flat-" + layout)
    assert r.batch_get_v1(KEYS[:2], indices([0, 1])) == [True, True]
    assert torch.equal(page_tensor(other, 0), page_tensor(pool, 6 * T))
    assert torch.equal(page_tensor(other, T), page_tensor(pool, 3 * T))


def test_exists_and_get_stop_at_the_first_missing_page(server):
    pool = host_pool("page_first", seed=5)
    s = storage(server.address, pool, cache_salt="gap")
    assert s.batch_set_v1([KEYS[0], KEYS[2]], indices([0, 1])) == [True, True]
    assert s.batch_exists(KEYS[:3]) == 1                 # KEYS[1] is missing
    before = pool.kv_buffer.clone()
    ok = s.batch_get_v1(KEYS[:3], indices([3, 4, 5]))
    assert ok[0] and not ok[1]
    assert torch.equal(page_tensor(pool, 3 * T), page_tensor(pool, 0))
    assert torch.equal(pool.kv_buffer[:, 4 * T:5 * T], before[:, 4 * T:5 * T])  # not written


@pytest.mark.parametrize("change", ["tp_rank", "cache_salt", "page_size", "dtype", "model"])
def test_namespace_identity_separates(server, change):
    """Pages stored by one configuration are a miss for a configuration that differs in one
    part of the namespace identity."""
    salt = "ident-" + change
    a = storage(server.address, host_pool("page_first", seed=6), cache_salt=salt)
    assert a.batch_set_v1(KEYS[:1], indices([0])) == [True]
    kw = {"cache_salt": salt}
    pool = host_pool("page_first", seed=7)
    if change == "tp_rank":
        kw.update(tp_rank=1, tp_size=2)
    elif change == "cache_salt":
        kw["cache_salt"] = salt + "-other"
    elif change == "page_size":
        pool = host_pool("page_first", seed=7, page_size=2 * T)
    elif change == "dtype":
        pool = host_pool("page_first", seed=7, dtype=torch.bfloat16)
    else:
        kw["model"] = "another-model"
    b = storage(server.address, pool, **kw)
    assert b.batch_exists(KEYS[:1]) == 0
    same = storage(server.address, host_pool("page_first", seed=8), cache_salt=salt)
    assert same.batch_exists(KEYS[:1]) == 1


def test_refusals_name_the_cause(server):
    with pytest.raises(ValueError, match="MLA"):
        TurboKVStorage(config(server.address, mla=True), {})
    with pytest.raises(ValueError, match="unknown keys"):
        TurboKVStorage(config(server.address, sever="typo"), {})
    with pytest.raises(ValueError, match="page_first_kv_split"):
        storage(server.address, host_pool("page_first", seed=0)).register_mem_pool_host(
            _with(host_pool("page_first", seed=0), layout="page_first_kv_split"))
    fp8 = host_pool("page_first", seed=0)
    fp8.dtype = torch.float8_e4m3fn
    with pytest.raises(ValueError, match="dtype"):
        storage(server.address, fp8)
    pool = host_pool("page_first", seed=0)
    s = storage(server.address, pool)
    s.register_mem_host_pool_v2(pool, PoolName.KV)     # the KV pool itself, as SGLang's
    s.register_mem_host_pool_v2(pool, "kv")            # HybridCacheController passes it
    with pytest.raises(ValueError, match="hybrid.*mamba"):
        s.register_mem_host_pool_v2(object(), PoolName.MAMBA)


def _with(pool, **attrs):
    for k, v in attrs.items():
        setattr(pool, k, v)
    return pool


def test_dead_server_costs_misses_not_errors(tmp_path, server_binary):
    srv = ServerProcess(server_binary, str(tmp_path / "data"), str(tmp_path / "log")).start()
    pool = host_pool("page_first_direct", seed=9)
    s = storage(srv.address, pool, get_timeout_s=2, exists_timeout_s=1)
    assert s.batch_set_v1(KEYS[:2], indices([0, 1])) == [True, True]
    srv.stop()
    before = pool.kv_buffer.clone()
    t0 = time.monotonic()
    assert s.batch_exists(KEYS[:2]) == 0
    assert s.batch_get_v1(KEYS[:2], indices([2, 3])) == [False, False]
    assert s.batch_set_v1(KEYS[2:4], indices([4, 5])) == [False, False]
    assert s.batch_get([KEYS[0]], [pool.get_dummy_flat_data_page()]) == [None]
    assert time.monotonic() - t0 < 10
    assert torch.equal(pool.kv_buffer, before)
    c = s.counters()
    assert c.get("exists.error", 0) + c.get("exists.skipped", 0) >= 1, c
    assert c.get("get.ok", 0) == 0
    # A fresh backend whose server is down at start-up still starts (misses until it answers).
    cold = storage(srv.address, host_pool("page_first", seed=10), exists_timeout_s=1)
    assert cold.batch_exists(KEYS[:1]) == 0
