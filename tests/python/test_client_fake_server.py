"""The Python client against an in-process fake TurboKV servicer: chunking on the wire,
reassembly and validation of GetBlocks streams, retries, shapes and dtypes. No binary needed."""
from __future__ import annotations

import threading
from concurrent import futures

import grpc
import numpy as np
import pytest

from conftest import require_stubs

require_stubs()

from turbokv.v1 import turbokv_pb2 as pb  # noqa: E402
from turbokv.v1 import turbokv_pb2_grpc as pb_grpc  # noqa: E402

from turbokv import Client, StatusCode, TurboKVError  # noqa: E402

NS = 0xFEDCBA9876543210
SHAPE = dict(num_layers=2, num_kv_heads=2, head_dim=8, block_tokens=4)
BLOCK_VALUES = 2 * 2 * 4 * 2 * 8


class Fake(pb_grpc.TurboKVServicer):
    def __init__(self):
        self.fail_first = 0
        self.calls = 0
        self.put_messages = []
        self.get_responses = []
        self.last_get = None
        self.dtype = pb.DTYPE_FP16
        self.lock = threading.Lock()

    def _maybe_fail(self, context):
        with self.lock:
            self.calls += 1
            if self.fail_first > 0:
                self.fail_first -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "try later")

    def Stats(self, request, context):
        self._maybe_fail(context)
        d = pb.NamespaceDescriptor(dtype=self.dtype, **SHAPE)
        return pb.StatsResponse(version="fake", namespaces=[
            pb.NamespaceStats(namespace_id=NS, namespace_descriptor=d, blocks=3)])

    def PutBlocks(self, request_iterator, context):
        msgs = list(request_iterator)
        self._maybe_fail(context)
        self.put_messages = msgs
        return pb.PutBlocksResponse(results=[
            pb.BlockResult(block_hash=m.block_hash, stored_bytes=m.block_bytes // 4,
                           code=3 if m.block_bytes == 3 else 0,
                           message="bad" if m.block_bytes == 3 else "")
            for m in msgs if m.offset == 0])

    def GetBlocks(self, request, context):
        self._maybe_fail(context)
        self.last_get = request
        yield from self.get_responses

    def Lookup(self, request, context):
        self._maybe_fail(context)
        if request.lease_seconds == 7:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown namespace")
        return pb.LookupResponse(matched_blocks=len(request.block_hashes),
                                 matched_tokens=4 * len(request.block_hashes))


@pytest.fixture
def fake():
    servicer = Fake()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_TurboKVServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = Client("127.0.0.1:%d" % port, timeout=10, max_chunk_bytes=1024)
    yield servicer, client
    client.close()
    server.stop(None)


def chunk(i, total, off, data, dtype=pb.DTYPE_FP16, enc=pb.ENCODING_RAW):
    return pb.GetBlocksResponse(index=i, found=True, encoding=enc, dtype=dtype,
                                block_bytes=total, offset=off, data=data)


def test_put_chunks_and_results(fake):
    svc, c = fake
    res = c.put_packed_blocks(NS, [b"1" * 32, b"2" * 32, b"3" * 32],
                              [b"a" * 2500, b"b" * 1024, b"ccc"])
    assert [(m.block_hash[:1], m.offset, len(m.data)) for m in svc.put_messages] == [
        (b"1", 0, 1024), (b"1", 1024, 1024), (b"1", 2048, 452), (b"2", 0, 1024), (b"3", 0, 3)]
    assert all(m.encoding == pb.ENCODING_PACKED and m.namespace_id == NS
               for m in svc.put_messages)
    assert res[0].ok and res[0].stored_bytes == 625
    assert res[2].code == StatusCode.INVALID_ARGUMENT and res[2].message == "bad"


def test_put_raw_validates_against_namespace_from_stats(fake):
    svc, c = fake
    blocks = np.arange(3 * BLOCK_VALUES, dtype=np.float16).reshape(3, 2, 2, 4, 2, 8)
    res = c.put_blocks(NS, [b"h" * 32] * 3, blocks)
    assert len(res) == 3 and all(r.ok for r in res)
    data = b"".join(m.data for m in svc.put_messages if m.block_hash == b"h" * 32)
    assert data[:BLOCK_VALUES * 2] == blocks[0].tobytes()
    with pytest.raises(ValueError, match="shape"):
        c.put_blocks(NS, [b"h" * 32], blocks[:, :1])
    with pytest.raises(ValueError, match="dtype"):
        c.put_blocks(NS, [b"h" * 32] * 3, blocks.astype(np.float32))
    with pytest.raises(TurboKVError) as e:
        c.put_blocks(NS ^ 1, [b"h" * 32], blocks[:1])
    assert e.value.code == StatusCode.NOT_FOUND


