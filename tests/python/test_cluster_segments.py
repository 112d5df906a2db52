"""Segment placement of the sharded Python client against three real turbokv-server processes.

Chains of 48 blocks (3 segments of 16) sharing their first 20 blocks, put the way the engines
put them (Lookup of the whole chain, GetBlocks of the matched prefix, PutBlocks of the rest with
its chain context): every segment lives whole on the node its first block picks, a Lookup spans
the segments, a call that starts inside a segment without the segment's first block is a
ValueError naming ``chain.segment_head``, replicas keep every chain whole with a node down, and
with R = 1 a node down costs exactly its segments' blocks, never a failed call.
"""
from __future__ import annotations

import numpy as np
import pytest

from test_cluster_integration import cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

S = 16
CHAIN_BLOCKS = 48
SHARED = 20
BLOCK_TOKENS = 4


def _client(cluster, **kw):  # noqa: F811
    from turbokv import ShardedClient
    return ShardedClient(",".join(n.address for n in cluster), timeout=30,
                         node_down_seconds=0.2, segment_blocks=S, **kw)


def _chains(ns, n):
    from turbokv import PrefixHasher
    out = []
    for p in range(n):
        tokens = np.arange(CHAIN_BLOCKS * BLOCK_TOKENS)
        tokens[SHARED * BLOCK_TOKENS:] += 1000 * (p + 1)
        out.append(PrefixHasher(ns).block_hashes(tokens, BLOCK_TOKENS))
    return out


def _block(i):
    rng = np.random.default_rng(i)
    return rng.standard_normal((1, 2, BLOCK_TOKENS, 1, 64)).astype(np.float16)


def _engine_step(c, ns, chain):
    """What an engine does for one request: returns (matched, put results)."""
    m = c.lookup(ns, chain).matched_blocks
    got = c.get_blocks(ns, chain[:m])
    assert all(g is not None for g in got)
    res = c.put_blocks(ns, chain[m:], [_block(i) for i in range(m, len(chain))],
                       chain=c.chain_context(chain, m))
    return m, res


def _register(c, salt):
    return c.register_namespace(model="segments", num_layers=1, num_kv_heads=1, head_dim=64,
                                block_tokens=BLOCK_TOKENS, preset="k4v4-g32",
                                cache_salt=salt).namespace_id


def test_segments_live_together_and_lookup_spans_them(cluster):  # noqa: F811
    from turbokv import ChainContext, Client
    c = _client(cluster)
    try:
        ns = _register(c, "together")
        chains = _chains(ns, 3)
        # The first request of each chain stores it; the engine pattern puts the rest of the
        # later ones from inside a segment (position 20 after the shared prefix matched).
        for k, chain in enumerate(chains):
            m, res = _engine_step(c, ns, chain)
            assert m == (0 if k == 0 else SHARED)
            assert all(r.ok for r in res)
        # Each node holds exactly the blocks whose segment's first block it wins.
        for n in cluster:
            with Client(n.address) as direct:
                for chain in chains:
                    got = direct.get_packed_blocks(ns, chain)
                    want = [c.owners(chain[i - i % S])[0] == n.address for i in range(len(chain))]
                    assert [g is not None for g in got] == want
        for chain in chains:
            assert c.lookup(ns, chain).matched_blocks == CHAIN_BLOCKS
        # A suffix with its context; the context of a slice equals the whole chain's placement.
        ctx = c.chain_context(chains[0], 21)
        assert ctx == ChainContext(21, chains[0][16])
        assert c.lookup(ns, chains[0][21:], chain=ctx).matched_blocks == CHAIN_BLOCKS - 21
        assert c.placement(chains[0][21:], ctx) == c.placement(chains[0])[21:]
        # A block gone from the middle segment ends the match exactly there.
        with Client(c.owners(chains[0][16])[0]) as direct:
            assert direct.delete_blocks(ns, [chains[0][25]]) == 1
        assert c.lookup(ns, chains[0]).matched_blocks == 25
        assert c.lookup(ns, chains[1]).matched_blocks == CHAIN_BLOCKS
        got = c.get_packed_blocks(ns, chains[0][21:30], chain=ctx)
        assert [g is not None for g in got] == [j != 4 for j in range(9)]
        # The engine's next request finds 25 blocks and puts the other 23 back where they go.
        m, res = _engine_step(c, ns, chains[0])
        assert m == 25 and all(r.ok for r in res)
        assert c.lookup(ns, chains[0]).matched_blocks == CHAIN_BLOCKS
    finally:
        c.close()


