"""Worker side of the vLLM connector: fetches into and saves from vLLM's paged KV cache.

Threads: network calls run on two small pools (``turbokv-load``, ``turbokv-save``), never on
the forward pass. A load is asynchronous in vLLM's sense: the scheduler parks the request
(WAITING_FOR_REMOTE_KVS) while the load pool fetches its blocks; the copy into the paged cache
then happens on the worker's own thread in ``get_finished`` (so on CUDA it is ordered on the
current stream before the request's first forward). Saves gather the new blocks of each layer
in ``wait_for_save`` (on CUDA into a device buffer, then one non-blocking copy to pinned host
memory) and hand them to the save pool, which puts them after the copy's event completed.

Failure is a miss: a load that fails (server down, slow past ``load_timeout_s``, block missing
or corrupt, non-finite values) writes nothing past its last good block and reports the vLLM
blocks from there on as failed, which vLLM (``kv_load_failure_policy="recompute"``) recomputes.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

from .vllm_layout import PagedLayout
from .vllm_store import Counters, Health, NamespaceShape, failure_reason, logger

_TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


@dataclasses.dataclass
class LoadSpec:
    """Fetch ``hashes`` (one list per TP rank; turbokv blocks of ``block_tokens``) and write
    tokens ``[skip_tokens, skip_tokens + len(block_ids) * vllm_block_size)`` of them, in
    order, into the vLLM blocks ``block_ids``."""
    req_id: str
    salt: str
    ns_ids: List[int]
    hashes: List[List[bytes]]
    skip_tokens: int
    block_ids: List[int]


@dataclasses.dataclass
class SaveSpec:
    """Put the turbokv blocks ``hashes[rank]``, whose tokens sit in vLLM blocks ``block_ids``
    (``block_tokens / vllm_block_size`` of them per turbokv block, in order)."""
    req_id: str
    salt: str
    ns_ids: List[int]
    hashes: List[List[bytes]]
    block_ids: List[int]


@dataclasses.dataclass
class _LoadResult:
    spec: LoadSpec
    data: Optional[torch.Tensor] = None   # [n][L][2][bt][H][D], host (pinned with CUDA)
    good: int = 0                         # leading blocks of data that arrived intact


class WorkerSide:
    """Owns the layer tensors, the layouts and the pools of one worker (one TP rank).

    Args:
      layers: ``(name, kv_view, layout)`` in model order; ``kv_view`` is vLLM's
        ``[num_kernel_blocks][H][N][2D]`` tensor of the layer.
      vllm_block_size: tokens per vLLM (KV-cache manager) block; a multiple of the kernel
        block size N (vLLM may split manager blocks into kernel blocks).
    """

    def __init__(self, client, namespaces, shape: NamespaceShape, tp_rank: int,
                 layers: Sequence[Tuple[str, torch.Tensor, PagedLayout]], vllm_block_size: int,
                 load_timeout_s: float, save_timeout_s: float, max_pending_save_bytes: int,
                 health: Health, counters: Counters):
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
        self._saves = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="turbokv-save")
        self._inflight: Dict[str, Tuple[LoadSpec, concurrent.futures.Future]] = {}
        self._invalid: Set[int] = set()

    # -- ids ------------------------------------------------------------------------------
    def _kernel_ids(self, block_ids: Sequence[int]) -> torch.Tensor:
        s = self._split
        ids = [b * s + i for b in block_ids for i in range(s)]
        return torch.tensor(ids, dtype=torch.int64, device=self._device)

    # -- loads ----------------------------------------------------------------------------
    def start_loads(self, specs: Sequence[LoadSpec]) -> None:
        for spec in specs:
            self._inflight[spec.req_id] = (spec, self._loads.submit(self._fetch, spec))

    def _fetch(self, spec: LoadSpec) -> _LoadResult:
        hashes = spec.hashes[self._rank]
        res = _LoadResult(spec)
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
        t0 = time.monotonic()
        s = self._shape
        buf = torch.empty((len(hashes), s.num_layers, 2, s.block_tokens, s.num_kv_heads,
                           s.head_dim), dtype=self._dtype,
                          pin_memory=self._device.type == "cuda")
        try:
            # Decoded by the server straight into buf (the client's caller-owned buffers).
            got = self._client.get_blocks(ns, hashes, timeout=self._load_timeout, out=buf)
        except Exception as e:  # noqa: BLE001 - any failure is a miss
            self._health.failed(e)
            if failure_reason(e) == "not_found":
                self._namespaces.forget()
            self._counters.add("load.error", len(hashes))
            return res
        self._health.ok()
        res.data = buf
        for i, b in enumerate(got):
            if b is None:
                logger.warning("turbokv: block %d of %d for request %s is gone (evicted or "
                               "corrupt); recomputing from there", i, len(hashes), spec.req_id)
                self._counters.add("load.miss", len(hashes) - i)
                break
            if not bool(torch.isfinite(buf[i]).all()):
                logger.warning("turbokv: block %d for request %s has non-finite values; "
                               "recomputing from there", i, spec.req_id)
                self._counters.add("load.corrupt", len(hashes) - i)
                break
            res.good = i + 1
        self._counters.add("load.ok", res.good)
        self._counters.add("load.bytes", res.good * s.raw_block_bytes())
        self._counters.add("load.seconds", time.monotonic() - t0)
        return res

    def finished_loads(self) -> Set[str]:
        """Writes every completed fetch into the paged cache; returns their request ids."""
        done = set()
        for req_id, (spec, fut) in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[req_id]
            try:
                self._inject(fut.result())
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

    def take_invalid(self) -> Set[int]:
        out, self._invalid = self._invalid, set()
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

    def _gather(self, spec: SaveSpec, n: int):
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

    def _put(self, spec: SaveSpec, staged: torch.Tensor, event, nbytes: int) -> None:
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
                                                  timeout=self._save_timeout)
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
