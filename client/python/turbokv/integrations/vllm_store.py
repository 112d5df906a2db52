"""What both sides of the vLLM connector share: options, namespaces, server health, stats.

No vLLM import here (torch neither): the connector module passes plain values in, so this part
is testable on its own.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from turbokv.errors import StatusCode
from turbokv.security import Security
from turbokv.sharding import DEFAULT_SEGMENT_BLOCKS
from turbokv.store_client import StoreClient

from ._options import make_client as _make_client
from ._options import parse_options, security_of

# A child of vLLM's "vllm" logger, so lines come out with vLLM's format and level.
logger = logging.getLogger("vllm.turbokv")

#: The ``medium`` of the KV events the connector publishes (and turbokv-server's own events).
KV_EVENT_MEDIUM = "turbokv"

#: Namespace dtype of each torch KV-cache dtype name.
TORCH_DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32"}


@dataclasses.dataclass(frozen=True)
class ConnectorOptions:
    """``kv_connector_extra_config`` of the connector (every field optional but ``server``).

    server: ``"HOST:PORT"``, ``"HOST:PORT,HOST:PORT,..."`` or ``"dns:///NAME:PORT"``; more than one
        node (or a DNS name) uses rendezvous sharding (``turbokv.ShardedClient``).
    preset: codec preset of the namespace (``k8v4``, ``k4v4-g32``, ..., ``raw``); ``""`` = the
        server's ``--default-preset`` (``k5v4`` unless the server was started with another).
        Default ``""``.
    block_tokens: tokens per turbokv block, a multiple of vLLM's block size; 0 = vLLM's block size.
        Larger blocks mean fewer, larger RPC items; hits are whole turbokv blocks. Default 0.
    model / model_revision: namespace identity; default vLLM's model (path or name) and revision.
    lease_seconds: lease taken by the scheduler's Lookup on matched blocks, so they are not
        evicted before the worker fetches them. Default 30.
    lookup_timeout_s: deadline of a scheduler Lookup (it runs on the scheduler's loop). Default 0.5.
    load_timeout_s: deadline of one request's block fetch. Default 10.
    save_timeout_s: deadline of one put of a request's new blocks. Default 30.
    retry_after_s: after a server failure, calls are skipped (misses) for this long, doubling
        up to 30 s while failures go on. Default 1.
    max_pending_save_mib: host memory for blocks waiting to be put; new saves past it are
        dropped (counted). Default 1024.
    save_decode: also save blocks completed during decode (multi-turn reuse). Default True.
    idle_wait_s: in a step that runs no forward (vLLM has only requests waiting for their
        blocks), the worker waits up to this long for a fetch to finish before returning to
        vLLM's loop, which would otherwise spin (and hold the GIL the fetch threads need);
        0 = never wait. Default 0.02.
    replicas: copies per block with several nodes. Default 1.
    segment_blocks: with several nodes, turbokv blocks of a prompt placed together on one node
        (``turbokv.ShardedClient``); every client of the cluster must use the same value.
        Default ``turbokv.sharding.DEFAULT_SEGMENT_BLOCKS``.
    tls: TLS with the system's CA roots (implied by tls_ca). Default False.
    tls_ca / tls_cert / tls_key: PEM CA bundle to trust; client certificate and key for a
        server with mutual TLS. Default "" (unset).
    tls_server_name: the name the server certificate is checked against, when it is not the
        host of ``server`` (a ``dns:///`` target resolves to pod IPs). Default "".
    token_file / token: the bearer token (prefer token_file: the config is logged). Default "".
    Unset TLS/token keys fall back to the ``TURBOKV_TLS_*`` / ``TURBOKV_TOKEN*`` environment
    variables (``turbokv.Security.from_env``).
    """
    server: str
    preset: str = ""
    block_tokens: int = 0
    model: str = ""
    model_revision: str = ""
    lease_seconds: int = 30
    lookup_timeout_s: float = 0.5
    load_timeout_s: float = 10.0
    save_timeout_s: float = 30.0
    retry_after_s: float = 1.0
    max_pending_save_mib: int = 1024
    save_decode: bool = True
    idle_wait_s: float = 0.02
    replicas: int = 1
    segment_blocks: int = DEFAULT_SEGMENT_BLOCKS
    tls: bool = False
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_server_name: str = ""
    token_file: str = ""
    token: str = dataclasses.field(default="", repr=False)

    def security(self) -> Security:
        """The connection's TLS and token settings (these keys, else the environment)."""
        return security_of(self)

    @classmethod
    def from_extra_config(cls, extra: dict) -> ConnectorOptions:
        """Raises ValueError naming unknown or out-of-range keys."""
        opts = parse_options(cls, extra, prefix="turbokv connector",
                             unknown_message="turbokv connector: unknown kv_connector_extra_config "
                                             "keys %s; known: %s",
                             config_name="kv_connector_extra_config")
        for name, lo in (("lease_seconds", 0), ("block_tokens", 0), ("max_pending_save_mib", 0),
                         ("replicas", 1), ("segment_blocks", 1)):
            if getattr(opts, name) < lo:
                raise ValueError("turbokv connector: %s must be >= %d" % (name, lo))
        for name in ("lookup_timeout_s", "load_timeout_s", "save_timeout_s", "retry_after_s"):
            if not getattr(opts, name) > 0:
                raise ValueError("turbokv connector: %s must be > 0" % name)
        if not 0 <= opts.idle_wait_s <= 1:
            raise ValueError("turbokv connector: idle_wait_s must be in [0, 1]")
        return opts


@dataclasses.dataclass(frozen=True)
class NamespaceShape:
    """Everything of a namespace but the cache salt and the TP rank (one per engine)."""
    model: str
    model_revision: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_tokens: int
    dtype: str          # fp16 | bf16 | fp32
    tp_size: int
    preset: str

    def raw_block_bytes(self) -> int:
        itemsize = 4 if self.dtype == "fp32" else 2
        return (self.num_layers * 2 * self.block_tokens * self.num_kv_heads * self.head_dim
                * itemsize)


def make_client(opts: ConnectorOptions, timeout: float) -> StoreClient:
    """A ``Client`` for one ``HOST:PORT``, else a ``ShardedClient``."""
    return _make_client(opts.server, timeout=timeout, replicas=opts.replicas,
                        retry_after_s=opts.retry_after_s, security=opts.security(),
                        segment_blocks=opts.segment_blocks)


def failure_reason(err: BaseException) -> str:
    """A bounded label for a failed call: unavailable, deadline, full, not_found, corrupt, other."""
    code = getattr(err, "code", None)
    reasons = {StatusCode.UNAVAILABLE: "unavailable",
            StatusCode.DEADLINE_EXCEEDED: "deadline",
            StatusCode.RESOURCE_EXHAUSTED: "full",
            StatusCode.NOT_FOUND: "not_found",
            StatusCode.DATA_LOSS: "corrupt"}
    return reasons.get(code, "other") if isinstance(code, StatusCode) else "other"


class Health:
    """Skips server calls for a while after a failure, so a down or slow server costs one
    deadline, not one per request. Thread-safe."""

    MAX_BACKOFF_S = 30.0

    def __init__(self, retry_after_s: float, what: str):
        self._base = float(retry_after_s)
        self._what = what
        self._lock = threading.Lock()
        self._until = 0.0
        self._backoff = self._base
        self._failing = False

    def available(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._until

    def ok(self) -> None:
        with self._lock:
            if self._failing:
                logger.info("turbokv %s: server answers again", self._what)
            self._failing = False
            self._backoff = self._base
            self._until = 0.0

    def failed(self, err: BaseException) -> None:
        with self._lock:
            first = not self._failing
            self._failing = True
            self._until = time.monotonic() + self._backoff
            backoff = self._backoff
            self._backoff = min(self._backoff * 2, self.MAX_BACKOFF_S)
        (logger.warning if first else logger.info)(
            "turbokv %s failed (%s: %s); treating as a miss (recompute), next try in %.1f s",
            self._what, failure_reason(err), _short(err), backoff)


def _short(err: BaseException) -> str:
    s = str(getattr(err, "details", "") or err)
    return s if len(s) < 200 else s[:200] + "..."


class Namespaces:
    """Registers namespaces on first use, one per (cache salt, tp_rank); caches the ids.

    ``get`` returns None (and notes the failure in ``health``) when the server cannot be
    reached; it never raises for server errors.
    """

    def __init__(self, client, shape: NamespaceShape, health: Health, timeout: float):
        self._client = client
        self._shape = shape
        self._health = health
        self._timeout = timeout
        self._ids: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    @property
    def shape(self) -> NamespaceShape:
        return self._shape

    def get(self, salt: str, tp_rank: int) -> int | None:
        key = (salt, tp_rank)
        with self._lock:
            if key in self._ids:
                return self._ids[key]
        if not self._health.available():
            return None
        s = self._shape
        try:
            info = self._client.register_namespace(
                s.model, s.num_layers, s.num_kv_heads, s.head_dim, s.block_tokens, dtype=s.dtype,
                preset=s.preset, model_revision=s.model_revision, tp_rank=tp_rank,
                tp_size=s.tp_size, cache_salt=salt, timeout=self._timeout)
        except Exception as e:  # noqa: BLE001 - a failed registration is a miss
            if getattr(e, "code", None) == StatusCode.INVALID_ARGUMENT:
                logger.error("turbokv: the server refused namespace %s: %s", s, _short(e))
            self._health.failed(e)
            return None
        self._health.ok()
        with self._lock:
            self._ids[key] = info.namespace_id
        if info.created:
            logger.info("turbokv: namespace %016x registered (%s, tp %d/%d, salt %r, %.2f bpv)",
                        info.namespace_id, s.model, tp_rank, s.tp_size, salt,
                        info.bits_per_value)
        return info.namespace_id

    def forget(self) -> None:
        """Drops the cached ids (after NOT_FOUND: the server lost its namespaces)."""
        with self._lock:
            self._ids.clear()


class Counters:
    """Thread-safe counters, drained into vLLM's connector stats every step.

    Keys are ``"<op>.<result>"`` (blocks) and ``"<op>.bytes"``: op in lookup, load, save;
    result in hit, miss, ok, error, dropped, corrupt (see ``TurboKVConnectorStats``).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._data: dict[str, float] = {}
        self._total: dict[str, float] = {}

    def add(self, key: str, n: float = 1) -> None:
        if not n:
            return
        with self._lock:
            self._data[key] = self._data.get(key, 0) + n
            self._total[key] = self._total.get(key, 0) + n

    def drain(self) -> dict[str, float]:
        with self._lock:
            out, self._data = self._data, {}
        return out

    def totals(self) -> dict[str, float]:
        """Process-lifetime totals (for logs and tests)."""
        with self._lock:
            return dict(self._total)
