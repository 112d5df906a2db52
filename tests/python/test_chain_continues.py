"""The chain_continues put hint (PutBlocksHeader) against a real turbokv-server (docs/cluster.md).

A sharded client's per-node put that does not hold the request's last block carries the hint,
and the server's eviction policy (LRFU) then takes none of that stream's blocks for the
request's last, partly filled block, which it values least. Five chains A of two blocks are put
first, then thirty chains B of two blocks without the hint, past the capacity: with the hint on
A's puts every A chain is still whole (the evicted blocks are B's last ones); without it, A's
last blocks, the oldest of the least valued, are evicted first.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import ServerProcess, find_server_binary

pytestmark = pytest.mark.integration

BLOCK_TOKENS = 64  # raw fp16 block: 1 layer x K,V x 64 tokens x 1 head x 64 = 16 KiB


def _block(i: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    return rng.standard_normal((1, 2, BLOCK_TOKENS, 1, 64)).astype(np.float16)


def _chains(ns: int, first: int, n: int):
    from turbokv import PrefixHasher
    hasher = PrefixHasher(ns)
    return [hasher.block_hashes(np.arange(2 * BLOCK_TOKENS) + 100_000 * (first + k), BLOCK_TOKENS)
            for k in range(n)]


@pytest.mark.parametrize("hint", [True, False])
def test_a_put_whose_chain_continues_keeps_its_last_block(tmp_path, hint):
    from turbokv import Client
    binary = find_server_binary()
    if binary is None:
        pytest.skip("no turbokv-server binary")
    # 1 MiB: 64 blocks, less what RocksDB's WAL holds (up to 256 KiB): 48-64 fit.
    server = ServerProcess(binary, str(tmp_path / "data"), str(tmp_path / "server.log"),
                           extra_args=["--capacity", "1MiB"]).start()
    try:
        with Client(server.address, timeout=30) as c:
            ns = c.register_namespace(model="chain-continues", num_layers=1, num_kv_heads=1,
                                      head_dim=64, block_tokens=BLOCK_TOKENS,
                                      preset="raw").namespace_id
            a = _chains(ns, 0, 5)
            b = _chains(ns, 5, 30)
            for k, chain in enumerate(a):
                res = c.put_blocks(ns, chain, [_block(2 * k), _block(2 * k + 1)],
                                   chain_continues=hint)
                assert all(r.ok for r in res)
            for k, chain in enumerate(b):
                c.put_blocks(ns, chain, [_block(100 + 2 * k), _block(101 + 2 * k)])
            evicted = c.stats().evicted_blocks
            assert 0 < evicted < len(b), evicted  # fewer than B's last blocks
            whole_a = sum(c.lookup(ns, chain).matched_blocks == 2 for chain in a)
            if hint:
                assert whole_a == len(a)
            else:
                assert whole_a < len(a)
    finally:
        server.stop()
