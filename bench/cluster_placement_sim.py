#!/usr/bin/env python3
"""Simulates cluster placement policies on a Mooncake-format trace (docs/cluster.md, "Placement").

N nodes, each an LRU cache of capacity/N blocks, against one LRU cache of the whole capacity, per
placement policy:

  block        each block on the rendezvous winner of its own id (the old placement)
  fixed:S      block i of a chain on the winner of block (i // S) * S: segments by position
  cdc:S        a block starts a segment when hash(id) % S == 0 (or it is the chain's head): the
               segment is placed by its first block (content-defined boundaries, mean length S)
  chain        the whole chain on the winner of its head block

Per request, as the engines drive turbokv: Lookup(chain) gives the leading match (a block hits
when its node holds it and every block before it hit); the matched blocks are read and the rest
put. Every request's blocks become most recently used with the head most recent and the tail
least (the server ranks a chain's tail below its head, block_store.h ChainCursor), so a node
evicts tails before heads.

Prints, per capacity (share of the trace's distinct blocks) and policy: the block hit ratio of N
nodes and its ratio to the single cache (same capacity, same run), the nodes a Lookup asks (mean),
and the load balance (max over nodes / mean of blocks put, and of blocks resident at the end).
With --join / --leave: the hit ratio when a node joins (or one leaves) halfway through the
trace, against the same run without the change.

    python3 bench/cluster_placement_sim.py --trace ../shared/data/traces/mooncake_synthetic_trace.jsonl
    build/venv/bin/python -m bench.cache_replay.workloads --kind chat --seed 1 --out /tmp/chat.jsonl
    python3 bench/cluster_placement_sim.py --trace /tmp/chat.jsonl --capacities 0.10,0.25

It models LRU nodes only: the real server's policy (LRFU, prefix-tree aware) is measured by the
cache replay benchmark (bench/cache_replay, --nodes, --segment-blocks; docs/cluster.md).
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import statistics
import sys
from collections.abc import Callable, Sequence


def load_trace(path: str) -> list[list[int]]:
    """The trace's requests as lists of block ids (``hash_ids``), in arrival order."""
    with open(path) as f:
        return [json.loads(line)["hash_ids"] for line in f if line.strip()]


class Weights:
    """Rendezvous weights: SHA-256(node ‖ 0 ‖ key), first 8 bytes big-endian (as sharding.py)."""

    def __init__(self) -> None:
        self._cache: dict[tuple, int] = {}

    def winner(self, nodes: Sequence[str], key: int) -> str:
        best, best_w = "", -1
        kb = key.to_bytes(8, "big")
        for n in nodes:
            w = self._cache.get((n, key))
            if w is None:
                w = int.from_bytes(hashlib.sha256(n.encode() + b"\0" + kb).digest()[:8], "big")
                self._cache[(n, key)] = w
            if w > best_w or (w == best_w and n < best):
                best, best_w = n, w
        return best


def is_boundary(block: int, s: int) -> bool:
    d = hashlib.sha256(b"seg" + block.to_bytes(8, "big")).digest()
    return int.from_bytes(d[:8], "big") % s == 0


