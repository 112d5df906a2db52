"""Worker side of the vLLM connector: fetches into and saves from vLLM's paged KV cache.

Two classes:

* :class:`WorkerSide` moves the data (torch only, no vLLM import: testable on its own).
* :class:`TurboKVConnectorWorker` is the worker half of the connector: it maps vLLM's layer
  tensors and attention backends to layouts and drives :class:`WorkerSide` from the step
  hooks (vLLM is imported inside its methods).

Threads: network calls run on two small pools (``turbokv-load``, ``turbokv-save``), never on
the forward pass. A load is asynchronous in vLLM's sense: the scheduler parks the request
(WAITING_FOR_REMOTE_KVS) while the load pool fetches its blocks (the server decodes them straight
into one host buffer per request, taken from a small pool so that a load does not pay the page
faults of a fresh one; the blocks are then checked for NaN / infinity with one sum each); the copy into the paged cache then happens on the worker's
own thread in ``get_finished`` (so on CUDA it is ordered on the current stream before the
request's first forward). When a step runs no forward (the scheduler has nothing but requests
waiting for their blocks), ``get_finished`` waits up to ``idle_wait_s`` for a fetch to finish
instead of returning at once: vLLM's engine loop would otherwise spin, and with it hold the
GIL the fetch threads need to receive their data. Saves gather the new blocks of each layer in
``wait_for_save`` (on CUDA into a device buffer, then one non-blocking copy to pinned host
memory) and hand them to the save pool, which puts them after the copy's event completed.

Failure is a miss: a load that fails (server down, slow past ``load_timeout_s``, block missing
or corrupt, non-finite values) writes nothing past its last good block and reports the vLLM
blocks from there on through ``get_block_ids_with_load_errors``; what vLLM then does is the
user's ``kv_load_failure_policy`` (``recompute``: those blocks are recomputed; ``fail``: the
request fails).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..sharding import ChainContext
from ..store_client import StoreClient
from .vllm_layout import PagedLayout, make_layout
from .vllm_store import (
    ConnectorOptions,
    Counters,
    Health,
    Namespaces,
    NamespaceShape,
    failure_reason,
    logger,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig

_TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """Consecutive blocks of one request, as a vLLM ``BlockStored`` event describes them:
    TP rank 0's turbokv hashes, the hash of the block before the first (None: the first block
    of the prompt), their ``len(hashes) * block_size`` token ids, and vLLM's extra keys (one
    entry per block, or None). Hashable: workers' reports of one run compare equal."""
    hashes: tuple[bytes, ...]
    parent: bytes | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    lora_name: str | None = None
    extra_keys: tuple[tuple[Any, ...] | None, ...] | None = None

    def part(self, begin: int, end: int) -> StoredRun:
        """Blocks [begin, end) of this run."""
        bs = self.block_size
        return dataclasses.replace(
            self, hashes=self.hashes[begin:end],
            parent=self.hashes[begin - 1] if begin > 0 else self.parent,
            token_ids=self.token_ids[begin * bs:end * bs],
            extra_keys=self.extra_keys[begin:end] if self.extra_keys is not None else None)


@dataclasses.dataclass
class LoadSpec:
    """Fetch ``hashes`` (one list per TP rank; turbokv blocks of ``block_tokens``) and write
    tokens ``[skip_tokens, skip_tokens + len(block_ids) * vllm_block_size)`` of them, in
    order, into the vLLM blocks ``block_ids``. ``chains``: per TP rank, where ``hashes[rank]``
    sit in the prompt's chain (the client's ``chain_context``; a cluster places by it)."""
    req_id: str
    salt: str
    ns_ids: list[int]
    hashes: list[list[bytes]]
    skip_tokens: int
    block_ids: list[int]
    chains: list[ChainContext] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SaveSpec:
    """Put the turbokv blocks ``hashes[rank]``, whose tokens sit in vLLM blocks ``block_ids``
    (``block_tokens / vllm_block_size`` of them per turbokv block, in order). ``chains`` as
    in LoadSpec. ``announce``: the blocks as a KV event describes them (set when vLLM's KV
    events are on)."""
    req_id: str
    salt: str
    ns_ids: list[int]
    hashes: list[list[bytes]]
    block_ids: list[int]
    chains: list[ChainContext] = dataclasses.field(default_factory=list)
    announce: StoredRun | None = None


