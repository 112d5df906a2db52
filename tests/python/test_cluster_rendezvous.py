"""Rendezvous placement and endpoint parsing of the sharded Python client (no server).

The vectors in client/python/turbokv/rendezvous_vectors.json are checked here and by the C++
test tests/unit/client_sharding_test.cc, so both clients place every block on the same nodes.
"""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from conftest import CLIENT_PY
from turbokv import sharding

VECTORS = os.path.join(CLIENT_PY, "turbokv", "rendezvous_vectors.json")


def test_weight_matches_an_independent_sha256():
    # 0xd589d599507e749a: `printf '127.0.0.1:50051\0' + bytes 0..31 | sha256sum`, first 16
    # hex digits, computed with coreutils rather than hashlib.
    assert sharding.weight("127.0.0.1:50051", bytes(range(32))) == 0xD589D599507E749A


def test_vectors():
    with open(VECTORS) as f:
        vec = json.load(f)
    assert len(vec["cases"]) >= 5
    for case in vec["cases"]:
        h = bytes.fromhex(case["block_hash"])
        for node, w in case["weights"].items():
            assert sharding.weight(node, h) == int(w), (node, case["block_hash"])
        assert sharding.rank(vec["nodes"], h) == case["rank"]
        assert sharding.owners(vec["nodes"], h, 2) == case["rank"][:2]


def test_rank_ties_break_by_node_id():
    # Equal node ids cannot happen; equal weights are simulated by the order of the key.
    nodes = ["b:1", "a:1", "c:1"]
    h = b"\x01" * 32
    r = sharding.rank(nodes, h)
    assert sorted(r) == sorted(nodes)
    assert sharding.rank(list(reversed(nodes)), h) == r  # input order never matters


def _keys(n):
    return [hashlib.sha256(b"key %d" % i).digest() for i in range(n)]


@pytest.mark.parametrize("n_before", [3, 4, 8])
def test_adding_a_node_moves_about_one_over_n_keys(n_before):
    keys = _keys(20000)
    before = ["10.0.0.%d:50051" % i for i in range(n_before)]
    after = before + ["10.0.0.%d:50051" % n_before]
    moved = 0
    for k in keys:
        a, b = sharding.owners(before, k, 1)[0], sharding.owners(after, k, 1)[0]
        if a != b:
            assert b == after[-1]  # a key only ever moves to the new node
            moved += 1
    frac = moved / len(keys)
    print("remap %d -> %d nodes: %.4f of keys moved (1/N = %.4f)" %
          (n_before, n_before + 1, frac, 1 / (n_before + 1)))
    assert abs(frac - 1 / (n_before + 1)) < 0.015


def test_removing_a_node_moves_only_its_keys_and_balances():
    keys = _keys(12000)
    nodes = ["n%d:1" % i for i in range(4)]
    counts = {n: 0 for n in nodes}
    for k in keys:
        first = sharding.owners(nodes, k, 1)[0]
        counts[first] += 1
        after = sharding.owners(nodes[:3], k, 1)[0] if first == nodes[3] else None
        if first != nodes[3]:
            assert sharding.owners(nodes[:3], k, 1)[0] == first
        else:
            assert after in nodes[:3]
    for c in counts.values():
        assert abs(c / len(keys) - 0.25) < 0.02, counts


def test_replicas_are_distinct_and_prefix_of_rank():
    nodes = ["n%d:1" % i for i in range(5)]
    for k in _keys(200):
        o = sharding.owners(nodes, k, 3)
        assert len(set(o)) == 3 and o == sharding.rank(nodes, k)[:3]
    assert sharding.owners(nodes[:2], b"x" * 32, 3) == sharding.rank(nodes[:2], b"x" * 32)


def test_parse_endpoints():
    eps = sharding.parse_endpoints("127.0.0.1:1, localhost:2,[::1]:3,dns:///svc.ns:50051")
    assert [e.spec for e in eps] == ["127.0.0.1:1", "localhost:2", "[::1]:3",
                                    "dns:///svc.ns:50051"]
    assert [e.dns for e in eps] == [False, False, False, True]
    for bad in ["", "host", "host:0", "host:70000", ":5", "a:1,a:1", "dns://auth/x:1",
                "::1:5", "a:1,,b:2"]:
        with pytest.raises(ValueError):
            sharding.parse_endpoints(bad)


def test_resolve_dns_to_ip_nodes():
    eps = sharding.parse_endpoints("dns:///localhost:7000,10.1.2.3:9")
    nodes = sharding.resolve(eps)
    assert nodes[-1] == "10.1.2.3:9"
    assert "127.0.0.1:7000" in nodes or "[::1]:7000" in nodes
    with pytest.raises(OSError):
        sharding.resolve(sharding.parse_endpoints("dns:///no-such-host.invalid:1"))


