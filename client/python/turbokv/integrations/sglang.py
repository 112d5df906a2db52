"""turbokv as SGLang's HiCache storage backend (L3): ``TurboKVStorage``, an ``HiCacheStorage``.

Loaded by SGLang's ``dynamic`` backend (written and tested against ``sglang==0.5.23``)::

    python -m sglang.launch_server --model-path MODEL --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "turbokv",
            "module_path": "turbokv.integrations.sglang", "class_name": "TurboKVStorage",
            "interface_v1": 1, "server": "127.0.0.1:50051", "preset": "k8v4"}'

SGLang builds ``TurboKVStorage(storage_config, kwargs)`` and hands it the whole extra config as
``storage_config.extra_config``; its keys besides SGLang's four (``backend_name``,
``module_path``, ``class_name``, ``interface_v1``) are :class:`SGLangStorageOptions`.
``interface_v1: 1`` selects SGLang's zero-copy calls (``batch_get_v1`` / ``batch_set_v1`` with
host-pool indices); without it SGLang moves flat page copies through ``batch_get`` /
``batch_set``, which work too. docs/sglang.md has the whole picture.

What maps to what:

* A SGLang page (``--page-size`` tokens) is one turbokv block: ``block_tokens`` = page size.
  The host pool's layout (``--hicache-mem-layout``) is mapped to turbokv's raw block
  ``[num_layers][2][block_tokens][num_kv_heads][head_dim]`` in
  :mod:`~turbokv.integrations.sglang_layout` (``layer_first``, ``page_first``,
  ``page_first_direct``, ``page_head``); blocks are stored the same whatever the layout, so
  engines with different host layouts share them.
* Keys. SGLang names a page by ``get_hash_str``: SHA-256 over the previous page's digest and the
  page's token ids as uint32 little-endian, the chain seeded with a digest of the request's
  ``extra_key`` and ``cache_salt`` when either is set (``sglang/srt/mem_cache/utils.py``,
  ``cpp_utils/hash_binding.cpp``). That is a prefix hash that depends only on the tokens, the
  salt and the extra key: stable across processes and machines. The backend never sees token
  ids (SGLang passes only these keys), so the 32 bytes of the key are the turbokv block hash
  (a key that is not 64 hex digits, which SGLang 0.5.23 does not make, is hashed with SHA-256).
* Namespace: SGLang's model name (or ``model``), ``model_revision``, the pool dtype, layers
  (draft layers included), KV heads and head_dim of this rank, the page size, the attention-TP
  rank and size, the codec preset, and ``cache_salt`` plus, with pipeline or context
  parallelism, the stage's rank and size. Requests' own cache salts and extra keys are in
  SGLang's key already (different salts never share a block).
* Failure is a miss: a server that is down, slow, full, or returns a damaged block (the server
  checks every block's checksum and reports it missing) costs the pages it would have given,
  a log line and a counter, never an exception into SGLang or a wrong page: a page is written
  into the host pool only from a block the server returned whole, and SGLang uses only the
  leading run of successes. After a failure calls are skipped for ``retry_after_s`` (doubling
  to 30 s while failures go on), so a dead server costs one deadline, not one per request.

Refused at start-up, with a message naming the cause: MLA models, hybrid models whose extra
pools (Mamba, SWA, ...) would need ``batch_*_v2``, K and V of different head dims, KV dtypes
other than fp16 / bf16 / fp32 (fp8 caches), and unmapped host layouts.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
)

from turbokv.errors import StatusCode
from turbokv.security import Security
from turbokv.store_client import StoreClient

from ._options import make_client, parse_options, security_of
from .sglang_layout import (
    TORCH_TO_NS_DTYPE,
    PageGeometry,
    check_layout,
    flat_page_as_block,
    page_block_view,
)

__all__ = ["SGLangStorageOptions", "TurboKVStorage"]

logger = logging.getLogger("sglang.turbokv")

# Keys of the extra config that belong to SGLang, not to turbokv.
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")


@dataclasses.dataclass(frozen=True)
class SGLangStorageOptions:
    """turbokv's keys in ``--hicache-storage-backend-extra-config`` (all optional but ``server``).

    server: ``"HOST:PORT"``, ``"HOST:PORT,HOST:PORT,..."`` or ``"dns:///NAME:PORT"``; more than
        one node (or a DNS name) uses rendezvous sharding (``turbokv.ShardedClient``).
    preset: codec preset of the namespace (``k8v4``, ``k5v4``, ``k4v4-g32``, ..., ``raw``);
        ``""`` = the server's ``--default-preset``. Default ``""``.
    model / model_revision: namespace identity; default SGLang's model name (``--model-path``
        or ``--served-model-name``) and "".
    cache_salt: a salt of the whole deployment (a tenant, say): deployments with different
        salts never share blocks. Default "".
    lease_seconds: lease taken by the existence check on the matched blocks, so they are not
        evicted before SGLang fetches them. Default 30.
    exists_timeout_s: deadline of one existence check (Lookup). Default 2.
    get_timeout_s: deadline of one batch fetch. Default 10.
    set_timeout_s: deadline of one batch put. Default 30.
    retry_after_s: after a failure, calls are skipped (misses) for this long, doubling up to
        30 s while failures go on. Default 1.
    max_batch_mib: host memory of one staging buffer (per SGLang I/O thread); a batch of pages
        larger than this is moved in several calls. Default 64.
    replicas: copies per block with several nodes. Default 1.
    tls, tls_ca, tls_cert, tls_key, tls_server_name, token_file, token: as for the vLLM
        connector (``turbokv.Security.from_config``; unset keys fall back to the
        ``TURBOKV_TLS_*`` / ``TURBOKV_TOKEN*`` environment variables). Prefer ``token_file``:
        SGLang logs its server arguments, extra config included.
    """
    server: str
    preset: str = ""
    model: str = ""
    model_revision: str = ""
    cache_salt: str = ""
    lease_seconds: int = 30
    exists_timeout_s: float = 2.0
    get_timeout_s: float = 10.0
    set_timeout_s: float = 30.0
    retry_after_s: float = 1.0
    max_batch_mib: int = 64
    replicas: int = 1
    tls: bool = False
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_server_name: str = ""
    token_file: str = ""
    token: str = dataclasses.field(default="", repr=False)

    def security(self) -> Security:
        return security_of(self)

    @classmethod
    def from_extra_config(cls, extra: dict[str, Any] | None) -> SGLangStorageOptions:
        """Raises ValueError naming unknown, missing or out-of-range keys."""
        extra = {k: v for k, v in (extra or {}).items() if k not in _SGLANG_KEYS}
        opts = parse_options(cls, extra, prefix="turbokv",
                             unknown_message="turbokv: unknown keys %s in "
                                             "--hicache-storage-backend-extra-config; known: %s",
                             config_name="--hicache-storage-backend-extra-config")
        for name, lo in (("lease_seconds", 0), ("max_batch_mib", 1), ("replicas", 1)):
            if getattr(opts, name) < lo:
                raise ValueError("turbokv: %s must be >= %d, got %r" % (name, lo,
                                                                        getattr(opts, name)))
        for name in ("exists_timeout_s", "get_timeout_s", "set_timeout_s", "retry_after_s"):
            if not getattr(opts, name) > 0:
                raise ValueError("turbokv: %s must be > 0" % name)
        return opts


def block_hash(key: str) -> bytes:
    """The turbokv block hash of a SGLang page key: the 32 bytes of its 64 hex digits (SGLang's
    SHA-256 page hash), else SHA-256 of the key's UTF-8 bytes."""
    if len(key) == 64:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.sha256(key.encode("utf-8")).digest()


