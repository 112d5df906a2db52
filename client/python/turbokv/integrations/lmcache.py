"""LMCache remote-storage plugin: LMCache's KV chunks stored in turbokv, compressed on ingest.

For LMCache 0.5.x (tested with 0.5.6). LMCache loads the plugin from its own configuration
(YAML file named by ``LMCACHE_CONFIG_FILE``, or ``LMCACHE_*`` variables)::

    chunk_size: 256
    local_cpu: true                      # LMCache's buffer allocator (needed by remote backends)
    max_local_cpu_size: 2                # GiB
    remote_serde: naive                  # turbokv compresses; LMCache sends raw chunks
    remote_storage_plugins: ["turbokv"]
    extra_config:
      remote_storage_plugin.turbokv.module_path: turbokv.integrations.lmcache
      remote_storage_plugin.turbokv.class_name: TurboKVConnectorAdapter
      remote_storage_plugin.turbokv.server: "10.0.0.1:50051,10.0.0.2:50051"
      remote_storage_plugin.turbokv.preset: "k5v4"         # unset: the server's --default-preset

Settings (``extra_config`` keys ``remote_storage_plugin.<plugin name>.<setting>``; the plugin
name is ``turbokv`` or ``turbokv.<instance>``):

    ===================  ==========================================================  =======
    setting              meaning                                                     default
    ===================  ==========================================================  =======
    server               ``HOST:PORT[,HOST:PORT...]`` or ``dns:///NAME:PORT``        required
    preset               turbokv codec preset ("raw" stores the chunk verbatim)     server's
    model_revision       weights revision, part of the namespace                     ""
    cache_salt           tenant salt, part of the namespace                          ""
    replicas             copies of each chunk across the servers                     1
    timeout_seconds      deadline of each turbokv call                               5
    lease_seconds        how long a pinned existence check protects the chunks      30
    tls                  TLS with the system's CA roots (implied by tls_ca)          false
    tls_ca               PEM CA bundle to trust for the server certificate          unset
    tls_cert, tls_key    PEM client certificate and key (mutual TLS)                unset
    tls_server_name      name checked against the server certificate                the host
    token_file, token    bearer token (a file, or the token itself)                 unset
    ===================  ==========================================================  =======

Unset TLS and token settings fall back to ``TURBOKV_TLS_CA``, ``TURBOKV_TOKEN_FILE``, ...
(``turbokv.Security.from_env``).

Mapping. LMCache hands the connector one MemoryObj per chunk of ``chunk_size`` tokens, a
tensor ``[2][num_layers][chunk_size][num_kv_heads * head_dim]`` (format KV_2LTD) in the
model dtype, under a CacheEngineKey ``model@world_size@worker_id@chunk_hash@dtype[@tags]``.
Each chunk is one turbokv block ``[num_layers][2][block_tokens = chunk_size][num_kv_heads]
[head_dim]`` (the K/V and layer axes swapped: one copy on put, one on get) in the namespace
(model = the key's model name, ``model_revision``, dtype, shapes, ``tp_rank`` = worker_id,
``tp_size`` = world_size, ``cache_salt``, codec = ``preset``); its block hash is
SHA-256("lmcache/v1\\0" + the key's string), so the tags and the chunk hash (LMCache's own
prefix hash) name it. The server compresses on ingest and decompresses on the way out.
Existence checks are turbokv Lookups (a batch of consecutive chunk keys is one Lookup, whose
matched prefix is LMCache's "consecutive keys that exist"; ``pin`` takes a lease).

Not supported (refused when the connector is created, with the reason): MLA chunks, layerwise
mode, models whose layers form several KV groups, ``save_unfull_chunk: true`` (a partial
chunk has no fixed block size; such chunks are also skipped on put).

Failures cost misses, never errors: a server that is down, slow or full makes ``exists``
false, ``get`` None and ``put`` a no-op; each change of state (unreachable / reachable again)
is logged once at WARNING/INFO, and ``counters()`` counts puts, hits, misses and failures.
A chunk that arrives corrupt (DATA_LOSS) is a miss.

Needs LMCache (and so torch) in the environment; importing ``turbokv.integrations`` does not.
"""
from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import hashlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.connector import (
    ConnectorAdapter,
    ConnectorContext,
    extract_plugin_type,
)
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from ..errors import TurboKVError
from ..security import Security
from ..sharded_client import ShardedClient

logger = logging.getLogger("turbokv.lmcache")

PLUGIN_TYPE = "turbokv"
HASH_DOMAIN = b"lmcache/v1\0"
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_NP_OUT = {"fp16": np.float16, "bf16": np.int16, "fp32": np.float32}  # bf16 as bit patterns

