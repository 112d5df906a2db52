"""A client of many turbokv servers: rendezvous placement, fan-out, replication.

    from turbokv import ShardedClient
    c = ShardedClient("10.0.0.1:50051,10.0.0.2:50051", replicas=2)
    c = ShardedClient("dns:///turbokv.default.svc.cluster.local:50051")

Placement (sharding.py): a prefix chain is cut into segments of ``segment_blocks``
consecutive blocks by position, and each block goes to the first ``replicas`` nodes of the
rendezvous rank of its segment's first block. The default, 1, places each block by its own
hash, which spreads every chain and so the load evenly over the nodes and hits best
(docs/cluster.md, "Placement"); longer segments keep runs of a chain on one node, so a Lookup
asks fewer nodes. A put's per-node calls that do not hold its last block carry
``chain_continues``, so each server's eviction policy sees the request's last block where a
single server would.

Placing a block needs its position in the chain, so every call that takes hashes assumes they
start their chain (``hashes[0]`` at position 0) unless ``chain=`` says where they sit (a
:class:`turbokv.sharding.ChainContext`; ``chain_context(whole_chain, start)`` builds it). The
engines' pattern::

    m = c.lookup(ns, chain).matched_blocks                  # the chain from its head
    got = c.get_blocks(ns, chain[:m])                       # starts at the head too
    c.put_blocks(ns, chain[m:], rest, chain=c.chain_context(chain, m))

A call that starts inside a segment without its ``segment_head`` raises ValueError naming
``chain.segment_head``. All clients of a cluster must use the same ``segment_blocks`` (it is part
of the placement, like the node ids).

Batched calls are split per node and run concurrently; the answers are merged in request
order:

* ``put_*``: each block goes to all of its R nodes; its result is OK when at least one copy
  was stored, else the first owner's error (UNAVAILABLE when that node is down).
* ``get_*``: each block is read from its owners in rank order; the first that has it wins
  (blocks are named by their prefix hash, so every copy is the same block).
* ``lookup``: each node is asked about the chain hashes it owns (in chain order) and answers
  with its leading match; the chain matches up to the first block that none of its owners has.
  With R >= 2 a node's first miss does not end the chain, so owners whose answer is still
  unknown at the first unresolved block are asked again from there (one more round per such
  block; R = 1 always takes one round).
* One tuning for the cluster: each lookup sends the other nodes the eviction-policy tuning
  (half-life, unseen age) that the cluster's tuning node (``sharding.tuning_node``) returned
  last, so every node ranks the pieces of a chain alike (docs/cluster.md).
* ``register_namespace`` registers on every node; a node that later answers NOT_FOUND (a new
  pod, a wiped volume) gets the namespace registered again, then the call is retried once.

Failures: a node that fails with UNAVAILABLE or DEADLINE_EXCEEDED is marked down for
``node_down_seconds`` (skipped meanwhile) and costs misses: lookups and gets of its blocks miss
(nothing, with R >= 2 and a live replica), puts of blocks with no live owner return per-block
UNAVAILABLE. The caller gets an error only when the cluster cannot answer: none of the nodes a
call asked answered and every other node is marked down (UNAVAILABLE), or for errors that are
the caller's (INVALID_ARGUMENT, ValueError, NOT_FOUND on every node asked, ...). With segments
one call often asks a single node: its failure costs that call's blocks, not the call.

DNS targets are re-resolved every ``dns_refresh_seconds`` (on the next call after that); a
failed resolution keeps the previous node list.

Thread safety: a ShardedClient may be shared by threads.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from . import buffers, sharding
from ._async import AsyncCalls
from .client import (
    BlockResult,
    Client,
    Layers,
    LookupResult,
    NamespaceInfo,
    NamespaceStats,
    PolicyTuning,
    ServerStats,
    _block_hashes,
)
from .errors import StatusCode, TurboKVError
from .security import Security

_NODE_FAILURES = (StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED)
# Reconnect quickly to a node that comes back (gRPC's default backoff grows to 120 s).
_CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.min_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 1000)]


class _NodeDown(Exception):
    """A node could not answer (down, unreachable, or lacks the namespace)."""

    def __init__(self, node: str, error: TurboKVError | None):
        super().__init__(node)
        self.node = node
        self.error = error


class ShardedClient(AsyncCalls):
    """Many turbokv servers as one store.

    Args:
      endpoints: ``"host:port,host:port"``, ``"dns:///name:port"`` (items may be mixed), or a
        sequence of such items. See sharding.py for node identities.
      replicas: copies of each block (R), >= 1; capped at the number of nodes. Default 1.
      segment_blocks: blocks of a chain placed together (S), in [1, 2^20]; 1 places each
        block by its own hash. Every client of a cluster must use the same value.
        Default sharding.DEFAULT_SEGMENT_BLOCKS.
      timeout: deadline of each per-node call in seconds. Default 30.
      max_attempts: attempts per per-node call on UNAVAILABLE. Default 2 (a down node should
        cost little; the other nodes still answer).
      node_down_seconds: how long a failed node is skipped. Default 5.
      dns_refresh_seconds: re-resolution period of DNS targets. Default 30.
      max_concurrent_calls: threads running the ``*_async`` calls (created on first use;
        each call fans out on a separate pool of 16). Default 8.
      security: TLS and bearer-token settings of every node's connection (turbokv.Security).
    Raises:
      ValueError: bad endpoints or options. OSError: a DNS name does not resolve at start.
    """

    def __init__(self, endpoints, replicas: int = 1, timeout: float = 30.0,
                 max_attempts: int = 2, node_down_seconds: float = 5.0,
                 dns_refresh_seconds: float = 30.0, max_concurrent_calls: int = 8,
                 security: Security | None = None,
                 segment_blocks: int = sharding.DEFAULT_SEGMENT_BLOCKS):
        self.security = security
        self._endpoints = sharding.parse_endpoints(endpoints)
        if int(replicas) < 1:
            raise ValueError("replicas must be >= 1, got %r" % (replicas,))
        self.replicas = int(replicas)
        self.segment_blocks = sharding.check_segment_blocks(segment_blocks)
        self.timeout = float(timeout)
        self.max_attempts = int(max_attempts)
        self.node_down_seconds = float(node_down_seconds)
        self.dns_refresh_seconds = float(dns_refresh_seconds)
        if not 1 <= int(max_concurrent_calls) <= 256:
            raise ValueError("max_concurrent_calls must be in [1, 256]")
        self.max_concurrent_calls = int(max_concurrent_calls)
        self._has_dns = any(ep.dns for ep in self._endpoints)
        self._lock = threading.Lock()
        self._clients: dict[str, Client] = {}
        self._down_until: dict[str, float] = {}
        self._namespaces: dict[int, dict] = {}  # id -> register_namespace kwargs
        self._block_tokens: dict[int, int] = {}
        # The tuning node's last eviction-policy tuning (keyed by that node, so a new tuning
        # node starts with nothing to send): docs/cluster.md, "One tuning for the cluster".
        self._tuning: dict[str, PolicyTuning] = {}
        self._nodes: list[str] = []
        self._resolved_at = 0.0
        self._fan_pool = concurrent.futures.ThreadPoolExecutor(max_workers=16,
                                                           thread_name_prefix="turbokv-shard")
        self._set_nodes(sharding.resolve(self._endpoints))

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Cancels queued ``*_async`` calls, waits for running ones, closes every node's
        client."""
        self._close_async()
        self._fan_pool.shutdown(wait=True)
        with self._lock:
            for c in self._clients.values():
                c.close()
            self._clients.clear()

    def __enter__(self) -> ShardedClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- nodes -------------------------------------------------------------------------------
    def _set_nodes(self, nodes: list[str]) -> None:
        if not nodes:
            raise OSError("the endpoints resolved to no addresses")
        with self._lock:
            self._nodes = list(nodes)
            self._resolved_at = time.monotonic()
            for n in nodes:
                if n not in self._clients:
                    self._clients[n] = Client(n, timeout=self.timeout,
                                              max_attempts=self.max_attempts,
                                              options=_CHANNEL_OPTIONS,
                                              security=self.security)
            # Dropped, not closed: a call in flight may still use it (the channel closes when
            # the last reference goes).
            for n in [n for n in self._clients if n not in nodes]:
                del self._clients[n]

    def set_endpoints(self, endpoints) -> None:
        """Replaces the endpoint list (same forms as the constructor), e.g. after scaling.
        Clients of nodes that remain are kept; blocks move as rendezvous hashing says."""
        eps = sharding.parse_endpoints(endpoints)
        nodes = sharding.resolve(eps)
        with self._lock:
            self._endpoints = eps
            self._has_dns = any(ep.dns for ep in eps)
        self._set_nodes(nodes)

    def nodes(self) -> list[str]:
        """The current node ids (DNS targets re-resolved when due)."""
        if self._has_dns and time.monotonic() - self._resolved_at >= self.dns_refresh_seconds:
            try:
                self._set_nodes(sharding.resolve(self._endpoints))
            except OSError:
                with self._lock:
                    self._resolved_at = time.monotonic()  # keep the old list; retry later
        with self._lock:
            return list(self._nodes)

    def owners(self, block_hash: bytes, nodes: Sequence[str] | None = None) -> list[str]:
        """The nodes of placement key ``block_hash`` (a segment's first block: they hold its
        whole segment), preferred first."""
        return sharding.owners(self.nodes() if nodes is None else nodes, block_hash,
                               self.replicas)

    def chain_context(self, chain: Sequence[bytes], start: int) -> sharding.ChainContext:
        """The ``chain=`` argument for a call on ``chain[start:]`` (``chain``: the prefix chain
        from its head, at least ``start`` hashes). ValueError: ``start`` out of range."""
        return sharding.chain_context(chain, start, self.segment_blocks)

    def placement(self, hashes: Sequence[bytes], chain: sharding.ChainContext | None = None,
                  nodes: Sequence[str] | None = None) -> list[list[str]]:
        """For each of ``hashes`` (consecutive blocks of one chain, placed as ``chain`` says),
        the nodes that hold it, preferred first. ValueError as the calls raise it."""
        nodes = self.nodes() if nodes is None else nodes
        memo: dict[bytes, list[str]] = {}
        out = []
        for k in sharding.placement_keys(_block_hashes(hashes), self.segment_blocks, chain):
            o = memo.get(k)
            if o is None:
                o = memo[k] = sharding.owners(nodes, k, self.replicas)
            out.append(o)
        return out

    def mark_up(self, node: str | None = None) -> None:
        """Forgets that ``node`` (default: every node) failed, so the next call tries it."""
        with self._lock:
            if node is None:
                self._down_until.clear()
            else:
                self._down_until.pop(node, None)

    def _is_down(self, node: str) -> bool:
        with self._lock:
            return self._down_until.get(node, 0.0) > time.monotonic()

    def _client(self, node: str) -> Client:
        with self._lock:
            return self._clients[node]

    def _on_node(self, node: str, ns_id: int | None, fn: Callable[..., Any]) -> Any:
        """fn(client of node); raises _NodeDown for a node that cannot answer."""
        if self._is_down(node):
            raise _NodeDown(node, None)
        c = self._client(node)
        for attempt in (0, 1):
            try:
                return fn(c)
            except TurboKVError as e:
                if e.code in _NODE_FAILURES:
                    with self._lock:
                        self._down_until[node] = time.monotonic() + self.node_down_seconds
                    raise _NodeDown(node, e) from None
                if e.code != StatusCode.NOT_FOUND or ns_id is None:
                    raise
                with self._lock:
                    kwargs = self._namespaces.get(ns_id)
                if kwargs is None or attempt == 1:
                    raise _NodeDown(node, e) from None
                try:
                    c.register_namespace(**kwargs)
                except TurboKVError as e2:
                    raise _NodeDown(node, e2) from None

    def _fan_out(self, ns_id: int | None,
                 work: Mapping[str, Callable[..., Any]]) -> dict[str, Any]:
        """Runs work[node] on every node concurrently: node -> result or _NodeDown."""
        futures = {n: self._fan_pool.submit(self._on_node, n, ns_id, fn) for n, fn in work.items()}
        out = {}
        for n, f in futures.items():
            try:
                out[n] = f.result()
            except _NodeDown as d:
                out[n] = d
        return out

    def _raise_if_none_answered(self, results: dict, nodes: Sequence[str] = ()) -> None:
        """Raises when none of the nodes asked (``results``) answered: NOT_FOUND when every one
        said so; nothing when another node of the cluster (``nodes``) is not marked down (the
        call then reports the asked nodes' blocks as misses: with segments one call often asks
        one node, and a down node costs misses, not a failed call, while the cluster answers);
        else UNAVAILABLE naming each node's error."""
        if not results or any(not isinstance(r, _NodeDown) for r in results.values()):
            return
        errors = [r.error for r in results.values() if r.error is not None]
        not_found = [e for e in errors if e.code == StatusCode.NOT_FOUND]
        if not_found and len(not_found) == len(errors):
            raise not_found[0]
        if any(n not in results and not self._is_down(n) for n in nodes):
            return
        raise TurboKVError(StatusCode.UNAVAILABLE, "no turbokv node answered (%s)" %
                           ", ".join("%s: %s" % (n, r.error or "down")
                                     for n, r in sorted(results.items())))

    # -- namespaces --------------------------------------------------------------------------
    def register_namespace(self, model: str, num_layers: int, num_kv_heads: int, head_dim: int,
                           block_tokens: int, dtype: str = "fp16", preset: str = "",
                           model_revision: str = "", **kwargs) -> NamespaceInfo:
        """Registers the namespace on every node (Client.register_namespace's arguments).
        Returns the first node's answer; nodes that are down get it on first use."""
        args = dict(model=model, num_layers=num_layers, num_kv_heads=num_kv_heads,
                    head_dim=head_dim, block_tokens=block_tokens, dtype=dtype, preset=preset,
                    model_revision=model_revision, **kwargs)
        nodes = self.nodes()
        results = self._fan_out(None, {n: (lambda c: c.register_namespace(**args))
                                       for n in nodes})
        self._raise_if_none_answered(results)
        info = next(results[n] for n in nodes if not isinstance(results[n], _NodeDown))
        stored = dict(args)
        stored.pop("timeout", None)
        with self._lock:
            self._namespaces[info.namespace_id] = stored
            self._block_tokens[info.namespace_id] = int(block_tokens)
        return info

    def drop_namespace(self, namespace_id: int, timeout: float | None = None) -> int:
        """Drops the namespace on every node; returns the blocks deleted (all copies)."""
        results = self._fan_out(None, {n: (lambda c: c.drop_namespace(namespace_id, timeout))
                                       for n in self.nodes()})
        self._raise_if_none_answered(results)
        with self._lock:
            self._namespaces.pop(namespace_id, None)
        return sum(r for r in results.values() if not isinstance(r, _NodeDown))

    # -- put ---------------------------------------------------------------------------------
    def put_blocks(self, namespace_id: int, hashes: Sequence[bytes], blocks: Any,
                   timeout: float | None = None, *,
                   chain: sharding.ChainContext | None = None,
                   chain_continues: bool = False) -> list[BlockResult]:
        """Client.put_blocks over the cluster (see the module docstring for the results).
        ``chain``: where ``hashes`` sit in their chain (default: they start it).
        ``chain_continues``: as in Client.put_blocks; the per-node calls without the last of
        ``hashes`` carry it anyway (their last block is a middle part of the chain)."""
        if isinstance(blocks, (list, tuple)):
            items = list(blocks)
        else:
            arr = buffers.as_array(blocks, "blocks")
            items = list(arr) if arr.ndim == 6 else [arr]
        return self._put(namespace_id, hashes, items, chain, chain_continues,
                         lambda c, hs, bs, more: c.put_blocks(namespace_id, hs, bs, timeout,
                                                              chain_continues=more))

    def put_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          blocks: Sequence[Any], timeout: float | None = None, *,
                          chain: sharding.ChainContext | None = None,
                          chain_continues: bool = False) -> list[BlockResult]:
        """Client.put_packed_blocks over the cluster (``chain``, ``chain_continues`` as in
        put_blocks)."""
        return self._put(namespace_id, hashes, list(blocks), chain, chain_continues,
                         lambda c, hs, bs, more: c.put_packed_blocks(
                             namespace_id, hs, bs, timeout, chain_continues=more))

    def _put(self, ns_id, hashes, blocks, chain, chain_continues, put) -> list[BlockResult]:
        hashes = _block_hashes(hashes)
        if len(hashes) != len(blocks):
            raise ValueError("%d hashes but %d blocks" % (len(hashes), len(blocks)))
        if not hashes:
            return []
        nodes = self.nodes()
        own = self.placement(hashes, chain, nodes)
        per_node: dict[str, list[int]] = {}
        for i, o in enumerate(own):
            for n in o:
                per_node.setdefault(n, []).append(i)
        # A node without the last block gets a middle part of the chain (chain_continues).
        last = len(hashes) - 1
        work = {n: (lambda c, idx=idx: put(c, [hashes[i] for i in idx], [blocks[i] for i in idx],
                                           chain_continues or idx[-1] != last))
                for n, idx in per_node.items()}
        results = self._fan_out(ns_id, work)
        self._raise_if_none_answered(results, nodes)
        by_node = {n: dict(zip(per_node[n], r)) for n, r in results.items()
                   if not isinstance(r, _NodeDown)}
        out = []
        for i, o in enumerate(own):
            got = [by_node[n][i] for n in o if n in by_node]
            ok = [r for r in got if r.ok]
            if ok:
                out.append(ok[0])
            elif got:
                out.append(got[0])
            else:
                down = results[o[0]]
                out.append(BlockResult(hashes[i], StatusCode.UNAVAILABLE,
                                       "no owner of the block is reachable (%s: %s)"
                                       % (o[0], down.error or "marked down"), 0))
        return out

    # -- lookup ------------------------------------------------------------------------------
    def lookup(self, namespace_id: int, hashes: Sequence[bytes], lease_seconds: int = 0,
               timeout: float | None = None, *,
               chain: sharding.ChainContext | None = None) -> LookupResult:
        """Leading match of the prefix chain across the cluster (module docstring).
        ``hashes``: the chain from its head, unless ``chain`` says where they start."""
        hashes = _block_hashes(hashes)
        n = len(hashes)
        nodes = self.nodes()
        own = self.placement(hashes, chain, nodes)
        positions: dict[str, list[int]] = {}
        for i, o in enumerate(own):
            for node in o:
                positions.setdefault(node, []).append(i)
        present: list[dict[str, bool]] = [dict() for _ in range(n)]
        cursor = {node: 0 for node in positions}
        answered = [False]
        tokens_per_block = [self._block_tokens.get(namespace_id)]

        # One tuning for the cluster: the tuning node's last answer goes to the others.
        leader = sharding.tuning_node(nodes)
        with self._lock:
            follow = self._tuning.get(leader) if leader is not None else None

        def ask(node):
            ps = positions[node][cursor[node]:]
            return self._on_node(node, namespace_id, lambda c: c.lookup(
                namespace_id, [hashes[p] for p in ps], lease_seconds, timeout,
                follow_tuning=None if node == leader else follow))

        def run(round_nodes):
            results = self._fan_out_fn(round_nodes, ask)
            for node, r in results.items():
                ps = positions[node][cursor[node]:]
                if isinstance(r, _NodeDown):
                    for p in ps:
                        present[p][node] = False
                    cursor[node] = len(positions[node])
                    continue
                answered[0] = True
                if node == leader and r.tuning is not None:
                    with self._lock:
                        self._tuning = {leader: r.tuning}
                m = r.matched_blocks
                if m and r.matched_tokens:
                    tokens_per_block[0] = r.matched_tokens // m
                for p in ps[:m]:
                    present[p][node] = True
                if m < len(ps):
                    present[ps[m]][node] = False
                cursor[node] += m + 1
            return results

        first = run(list(positions))
        if not answered[0] and first:
            self._raise_if_none_answered(first, nodes)
        g = 0
        while g < n:
            if any(present[g].get(node) for node in own[g]):
                g += 1
                continue
            unknown = [node for node in own[g] if node not in present[g]]
            if not unknown:
                break
            run(unknown)
        bt = tokens_per_block[0] or 0
        return LookupResult(g, g * bt)

    def _fan_out_fn(self, nodes, fn):
        futures = {n: self._fan_pool.submit(fn, n) for n in nodes}
        out = {}
        for n, f in futures.items():
            try:
                out[n] = f.result()
            except _NodeDown as d:
                out[n] = d
        return out

    # -- get ---------------------------------------------------------------------------------
    def get_blocks(self, namespace_id: int, hashes: Sequence[bytes], dtype: str | None = None,
                   layers: Layers = None, timeout: float | None = None,
                   out: Any = None, *,
                   chain: sharding.ChainContext | None = None) -> list[np.ndarray | None]:
        """Client.get_blocks over the cluster: each block from the first owner that has it
        (``out`` as in Client.get_blocks; each owner writes into the block's slot).
        ``chain``: where ``hashes`` sit in their chain (default: they start it)."""
        return self._get(namespace_id, hashes, out, chain,
                         lambda c, hs, o: c.get_blocks(namespace_id, hs, dtype=dtype,
                                                       layers=layers, timeout=timeout, out=o))

    def get_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          timeout: float | None = None, out: Any = None, *,
                          chain: sharding.ChainContext | None = None) -> list[Any]:
        """Client.get_packed_blocks over the cluster (``chain`` as in get_blocks)."""
        return self._get(namespace_id, hashes, out, chain,
                         lambda c, hs, o: c.get_packed_blocks(namespace_id, hs, timeout, out=o))

    def _get(self, ns_id: int, hashes: Sequence[bytes], out: Any,
             chain: sharding.ChainContext | None,
             get: Callable[[Client, list[bytes], list[Any] | None], list[Any]]) -> list[Any]:
        hashes = _block_hashes(hashes)
        nodes = self.nodes()
        own = self.placement(hashes, chain, nodes)
        slots = buffers.split_out(out, len(hashes)) if out is not None else None
        result: list[Any] = [None] * len(hashes)
        pending = list(range(len(hashes)))
        any_answer = False
        last_results: dict[str, Any] = {}
        for r in range(max((len(o) for o in own), default=0)):
            per_node: dict[str, list[int]] = {}
            for i in pending:
                if r < len(own[i]):
                    per_node.setdefault(own[i][r], []).append(i)
            if not per_node:
                break
            results = self._fan_out(ns_id, {
                n: (lambda c, idx=idx: get(c, [hashes[i] for i in idx],
                                           None if slots is None else [slots[i] for i in idx]))
                for n, idx in per_node.items()})
            last_results.update(results)
            for n, res in results.items():
                if isinstance(res, _NodeDown):
                    continue
                any_answer = True
                for i, b in zip(per_node[n], res):
                    result[i] = b
            pending = [i for i in pending if result[i] is None]
            if not pending:
                break
        if hashes and not any_answer:
            self._raise_if_none_answered(last_results, nodes)
        return result

    # -- delete / stats ----------------------------------------------------------------------
    def delete_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                      timeout: float | None = None, *,
                      chain: sharding.ChainContext | None = None) -> int:
        """Deletes the blocks from all their owners; returns the copies deleted. ``chain``:
        where ``hashes`` sit in their chain (default: they start it)."""
        hashes = _block_hashes(hashes)
        nodes = self.nodes()
        per_node: dict[str, list[bytes]] = {}
        for h, own in zip(hashes, self.placement(hashes, chain, nodes)):
            for n in own:
                per_node.setdefault(n, []).append(h)
        results = self._fan_out(namespace_id, {
            n: (lambda c, hs=hs: c.delete_blocks(namespace_id, hs, timeout))
            for n, hs in per_node.items()})
        self._raise_if_none_answered(results, nodes)
        return sum(r for r in results.values() if not isinstance(r, _NodeDown))

    def node_stats(self, timeout: float | None = None) -> dict[str, ServerStats | None]:
        """Client.stats of every node; None for a node that did not answer."""
        results = self._fan_out(None, {n: (lambda c: c.stats(timeout)) for n in self.nodes()})
        return {n: (None if isinstance(r, _NodeDown) else r) for n, r in results.items()}

    def stats(self, timeout: float | None = None) -> ServerStats:
        """Sums of the nodes' counters (capacity_bytes, used_bytes, blocks, logical_bytes,
        evicted_blocks, checksum_failures), ``namespaces`` merged by id (blocks and bytes
        summed over the copies), ``codec_backend`` / ``durability`` / ``version`` the
        distinct values joined by ",", and ``nodes``: the per-node answers (None when down).
        UNAVAILABLE when no node answers."""
        per = self.node_stats(timeout)
        live = [s for s in per.values() if s is not None]
        if not live:
            raise TurboKVError(StatusCode.UNAVAILABLE, "no turbokv node answered")
        merged: dict[int, NamespaceStats] = {}
        for s in live:
            for ns in s.namespaces:
                m = merged.get(ns.namespace_id)
                merged[ns.namespace_id] = ns if m is None else dataclasses.replace(
                    m, blocks=m.blocks + ns.blocks, stored_bytes=m.stored_bytes + ns.stored_bytes,
                    logical_bytes=m.logical_bytes + ns.logical_bytes)

        def distinct(values: list[str]) -> str:
            return ",".join(sorted(set(values)))

        return ServerStats(
            capacity_bytes=sum(s.capacity_bytes for s in live),
            used_bytes=sum(s.used_bytes for s in live), blocks=sum(s.blocks for s in live),
            logical_bytes=sum(s.logical_bytes for s in live),
            evicted_blocks=sum(s.evicted_blocks for s in live),
            checksum_failures=sum(s.checksum_failures for s in live),
            codec_backend=distinct([s.codec_backend for s in live]),
            durability=distinct([s.durability for s in live]),
            version=distinct([s.version for s in live]),
            namespaces=list(merged.values()), nodes=per)
