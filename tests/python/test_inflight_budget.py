"""Concurrent puts whose blocks add up to more than the server's in-flight budget
(--max-in-flight-bytes) are served in turn, not refused: the server reserves a read window
before each read and charges what the stream really sends; the stream's header
(PutBlocksHeader: the block count) lets it read the end of the stream without a reservation
(server/service/put_blocks_reactor.cc). Before that, every stream held part of its block while
waiting for bytes only a finished block would give back, and all of them waited out the
admission timeout (4 concurrent 2 MiB puts on a 4 MiB budget: 1 stored, 3 RESOURCE_EXHAUSTED
after 3 s). Real turbokv-server binary, real Python client, raw gRPC for the header contract.
"""
from __future__ import annotations

import os
from concurrent import futures

import grpc
import numpy as np
import pytest

from conftest import ServerProcess, find_server_binary, require_stubs

require_stubs()

from turbokv.v1 import turbokv_pb2 as pb  # noqa: E402
from turbokv.v1 import turbokv_pb2_grpc as pb_grpc  # noqa: E402

from turbokv import Client, StatusCode  # noqa: E402

# 32 layers x 2 x 16 tokens x 8 heads x 128 dims x fp16 = 2 MiB raw per block.
SHAPE = dict(num_layers=32, num_kv_heads=8, head_dim=128, block_tokens=16)


@pytest.fixture
def small_budget_server(tmp_path):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("no turbokv-server binary (build it with tools/setup.sh)")
    s = ServerProcess(binary, str(tmp_path / "data"), str(tmp_path / "server.log"),
                      extra_args=["--max-in-flight-bytes", "4MiB",
                                  "--admission-timeout-ms", "3000"])
    s.start()
    yield s
    s.stop()


