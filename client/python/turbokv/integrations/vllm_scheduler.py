"""Scheduler side of the vLLM connector: lookups, the load and save plan of every step, and the
KV events of the blocks the workers stored.

Runs in vLLM's scheduler (engine core) process, on its loop: every method returns quickly. The
only network call is the Lookup of a new request's prompt (``lookup_timeout_s``); a server
that fails is skipped for ``retry_after_s`` (:class:`~turbokv.integrations.vllm_store.Health`).
"""
from __future__ import annotations

import collections
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import (
    TYPE_CHECKING,
    Any,
)

from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVCacheEvent
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata

from turbokv.hasher import PrefixHasher
from turbokv.store_client import StoreClient

from .vllm_store import (
    KV_EVENT_MEDIUM,
    ConnectorOptions,
    Counters,
    Health,
    Namespaces,
    NamespaceShape,
    failure_reason,
)
from .vllm_worker import LoadSpec, SaveSpec, StoredRun

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

__all__ = ["TurboKVConnectorMetadata", "TurboKVConnectorScheduler", "EventTally"]


@dataclasses.dataclass
class TurboKVConnectorMetadata(KVConnectorMetadata):
    """Scheduler -> workers, once per step.

    loads: fetches to start (one per request whose external hit was just allocated).
    saves: whole blocks the step completes.
    idle: the step runs no model forward (nothing scheduled): the workers may wait a little for
        a fetch to finish instead of returning at once to a busy loop (``idle_wait_s``).
    """
    loads: list[LoadSpec] = dataclasses.field(default_factory=list)
    saves: list[SaveSpec] = dataclasses.field(default_factory=list)
    idle: bool = False


@dataclasses.dataclass
class _Request:
    """Scheduler-side state of one request."""
    request: Request
    salt: str
    ns_ids: list[int]
    hashers: list[PrefixHasher]
    chains: list[list[bytes]]           # per TP rank, turbokv block hashes so far
    block_ids: list[int] = dataclasses.field(default_factory=list)
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


class EventTally:
    """Turns the workers' reports into vLLM KV events, each block announced once.

    A block is stored only when every TP rank stored its head slice: a BlockStored is published
    when ``num_workers`` reports of it arrived (over any number of steps; one still incomplete
    after ``max_wait_s`` is dropped: some rank failed to store). A block announced in the last
    ``remember`` announcements is not announced again (the connector may put a block twice
    when a lookup ran before an earlier put finished). BlockRemoved (a load found the block
    gone) is published at its first report; it also forgets the block, so a later store is
    announced again.

    Not thread-safe: the scheduler's loop only.
    """

    def __init__(self, num_workers: int, max_wait_s: float = 60.0, remember: int = 65536):
        self._num_workers = max(1, int(num_workers))
        self._max_wait_s = float(max_wait_s)
        self._remember = int(remember)
        self._pending: dict[StoredRun, tuple[int, float]] = {}
        self._announced: OrderedDict[bytes, None] = collections.OrderedDict()
        self._ready: collections.deque[KVCacheEvent] = collections.deque()

    def add(self, stored: Iterable[StoredRun], removed: Iterable[bytes]) -> None:
        now = time.monotonic()
        for run in stored:
            count, since = self._pending.get(run, (0, now))
            if count + 1 < self._num_workers:
                self._pending[run] = (count + 1, since)
                continue
            self._pending.pop(run, None)
            if all(h in self._announced for h in run.hashes):
                continue
            for h in run.hashes:
                self._announced[h] = None
                self._announced.move_to_end(h)
            while len(self._announced) > self._remember:
                self._announced.popitem(last=False)
            self._ready.append(BlockStored(
                block_hashes=list(run.hashes), parent_block_hash=run.parent,
                token_ids=list(run.token_ids), block_size=run.block_size,
                lora_id=run.lora_id, medium=KV_EVENT_MEDIUM, lora_name=run.lora_name,
                extra_keys=list(run.extra_keys) if run.extra_keys is not None else None))
        gone = [h for h in dict.fromkeys(removed) if h in self._announced]
        if gone:
            for h in gone:
                del self._announced[h]
            self._ready.append(BlockRemoved(block_hashes=gone, medium=KV_EVENT_MEDIUM))
        stale = [r for r, (_, since) in self._pending.items() if now - since > self._max_wait_s]
        for r in stale:
            del self._pending[r]

    def take(self) -> Iterator[KVCacheEvent]:
        while self._ready:
            yield self._ready.popleft()


