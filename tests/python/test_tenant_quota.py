"""Tenant quotas and shares of the capacity kept by the store (issue 22, item 2), on the real
turbokv-server binary with two tenants (bearer tokens). docs/server.md, "Quotas and shares of
the capacity", is the contract.

Before: the quota was checked when a PutBlocks stream started, so with 6 concurrent streams a
tenant with a 6 MiB quota stored 15.2 MB, and eviction was one global order, so that tenant's
puts evicted all of another tenant's blocks, though those were inside its quota. Now the store
checks the quota as each block commits, under its lock, evicting the tenant's own least valuable
blocks, and capacity evictions take blocks of the tenants above their share first.
"""
from __future__ import annotations

import re
import threading
import time
import urllib.request

import numpy as np
import pytest

from conftest import ServerProcess, find_server_binary, require_stubs
from pki import token_digest

pytestmark = pytest.mark.integration

TOKEN_A = "tenant-a-secret-0123456789"
TOKEN_B = "tenant-b-secret-9876543210"
TOKEN_ADMIN = "operator-secret-abcdef"
# Raw blocks of 2 x 2 x 16 x 2 x 64 fp16 = 16 KiB (packed: the same plus a small header).
SHAPE = dict(num_layers=2, num_kv_heads=2, head_dim=64, block_tokens=16)


def _server(tmp_path, name, *args):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    require_stubs()
    s = ServerProcess(binary, str(tmp_path / (name + "-data")), str(tmp_path / (name + ".log")),
                      extra_args=list(args), metrics=True)
    return s.start()