def block_hash(key: CacheEngineKey) -> bytes:
    """The turbokv block hash of an LMCache chunk key (32 bytes)."""
    return hashlib.sha256(HASH_DOMAIN + key.to_string().encode()).digest()


class _Settings:
    def __init__(self, config: LMCacheEngineConfig | None, plugin_name: str):
        extra: dict[str, Any] = dict((config.extra_config if config else None) or {})
        prefix = "remote_storage_plugin.%s." % plugin_name

        def get(name: str, default: Any) -> Any:
            return extra.get(prefix + name, default)

        self.server = str(get("server", "") or "")
        if not self.server:
            raise ValueError("turbokv LMCache plugin: set extra_config %sserver to "
                             "HOST:PORT[,HOST:PORT...] or dns:///NAME:PORT" % prefix)
        self.preset = str(get("preset", ""))
        self.model_revision = str(get("model_revision", ""))
        self.cache_salt = str(get("cache_salt", ""))
        self.replicas = int(get("replicas", 1))
        self.timeout = float(get("timeout_seconds", 5.0))
        self.lease_seconds = int(get("lease_seconds", 30))
        self.security = Security.from_config({
            k: get(k, None) for k in ("tls", "tls_ca", "tls_cert", "tls_key", "tls_server_name",
                                      "token", "token_file") if get(k, None)})
        if self.timeout <= 0 or self.replicas < 1 or self.lease_seconds < 0:
            raise ValueError("turbokv LMCache plugin: timeout_seconds must be > 0, replicas "
                             ">= 1, lease_seconds >= 0")