class TurboKVConnectorScheduler:
    """The scheduler half of :class:`~turbokv.integrations.vllm.TurboKVConnector`.

    Args:
      opts: the connector's options.
      shape: the namespace shape (one namespace per cache salt and TP rank).
      vllm_block_size: tokens per vLLM KV-cache block; ``shape.block_tokens`` is a multiple.
      can_load / can_save: from ``kv_role``.
      namespaces / health / counters / client: shared with nothing else in this process.
      events: publish BlockStored / BlockRemoved through ``take_events`` (vLLM's KV events
        are enabled).
    """

    def __init__(self, opts: ConnectorOptions, shape: NamespaceShape, vllm_block_size: int,
                 can_load: bool, can_save: bool, client: StoreClient, namespaces: Namespaces,
                 health: Health, counters: Counters, events: bool):
        self._opts = opts
        self._shape = shape
        self._bt = shape.block_tokens
        self._vbs = int(vllm_block_size)
        self._can_load = can_load
        self._can_save = can_save
        self._client = client
        self._namespaces = namespaces
        self._health = health
        self.counters = counters
        self._events: EventTally | None = EventTally(shape.tp_size) if events else None
        self._reqs: dict[str, _Request] = {}
        self._pending_loads: list[LoadSpec] = []

    # -- requests -------------------------------------------------------------------------
    @staticmethod
    def eligible(request: Request) -> bool:
        """Token-id prompts only: multimodal and prompt-embedding requests are neither looked
        up nor saved (their token ids do not identify their KV)."""
        return (request.prompt_token_ids is not None and request.prompt_embeds is None
                and not request.mm_features)

    def _state(self, request: Request) -> _Request | None:
        st = self._reqs.get(request.request_id)
        if st is not None or not self.eligible(request):
            return st
        salt = request.cache_salt or ""
        got = [self._namespaces.get(salt, r) for r in range(self._shape.tp_size)]
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

    def may_load_async(self, request: Request) -> bool:
        """vLLM >= 0.34 (``--max-num-inflight-kv-loads``): whether a lookup may report an
        asynchronous hit. Cheap: no lookup, only whether the prompt has a whole block."""
        return (self._can_load and self.eligible(request)
                and (request.num_prompt_tokens - 1) // self._bt > 0)

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        usable = (request.num_prompt_tokens - 1) // self._bt   # never the last prompt token
        st = self._state(request)
        if st is None:
            if usable and self.eligible(request):
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

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
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
            block_ids=st.block_ids[start // self._vbs:end // self._vbs],
            chains=[self._client.chain_context(c, first) for c in st.chains]))

    # -- the step's plan ------------------------------------------------------------------
    def build_connector_meta(self, scheduler_output: SchedulerOutput
                             ) -> TurboKVConnectorMetadata:
        so = scheduler_output
        meta = TurboKVConnectorMetadata(loads=self._pending_loads,
                                        idle=so.total_num_scheduled_tokens == 0)
        self._pending_loads = []
        if not self._can_save:
            return meta
        spec_tokens = so.scheduled_spec_decode_tokens or {}
        for new in so.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            self._plan_save(meta, st, new.num_computed_tokens, so.num_scheduled_tokens.get(
                new.req_id, 0) - len(spec_tokens.get(new.req_id, ())))
        cached = so.scheduled_cached_reqs
        # vLLM < 0.34 names preempted requests that resume here (their block ids replace the
        # old ones); vLLM >= 0.34 re-sends them in full among the new requests above.
        resumed = getattr(cached, "resumed_req_ids", None) or ()
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in resumed:
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
                                   block_ids=st.block_ids[first * per:full * per],
                                   chains=[self._client.chain_context(c, first)
                                           for c in st.chains],
                                   announce=self._announcement(st, first, full)))
        st.saved_blocks = full

    def _announcement(self, st: _Request, first: int, end: int) -> StoredRun | None:
        """What a worker reports once blocks [first, end) are stored (events enabled only):
        TP rank 0's hashes identify the blocks (every rank stores its own namespace)."""
        if self._events is None:
            return None
        req = st.request
        chain = st.chains[0]
        lora = req.lora_request
        lora_name = str(lora.lora_name) if lora is not None else None
        extra: tuple[tuple[Any, ...] | None, ...] | None = None
        if lora_name is not None or st.salt:
            # vLLM's extra_keys: per block, the LoRA name, then the cache salt (first block).
            extra = tuple(tuple(([lora_name] if lora_name else [])
                                + ([st.salt] if j == 0 and st.salt else [])) or None
                          for j in range(first, end))
        return StoredRun(hashes=tuple(chain[first:end]),
                         parent=chain[first - 1] if first > 0 else None,
                         token_ids=tuple(req.all_token_ids[first * self._bt:end * self._bt]),
                         block_size=self._bt,
                         lora_id=int(lora.lora_int_id) if lora is not None else None,
                         lora_name=lora_name, extra_keys=extra)

    def request_finished(self, request: Request, block_ids: list[int]
                         ) -> tuple[bool, dict[str, Any] | None]:
        # Every whole block was handed to the worker in the step that completed it, and the
        # worker copies it out of the paged cache in that step: nothing holds vLLM's blocks.
        self._reqs.pop(request.request_id, None)
        return False, None

    # -- events -----------------------------------------------------------------------------
    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        events = getattr(connector_output, "kv_cache_events", None)
        if self._events is None or events is None or not hasattr(events, "reports"):
            return
        stored, removed = events.reports()
        self._events.add(stored, removed)

    def take_events(self) -> Iterator[KVCacheEvent]:
        if self._events is not None:
            yield from self._events.take()
