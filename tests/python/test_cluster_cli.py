"""The `turbokv` CLI over three real servers: `--server a,b,c [--replicas R]`.

`ns register` registers on every node; `put` through the C++ CLI places blocks where the
Python ShardedClient expects them (both implement the placement contract: rendezvous over
segments of `--segment-blocks` blocks); with one node
killed, R = 1 lookups stop at that node's first block and R = 2 lookups still match fully.
"""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES, find_cli_binary
from test_cluster_integration import cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

# The 16-block chain spans 4 segments (both clients must use the same value).
SEGMENT_BLOCKS = 4


def _cli(spec, *args, replicas=1):
    cli = find_cli_binary()
    if cli is None:
        pytest.skip("turbokv CLI binary not found (TURBOKV_CLI_BIN / TURBOKV_BUILD_DIR)")
    p = subprocess.run([cli, "--server", spec, "--replicas", str(replicas), "--segment-blocks",
                        str(SEGMENT_BLOCKS), "--timeout", "20", "--json", *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, "turbokv %s failed (%d): %s" % (args, p.returncode, p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("replicas", [1, 2])
def test_cli_over_three_nodes(cluster, tmp_path, replicas):  # noqa: F811
    from turbokv import Client, PrefixHasher, ShardedClient
    kv_path = os.path.join(FIXTURES, "smollm2_kv_64_fp16.npy")
    tok_path = os.path.join(FIXTURES, "smollm2_tokens_64.npy")
    if not os.path.exists(kv_path):
        pytest.skip("fixture missing")
    spec = ",".join(n.address for n in cluster)
    L, _, _, H, D = np.load(kv_path).shape
    ns = _cli(spec, "ns", "register", "--model", "cli-cluster", "--num-layers", str(L),
              "--num-kv-heads", str(H), "--head-dim", str(D), "--block-tokens", "4",
              "--dtype", "fp16", "--preset", "k4v4-g32", replicas=replicas)
    ns_id = int(ns["namespace_id"], 16)
    for n in cluster:  # registered on every node
        with Client(n.address) as c:
            assert ns_id in {x.namespace_id for x in c.stats().namespaces}
    put = _cli(spec, "put", "--namespace", ns["namespace_id"], "--kv", kv_path, "--tokens",
               tok_path, replicas=replicas)
    assert put["blocks_stored"] == 16
    chain = PrefixHasher(ns_id).block_hashes(np.load(tok_path), 4)
    py = ShardedClient(spec, replicas=replicas, node_down_seconds=0.2,
                       segment_blocks=SEGMENT_BLOCKS)
    try:
        # The Python client finds every block where the C++ CLI put it, and nothing else.
        placement = py.placement(chain)
        for n in cluster:
            with Client(n.address) as c:
                got = c.get_packed_blocks(ns_id, chain)
                assert [b is not None for b in got] == [n.address in o for o in placement]
        dead = cluster[2]
        dead.kill()
        lk = _cli(spec, "lookup", "--namespace", ns["namespace_id"], "--tokens", tok_path,
                  replicas=replicas)
        if replicas == 1:
            want = next((i for i, o in enumerate(placement) if o[0] == dead.address),
                        len(chain))
        else:
            want = len(chain)
        assert lk["matched_blocks"] == want
        assert py.lookup(ns_id, chain).matched_blocks == want
        # stats still answers, from the live nodes, and names the one that did not.
        p = subprocess.run([find_cli_binary(), "--server", spec, "--timeout", "20", "--json",
                            "stats"], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout.strip().splitlines()[-1])
        assert [u["node"] for u in st["unanswered_nodes"]] == [dead.address], st
        assert "UNAVAILABLE" in st["unanswered_nodes"][0]["error"]
        assert "node %s did not answer" % dead.address in p.stderr, p.stderr
    finally:
        py.close()