def test_get_reassembles_interleaved_chunks(fake):
    svc, c = fake
    a = np.arange(BLOCK_VALUES, dtype=np.float16).reshape(2, 2, 4, 2, 8)
    raw = a.tobytes()
    svc.get_responses = [chunk(0, len(raw), 0, raw[:100]),
                         pb.GetBlocksResponse(index=1, found=False),
                         chunk(0, len(raw), 100, raw[100:])]
    got = c.get_blocks(NS, [b"x" * 32, b"y" * 32])
    assert got[1] is None
    assert got[0].dtype == np.float16 and np.array_equal(got[0], a)
    # Layer range and dtype go on the wire; the result is shaped by the range.
    one = np.arange(BLOCK_VALUES // 2, dtype=np.float32).reshape(1, 2, 4, 2, 8)
    svc.get_responses = [chunk(0, one.nbytes, 0, one.tobytes(), dtype=pb.DTYPE_FP32)]
    got = c.get_blocks(NS, [b"x" * 32], dtype="fp32", layers=(1, 2))
    assert (svc.last_get.layer_begin, svc.last_get.layer_end) == (1, 2)
    assert svc.last_get.dtype == pb.DTYPE_FP32
    assert got[0].shape == (1, 2, 4, 2, 8) and np.array_equal(got[0], one)
    svc.get_responses = [chunk(0, 5, 0, b"12345", enc=pb.ENCODING_PACKED)]
    assert c.get_packed_blocks(NS, [b"x" * 32]) == [b"12345"]
    assert c.get_blocks(NS, []) == []


@pytest.mark.parametrize("responses", [
    [chunk(0, 6, 0, b"abc")],                             # incomplete
    [chunk(1, 3, 0, b"abc")],                             # index out of range
    [chunk(0, 6, 3, b"abc")],                             # does not start at 0
    [chunk(0, 6, 0, b"abc"), chunk(0, 6, 2, b"cde")],     # overlap
    [chunk(0, 2, 0, b"abc")],                             # larger than block_bytes
    [pb.GetBlocksResponse(index=0, found=False), chunk(0, 1, 0, b"a")],  # data after miss
    [],                                                   # never reported
    [chunk(0, 3, 0, b"abc", enc=pb.ENCODING_RAW)],        # wrong encoding (asked PACKED)
])
def test_get_rejects_broken_streams(fake, responses):
    svc, c = fake
    svc.get_responses = responses
    with pytest.raises(TurboKVError) as e:
        c.get_packed_blocks(NS, [b"x" * 32])
    assert e.value.code == StatusCode.DATA_LOSS


def test_get_raw_size_mismatch_is_data_loss(fake):
    svc, c = fake
    svc.get_responses = [chunk(0, 10, 0, b"0123456789")]
    with pytest.raises(TurboKVError) as e:
        c.get_blocks(NS, [b"x" * 32])
    assert e.value.code == StatusCode.DATA_LOSS


def test_retries_unavailable_then_succeeds(fake):
    svc, c = fake
    svc.fail_first = 2
    assert c.stats().version == "fake"
    assert svc.calls == 3
    svc.calls, svc.fail_first = 0, 1
    res = c.put_packed_blocks(NS, [b"k" * 8], [b"z" * 3000])  # the stream is replayed whole
    assert svc.calls == 2 and len(res) == 1
    assert sum(len(m.data) for m in svc.put_messages) == 3000


def test_retries_are_bounded_and_only_for_unavailable(fake):
    svc, c = fake
    svc.fail_first = 100
    with pytest.raises(TurboKVError) as e:
        c.lookup(NS, [b"a" * 32])
    assert e.value.code == StatusCode.UNAVAILABLE and svc.calls == 4
    svc.fail_first, svc.calls = 0, 0
    with pytest.raises(TurboKVError) as e:
        c.lookup(NS, [b"a" * 32], lease_seconds=7)
    assert e.value.code == StatusCode.NOT_FOUND and e.value.details == "unknown namespace"
    assert svc.calls == 1


def test_bf16_travels_as_uint16(fake):
    svc, c = fake
    svc.dtype = pb.DTYPE_BF16
    bits = np.arange(BLOCK_VALUES, dtype=np.uint16).reshape(1, 2, 2, 4, 2, 8)
    assert c.put_blocks(NS, [b"b" * 32], bits)[0].ok
    with pytest.raises(ValueError):
        c.put_blocks(NS, [b"b" * 32], bits.astype(np.float16))
    svc.get_responses = [chunk(0, bits.nbytes, 0, bits.tobytes(), dtype=pb.DTYPE_BF16)]
    got = c.get_blocks(NS, [b"b" * 32])
    assert got[0].dtype == np.uint16 and np.array_equal(got[0], bits[0])