@dataclasses.dataclass
class LoadTiming:
    """One request's load, seconds (time.monotonic): submitted in ``start_load_kv``, fetched
    on the load pool, written into the paged cache in ``get_finished``."""
    req_id: str
    blocks: int          # turbokv blocks that arrived intact
    bytes: int           # their raw bytes
    queued_s: float      # submit -> fetch start
    fetch_s: float       # GetBlocks into the host buffer (decode included)
    check_s: float       # the finiteness check of the blocks received
    wait_s: float        # check end -> the get_finished that wrote it
    inject_s: float      # the copy into the paged cache
    total_s: float       # submit -> written


def _chain(chains: Sequence[ChainContext], rank: int) -> ChainContext | None:
    """This rank's chain context; None (the hashes start the chain) when none was sent."""
    return chains[rank] if rank < len(chains) else None


@dataclasses.dataclass
class _LoadResult:
    spec: LoadSpec
    submitted: float
    data: torch.Tensor | None = None   # [n][L][2][bt][H][D], host (pinned with CUDA)
    good: int = 0                         # leading blocks of data that arrived intact
    fetch_start: float = 0.0
    fetch_end: float = 0.0                # GetBlocks returned
    check_end: float = 0.0                # finiteness checked


def _first_non_finite(blocks: torch.Tensor) -> int:
    """Index of the first block of ``blocks`` ``[n][...]`` holding a NaN or an infinity, or n.

    One sum per block instead of ``isfinite().all()`` (which writes a bool tensor as large as
    the block: about 5x slower): a NaN or an infinity makes the sum non-finite. A sum can also
    overflow on finite values of magnitude near the dtype's maximum (1e38 in fp32, the sum
    accumulates in fp32 for every dtype); such a block is reported too, which costs a recompute,
    never a wrong block.
    """
    n = int(blocks.shape[0])
    if n == 0 or bool(torch.isfinite(blocks.sum(dtype=torch.float32))):
        return n
    sums = blocks.reshape(n, -1).sum(dim=1, dtype=torch.float32)
    bad = (~torch.isfinite(sums)).nonzero()
    return int(bad[0, 0]) if bad.numel() else n


class _BufferPool:
    """Host buffers for fetches, reused: a fresh 40 MB tensor costs page faults (on this
    project's VM as much as a third of a raw load's time) where a reused one does not.

    ``take(n, shape)`` returns a tensor ``[n, *shape]`` (a view of a pooled flat buffer of at
    least that size, else a new one); ``give`` returns the buffer once its data was written
    into the paged cache. At most ``keep`` buffers of at most ``max_bytes`` each stay pooled
    (the rest go to the allocator). Thread-safe.
    """

    def __init__(self, dtype: torch.dtype, pin: bool, keep: int = 2,
                 max_bytes: int = 256 << 20):
        self._dtype = dtype
        self._pin = pin
        self._keep = keep
        self._max_bytes = max_bytes
        self._free: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, n: int, shape: Sequence[int]) -> torch.Tensor:
        numel = n
        for x in shape:
            numel *= int(x)
        with self._lock:
            fits = [b for b in self._free if b.numel() >= numel]
            flat = min(fits, key=lambda b: b.numel()) if fits else None
            if flat is not None:
                self._free.remove(flat)
        if flat is None:
            flat = torch.empty(numel, dtype=self._dtype, pin_memory=self._pin)
        return flat[:numel].view(n, *shape)

    def give(self, buf: torch.Tensor) -> None:
        base = buf._base if buf._base is not None else buf
        if base.numel() * base.element_size() > self._max_bytes:
            return
        with self._lock:
            self._free.append(base)
            if len(self._free) > self._keep:
                self._free.remove(min(self._free, key=lambda b: b.numel()))


