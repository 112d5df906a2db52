"""SGLang's own HiCache storage path (sglang 0.5.23) driving ``TurboKVStorage`` against a real
``turbokv-server``, without an SGLang server: the cheap tier of the SGLang tests, which runs in
default CI on the engine venv's CPU torch with SGLang's wheel on the path
(``$BUILD/sglang-api/0.5.23``, tools/setup_engines.sh).

SGLang code that runs here, unchanged:

* ``HybridCacheController.parse_storage_backend_extra_config``: the JSON of
  ``--hicache-storage-backend-extra-config`` parsed as a server parses it (SGLang pops its own
  prefetch keys before the backend sees the rest);
* ``StorageBackendFactory.create_backend("dynamic", ...)``: imports
  ``turbokv.integrations.sglang.TurboKVStorage`` from ``module_path`` / ``class_name``, checks it
  is a ``HiCacheStorage`` and builds ``cls(storage_config, kwargs)``;
* ``HiCacheController``'s storage methods, called as functions of a small harness that holds
  only the attributes they read (the controller's ``__init__`` needs a device, threads and
  gloo groups): ``_page_backup`` (write-back, through ``_page_set_zero_copy`` or
  ``_generic_page_set``), ``_storage_hit_query`` (SGLang's page hashes of the token ids, then
  ``batch_exists``), ``_page_transfer`` / ``_page_transfer_kv_batch`` (prefetch, through
  ``_page_get_zero_copy`` or ``_generic_page_get``), the prefetch acks it queues;
* the host pools: ``MHATokenToKVPoolHost`` over a CPU ``MHATokenToKVPool``, built by their own
  constructors (tests/engine/sglang_pools.py), with their allocator and page accessors.

Not run here: the controller's threads and TP synchronisation, the device<->host copies, the
radix tree, a model. tests/engine/test_sglang_backend.py (opt-in: TURBOKV_SGLANG_E2E=1) runs a
whole SGLang server.
"""
from __future__ import annotations

import json
import queue

import pytest

from conftest import ServerProcess

torch = pytest.importorskip("torch")
pytest.importorskip("sglang")

from sglang.srt.managers.cache_controller import (  # noqa: E402
    HiCacheController,
    PrefetchOperation,
    StorageOperation,
)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController  # noqa: E402
from sglang.srt.mem_cache.storage import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_hash_str, get_storage_hash_str  # noqa: E402

from sglang_pools import T, host_pool, page_tensor  # noqa: E402
from turbokv.integrations.sglang import TurboKVStorage  # noqa: E402

PAGES = 5


class Controller:
    """SGLang's ``HiCacheController`` storage methods over a storage backend built by SGLang's
    factory from an extra-config JSON string (as ``attach_storage_backend`` does)."""

    _storage_hit_query = HiCacheController._storage_hit_query
    _page_backup = HiCacheController._page_backup
    _page_transfer = HiCacheController._page_transfer
    _page_transfer_kv_batch = HiCacheController._page_transfer_kv_batch
    _page_get_zero_copy = HiCacheController._page_get_zero_copy
    _generic_page_get = HiCacheController._generic_page_get
    _page_set_zero_copy = HiCacheController._page_set_zero_copy
    _generic_page_set = HiCacheController._generic_page_set

    def __init__(self, extra_config_json: str, pool, model_name: str = "ctl-model-path"):
        extra, self.prefetch_threshold, *_ = (
            HybridCacheController.parse_storage_backend_extra_config(extra_config_json))
        self.storage_config = HiCacheStorageConfig(
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
            is_mla_model=False, enable_storage_metrics=True,
            is_page_first_layout=pool.layout == "page_first", model_name=model_name,
            extra_config=extra)
        self.storage_backend = StorageBackendFactory.create_backend(
            "dynamic", self.storage_config, pool)
        self.storage_backend.register_mem_pool_host(pool)
        self.mem_pool_host = self.storage_host_pool = pool
        self.page_size = pool.page_size
        self.prefetch_sync_queue: queue.Queue = queue.Queue()
        # attach_storage_backend's choice for the "dynamic" backend.
        if bool(extra.get("interface_v1", 0)):
            self.page_get_func, self.page_set_func = (self._page_get_zero_copy,
                                                      self._page_set_zero_copy)
        else:
            self.page_get_func, self.page_set_func = (self._generic_page_get,
                                                      self._generic_page_set)

    def write_back(self, tokens) -> StorageOperation:
        """Backs up the whole pages of ``tokens`` from freshly allocated host pages (their
        random contents), keyed as SGLang keys them."""
        n = len(tokens) // self.page_size * self.page_size
        op = StorageOperation(self.mem_pool_host.alloc(n), tokens[:n],
                              hash_value=get_storage_hash_str(tokens[:n], None,
                                                              page_size=self.page_size))
        self._page_backup(op)
        return op

    def prefetch(self, tokens):
        """The hit query and the page transfer of one prefetch; returns (operation, pages)."""
        op = PrefetchOperation("req-%d" % id(tokens), tokens)
        op.hash_value, hit_tokens = self._storage_hit_query(op)
        op.storage_hit_count = hit_tokens
        op.host_indices = self.mem_pool_host.alloc(hit_tokens) if hit_tokens else None
        pages = self._page_transfer(op) if hit_tokens else 0
        return op, pages