def _reason(err: BaseException) -> str:
    code = getattr(err, "code", None)
    reasons = {StatusCode.UNAVAILABLE: "unavailable", StatusCode.DEADLINE_EXCEEDED: "deadline",
               StatusCode.RESOURCE_EXHAUSTED: "full", StatusCode.NOT_FOUND: "not_found",
               StatusCode.DATA_LOSS: "corrupt"}
    return reasons.get(code, "other") if isinstance(code, StatusCode) else "other"


def _short(err: BaseException) -> str:
    s = str(getattr(err, "details", "") or err)
    return s if len(s) < 200 else s[:200] + "..."


class _Backoff:
    """Skips server calls for a while after a failure (``retry_after_s``, doubling to 30 s).
    Thread-safe."""

    MAX_S = 30.0

    def __init__(self, retry_after_s: float):
        self._base = retry_after_s
        self._lock = threading.Lock()
        self._until = 0.0
        self._next = retry_after_s
        self._failing = False

    def available(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._until

    def ok(self) -> None:
        with self._lock:
            if self._failing:
                logger.info("turbokv: the server answers again")
            self._failing, self._next, self._until = False, self._base, 0.0

    def failed(self, what: str, err: BaseException) -> None:
        with self._lock:
            first = not self._failing
            self._failing = True
            wait = self._next
            self._until = time.monotonic() + wait
            self._next = min(self._next * 2, self.MAX_S)
        (logger.warning if first else logger.info)(
            "turbokv %s failed (%s: %s); treating as a miss, next try in %.1f s",
            what, _reason(err), _short(err), wait)


class TurboKVStorage(HiCacheStorage):
    """SGLang HiCache storage backed by turbokv (see the module docstring).

    Thread safety: SGLang calls it from its prefetch and backup threads at once; every method
    may run concurrently (one client, per-thread staging buffers).
    """

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict | None = None):
        self.storage_config = storage_config
        self.options = SGLangStorageOptions.from_extra_config(storage_config.extra_config)
        if storage_config.is_mla_model:
            raise ValueError("turbokv: MLA models (rank-replicated latent KV) are not supported; "
                             "turbokv stores per-head K and V")
        self.zero_copy = bool((storage_config.extra_config or {}).get("interface_v1", 0))
        self._backoff = _Backoff(self.options.retry_after_s)
        self._client = _make_client(self.options)
        self._lock = threading.Lock()
        self._ns_id: int | None = None
        self._geom: PageGeometry | None = None
        self._kv_buffer: torch.Tensor | None = None
        self._staging = threading.local()
        self._counters: dict[str, float] = {}
        self._prefetch_pgs: list[int] = []
        self._backup_pgs: list[int] = []
        self._prefetch_bw: list[float] = []
        self._backup_bw: list[float] = []
        logger.info("turbokv: HiCache storage on %s (preset %r, %s interface)",
                    self.options.server, self.options.preset or "server default",
                    "zero-copy v1" if self.zero_copy else "page-copy")

    @property
    def geom(self) -> PageGeometry:
        """The page geometry of the registered host pool. RuntimeError before
        ``register_mem_pool_host`` (SGLang always calls it first)."""
        if self._geom is None:
            raise RuntimeError("turbokv: register_mem_pool_host was not called")
        return self._geom

    # -- set-up ------------------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Checks the host pool and derives the namespace; registers it when the server
        answers (else on first use). Raises ValueError for what turbokv cannot store."""
        super().register_mem_pool_host(mem_pool_host)
        self._geom = pool_geometry(mem_pool_host)
        self._kv_buffer = mem_pool_host.kv_buffer
        want = self._geom.buffer_shape(int(mem_pool_host.size))
        if tuple(self._kv_buffer.shape) != want:
            raise ValueError("turbokv: the %s host pool's kv_buffer has shape %s, expected %s; "
                             "this SGLang version lays it out differently"
                             % (self._geom.layout, tuple(self._kv_buffer.shape), want))
        g = self._geom
        logger.info("turbokv: pages of %d tokens = blocks [%d][2][%d][%d][%d] %s (%.2f MiB raw), "
                    "host layout %s", g.page_size, g.num_layers, g.page_size, g.num_kv_heads,
                    g.head_dim, TORCH_TO_NS_DTYPE[g.dtype], g.block_nbytes / 2 ** 20, g.layout)
        self._namespace(fail_loudly=True)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Hybrid models' extra pools (Mamba, SWA, indexer, draft) are refused: turbokv's
        blocks hold full-attention K/V only. The KV pool itself is accepted."""
        # PoolName is a (str, Enum): == matches both PoolName.KV and "kv" (str() would not).
        if host_pool_name == PoolName.KV and (
                host_pool is getattr(self, "mem_pool_host", None)
                or getattr(host_pool, "kv_buffer", None) is self._kv_buffer):
            return
        raise ValueError("turbokv: hybrid models are not supported (SGLang registered the extra "
                         "host pool %r, which needs the batch_*_v2 interface)"
                         % getattr(host_pool_name, "value", host_pool_name))

    def _namespace(self, fail_loudly: bool = False) -> int | None:
        """The namespace id, registering it first; None when the server cannot be reached."""
        with self._lock:
            if self._ns_id is not None:
                return self._ns_id
        g = self._geom
        if g is None or not self._backoff.available():
            return None
        cfg, opts = self.storage_config, self.options
        salt = opts.cache_salt
        if cfg.pp_size > 1 or cfg.attn_cp_size > 1:
            salt += "|sglang:pp%d/%d:cp%d/%d" % (cfg.pp_rank, cfg.pp_size, cfg.attn_cp_rank,
                                                  cfg.attn_cp_size)
        try:
            info = self._client.register_namespace(
                opts.model or cfg.model_name or "", g.num_layers, g.num_kv_heads, g.head_dim,
                g.page_size, dtype=TORCH_TO_NS_DTYPE[g.dtype], preset=opts.preset,
                model_revision=opts.model_revision, tp_rank=cfg.tp_rank, tp_size=cfg.tp_size,
                cache_salt=salt, timeout=opts.exists_timeout_s)
        except Exception as e:  # noqa: BLE001 - a server that cannot register costs misses
            if fail_loudly and getattr(e, "code", None) == StatusCode.INVALID_ARGUMENT:
                raise ValueError("turbokv: the server refused the namespace: %s" % _short(e)) from e
            self._backoff.failed("namespace registration", e)
            return None
        self._backoff.ok()
        with self._lock:
            self._ns_id = info.namespace_id
        logger.info("turbokv: namespace %016x (%s, tp %d/%d, %.2f bits per value%s)",
                    info.namespace_id, info.model, cfg.tp_rank, cfg.tp_size, info.bits_per_value,
                    ", new" if info.created else "")
        return info.namespace_id

    def _forget_namespace(self) -> None:
        with self._lock:
            self._ns_id = None

    def _failed(self, what: str, err: BaseException) -> None:
        if getattr(err, "code", None) == StatusCode.NOT_FOUND:
            self._forget_namespace()    # dropped on the server: register again next time
        self._count(what + ".error")
        self._backoff.failed(what, err)

    def _count(self, key: str, n: float = 1) -> None:
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + n

    def counters(self) -> dict[str, float]:
        """Totals since start: ``"<op>.<result>"`` (pages) and ``"<op>.bytes"`` (raw bytes);
        op in exists (hit/miss/error/skipped), get (ok/miss/error/skipped), set (ok/exists/
        error/skipped)."""
        with self._lock:
            return dict(self._counters)

    def _staging_buffer(self, n: int) -> torch.Tensor:
        """A contiguous ``[n][L][2][T][H][D]`` buffer of this thread (reused)."""
        g = self.geom
        buf = getattr(self._staging, "buf", None)
        if buf is None or buf.shape[0] < n:
            buf = torch.empty((n,) + g.block_shape, dtype=g.dtype)
            self._staging.buf = buf
        return buf[:n]

    def _chunk(self) -> int:
        return max(1, (self.options.max_batch_mib << 20) // self.geom.block_nbytes)

    # -- existence ---------------------------------------------------------------------------
    def batch_exists(self, keys: list[str],
                     extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        """How many leading pages of ``keys`` are stored (one Lookup, index only, with a lease);
        0 when the server cannot answer."""
        if not keys:
            return 0
        ns = self._namespace()
        if ns is None:
            self._count("exists.skipped", len(keys))
            return 0
        try:
            r = self._client.lookup(ns, [block_hash(k) for k in keys],
                                    lease_seconds=self.options.lease_seconds,
                                    timeout=self.options.exists_timeout_s)
        except Exception as e:  # noqa: BLE001 - a failed lookup is a miss
            self._failed("exists", e)
            return 0
        self._backoff.ok()
        hit = min(int(r.matched_blocks), len(keys))
        self._count("exists.hit", hit)
        self._count("exists.miss", len(keys) - hit)
        return hit

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- zero-copy interface (interface_v1) --------------------------------------------------
    def batch_get_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Fetches pages into the host pool at ``host_indices`` (``len(keys) * page_size``
        token indices, page by page). Returns per page whether it was written."""
        g = self.geom
        firsts = _page_starts(host_indices, len(keys), g.page_size)
        views = [page_block_view(self._kv_buffer, g, i) for i in firsts]
        return self._get_into(keys, views)

    def batch_set_v1(self, keys: list[str], host_indices: torch.Tensor,
                     extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Stores the host pool's pages at ``host_indices``. Returns per page whether it is
        stored (pages already stored count as stored)."""
        g = self.geom
        firsts = _page_starts(host_indices, len(keys), g.page_size)
        views = [page_block_view(self._kv_buffer, g, i) for i in firsts]
        return self._put_from(keys, views)

    # -- page-copy interface -----------------------------------------------------------------
    def get(self, key: str, target_location: Any | None = None,
            target_sizes: Any | None = None) -> torch.Tensor | None:
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Any | None = None,
                  target_sizes: Any | None = None) -> list[torch.Tensor | None]:
        """Fetches pages into flat page tensors (``get_dummy_flat_data_page()``, filled in the
        host layout's flat order); None for a page not fetched."""
        if target_locations is None or len(target_locations) != len(keys):
            raise ValueError("turbokv: batch_get needs one target tensor per key")
        views = [flat_page_as_block(t, self.geom) for t in target_locations]
        ok = self._get_into(keys, views)
        return [t if f else None for t, f in zip(target_locations, ok)]

    def set(self, key: str, value: Any | None = None, target_location: Any | None = None,
            target_sizes: Any | None = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: list[str], values: Any | None = None,
                  target_locations: Any | None = None,
                  target_sizes: Any | None = None) -> bool:
        """Stores flat pages (``get_data_page(i, flat=True)``); True when all are stored."""
        if values is None or len(values) != len(keys):
            raise ValueError("turbokv: batch_set needs one page tensor per key")
        views = [flat_page_as_block(v, self.geom) for v in values]
        return all(self._put_from(keys, views))

    # -- the two transfers -------------------------------------------------------------------
    def _get_into(self, keys: Sequence[str], views: Sequence[torch.Tensor]) -> list[bool]:
        """Fetches ``keys`` and copies each block that came back whole into its
        ``[L][2][T][H][D]`` view. Never raises for server errors (misses)."""
        ok = [False] * len(keys)
        if not keys:
            return ok
        ns = self._namespace()
        if ns is None:
            self._count("get.skipped", len(keys))
            return ok
        t0 = time.perf_counter()
        step = self._chunk()
        for start in range(0, len(keys), step):
            part = keys[start:start + step]
            buf = self._staging_buffer(len(part))
            try:
                got = self._client.get_blocks(ns, [block_hash(k) for k in part], out=buf,
                                              timeout=self.options.get_timeout_s)
            except Exception as e:  # noqa: BLE001 - a failed fetch is a miss
                self._failed("get", e)
                break
            self._backoff.ok()
            for j, b in enumerate(got):
                if b is None:
                    continue
                views[start + j].copy_(buf[j])
                ok[start + j] = True
            if not all(b is not None for b in got):
                break   # SGLang uses only the leading run of pages
        n_ok = sum(ok)
        self._count("get.ok", n_ok)
        self._count("get.miss", len(keys) - n_ok)
        self._count("get.bytes", n_ok * self.geom.block_nbytes)
        self._record(self._prefetch_pgs, self._prefetch_bw, n_ok, time.perf_counter() - t0)
        return ok

    def _put_from(self, keys: Sequence[str], views: Sequence[torch.Tensor]) -> list[bool]:
        """Stores the blocks of ``views`` under ``keys`` (after one Lookup: leading pages
        already stored are not sent again). Never raises for server errors."""
        ok = [False] * len(keys)
        if not keys:
            return ok
        ns = self._namespace()
        if ns is None:
            self._count("set.skipped", len(keys))
            return ok
        t0 = time.perf_counter()
        hashes = [block_hash(k) for k in keys]
        try:
            have = int(self._client.lookup(ns, hashes, timeout=self.options.exists_timeout_s)
                       .matched_blocks)
        except Exception as e:  # noqa: BLE001 - a failed put is a lost write, not an error
            self._failed("set", e)
            return ok
        have = min(have, len(keys))
        for i in range(have):
            ok[i] = True
        self._count("set.exists", have)
        step = self._chunk()
        sent = 0
        for start in range(have, len(keys), step):
            end = min(start + step, len(keys))
            buf = self._staging_buffer(end - start)
            for j in range(start, end):
                buf[j - start].copy_(views[j])
            try:
                results = self._client.put_blocks(ns, hashes[start:end], buf,
                                                  timeout=self.options.set_timeout_s)
            except Exception as e:  # noqa: BLE001
                self._failed("set", e)
                break
            self._backoff.ok()
            for j, r in enumerate(results):
                ok[start + j] = r.code == StatusCode.OK
                if r.code != StatusCode.OK:
                    self._count("set.refused")
                    logger.info("turbokv: block %s not stored: %s %s", r.block_hash.hex()[:16],
                                r.code.name, r.message)
            sent += end - start
        n_new = sum(ok) - have
        self._count("set.ok", n_new)
        self._count("set.bytes", n_new * self.geom.block_nbytes)
        self._record(self._backup_pgs, self._backup_bw, sent, time.perf_counter() - t0)
        return ok

    def _record(self, pages: list[int], bandwidth: list[float], n: int, seconds: float) -> None:
        if not self.storage_config.enable_storage_metrics or n == 0:
            return
        with self._lock:
            pages.append(n)
            bandwidth.append(n * self.geom.block_nbytes / 2 ** 30 / max(seconds, 1e-9))

    # -- hybrid models -----------------------------------------------------------------------
    def batch_exists_v2(self, keys: list[str], pool_transfers: list[PoolTransfer] | None = None,
                        extra_info: HiCacheStorageExtraInfo | None = None) -> PoolTransferResult:
        """KV pages only (no extra pools are ever registered: they are refused)."""
        if pool_transfers:
            raise ValueError("turbokv: hybrid models are not supported (extra pools %s)"
                             % [str(t.name) for t in pool_transfers])
        hit = self.batch_exists(keys, extra_info)
        return PoolTransferResult(hit, {PoolName.KV: hit} if hit else {},
                                  list(range(1, hit + 1)))

    def batch_get_v2(self, transfers: list[PoolTransfer],
                     extra_info: HiCacheStorageExtraInfo | None = None) -> dict[str, list[bool]]:
        raise ValueError("turbokv: hybrid models are not supported (batch_get_v2 of %s)"
                         % [str(t.name) for t in transfers])

    def batch_set_v2(self, transfers: list[PoolTransfer],
                     extra_info: HiCacheStorageExtraInfo | None = None) -> dict[str, list[bool]]:
        raise ValueError("turbokv: hybrid models are not supported (batch_set_v2 of %s)"
                         % [str(t.name) for t in transfers])

    # -- admin -------------------------------------------------------------------------------
    def clear(self) -> bool:
        """Drops this rank's namespace with its blocks (SGLang's
        ``/clear_hicache_storage_backend``). Other models, ranks, salts and presets keep
        theirs. True when dropped (or it did not exist)."""
        ns = self._namespace()
        if ns is None:
            return False
        try:
            n = self._client.drop_namespace(ns, timeout=self.options.set_timeout_s)
        except Exception as e:  # noqa: BLE001
            if getattr(e, "code", None) == StatusCode.NOT_FOUND:
                self._forget_namespace()
                return True
            logger.error("turbokv: clear failed: %s", _short(e))
            return False
        self._forget_namespace()
        logger.info("turbokv: dropped namespace %016x (%d blocks)", ns, n)
        return True

    def get_stats(self) -> Any:
        """SGLang's ``StorageMetrics`` (pages and GB/s of each fetch and put since the last
        call) when ``--enable-hicache-storage-metrics`` is on, else None."""
        if not self.storage_config.enable_storage_metrics:
            return None
        from sglang.srt.observability.metrics_collector import StorageMetrics
        m = StorageMetrics()
        with self._lock:
            m.prefetch_pgs.extend(self._prefetch_pgs)
            m.backup_pgs.extend(self._backup_pgs)
            m.prefetch_bandwidth.extend(self._prefetch_bw)
            m.backup_bandwidth.extend(self._backup_bw)
            for lst in (self._prefetch_pgs, self._backup_pgs, self._prefetch_bw,
                        self._backup_bw):
                lst.clear()
        return m

    def close(self) -> None:
        logger.info("turbokv: closing (%s)", ", ".join("%s=%g" % kv for kv in
                                                       sorted(self.counters().items())))
        self._client.close()


def pool_geometry(pool: Any) -> PageGeometry:
    """The page geometry of an SGLang MHA host pool; ValueError for what turbokv cannot map."""
    if getattr(pool, "kv_buffer", None) is None:
        raise ValueError("turbokv: the host pool %s has no kv_buffer (a hybrid or logical pool); "
                         "not supported" % type(pool).__name__)
    if not hasattr(pool, "head_num") or type(pool).__name__.startswith("MLA"):
        raise ValueError("turbokv: host pool %s is not an MHA pool (MLA is not supported)"
                         % type(pool).__name__)
    layout = pool.layout
    check_layout(layout)
    if getattr(pool, "v_head_dim", pool.head_dim) != pool.head_dim:
        raise ValueError("turbokv: K head_dim %d differs from V head_dim %d; turbokv blocks hold "
                         "K and V of one head_dim" % (pool.head_dim, pool.v_head_dim))
    if pool.dtype not in TORCH_TO_NS_DTYPE:
        raise ValueError("turbokv: KV cache dtype %s is not stored raw by turbokv (fp16, bf16 or "
                         "fp32 only)" % pool.dtype)
    return PageGeometry(layout=layout, num_layers=int(pool.layer_num),
                        page_size=int(pool.page_size), num_kv_heads=int(pool.head_num),
                        head_dim=int(pool.head_dim), dtype=pool.dtype)


def _page_starts(host_indices: torch.Tensor, n: int, page_size: int) -> list[int]:
    """First host token index of each of the n pages in ``host_indices``."""
    if host_indices.numel() != n * page_size:
        raise ValueError("turbokv: %d host indices for %d pages of %d tokens"
                         % (host_indices.numel(), n, page_size))
    return host_indices.view(n, page_size)[:, 0].tolist()


def _make_client(opts: SGLangStorageOptions) -> StoreClient:
    """A ``Client`` for one ``HOST:PORT``, else a ``ShardedClient``."""
    return make_client(opts.server, timeout=max(opts.get_timeout_s, opts.set_timeout_s),
                       replicas=opts.replicas, retry_after_s=opts.retry_after_s,
                       security=opts.security())