# -- segments --------------------------------------------------------------------------------

def _vectors():
    with open(VECTORS) as f:
        return json.load(f)


def test_segment_vectors():
    vec = _vectors()
    assert len(vec["segment_cases"]) >= 8
    for case in vec["segment_cases"]:
        chain = [bytes.fromhex(h) for h in case["chain"]]
        s, start, end = case["segment_blocks"], case["start"], case["end"]
        ctx = sharding.chain_context(chain, start, s)
        assert ctx.position == case["context"]["position"], case["name"]
        assert ctx.segment_head.hex() == case["context"]["segment_head"], case["name"]
        keys = sharding.placement_keys(chain[start:end], s, ctx)
        assert [k.hex() for k in keys] == case["placement_keys"], case["name"]
        owners = [sharding.owners(vec["nodes"], k, case["replicas"]) for k in keys]
        assert owners == case["owners"], case["name"]


def test_segment_error_vectors():
    for case in _vectors()["segment_errors"]:
        ctx = sharding.ChainContext(case["position"], bytes.fromhex(case["segment_head"]))
        hashes = [bytes([i]) * 32 for i in range(case["hashes"])]
        with pytest.raises(ValueError, match=case["names"].replace(".", r"\.")):
            sharding.placement_keys(hashes, case["segment_blocks"], ctx)


def test_placement_of_a_slice_with_its_context_equals_the_whole_chain():
    chain = _keys(70)
    for s in (1, 2, 3, 16, 64, 100):
        whole = sharding.placement_keys(chain, s)
        assert whole == [chain[(i // s) * s] for i in range(70)]
        for start in range(0, 71):
            for end in (start, min(70, start + 1), min(70, start + 17), 70):
                ctx = sharding.chain_context(chain, start, s)
                assert sharding.placement_keys(chain[start:end], s, ctx) == whole[start:end]


def test_context_is_needed_only_inside_a_segment():
    chain = _keys(40)
    # At a segment boundary the position alone places the call.
    assert (sharding.placement_keys(chain[32:], 16, sharding.ChainContext(32))
            == sharding.placement_keys(chain, 16)[32:])
    # Inside a segment without the head: ValueError naming the argument and how to fix it.
    with pytest.raises(ValueError, match=r"chain\.segment_head is required.*position 21.*"
                                         r"starts at position 16.*segment_blocks=16"):
        sharding.placement_keys(chain[21:], 16, sharding.ChainContext(21))
    with pytest.raises(ValueError, match=r"chain\.position must be >= 0"):
        sharding.placement_keys(chain, 16, sharding.ChainContext(-1))
    with pytest.raises(TypeError, match="chain must be a turbokv.ChainContext"):
        sharding.placement_keys(chain, 16, 5)
    with pytest.raises(ValueError, match=r"start must be in \[0, len\(chain\) = 40\], got 41"):
        sharding.chain_context(chain, 41, 16)
    # An empty call needs nothing.
    assert sharding.placement_keys([], 16, sharding.ChainContext(21)) == []


def test_segments_keep_rendezvous_remapping():
    # Whole segments move, and only to the new node: about 1/(N+1) of the blocks.
    nodes = ["10.0.0.%d:50051" % i for i in range(3)]
    after = nodes + ["10.0.0.3:50051"]
    moved = total = 0
    for c in range(600):
        chain = [hashlib.sha256(b"chain %d block %d" % (c, i)).digest() for i in range(40)]
        for k in sharding.placement_keys(chain, 16):
            a, b = sharding.owners(nodes, k, 1)[0], sharding.owners(after, k, 1)[0]
            total += 1
            if a != b:
                assert b == after[-1]
                moved += 1
    assert abs(moved / total - 0.25) < 0.04, moved / total


def test_tuning_node_is_the_first_of_the_tuning_keys_rank():
    # The same nodes as tests/unit/client_sharding_test.cc pins for TuningNode.
    a = ["10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"]
    assert sharding.tuning_node(a) == "10.0.0.2:50051"
    b = ["turbokv-0:50051", "turbokv-1:50051", "turbokv-2:50051", "turbokv-3:50051"]
    assert sharding.tuning_node(b) == "turbokv-1:50051"
    assert sharding.tuning_node(b) == sharding.rank(b, sharding.TUNING_KEY)[0]
    # Dropping another node keeps it; dropping it moves it to the next of the rank.
    assert sharding.tuning_node([b[0], b[1], b[3]]) == "turbokv-1:50051"
    assert sharding.tuning_node([b[0], b[2], b[3]]) == "turbokv-2:50051"
    assert sharding.tuning_node([]) is None