def test_calls_without_the_segment_head_name_it(cluster):  # noqa: F811
    from turbokv import ChainContext, ShardedClient
    c = _client(cluster)
    try:
        ns = _register(c, "errors")
        chain = _chains(ns, 1)[0]
        bare = ChainContext(21)
        calls = [
            lambda: c.lookup(ns, chain[21:], chain=bare),
            lambda: c.get_blocks(ns, chain[21:], chain=bare),
            lambda: c.get_packed_blocks(ns, chain[21:], chain=bare),
            lambda: c.put_blocks(ns, chain[21:], [_block(i) for i in range(21, 48)], chain=bare),
            lambda: c.put_packed_blocks(ns, chain[21:], [b"x"] * 27, chain=bare),
            lambda: c.delete_blocks(ns, chain[21:], chain=bare),
            lambda: c.lookup_async(ns, chain[21:], chain=bare).result(timeout=30),
        ]
        for call in calls:
            with pytest.raises(ValueError, match=r"chain\.segment_head is required.*position 21"):
                call()
        with pytest.raises(ValueError, match=r"chain\.position must be >= 0"):
            c.lookup(ns, chain, chain=ChainContext(-3))
        with pytest.raises(ValueError, match=r"start must be in \[0, len\(chain\) = 48\]"):
            c.chain_context(chain, 49)
        with pytest.raises(ValueError, match=r"segment_blocks must be in \[1, 1048576\], got 0"):
            ShardedClient("127.0.0.1:1", segment_blocks=0)
        # At a segment boundary the position alone is enough.
        assert c.lookup(ns, chain[32:], chain=ChainContext(32)).matched_blocks == 0
    finally:
        c.close()


def test_replicated_segments_survive_a_node(cluster):  # noqa: F811
    c = _client(cluster, replicas=2)
    try:
        ns = _register(c, "r2")
        chains = _chains(ns, 3)
        for chain in chains:
            _engine_step(c, ns, chain)
        copies = sum(next(x.blocks for x in s.namespaces if x.namespace_id == ns)
                     for s in c.node_stats().values())
        assert copies == 2 * len({h for ch in chains for h in ch})
        cluster[1].kill()
        for chain in chains:
            assert c.lookup(ns, chain).matched_blocks == CHAIN_BLOCKS
            assert all(b is not None for b in c.get_packed_blocks(ns, chain))
    finally:
        c.close()


def test_a_node_down_costs_its_segments_never_a_call(cluster):  # noqa: F811
    c = _client(cluster)
    try:
        ns = _register(c, "down")
        chains = _chains(ns, 3)
        for chain in chains:
            _engine_step(c, ns, chain)
        dead = cluster[1].address
        cluster[1].kill()
        for chain in chains:
            placement = c.placement(chain)
            want = next((i for i, o in enumerate(placement) if o[0] == dead), len(chain))
            assert c.lookup(ns, chain).matched_blocks == want
            got = c.get_packed_blocks(ns, chain)
            assert [g is None for g in got] == [o[0] == dead for o in placement]
            # Puts of one segment each: a call that asks only the dead node reports its blocks
            # per block (UNAVAILABLE), as long as other nodes are up.
            for start in range(0, len(chain), S):
                res = c.put_blocks(ns, chain[start:start + S],
                                   [_block(i) for i in range(start, start + S)],
                                   chain=c.chain_context(chain, start))
                assert [r.ok for r in res] == [o[0] != dead for o in placement[start:start + S]]
    finally:
        c.close()