def _blocks(n, seed, shape=SHAPE):
    """n random fp16 blocks [L][2][block_tokens][H][D] of `shape`."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((shape["num_layers"], 2, shape["block_tokens"],
                                 shape["num_kv_heads"], shape["head_dim"])).astype(np.float16)
            for _ in range(n)]


@pytest.mark.parametrize("preset", ["k4v4-g32", "raw"])
def test_concurrent_puts_over_the_budget_are_served_in_turn(small_budget_server, preset):
    client = Client(small_budget_server.address)
    try:
        ns = client.register_namespace("budget-test", preset=preset, **SHAPE)
        assert ns.raw_block_bytes == 2 << 20
        blocks = _blocks(8, seed=1)
        hashes = [os.urandom(32) for _ in blocks]

        def put(i):
            return client.put_blocks(ns.namespace_id, [hashes[i]], [blocks[i]], timeout=60)

        # 8 concurrent one-block puts, 8 x (2 MiB raw + packed) against 4 MiB.
        with futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(put, range(8)))
        for r in results:
            assert len(r) == 1 and r[0].code == StatusCode.OK, r
        got = client.get_blocks(ns.namespace_id, hashes)
        for i, g in enumerate(got):
            assert g is not None
            if preset == "raw":
                assert np.array_equal(np.asarray(g).view(np.uint16), blocks[i].view(np.uint16))
    finally:
        client.close()


def test_a_block_larger_than_the_budget_goes_through_alone(small_budget_server):
    # 4 MiB raw (+ packed) on a 4 MiB budget: reserved whole when nothing else is in flight.
    client = Client(small_budget_server.address)
    try:
        shape = dict(SHAPE, block_tokens=32)
        ns = client.register_namespace("budget-test-big", preset="k4v4-g32", **shape)
        assert ns.raw_block_bytes == 4 << 20
        (block,) = _blocks(1, seed=2, shape=shape)
        r = client.put_blocks(ns.namespace_id, [os.urandom(32)], [block], timeout=30)
        assert r[0].code == StatusCode.OK, r
    finally:
        client.close()


def _chunks(ns_id, h, data, chunk=1 << 20, header=None):
    for off in range(0, len(data), chunk):
        msg = pb.PutBlocksRequest(namespace_id=ns_id, block_hash=h, encoding=pb.ENCODING_RAW,
                                  block_bytes=len(data), offset=off, data=data[off:off + chunk])
        if header is not None and off == 0:
            msg.header.CopyFrom(header)
        yield msg


def test_a_stream_sending_more_blocks_than_it_declared_fails(small_budget_server):
    client = Client(small_budget_server.address)
    try:
        ns = client.register_namespace("budget-test", preset="k4v4-g32", **SHAPE)
        data = [b.tobytes() for b in _blocks(2, seed=3)]
        hashes = [os.urandom(32) for _ in data]
        with grpc.insecure_channel(small_budget_server.address) as channel:
            stub = pb_grpc.TurboKVStub(channel)

            def requests(block_count=0, header_on=0):
                for i, (h, d) in enumerate(zip(hashes, data)):
                    header = (pb.PutBlocksHeader(block_count=block_count)
                              if block_count and i == header_on else None)
                    yield from _chunks(ns.namespace_id, h, d, header=header)

            with pytest.raises(grpc.RpcError) as e:
                stub.PutBlocks(requests(block_count=1), timeout=30)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "more than the 1 blocks its header's block_count declared" in \
                e.value.details()
            # Declared right, the same stream is stored whole; the server still serves.
            ok = stub.PutBlocks(requests(block_count=2), timeout=30)
            assert [r.code for r in ok.results] == [0, 0]
            # No header: read the same way.
            ok = stub.PutBlocks(requests(), timeout=30)
            assert [r.code for r in ok.results] == [0, 0]
            # A header on a later message than the first fails the stream.
            with pytest.raises(grpc.RpcError) as e:
                stub.PutBlocks(requests(block_count=2, header_on=1), timeout=30)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "only the first may" in e.value.details()
            # Another namespace in a later message than the first names fails the stream.
            other = client.register_namespace("budget-test-other", preset="k4v4-g32", **SHAPE)

            def mixed():
                yield from _chunks(ns.namespace_id, hashes[0], data[0])
                yield from _chunks(other.namespace_id, hashes[1], data[1])

            with pytest.raises(grpc.RpcError) as e:
                stub.PutBlocks(mixed(), timeout=30)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "is not the stream's namespace" in e.value.details()
    finally:
        client.close()


def _in_flight_bytes(server):
    import urllib.request
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port,
                                  timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("turbokv_in_flight_bytes "):
            return float(line.split()[1])
    raise AssertionError("no turbokv_in_flight_bytes in /metrics")


@pytest.mark.parametrize("with_header", [True, False])
def test_one_block_larger_than_the_stream_window_is_stored(tmp_path, with_header):
    # 64 MiB raw + 18 MiB packed is more than a stream's 64 MiB window of uncommitted bytes.
    # A stream used to pause mid-block until a commit, which only a whole block makes: the put
    # hung until its deadline, kept its budget, and the server could not shut down.
    binary = find_server_binary()
    if binary is None:
        pytest.skip("no turbokv-server binary (build it with tools/setup.sh)")
    s = ServerProcess(binary, str(tmp_path / "data"), str(tmp_path / "server.log"),
                      metrics=True).start()
    try:
        client = Client(s.address)
        shape = dict(SHAPE, block_tokens=512)
        ns = client.register_namespace("budget-test-window", preset="k4v4-g32", **shape)
        assert ns.raw_block_bytes == 64 << 20
        (block,) = _blocks(1, seed=4, shape=shape)
        h = os.urandom(32)
        if with_header:
            r = client.put_blocks(ns.namespace_id, [h], [block], timeout=60)
            assert r[0].code == StatusCode.OK, r
        else:  # a client that sends no header
            with grpc.insecure_channel(s.address) as channel:
                resp = pb_grpc.TurboKVStub(channel).PutBlocks(
                    _chunks(ns.namespace_id, h, block.tobytes()), timeout=60)
            assert [r.code for r in resp.results] == [0], resp
        assert client.lookup(ns.namespace_id, [h]).matched_blocks == 1
        client.close()
        # Nothing is left holding the budget (the gauge follows within a refresh interval).
        import time
        deadline = time.monotonic() + 15
        while _in_flight_bytes(s) != 0:
            assert time.monotonic() < deadline, _in_flight_bytes(s)
            time.sleep(0.2)
    finally:
        proc = s.proc
        s.stop()
        assert proc.returncode == 0, "the server did not stop on SIGTERM"