class WorkerSide:
    """Owns the layer tensors, the layouts and the pools of one worker (one TP rank).

    Args:
      layers: ``(name, kv_view, layout)`` in model order; ``kv_view`` is vLLM's
        ``[num_kernel_blocks][H][N][2D]`` tensor of the layer.
      vllm_block_size: tokens per vLLM (KV-cache manager) block; a multiple of the kernel
        block size N (vLLM may split manager blocks into kernel blocks).
      events: record what is stored and found missing for vLLM's KV events
        (:meth:`take_reports`).
    """

    def __init__(self, client: StoreClient, namespaces: Namespaces, shape: NamespaceShape, tp_rank: int,
                 layers: Sequence[tuple[str, torch.Tensor, PagedLayout]], vllm_block_size: int,
                 load_timeout_s: float, save_timeout_s: float, max_pending_save_bytes: int,
                 health: Health, counters: Counters, events: bool = False):
        self._client = client
        self._namespaces = namespaces
        self._shape = shape
        self._rank = tp_rank
        self._layers = list(layers)
        self._vbs = int(vllm_block_size)
        kernel_bs = int(self._layers[0][1].shape[2])
        if self._vbs % kernel_bs:
            raise ValueError("vLLM block size %d is not a multiple of the kernel block size %d"
                             % (self._vbs, kernel_bs))
        self._split = self._vbs // kernel_bs
        self._per_block = shape.block_tokens // self._vbs
        self._device = self._layers[0][1].device
        self._dtype = _TORCH[shape.dtype]
        self._load_timeout = load_timeout_s
        self._save_timeout = save_timeout_s
        self._max_pending = int(max_pending_save_bytes)
        self._pending_bytes = 0
        self._pending_lock = threading.Lock()
        self._health = health
        self._counters = counters
        self._loads = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="turbokv-load")
        self._buffers = _BufferPool(self._dtype, pin=self._device.type == "cuda")
        self._saves = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="turbokv-save")
        self._inflight: dict[str, tuple[LoadSpec, concurrent.futures.Future]] = {}
        self._invalid: set[int] = set()
        self._load_done = threading.Condition()
        self._loads_finished = 0          # fetches completed (guarded by _load_done)
        self._events = events
        self._reports_lock = threading.Lock()
        self._stored: list[StoredRun] = []
        self._removed: list[bytes] = []
        self._timings: list[LoadTiming] = []

    # -- ids ------------------------------------------------------------------------------
    def _kernel_ids(self, block_ids: Sequence[int]) -> torch.Tensor:
        s = self._split
        ids = [b * s + i for b in block_ids for i in range(s)]
        return torch.tensor(ids, dtype=torch.int64, device=self._device)

    # -- loads ----------------------------------------------------------------------------
    def start_loads(self, specs: Sequence[LoadSpec]) -> None:
        now = time.monotonic()
        for spec in specs:
            self._inflight[spec.req_id] = (spec, self._loads.submit(self._fetch, spec, now))

    def _fetch(self, spec: LoadSpec, submitted: float) -> _LoadResult:
        try:
            return self._fetch_blocks(spec, submitted)
        finally:
            with self._load_done:
                self._loads_finished += 1
                self._load_done.notify_all()

    def _fetch_blocks(self, spec: LoadSpec, submitted: float) -> _LoadResult:
        hashes = spec.hashes[self._rank]
        res = _LoadResult(spec, submitted, fetch_start=time.monotonic())
        if not self._health.available():
            self._counters.add("load.error", len(hashes))
            self._counters.add("load.skipped_unavailable", len(hashes))
            return res
        ns = self._namespaces.get(spec.salt, self._rank)
        if ns is None or ns != spec.ns_ids[self._rank]:
            if ns is not None:
                logger.error("turbokv: worker namespace %016x differs from the scheduler's "
                             "%016x (shapes disagree); loading nothing", ns,
                             spec.ns_ids[self._rank])
            self._counters.add("load.error", len(hashes))
            return res
        s = self._shape
        buf = self._buffers.take(len(hashes), (s.num_layers, 2, s.block_tokens, s.num_kv_heads,
                                               s.head_dim))
        try:
            # Decoded by the server straight into buf (the client's caller-owned buffers).
            got = self._client.get_blocks(ns, hashes, timeout=self._load_timeout, out=buf,
                                          chain=_chain(spec.chains, self._rank))
        except Exception as e:  # noqa: BLE001 - any failure is a miss
            self._health.failed(e)
            if failure_reason(e) == "not_found":
                self._namespaces.forget()
            self._buffers.give(buf)
            self._counters.add("load.error", len(hashes))
            return res
        res.fetch_end = time.monotonic()
        self._health.ok()
        res.data = buf
        missing = [i for i, b in enumerate(got) if b is None]
        if missing and self._events:
            with self._reports_lock:
                self._removed.extend(spec.hashes[0][i] for i in missing)
        present = missing[0] if missing else len(hashes)
        res.good = _first_non_finite(buf[:present])
        if res.good < present:
            logger.warning("turbokv: block %d for request %s has non-finite values; "
                           "recomputing from there", res.good, spec.req_id)
            self._counters.add("load.corrupt", len(hashes) - res.good)
        elif missing:
            logger.warning("turbokv: block %d of %d for request %s is gone (evicted or "
                           "corrupt); recomputing from there", present, len(hashes), spec.req_id)
            self._counters.add("load.miss", len(hashes) - present)
        res.check_end = time.monotonic()
        self._counters.add("load.ok", res.good)
        self._counters.add("load.bytes", res.good * s.raw_block_bytes())
        self._counters.add("load.seconds", res.check_end - res.fetch_start)
        return res

    def wait_for_a_load(self, timeout: float) -> None:
        """Blocks until a fetch in flight completes, or ``timeout`` seconds (releasing the GIL
        meanwhile). Returns at once when none is in flight or one is already done."""
        if not self._inflight or timeout <= 0:
            return
        with self._load_done:
            seen = self._loads_finished
            if any(f.done() for _, f in self._inflight.values()):
                return
            self._load_done.wait_for(lambda: self._loads_finished != seen, timeout)

    def finished_loads(self) -> set[str]:
        """Writes every completed fetch into the paged cache; returns their request ids."""
        done = set()
        for req_id, (spec, fut) in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[req_id]
            try:
                res = fut.result()
                t0 = time.monotonic()
                self._inject(res)
                t1 = time.monotonic()
                if res.data is not None:
                    self._timings.append(LoadTiming(
                        req_id=req_id, blocks=res.good,
                        bytes=res.good * self._shape.raw_block_bytes(),
                        queued_s=res.fetch_start - res.submitted,
                        fetch_s=res.fetch_end - res.fetch_start,
                        check_s=res.check_end - res.fetch_end, wait_s=t0 - res.check_end,
                        inject_s=t1 - t0, total_s=t1 - res.submitted))
                    if self._device.type == "cpu":    # CUDA: the copy may still read it
                        self._buffers.give(res.data)
            except Exception:  # noqa: BLE001 - a bug must not fail the request either
                logger.exception("turbokv: load of request %s failed; recomputing", req_id)
                self._invalid.update(spec.block_ids)
            done.add(req_id)
        return done

    def _inject(self, res: _LoadResult) -> None:
        spec = res.spec
        skip_blocks = spec.skip_tokens // self._vbs          # vLLM blocks not to write
        good_vblocks = res.good * self._per_block - skip_blocks
        good_vblocks = max(0, min(good_vblocks, len(spec.block_ids)))
        self._invalid.update(spec.block_ids[good_vblocks:])
        if good_vblocks == 0:
            return
        assert res.data is not None
        data = res.data[:res.good]                            # [n][L][2][bt][H][D]
        if data.device != self._device:
            data = data.to(self._device, non_blocking=True)  # pinned: ordered on the stream
        h, d = data.shape[4], data.shape[5]
        kernel_bs = self._vbs // self._split
        first = skip_blocks * self._split                     # kernel blocks to skip
        count = good_vblocks * self._split
        ids = self._kernel_ids(spec.block_ids[:good_vblocks])
        for li, (_, kv, layout) in enumerate(self._layers):
            k = data[:, li, 0].reshape(-1, kernel_bs, h, d)[first:first + count]
            v = data[:, li, 1].reshape(-1, kernel_bs, h, d)[first:first + count]
            layout.scatter(kv, ids, k, v)

    def take_invalid(self) -> set[int]:
        out, self._invalid = self._invalid, set()
        return out

    def take_timings(self) -> list[LoadTiming]:
        """The loads written into the paged cache since the last call (worker thread)."""
        out, self._timings = self._timings, []
        return out

    # -- saves ----------------------------------------------------------------------------
    def save(self, specs: Sequence[SaveSpec]) -> None:
        for spec in specs:
            n = len(spec.hashes[self._rank])
            if n == 0:
                continue
            nbytes = n * self._shape.raw_block_bytes()
            with self._pending_lock:
                if self._pending_bytes + nbytes > self._max_pending:
                    self._counters.add("save.dropped", n)
                    logger.warning("turbokv: %d blocks of request %s not saved: %d bytes "
                                   "already wait to be put (max_pending_save_mib)", n,
                                   spec.req_id, self._pending_bytes)
                    continue
                self._pending_bytes += nbytes
            try:
                staged, event = self._gather(spec, n)
            except Exception:  # noqa: BLE001
                logger.exception("turbokv: gathering blocks of request %s failed; not saved",
                                 spec.req_id)
                self._release(nbytes)
                self._counters.add("save.error", n)
                continue
            self._saves.submit(self._put, spec, staged, event, nbytes)

    def _gather(self, spec: SaveSpec, n: int) -> tuple[torch.Tensor, Any | None]:
        s = self._shape
        shape = (n, s.num_layers, 2, s.block_tokens, s.num_kv_heads, s.head_dim)
        ids = self._kernel_ids(spec.block_ids)
        on_cpu = self._device.type == "cpu"
        buf = torch.empty(shape, dtype=self._dtype, device=self._device)
        for li, (_, kv, layout) in enumerate(self._layers):
            k, v = layout.gather(kv, ids)                     # [n*per*split][N][H][D]
            buf[:, li, 0] = k.reshape(n, s.block_tokens, s.num_kv_heads, s.head_dim)
            buf[:, li, 1] = v.reshape(n, s.block_tokens, s.num_kv_heads, s.head_dim)
        if on_cpu:
            return buf, None
        host = torch.empty(shape, dtype=self._dtype, pin_memory=True)
        host.copy_(buf, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event

    def _put(self, spec: SaveSpec, staged: torch.Tensor, event: Any | None,
             nbytes: int) -> None:
        hashes = spec.hashes[self._rank]
        try:
            if event is not None:
                event.synchronize()
            if not self._health.available():
                self._counters.add("save.error", len(hashes))
                return
            ns = self._namespaces.get(spec.salt, self._rank)
            if ns is None or ns != spec.ns_ids[self._rank]:
                self._counters.add("save.error", len(hashes))
                return
            try:
                results = self._client.put_blocks(ns, hashes, staged,   # read in place
                                                  timeout=self._save_timeout,
                                                  chain=_chain(spec.chains, self._rank))
            except Exception as e:  # noqa: BLE001 - a failed save only costs a future miss
                self._health.failed(e)
                if failure_reason(e) == "not_found":
                    self._namespaces.forget()
                self._counters.add("save.error", len(hashes))
                return
            self._health.ok()
            ok = sum(1 for r in results if r.ok)
            self._counters.add("save.ok", ok)
            self._counters.add("save.bytes", ok * self._shape.raw_block_bytes())
            self._counters.add("save.stored_bytes", sum(r.stored_bytes for r in results if r.ok))
            if spec.announce is not None and ok:
                self._report_stored(spec.announce, [r.ok for r in results])
            if ok < len(results):
                bad = next(r for r in results if not r.ok)
                self._counters.add("save.error", len(results) - ok)
                logger.warning("turbokv: %d of %d blocks of request %s not stored (%s: %s)",
                               len(results) - ok, len(results), spec.req_id, bad.code.name,
                               bad.message)
        except Exception:  # noqa: BLE001
            logger.exception("turbokv: saving blocks of request %s failed", spec.req_id)
            self._counters.add("save.error", len(hashes))
        finally:
            self._release(nbytes)

    def _report_stored(self, run: StoredRun, ok: Sequence[bool]) -> None:
        """One StoredRun per stretch of consecutive stored blocks (a refused block is never
        announced)."""
        parts: list[StoredRun] = []
        begin = None
        for i, good in enumerate(list(ok) + [False]):
            if good and begin is None:
                begin = i
            elif not good and begin is not None:
                parts.append(run.part(begin, i))
                begin = None
        with self._reports_lock:
            self._stored.extend(parts)

    def take_reports(self) -> tuple[list[StoredRun], list[bytes]]:
        """Blocks stored (as runs) and found missing (TP rank 0's hashes) since the last call."""
        with self._reports_lock:
            out = (self._stored, self._removed)
            self._stored, self._removed = [], []
        return out

    def _release(self, nbytes: int) -> None:
        with self._pending_lock:
            self._pending_bytes -= nbytes

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Waits until queued saves and loads are done (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        loads = [f for _, f in list(self._inflight.values())]
        _, pending = concurrent.futures.wait(loads, timeout=timeout)
        if pending:
            return False
        marker = self._saves.submit(lambda: None)   # one thread: runs after the queued puts
        try:
            marker.result(max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            return False
        return True

    def shutdown(self) -> None:
        self.wait_idle(timeout=self._save_timeout)
        self._saves.shutdown(wait=False)
        self._loads.shutdown(wait=False)


def _cpu_layout_writer(attn: Any) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor,
                                               torch.Tensor], None]:
    """The CPU backend's own cache write for one attention layer: its impl's
    ``do_kv_cache_update`` (which calls ``cpu_attn_reshape_and_cache`` with the ISA vLLM picked
    for the layer), so no private vLLM function is imported. Raises NotImplementedError when
    the layer has none (a vLLM whose CPU backend writes the cache inside forward)."""
    impl = getattr(attn, "impl", None)
    update = getattr(impl, "do_kv_cache_update", None)
    if update is None or not callable(update):
        raise NotImplementedError(
            "TurboKVConnector: vLLM's CPU attention layer %s has no impl.do_kv_cache_update "
            "to probe its cache layout with" % type(attn).__name__)

    def write(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
              slots: torch.Tensor) -> None:
        update(attn, key, value, kv_cache, slots)
    return write


class TurboKVConnectorWorker:
    """The worker half of :class:`~turbokv.integrations.vllm.TurboKVConnector` (one per TP
    rank): registers vLLM's layer tensors and runs the step hooks on :class:`WorkerSide`.

    Args:
      layer_names: the attention layers of the model's single KV-cache group, in order.
      idle_wait_s: longest ``get_finished`` waits for a fetch in a step without a forward.
    """

    def __init__(self, vllm_config: VllmConfig, opts: ConnectorOptions, shape: NamespaceShape,
                 layer_names: Sequence[str], vllm_block_size: int, client: StoreClient,
                 namespaces: Namespaces, health: Health, counters: Counters, events: bool):
        self._vllm_config = vllm_config
        self._opts = opts
        self._shape = shape
        self._layer_names = list(layer_names)
        self._vbs = int(vllm_block_size)
        self._client = client
        self._namespaces = namespaces
        self._health = health
        self.counters = counters
        self._events = events
        self.transfer: WorkerSide | None = None

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        ctx = self._vllm_config.compilation_config.static_forward_context
        layouts: dict[tuple[str, torch.dtype, int], PagedLayout] = {}
        layers = []
        for name in self._layer_names:
            kv = kv_caches[name]
            attn = ctx[name]
            backend = attn.attn_backend.get_name()
            key = (backend, kv.dtype, int(kv.shape[2]))
            if key not in layouts:      # one probe per backend, dtype and kernel block size
                write = _cpu_layout_writer(attn) if backend == "CPU_ATTN" else None
                layouts[key] = make_layout(backend, self._shape.head_dim, kv.dtype,
                                           int(kv.shape[2]), cpu_write=write,
                                           isa=str(getattr(attn, "isa", "?")))
            layers.append((name, kv, layouts[key]))
        s = self._shape
        tp_rank = get_tensor_model_parallel_rank() if s.tp_size > 1 else 0
        kv0 = layers[0][1]
        if (kv0.shape[1], kv0.shape[3]) != (s.num_kv_heads, 2 * s.head_dim):
            raise ValueError("TurboKVConnector: KV cache of shape %s does not match %d KV heads "
                             "of head_dim %d" % (tuple(kv0.shape), s.num_kv_heads, s.head_dim))
        self.transfer = WorkerSide(
            self._client, self._namespaces, s, tp_rank, layers, self._vbs,
            self._opts.load_timeout_s, self._opts.save_timeout_s,
            self._opts.max_pending_save_mib << 20, self._health, self.counters,
            events=self._events)
        logger.info("turbokv: %d layers, KV cache %s %s on %s, layout %s, tp rank %d/%d",
                    len(layers), tuple(kv0.shape), kv0.dtype, kv0.device, layers[0][2].name,
                    tp_rank, s.tp_size)

    def start_load_kv(self, meta: Any) -> None:
        if self.transfer is not None and meta is not None and meta.loads:
            self.transfer.start_loads(meta.loads)

    def wait_for_save(self, meta: Any) -> None:
        if self.transfer is not None and meta is not None and meta.saves:
            self.transfer.save(meta.saves)

    def get_finished(self, meta: Any) -> set[str] | None:
        if self.transfer is None:
            return None
        if meta is not None and meta.idle:
            self.transfer.wait_for_a_load(self._opts.idle_wait_s)
        return self.transfer.finished_loads() or None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.transfer.take_invalid() if self.transfer is not None else set()

    def take_reports(self) -> tuple[list[StoredRun], list[bytes]]:
        if self.transfer is None or not self._events:
            return [], []
        return self.transfer.take_reports()

    def shutdown(self) -> None:
        if self.transfer is not None:
            self.transfer.shutdown()