def extra_json(server: str, **kw) -> str:
    cfg = {"backend_name": "turbokv", "module_path": "turbokv.integrations.sglang",
           "class_name": "TurboKVStorage", "server": server, "preset": "raw",
           "retry_after_s": 0.05}
    cfg.update(kw)
    return json.dumps(cfg)


def tokens(seed: int, n: int = PAGES * T + 2):
    return [(seed * 7919 + 31 * i) % 49152 for i in range(n)]


@pytest.fixture(scope="module")
def server(tmp_path_factory, server_binary):
    tmp = tmp_path_factory.mktemp("sglang-controller")
    s = ServerProcess(server_binary, str(tmp / "data"), str(tmp / "server.log")).start()
    yield s
    s.stop()


def test_the_dynamic_factory_builds_turbokv_from_the_json_config(server):
    ctl = Controller(extra_json(server.address, interface_v1=1, prefetch_threshold=128,
                                cache_salt="factory"), host_pool("page_first"))
    b = ctl.storage_backend
    assert isinstance(b, TurboKVStorage) and isinstance(b, HiCacheStorage)
    assert ctl.prefetch_threshold == 128            # SGLang's key, popped before the backend
    assert "prefetch_threshold" not in b.storage_config.extra_config
    assert b.zero_copy and ctl.page_get_func == ctl._page_get_zero_copy
    with pytest.raises(ValueError, match="unknown keys"):
        Controller(extra_json(server.address, sever="typo"), host_pool("page_first"))


def test_sglang_storage_keys_are_its_plain_page_hash_chain():
    """Without a request salt or extra key, SGLang's storage keys are ``get_hash_str``'s
    SHA-256 chain over the tokens (no process-local seed): stable across processes."""
    t = tokens(1)
    keys = get_storage_hash_str(t[:PAGES * T], None, page_size=T)
    assert keys == get_hash_str(t[:PAGES * T], None, page_size=T)
    assert len(keys) == PAGES and all(len(k) == 64 for k in keys)


@pytest.mark.parametrize("writer,reader", [
    (("page_first_direct", 1), ("layer_first", 0)),     # the e2e test's two servers
    (("page_first", 0), ("page_head", 1)),
    (("layer_first", 1), ("page_first", 1)),
    (("page_head", 0), ("page_first_direct", 0)),
], ids=lambda wr: "%s-%s" % (wr[0], "v1" if wr[1] else "generic"))
def test_write_back_then_prefetch_through_sglangs_controller(server, writer, reader):
    salt = "ctl-%s-%d-%s-%d" % (writer + reader)
    w_pool, r_pool = host_pool(writer[0], seed=11), host_pool(reader[0], seed=12)
    w = Controller(extra_json(server.address, interface_v1=writer[1], cache_salt=salt), w_pool)
    t = tokens(2)
    op = w.write_back(t)
    assert op.completed_tokens == PAGES * T
    r = Controller(extra_json(server.address, interface_v1=reader[1], cache_salt=salt), r_pool)
    pre, pages = r.prefetch(t)
    assert pre.storage_hit_count == PAGES * T and pages == PAGES
    acks = [r.prefetch_sync_queue.get_nowait() for _ in range(r.prefetch_sync_queue.qsize())]
    assert acks and acks[-1].completed_tokens == PAGES * T
    for i in range(PAGES):
        src = int(op.host_indices[i * T])
        dst = int(pre.host_indices[i * T])
        assert torch.equal(page_tensor(r_pool, dst), page_tensor(w_pool, src)), i
    stats = r.storage_backend.get_stats()
    assert sum(stats.prefetch_pgs) == PAGES, stats.prefetch_pgs
    assert sum(w.storage_backend.get_stats().backup_pgs) == PAGES


def test_a_partly_stored_prefix_hits_its_leading_pages(server):
    pool = host_pool("page_first", seed=13)
    ctl = Controller(extra_json(server.address, interface_v1=1, cache_salt="partial"), pool)
    t = tokens(3)
    assert ctl.write_back(t[:3 * T]).completed_tokens == 3 * T
    other = tokens(4)
    pre, pages = ctl.prefetch(t[:3 * T] + other[:2 * T])
    assert pre.storage_hit_count == 3 * T and pages == 3
    assert ctl.prefetch(other)[0].storage_hit_count == 0


def test_clear_drops_what_this_rank_stored(server):
    pool = host_pool("page_first_direct", seed=14)
    ctl = Controller(extra_json(server.address, interface_v1=1, cache_salt="clear"), pool)
    t = tokens(5)
    ctl.write_back(t)
    assert ctl.prefetch(t)[0].storage_hit_count == PAGES * T
    assert ctl.storage_backend.clear() is True
    assert ctl.prefetch(t)[0].storage_hit_count == 0


def test_a_dead_server_costs_misses_in_sglangs_controller(tmp_path, server_binary):
    srv = ServerProcess(server_binary, str(tmp_path / "data"), str(tmp_path / "log")).start()
    pool = host_pool("page_first", seed=15)
    ctl = Controller(extra_json(srv.address, interface_v1=1, exists_timeout_s=1,
                                get_timeout_s=2), pool)
    t = tokens(6)
    assert ctl.write_back(t).completed_tokens == PAGES * T
    srv.stop()
    before = pool.kv_buffer.clone()
    pre, pages = ctl.prefetch(t)
    assert pre.storage_hit_count == 0 and pages == 0
    assert ctl.write_back(tokens(7)).completed_tokens == 0
    assert torch.equal(pool.kv_buffer, before)
