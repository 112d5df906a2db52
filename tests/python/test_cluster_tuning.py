"""One tuning for the cluster (docs/cluster.md) against real turbokv-server processes.

A Lookup's ``follow_tuning`` makes a server's LRFU policy take another node's half-life and
unseen age; its response carries the server's tuning. A ShardedClient sends the tuning node's
last answer (``sharding.tuning_node``) to the other nodes with their Lookups, so after two
lookups every node of a three-server cluster ranks blocks with the tuning node's choice. A
server started with ``--ignore-client-tuning`` keeps its own; an LRU server has none.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import ServerProcess, find_server_binary

pytestmark = pytest.mark.integration

BLOCK_TOKENS = 16


def _servers(tmp_path, n, extra_args=()):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("no turbokv-server binary")
    out = []
    try:
        for i in range(n):
            out.append(ServerProcess(binary, str(tmp_path / ("data%d" % i)),
                                     str(tmp_path / ("server%d.log" % i)),
                                     extra_args=["--capacity", "64MiB", *extra_args]).start())
    except BaseException:
        for s in out:
            s.stop()
        raise
    return out


def _register(c):
    return c.register_namespace(model="cluster-tuning", num_layers=1, num_kv_heads=1,
                                head_dim=64, block_tokens=BLOCK_TOKENS,
                                preset="raw").namespace_id


def _tuning_of(address, ns, hashes):
    from turbokv import Client
    with Client(address, timeout=30) as c:
        return c.lookup(ns, hashes).tuning


def test_a_server_follows_the_tuning_it_is_sent(tmp_path):
    from turbokv import Client, PolicyTuning
    (server,) = _servers(tmp_path, 1)
    try:
        with Client(server.address, timeout=30) as c:
            ns = _register(c)
            chain = [bytes([i]) * 16 for i in range(1, 4)]
            # The defaults: half-life 1 turnover, no unseen age yet.
            assert c.lookup(ns, chain).tuning == PolicyTuning(1.0, 0.0)
            got = c.lookup(ns, chain, follow_tuning=PolicyTuning(8.0, 0.25))
            assert got.matched_blocks == 0
            assert got.tuning == PolicyTuning(8.0, 0.25)
            assert c.lookup(ns, chain).tuning == PolicyTuning(8.0, 0.25)  # kept
            # A half-life that is not a candidate is ignored; the age is clamped to [0, 1].
            assert c.lookup(ns, chain, follow_tuning=PolicyTuning(3.0, 7.0)).tuning == \
                PolicyTuning(8.0, 1.0)
    finally:
        server.stop()


@pytest.mark.parametrize("extra_args,expected", [
    (["--ignore-client-tuning"], (1.0, 0.0)),
    (["--eviction-policy", "lru"], None),
])
def test_a_server_that_keeps_its_own_tuning(tmp_path, extra_args, expected):
    from turbokv import Client, PolicyTuning
    (server,) = _servers(tmp_path, 1, extra_args)
    try:
        with Client(server.address, timeout=30) as c:
            ns = _register(c)
            got = c.lookup(ns, [b"\x01" * 16], follow_tuning=PolicyTuning(16.0, 0.5)).tuning
            assert got == (None if expected is None else PolicyTuning(*expected))
    finally:
        server.stop()


def test_the_sharded_client_sends_the_tuning_nodes_choice_to_the_others(tmp_path):
    from turbokv import Client, PolicyTuning, ShardedClient, sharding
    servers = _servers(tmp_path, 3)
    try:
        addresses = [s.address for s in servers]
        with ShardedClient(",".join(addresses), timeout=30) as sc:
            ns = _register(sc)
            leader = sharding.tuning_node(sc.nodes())
            followers = [a for a in sc.nodes() if a != leader]
            assert leader in addresses and len(followers) == 2
            # A chain long enough that every node owns some of it (each block by its own hash).
            chain = [bytes([i]) * 16 for i in range(1, 40)]
            owners = {o[0] for o in sc.placement(chain)}
            assert owners == set(addresses)
            rng = np.random.default_rng(0)
            blocks = rng.standard_normal((len(chain), 1, 2, BLOCK_TOKENS, 1, 64)).astype(
                np.float16)
            assert all(r.ok for r in sc.put_blocks(ns, chain, blocks))
            # The tuning node is given a tuning of its own choosing here; the followers differ.
            with Client(leader, timeout=30) as c:
                c.lookup(ns, chain[:1], follow_tuning=PolicyTuning(16.0, 0.5))
            for f in followers:
                assert _tuning_of(f, ns, chain[:1]) == PolicyTuning(1.0, 0.0)
            # The first lookup learns the tuning node's choice, the second sends it.
            assert sc.lookup(ns, chain).matched_blocks == len(chain)
            for f in followers:
                assert _tuning_of(f, ns, chain[:1]) == PolicyTuning(1.0, 0.0)
            assert sc.lookup(ns, chain).matched_blocks == len(chain)
            for f in followers:
                assert _tuning_of(f, ns, chain[:1]) == PolicyTuning(16.0, 0.5)
            assert _tuning_of(leader, ns, chain[:1]) == PolicyTuning(16.0, 0.5)
    finally:
        for s in servers:
            s.stop()
