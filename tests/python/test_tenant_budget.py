"""One tenant's PutBlocks streams cannot hold up another tenant's puts (issue 22 item 1), on
the real turbokv-server binary with two tenants (bearer tokens), through bench/tenant_budget.py.

Before: a stream that named its namespace in the call metadata reserved a whole block (raw +
packed) before reading anything, the reservations lasted until each stream's deadline (for
ever without one), and waiters were served in one arrival order. Tenant A's 16 idle streams of
256 MiB reservations held 768 MiB of the 1 GiB budget, its other streams queued, and a 16 KiB
put of tenant B waited behind them until they timed out (--admission-timeout-ms). Now a stream
holds what it was sent plus one read window, a tenant holds at most its share of the budget
(--tenant-in-flight-share), each tenant's waiters queue on their own, idle streams are cancelled
(--stream-idle-timeout-ms) and calls without a deadline get the server's
(--default-deadline-ms).

Bounds are generous (B's puts have 20 s while A's streams would hold them for 60 s); nothing
here times the server's speed.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time

import numpy as np
import pytest

from conftest import REPO, find_server_binary, require_stubs

pytestmark = pytest.mark.integration
sys.path.insert(0, os.path.join(REPO, "bench"))

MiB = 1 << 20
# A's blocks: 32 x 2 x 1024 tokens x 8 x 128 x fp16 = 128 MiB raw, as large again packed (raw).
SHAPE_A_BIG = dict(num_layers=32, num_kv_heads=8, head_dim=128, block_tokens=1024)


@pytest.fixture
def tb():
    require_stubs()
    import tenant_budget
    return tenant_budget


def _start(tb, tmp_path, *args):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    proc, port, metrics = tb.start_server(binary, str(tmp_path), list(args))
    return proc, "127.0.0.1:%d" % port, metrics


def _stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


def _wait_metric(tb, metrics, name, pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        v = tb.scrape(metrics).get(name, 0.0)
        if pred(v):
            return v
        assert time.monotonic() < deadline, "%s stayed at %s" % (name, v)
        time.sleep(0.1)


def test_idle_and_slow_streams_of_one_tenant_do_not_hold_up_anothers_puts(tb, tmp_path):
    # A's waiters would wait 60 s for budget; B's puts have 20 s each.
    proc, address, metrics = _start(tb, tmp_path, "--admission-timeout-ms", "60000")
    try:
        ns_a = tb.register(address, tb.TOKEN_A, "big", SHAPE_A_BIG, "raw")
        assert ns_a.raw_block_bytes == 128 * MiB
        ns_b = tb.register(address, tb.TOKEN_B, "small", tb.SHAPE_B, "k4v4-g32")
        a = tb.TenantAStreams(address, ns_a.namespace_id, ns_a.raw_block_bytes, idle=16, slow=4,
                              interval=0.5)
        try:
            # The server holds A's streams' reservations (at least one window each) ...
            held = _wait_metric(tb, metrics, "turbokv_in_flight_bytes",
                                lambda v: v >= 16 * MiB)
            time.sleep(2.5)  # ... and A's slow streams have sent a few chunks more
            held = tb.scrape(metrics)["turbokv_in_flight_bytes"]
            rows = tb.put_b(address, ns_b.namespace_id, 5, timeout=20.0)
            assert [code for _, code in rows] == ["OK"] * 5, rows
            # What A's streams hold follows what they sent: one window per idle stream, not
            # a reservation of the 256 MiB they declared (which held 768 MiB before).
            assert held < 16 * 8 * MiB + 4 * 64 * MiB, held
            assert held <= 512 * MiB  # A's share of the 1 GiB budget (default 0.5)
        finally:
            a.close()
        # Once A's streams are gone, what they held is given back.
        _wait_metric(tb, metrics, "turbokv_in_flight_bytes", lambda v: v == 0)
    finally:
        _stop(proc)


def test_a_stream_that_stops_sending_is_cancelled_and_counted(tb, tmp_path):
    from turbokv.v1 import turbokv_pb2 as pb
    from turbokv.v1 import turbokv_pb2_grpc as pb_grpc

    from turbokv import Security
    proc, address, metrics = _start(tb, tmp_path, "--stream-idle-timeout-ms", "2000")
    try:
        ns_a = tb.register(address, tb.TOKEN_A, "big", SHAPE_A_BIG, "raw")
        ns_small = tb.register(address, tb.TOKEN_A, "small", tb.SHAPE_B, "raw")
        a = tb.TenantAStreams(address, ns_a.namespace_id, ns_a.raw_block_bytes, idle=3, slow=0)
        # A stream that sends a chunk every 0.2 s (well inside the 2 s) for longer than the
        # idle timeout is not cancelled: 2 blocks of 16 KiB in 4 KiB chunks, 8 gaps.
        raw = ns_small.raw_block_bytes
        chunk = raw // 4
        data = np.random.default_rng(1).standard_normal(raw // 2).astype(np.float16).tobytes()

        def steady():
            for i in range(2):
                h = hashlib.sha256(b"steady-%d" % i).digest()
                for off in range(0, raw, chunk):
                    time.sleep(0.2)
                    yield pb.PutBlocksRequest(namespace_id=ns_small.namespace_id, block_hash=h,
                                              encoding=pb.ENCODING_RAW, block_bytes=raw,
                                              offset=off, data=data[off:off + chunk])

        with Security(token=tb.TOKEN_A).channel(address, []) as ch:
            t0 = time.monotonic()
            r = pb_grpc.TurboKVStub(ch).PutBlocks(steady(), timeout=60)
            assert time.monotonic() - t0 > 1.6  # it did outlast one idle timeout
            assert [x.code for x in r.results] == [0, 0], r
        try:
            assert a.outcomes(timeout=60) == ["CANCELLED"] * 3
        finally:
            a.close()
        assert tb.scrape(metrics)["turbokv_stream_idle_timeouts_total"] == 3
        _wait_metric(tb, metrics, "turbokv_in_flight_bytes", lambda v: v == 0)
    finally:
        _stop(proc)


def test_a_call_without_a_deadline_gets_the_servers(tb, tmp_path):
    proc, address, metrics = _start(tb, tmp_path, "--stream-idle-timeout-ms", "0",
                                    "--default-deadline-ms", "2000")
    try:
        ns_a = tb.register(address, tb.TOKEN_A, "big", SHAPE_A_BIG, "raw")
        no_deadline = tb.TenantAStreams(address, ns_a.namespace_id, ns_a.raw_block_bytes,
                                        idle=2, slow=0)
        # A client's own deadline, even a longer one, is the client's: not cut at 2 s.
        own = tb.TenantAStreams(address, ns_a.namespace_id, ns_a.raw_block_bytes, idle=1,
                                slow=0, timeout=5.0)
        try:
            assert no_deadline.outcomes(timeout=60) == ["CANCELLED"] * 2
            assert own.outcomes(timeout=60) == ["DEADLINE_EXCEEDED"]
        finally:
            no_deadline.close()
            own.close()
        assert tb.scrape(metrics)["turbokv_default_deadline_cancels_total"] == 2
        assert tb.scrape(metrics)["turbokv_stream_idle_timeouts_total"] == 0
    finally:
        _stop(proc)