def _token_file(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def _tokens(tmp_path, *quotas):
    return _token_file(tmp_path / "tokens", [
        "token %s tenant-a" % token_digest(TOKEN_A),
        "token %s tenant-b" % token_digest(TOKEN_B),
        "token %s ops admin" % token_digest(TOKEN_ADMIN)] + list(quotas))


def _client(address, token):
    from turbokv import Client, Security
    return Client(address, timeout=60.0, max_attempts=1, security=Security(token=token))


def _blocks(n, seed=0):
    rng = np.random.default_rng(seed)
    L, H, D, bt = (SHAPE[k] for k in ("num_layers", "num_kv_heads", "head_dim", "block_tokens"))
    return rng.normal(0, 1, (n, L, 2, bt, H, D)).astype(np.float16)


def _hashes(n, tag):
    return [tag + i.to_bytes(8, "little") for i in range(n)]


def _metric(server, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port,
                                timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else 0.0


def _wait_metric(server, name, want, timeout=20.0):
    deadline = time.monotonic() + timeout
    while _metric(server, name) != want:
        assert time.monotonic() < deadline, (name, _metric(server, name), want)
        time.sleep(0.1)


def _put_concurrently(address, token, ns, streams, rounds, blocks_per_put, tag):
    """`streams` threads, each `rounds` PutBlocks streams of `blocks_per_put` new blocks.
    Returns the per-block status codes of every put."""
    codes, errors = [], []
    data = _blocks(blocks_per_put, seed=7)

    def run(t):
        try:
            with _client(address, token) as c:
                for r in range(rounds):
                    prefix = b"%s%d-%d-" % (tag, t, r)
                    res = c.put_blocks(ns, _hashes(blocks_per_put, prefix), data)
                    codes.extend(x.code for x in res)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(streams)]
    for t in threads:
        t.start()
    return threads, codes, errors


def test_quota_holds_within_one_block_with_concurrent_streams(tmp_path):
    """8 concurrent streams of tenant-a, each putting more than its whole quota, while a
    watcher samples what tenant-a stores: never more than the quota plus one block. tenant-b's
    blocks (within its quota) all stay."""
    from turbokv.errors import StatusCode
    # The quota in blocks is set below from the namespace's packed block size.
    probe = _server(tmp_path, "probe", "--token-file", _tokens(tmp_path))
    try:
        with _client(probe.address, TOKEN_A) as a:
            block = a.register_namespace(model="m", preset="raw", **SHAPE).packed_block_bytes
    finally:
        probe.stop()
    quota = 24 * block
    s = _server(tmp_path, "quota", "--token-file",
                _tokens(tmp_path, "quota tenant-a %d" % quota, "quota tenant-b %d" % (64 * block)))
    try:
        a = _client(s.address, TOKEN_A)
        b = _client(s.address, TOKEN_B)
        ns_a = a.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
        ns_b = b.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
        assert a.stats().capacity_bytes == quota
        hashes_b = _hashes(40, b"b")
        assert all(r.code == StatusCode.OK for r in b.put_blocks(ns_b, hashes_b, _blocks(40)))

        seen = []
        done = threading.Event()

        def watch():
            with _client(s.address, TOKEN_A) as w:
                while not done.is_set():
                    seen.append(w.stats().used_bytes)

        watcher = threading.Thread(target=watch)
        watcher.start()
        threads, codes, errors = _put_concurrently(s.address, TOKEN_A, ns_a, streams=8,
                                                   rounds=4, blocks_per_put=30, tag=b"a")
        for t in threads:
            t.join()
        done.set()
        watcher.join()
        assert not errors, errors
        assert len(codes) == 8 * 4 * 30
        stored = codes.count(StatusCode.OK)
        # Each stream's own earlier blocks are never evicted for its later ones: a stream of 30
        # blocks stores at most the 24 that fit, the rest are refused naming the quota.
        assert set(codes) <= {StatusCode.OK, StatusCode.RESOURCE_EXHAUSTED}
        assert stored >= 24, stored
        assert len(seen) > 10
        assert max(seen) <= quota + block, (max(seen), quota)
        # Each stored block past the quota evicted exactly one of tenant-a's.
        final = a.stats()
        assert final.used_bytes == quota and final.blocks == 24
        _wait_metric(s, "turbokv_quota_evictions_total", stored - 24)
        # tenant-b kept every block.
        assert b.stats().blocks == 40
        assert b.lookup(ns_b, hashes_b).matched_blocks == 40
        a.close()
        b.close()
    finally:
        s.stop()


def test_puts_over_capacity_take_the_tenant_above_its_share(tmp_path):
    """No quotas, an 8 MiB store: tenant-a fills it alone, tenant-b then stores 40 blocks (about
    0.7 MiB, within its half), and tenant-a keeps putting 300 blocks over 6 streams: every one
    of tenant-b's blocks stays, tenant-a's own blocks make the room. (Before, one global order
    ranked both tenants' blocks: tenant-a's puts evicted some of tenant-b's.)"""
    from turbokv.errors import StatusCode
    s = _server(tmp_path, "share", "--token-file", _tokens(tmp_path), "--capacity", "8MiB")
    try:
        a = _client(s.address, TOKEN_A)
        b = _client(s.address, TOKEN_B)
        ops = _client(s.address, TOKEN_ADMIN)
        ns_a = a.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
        ns_b = b.register_namespace(model="m", preset="raw", **SHAPE).namespace_id
        for i in range(60):  # 600 blocks of ~16 KiB: the store is full of tenant-a's
            a.put_blocks(ns_a, _hashes(10, b"f%d-" % i), _blocks(10, seed=i))
        evicted_before = ops.stats().evicted_blocks
        assert evicted_before > 0
        assert a.stats().used_bytes > 4 * 1024 * 1024
        hashes_b = _hashes(40, b"b")
        for i in range(4):
            res = b.put_blocks(ns_b, hashes_b[10 * i:10 * i + 10], _blocks(10, seed=100 + i))
            assert [r.code for r in res] == [StatusCode.OK] * 10, [r.message for r in res]
        assert b.lookup(ns_b, hashes_b).matched_blocks == 40
        threads, codes, errors = _put_concurrently(s.address, TOKEN_A, ns_a, streams=6,
                                                   rounds=5, blocks_per_put=10, tag=b"g")
        for t in threads:
            t.join()
        assert not errors, errors
        assert b.lookup(ns_b, hashes_b).matched_blocks == 40
        assert b.stats().blocks == 40
        assert set(codes) <= {StatusCode.OK, StatusCode.RESOURCE_EXHAUSTED}
        stored = codes.count(StatusCode.OK)
        assert stored >= 250, stored
        assert ops.stats().evicted_blocks >= evicted_before + stored - 40
        time.sleep(1.5)  # a metrics refresh (1 s) after the last eviction
        assert _metric(s, "turbokv_quota_evictions_total") == 0
        assert _metric(s, "turbokv_evictions_total") > 0
        for c in (a, b, ops):
            c.close()
    finally:
        s.stop()