class TurboKVConnector(RemoteConnector):
    """LMCache RemoteConnector over a turbokv store (see the module docstring).

    Thread safety: LMCache calls it from its event loop and from worker threads; the
    turbokv client is thread-safe and the namespace cache is locked. Blocking RPCs run on the
    connector's own small pool, never on LMCache's event loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, local_cpu_backend: Any,
                 config: LMCacheEngineConfig, metadata: LMCacheMetadata,
                 plugin_name: str = PLUGIN_TYPE, client: ShardedClient | None = None):
        super().__init__(config, metadata)
        if metadata.use_mla or self.meta_fmt != MemoryFormat.KV_2LTD:
            raise ValueError("turbokv LMCache plugin: MLA chunks are not supported (turbokv "
                             "blocks hold separate K and V)")
        if config.use_layerwise:
            raise ValueError("turbokv LMCache plugin: layerwise mode is not supported "
                             "(set use_layerwise: false)")
        if len(self.meta_shapes) != 1:
            raise ValueError("turbokv LMCache plugin: %d KV layer groups; one is supported"
                             % len(self.meta_shapes))
        if config.save_unfull_chunk:
            raise ValueError("turbokv LMCache plugin: stores full chunks only; set "
                             "save_unfull_chunk: false")
        self.settings = _Settings(config, plugin_name)
        num_layers, two, chunk, heads, head_dim = (int(x) for x in metadata.kv_shape)
        if two != 2:
            raise ValueError("turbokv LMCache plugin: kv_shape %s has no K/V axis of 2"
                             % (metadata.kv_shape,))
        self.num_layers, self.chunk_tokens = num_layers, chunk
        self.num_kv_heads, self.head_dim = heads, head_dim
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        # segment_blocks=1: LMCache hands a remote connector chunk keys without their place in
        # the prompt (a batch may start anywhere in it), so each chunk is placed by its own
        # hash; segments need the chunk's position (docs/cluster.md, "Placement").
        self.client = client or ShardedClient(self.settings.server,
                                              replicas=self.settings.replicas,
                                              timeout=self.settings.timeout,
                                              security=self.settings.security,
                                              segment_blocks=1)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4,
                                                           thread_name_prefix="turbokv-lmc")
        self._lock = threading.Lock()
        self._namespaces: dict[tuple[str, int, int, str], int] = {}
        self._healthy = True
        self._counters = dict(puts=0, put_failures=0, hits=0, misses=0, failures=0)
        logger.info("turbokv LMCache connector: server %s, preset %r, chunk %d tokens, "
                    "%d layers x %d KV heads x %d", self.settings.server, self.settings.preset,
                    chunk, num_layers, heads, head_dim)

    # -- bookkeeping -------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """puts (chunks stored), put_failures, hits, misses, failures (calls that failed)."""
        with self._lock:
            return dict(self._counters)

    def _count(self, **inc: int) -> None:
        with self._lock:
            for k, v in inc.items():
                self._counters[k] += v

    def _failed(self, what: str, e: Exception) -> None:
        self._count(failures=1)
        with self._lock:
            was, self._healthy = self._healthy, False
        if was:
            logger.warning("turbokv unreachable or failing (%s: %s); LMCache sees misses "
                           "until it answers again", what, e)
        else:
            logger.debug("turbokv %s failed: %s", what, e)

    def _ok(self) -> None:
        with self._lock:
            was, self._healthy = self._healthy, True
        if not was:
            logger.info("turbokv answers again (%s)", self.settings.server)

    def _namespace(self, key: CacheEngineKey) -> int | None:
        dtype = _DTYPES.get(key.dtype)
        if dtype is None:
            logger.warning("turbokv LMCache plugin: dtype %s is not stored (fp16, bf16, fp32)",
                           key.dtype)
            return None
        ident = (key.model_name, int(key.world_size), int(key.worker_id), dtype)
        with self._lock:
            ns = self._namespaces.get(ident)
        if ns is not None:
            return ns
        info = self.client.register_namespace(
            model=key.model_name, model_revision=self.settings.model_revision,
            num_layers=self.num_layers, num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim, block_tokens=self.chunk_tokens, dtype=dtype,
            preset=self.settings.preset, tp_rank=int(key.worker_id),
            tp_size=int(key.world_size), cache_salt=self.settings.cache_salt,
            timeout=self.settings.timeout)
        logger.info("turbokv namespace %016x for %s (world %d, worker %d, %s): %.2f bits "
                    "per value, %.2fx smaller than %s", info.namespace_id, key.model_name,
                    key.world_size, key.worker_id, dtype, info.bits_per_value,
                    info.compression_ratio, dtype)
        with self._lock:
            self._namespaces[ident] = info.namespace_id
        return info.namespace_id

    def _groups(self, keys: Sequence[CacheEngineKey]) -> dict[int, builtins.list[int]]:
        """namespace id -> positions of keys in it (keys of unsupported dtypes are left out)."""
        out: dict[int, list[int]] = {}
        for i, k in enumerate(keys):
            ns = self._namespace(k)
            if ns is not None:
                out.setdefault(ns, []).append(i)
        return out

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- existence ---------------------------------------------------------------------------
    def _prefix_present(self, keys: Sequence[CacheEngineKey], lease: int) -> int:
        """How many leading keys are stored (0 on any failure)."""
        if not keys:
            return 0
        try:
            groups = self._groups(keys)
            if len(groups) != 1 or groups[next(iter(groups))] != list(range(len(keys))):
                # mixed namespaces (never within one request): key by key, in order
                n = 0
                for k in keys:
                    if self._prefix_present([k], lease) != 1:
                        break
                    n += 1
                return n
            ns = next(iter(groups))
            r = self.client.lookup(ns, [block_hash(k) for k in keys], lease_seconds=lease,
                                   timeout=self.settings.timeout)
            self._ok()
            return int(r.matched_blocks)
        except TurboKVError as e:
            self._failed("lookup", e)
            return 0

    def exists_sync(self, key: CacheEngineKey) -> bool:
        return self._prefix_present([key], 0) == 1

    async def exists(self, key: CacheEngineKey) -> bool:
        return bool(await self._run(self.exists_sync, key))

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: builtins.list[CacheEngineKey]) -> int:
        return self._prefix_present(keys, 0)

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: builtins.list[CacheEngineKey],
                                     pin: bool = False) -> int:
        lease = self.settings.lease_seconds if pin else 0
        return int(await self._run(self._prefix_present, keys, lease))

    # -- get ---------------------------------------------------------------------------------
    def _get_sync(self, keys: Sequence[CacheEngineKey]) -> builtins.list[MemoryObj | None]:
        out: list[MemoryObj | None] = [None] * len(keys)
        try:
            groups = self._groups(keys)
        except TurboKVError as e:
            self._failed("register", e)
            self._count(misses=len(keys))
            return out
        L, T, H, D = self.num_layers, self.chunk_tokens, self.num_kv_heads, self.head_dim
        for ns, idx in groups.items():
            dtype = _DTYPES[keys[idx[0]].dtype]
            staging = np.empty((len(idx), L, 2, T, H, D), dtype=_NP_OUT[dtype])
            try:
                got = self.client.get_blocks(ns, [block_hash(keys[i]) for i in idx],
                                             timeout=self.settings.timeout, out=staging)
                self._ok()
            except TurboKVError as e:
                self._failed("get", e)
                continue
            for j, i in enumerate(idx):
                if got[j] is None:
                    continue
                obj = self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes,
                                                      self.meta_fmt)
                if obj is None:
                    logger.debug("LMCache could not allocate a chunk buffer; a miss")
                    continue
                dst = obj.tensor  # [2][L][T][H*D]
                src = torch.from_numpy(staging[j]).permute(1, 0, 2, 3, 4)  # [2][L][T][H][D]
                if dtype == "bf16":
                    dst.view(torch.int16).view(2, L, T, H, D).copy_(src)
                else:
                    dst.view(2, L, T, H, D).copy_(src)
                out[i] = obj
        hits = sum(o is not None for o in out)
        self._count(hits=hits, misses=len(keys) - hits)
        return out

    async def get(self, key: CacheEngineKey) -> MemoryObj | None:
        return (await self._run(self._get_sync, [key]))[0]

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: builtins.list[CacheEngineKey]) -> builtins.list[MemoryObj | None]:
        return list(await self._run(self._get_sync, keys))

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str,
                                       keys: builtins.list[CacheEngineKey]) -> builtins.list[MemoryObj]:
        """The consecutive leading chunks that came back (the ones after a miss are
        released)."""
        prefix: list[MemoryObj] = []
        broken = False
        for o in await self.batched_get(keys):
            if o is None:
                broken = True
            elif broken:
                o.ref_count_down()
            else:
                prefix.append(o)
        return prefix

    # -- put ---------------------------------------------------------------------------------
    def _put_sync(self, keys: Sequence[CacheEngineKey], objs: Sequence[MemoryObj]) -> None:
        L, T, H, D = self.num_layers, self.chunk_tokens, self.num_kv_heads, self.head_dim
        try:
            groups = self._groups(keys)
        except TurboKVError as e:
            self._failed("register", e)
            self._count(put_failures=len(keys))
            return
        for ns, idx in groups.items():
            hashes, blocks = [], []
            for i in idx:
                t = objs[i].tensor
                if t is None or tuple(t.shape) != (2, L, T, H * D):
                    logger.debug("skipping a chunk of shape %s (full chunks only)",
                                 None if t is None else tuple(t.shape))
                    continue
                hashes.append(block_hash(keys[i]))
                blocks.append(t.view(2, L, T, H, D).permute(1, 0, 2, 3, 4))  # read in place
            if not hashes:
                continue
            try:
                res = self.client.put_blocks(ns, hashes, blocks, timeout=self.settings.timeout)
                self._ok()
            except TurboKVError as e:
                self._failed("put", e)
                self._count(put_failures=len(hashes))
                continue
            bad = [r for r in res if not r.ok]
            self._count(puts=len(res) - len(bad), put_failures=len(bad))
            if bad:
                logger.warning("turbokv refused %d of %d chunks (%s: %s)", len(bad), len(res),
                               bad[0].code.name, bad[0].message)

    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj) -> None:
        await self._run(self._put_sync, [key], [memory_obj])

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: builtins.list[CacheEngineKey],
                          memory_objs: builtins.list[MemoryObj]) -> None:
        await self._run(self._put_sync, keys, memory_objs)

    # -- the rest of the interface -----------------------------------------------------------
    def remove_sync(self, key: CacheEngineKey) -> bool:
        try:
            ns = self._namespace(key)
            return ns is not None and self.client.delete_blocks(
                ns, [block_hash(key)], timeout=self.settings.timeout) > 0
        except TurboKVError as e:
            self._failed("delete", e)
            return False

    def support_ping(self) -> bool:
        return True

    async def ping(self) -> int:
        """0 when a server answers, else the turbokv status code number."""
        try:
            await self._run(lambda: self.client.stats(timeout=self.settings.timeout))
            self._ok()
            return 0
        except TurboKVError as e:
            self._failed("ping", e)
            return int(e.code)

    async def list(self) -> builtins.list[str]:
        """turbokv indexes chunks by hash and keeps no key names: always empty."""
        return []

    async def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()


class TurboKVConnectorAdapter(ConnectorAdapter):
    """What ``remote_storage_plugin.<name>.class_name`` names: creates a TurboKVConnector for
    the plugin URL ``plugin://turbokv[.instance]`` (the plugin's name must be ``turbokv`` or
    start with ``turbokv.``)."""

    def __init__(self) -> None:
        super().__init__("turbokv://")

    def can_parse(self, url: str) -> bool:
        return (url.startswith("plugin://")
                and extract_plugin_type(url[len("plugin://"):]) == PLUGIN_TYPE)

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        plugin = context.plugin_name or context.url[len("plugin://"):]
        return TurboKVConnector(context.loop, context.local_cpu_backend, context.config,
                                context.metadata, plugin_name=plugin)