def placement(policy: str) -> Callable[[list[int]], list[int]]:
    """chain -> for each position, the block id whose rendezvous winner holds it."""
    if policy == "block":
        return lambda chain: chain
    if policy == "chain":
        return lambda chain: [chain[0]] * len(chain)
    kind, _, s = policy.partition(":")
    s = int(s)
    if kind == "fixed":
        return lambda chain: [chain[(i // s) * s] for i in range(len(chain))]
    if kind == "cdc":
        memo: dict[int, bool] = {}

        def cdc(chain: list[int]) -> list[int]:
            out, head = [], chain[0]
            for i, b in enumerate(chain):
                if i > 0:
                    bd = memo.get(b)
                    if bd is None:
                        bd = memo[b] = is_boundary(b, s)
                    if bd:
                        head = b
                out.append(head)
            return out
        return cdc
    raise ValueError("unknown policy %r" % policy)


class Lru:
    """An LRU cache of ``capacity`` blocks. With ``garbage`` > 0 it models a store whose
    evicted and rewritten blocks leave garbage that counts against the capacity until it is
    collected: each eviction or rewrite adds one block of garbage, and when the garbage reaches
    ``garbage`` x capacity it is all collected at once (turbokv's blob files are collected when
    half garbage), so the blocks the store can hold swing between (1 - garbage) x capacity and
    the capacity, out of step on different nodes."""

    def __init__(self, capacity: int, garbage: float = 0.0) -> None:
        self.capacity = capacity
        self.d: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.puts = 0
        self.garbage_share = garbage
        self.garbage = 0

    def put(self, b: int) -> bool:
        """A PutBlocks of b: True when b was held already (the server rewrites it anyway)."""
        held = b in self.d
        if held and self.garbage_share:
            self._add_garbage()
        self.touch_or_put(b)
        return held

    def _add_garbage(self) -> None:
        self.garbage += 1
        if self.garbage >= self.garbage_share * self.capacity:
            self.garbage = 0

    def touch_or_put(self, b: int) -> None:
        if b in self.d:
            self.d.move_to_end(b)
            return
        self.puts += 1
        self.d[b] = None
        evicted = 0
        while self.d and len(self.d) + self.garbage > self.capacity:
            self.d.popitem(last=False)
            evicted += 1
        for _ in range(evicted if self.garbage_share else 0):  # counted from the next put on
            self._add_garbage()


def replay(trace: list[list[int]], capacity: int, nodes_at: Callable[[int], list[str]],
           policy: str, weights: Weights, order: str = "server", garbage: float = 0.0) -> dict:
    """Replays trace; nodes_at(request index) gives the membership. Returns the figures."""
    place = placement(policy)
    all_nodes = sorted({n for r in range(len(trace)) for n in (nodes_at(r),)[0]})
    caches: dict[str, Lru] = {}
    hits = refs = writes = rewrites = 0
    asked: list[int] = []
    prev_nodes: list[str] = []
    per = max(1, capacity // len(nodes_at(0)))  # a node's capacity; a joining node brings its own
    for r, chain in enumerate(trace):
        nodes = nodes_at(r)
        if nodes != prev_nodes:
            for n in nodes:
                if n not in caches:
                    caches[n] = Lru(per, garbage)
            prev_nodes = nodes
        keys = place(chain)
        owner = [weights.winner(nodes, k) for k in keys]
        asked.append(len(set(owner)))
        m = 0
        while m < len(chain) and chain[m] in caches[owner[m]].d:
            m += 1
        hits += m
        refs += len(chain)
        if order == "chain":
            for i in range(len(chain) - 1, -1, -1):  # head most recent, tail least
                caches[owner[i]].touch_or_put(chain[i])
            continue
        # As the server orders its LRU list: each call's blocks rank above every earlier
        # call's, and within a call each block just below the one before it. Calls: each
        # node's Lookup touches its own leading match, GetBlocks [0, m), PutBlocks [m, L).
        for n in set(owner):
            pos = [i for i in range(len(chain)) if owner[i] == n]
            lead = []
            for i in pos:
                if chain[i] not in caches[n].d:
                    break
                lead.append(i)
            for i in reversed(lead):
                caches[n].touch_or_put(chain[i])
        for i in range(m - 1, -1, -1):
            caches[owner[i]].touch_or_put(chain[i])
        for i in range(len(chain) - 1, m - 1, -1):
            rewrites += caches[owner[i]].put(chain[i])
        writes += len(chain) - m
    final = [caches[n] for n in prev_nodes]
    puts = [c.puts for c in final]
    held = [len(c.d) for c in final]
    return dict(hit=hits / refs, asked=statistics.mean(asked),
                put_imbalance=max(puts) / statistics.mean(puts) if sum(puts) else 1.0,
                held_imbalance=max(held) / statistics.mean(held) if sum(held) else 1.0,
                nodes=len(all_nodes), rewrites=rewrites / max(1, writes))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--capacities", default="0.05,0.10,0.25,0.50")
    ap.add_argument("--policies", default="block,fixed:4,fixed:8,fixed:16,fixed:32,fixed:64,"
                    "cdc:8,cdc:16,cdc:32,chain")
    ap.add_argument("--membership", action="store_true",
                    help="also: a node joins at 1/2 of the trace; one leaves at 1/2")
    ap.add_argument("--garbage", type=float, default=0.0,
                    help="model a store whose evicted blocks stay as garbage until this share of "
                         "the capacity is garbage (0: plain LRU; turbokv's blob GC: 0.5)")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    trace = load_trace(a.trace)
    distinct = len({b for c in trace for b in c})
    w = Weights()
    nodes = ["node-%d:50051" % i for i in range(a.nodes)]
    one = ["single:50051"]
    out = dict(trace=a.trace, requests=len(trace), distinct_blocks=distinct, nodes=a.nodes,
               results=[])
    print("trace %s: %d requests, %d block references, %d distinct blocks; %d nodes"
          % (a.trace, len(trace), sum(map(len, trace)), distinct, a.nodes))
    for frac in [float(x) for x in a.capacities.split(",")]:
        cap = int(round(frac * distinct))
        one_r = replay(trace, cap, lambda r: one, "block", w, garbage=a.garbage)
        single = one_r["hit"]
        print("\ncapacity %.0f%% (%d blocks): one cache hits %.4f, rewrites %.3f of its puts"
              % (100 * frac, cap, single, one_r["rewrites"]))
        print("  %-10s %8s %7s %7s %9s %9s %9s" % ("policy", "hit", "x one", "asked",
                                                   "put max/mean", "held max/mean", "rewrites"))
        for p in a.policies.split(","):
            r = replay(trace, cap, lambda _: nodes, p, w, garbage=a.garbage)
            row = dict(capacity=frac, policy=p, single_hit=single, **r)
            line = "  %-10s %8.4f %7.3f %7.2f %9.3f %9.3f %9.3f" % (
                p, r["hit"], r["hit"] / single, r["asked"], r["put_imbalance"],
                r["held_imbalance"], r["rewrites"])
            if a.membership:
                half = len(trace) // 2
                joined = nodes + ["node-%d:50051" % a.nodes]
                rj = replay(trace, cap, lambda i: nodes if i < half else joined, p, w,
                            garbage=a.garbage)
                rl = replay(trace, cap, lambda i: nodes if i < half else nodes[:-1], p, w,
                            garbage=a.garbage)
                row.update(join_hit=rj["hit"], leave_hit=rl["hit"])
                line += "   join %.4f (%.3fx)  leave %.4f (%.3fx)" % (
                    rj["hit"], rj["hit"] / r["hit"], rl["hit"], rl["hit"] / r["hit"])
            print(line)
            sys.stdout.flush()
            out["results"].append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
