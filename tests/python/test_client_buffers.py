"""The connector-facing client API against an in-process fake servicer: fetches into
caller-owned buffers (``out=``), puts from buffers, ``*_async`` futures, per-call deadlines,
and turbokv's own status codes and stats types. No binary needed; the same API against the
real server is in test_client_integration.py."""
from __future__ import annotations

import array
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

from conftest import require_stubs

require_stubs()

from turbokv.v1 import turbokv_pb2 as pb  # noqa: E402
from turbokv.v1 import turbokv_pb2_grpc as pb_grpc  # noqa: E402

from turbokv import Client, ServerStats, StatusCode, TurboKVError  # noqa: E402

NS = 0x1234
SHAPE = dict(num_layers=2, num_kv_heads=2, head_dim=8, block_tokens=4)
BLOCK = (2, 2, 4, 2, 8)
VALUES = int(np.prod(BLOCK))


def _block(seed):
    return (np.arange(VALUES, dtype=np.float32) * 0.5 + seed).astype(np.float16).reshape(BLOCK)


class Store(pb_grpc.TurboKVServicer):
    """Keeps raw fp16 blocks by hash (packed = the same bytes) and sends them back in chunks
    of 100 bytes. ``gate``: GetBlocks / Lookup wait on it; ``delay``: Lookup sleeps (cut short
    when the fixture ends, so a long delay does not hold up the test run)."""

    def __init__(self):
        self.blocks = {}
        self.calls = 0
        self.gate = None
        self.delay = 0.0
        self.done = threading.Event()
        self.lock = threading.Lock()

    def Stats(self, request, context):
        d = pb.NamespaceDescriptor(dtype=pb.DTYPE_FP16, **SHAPE)
        return pb.StatsResponse(version="fake", blocks=len(self.blocks), codec_backend="x",
                                namespaces=[pb.NamespaceStats(namespace_id=NS, blocks=1,
                                                              namespace_descriptor=d)])

    def PutBlocks(self, request_iterator, context):
        got = {}
        for m in request_iterator:
            got[m.block_hash] = got.get(m.block_hash, b"") + m.data
        with self.lock:
            self.blocks.update(got)
        return pb.PutBlocksResponse(results=[pb.BlockResult(block_hash=h, stored_bytes=len(d))
                                             for h, d in got.items()])

    def GetBlocks(self, request, context):
        with self.lock:
            self.calls += 1
        if self.gate is not None:
            self.gate.wait(10)
        for i, h in enumerate(request.block_hashes):
            data = self.blocks.get(h)
            if data is None:
                yield pb.GetBlocksResponse(index=i, found=False)
                continue
            for off in range(0, len(data), 100):
                yield pb.GetBlocksResponse(index=i, found=True, encoding=request.encoding,
                                           dtype=pb.DTYPE_FP16, block_bytes=len(data),
                                           offset=off, data=data[off:off + 100])

    def Lookup(self, request, context):
        with self.lock:
            self.calls += 1
        if self.gate is not None:
            self.gate.wait(10)
        if self.delay:
            self.done.wait(self.delay)
        n = 0
        while n < len(request.block_hashes) and request.block_hashes[n] in self.blocks:
            n += 1
        return pb.LookupResponse(matched_blocks=n, matched_tokens=4 * n)


@pytest.fixture
def store():
    servicer = Store()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_TurboKVServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = Client("127.0.0.1:%d" % port, timeout=10, max_chunk_bytes=1024)
    yield servicer, client
    servicer.done.set()
    client.close()
    server.stop(None)


H = [bytes([i]) * 32 for i in range(4)]


def _fill(store, c):
    blocks = np.stack([_block(i) for i in range(3)])
    assert all(r.ok for r in c.put_blocks(NS, H[:3], blocks))
    return blocks


def test_get_into_one_caller_array_without_copies(store):
    svc, c = store
    blocks = _fill(svc, c)
    out = np.full((4,) + BLOCK, 7, dtype=np.float16)
    got = c.get_blocks(NS, [H[0], H[3], H[1], H[2]], out=out)
    assert got[1] is None
    assert np.all(out[1] == 7)  # a missing block's slot is left as it was
    for slot, src in ((0, 0), (2, 1), (3, 2)):
        assert got[slot].shape == BLOCK and got[slot].dtype == np.float16
        assert np.shares_memory(got[slot], out[slot])
        assert np.array_equal(out[slot], blocks[src])


def test_get_into_per_block_buffers_of_any_kind(store):
    svc, c = store
    blocks = _fill(svc, c)
    nbytes = blocks[0].nbytes
    raw = bytearray(nbytes)
    arr = array.array("H", bytes(nbytes))  # 2-byte items through the buffer protocol
    flat = np.zeros(VALUES, dtype=np.float16)  # any shape with the right size
    got = c.get_blocks(NS, H[:3], out=[raw, memoryview(arr), flat])
    assert np.array_equal(np.frombuffer(raw, dtype=np.float16).reshape(BLOCK), blocks[0])
    assert np.array_equal(np.frombuffer(arr, dtype=np.float16).reshape(BLOCK), blocks[1])
    assert np.array_equal(flat.reshape(BLOCK), blocks[2])
    assert np.shares_memory(got[2], flat)


def test_bad_out_is_refused_before_any_rpc(store):
    svc, c = store
    _fill(svc, c)
    n = _block(0).nbytes
    cases = [
        (np.zeros((2,) + BLOCK, np.float16), "bytes"),                # wrong total size
        (np.zeros((3,) + BLOCK, np.float32), "dtype"),                 # wrong dtype
        ([bytearray(n), bytearray(n)], "2 buffers for 3 blocks"),     # wrong count
        ([bytearray(n), bytearray(n), bytearray(n - 2)], "out\\[2\\]"),
        ([bytearray(n), bytes(n), bytearray(n)], "read-only"),
        (np.zeros((3,) + BLOCK + (2,), np.float16)[..., 0], "C-contiguous"),
        ([bytearray(n), object(), bytearray(n)], "buffer-protocol"),
    ]
    for out, match in cases:
        with pytest.raises((ValueError, TypeError), match=match):
            c.get_blocks(NS, H[:3], out=out)
    assert svc.calls == 0


def test_get_layers_into_out(store):
    """The slot size follows the layer range and the output dtype."""
    svc, c = store
    half = np.arange(VALUES // 2, dtype=np.float16)
    svc.blocks[H[0]] = half.tobytes()
    out = np.zeros((1, 1, 2, 4, 2, 8), dtype=np.float16)
    got = c.get_blocks(NS, H[:1], layers=(1, 2), out=out)
    assert got[0].shape == (1, 2, 4, 2, 8) and np.array_equal(out.reshape(-1), half)
    with pytest.raises(ValueError, match="bytes"):
        c.get_blocks(NS, H[:1], out=out)  # all layers need twice the bytes


def test_packed_into_caller_slots(store):
    svc, c = store
    svc.blocks[H[0]] = b"a" * 250
    svc.blocks[H[1]] = b"b" * 300
    out = bytearray(2 * 512)
    got = c.get_packed_blocks(NS, H[:3], out=memoryview(out)[:3 * 300])
    assert got[2] is None
    assert got[0].tobytes() == b"a" * 250 and got[1].tobytes() == b"b" * 300
    assert out[:250] == b"a" * 250 and out[300:600] == b"b" * 300
    with pytest.raises(ValueError, match="slot"):
        c.get_packed_blocks(NS, H[:2], out=[bytearray(300), bytearray(299)])
    assert c.get_packed_blocks(NS, H[:2]) == [b"a" * 250, b"b" * 300]


def test_put_from_buffers(store):
    svc, c = store
    b = _block(5)
    # a raw block from a buffer-protocol view of fp16 data, a packed block from a bytearray
    assert c.put_blocks(NS, [H[0]], [memoryview(b)])[0].ok
    assert svc.blocks[H[0]] == b.tobytes()
    assert c.put_blocks(NS, [H[1]], b)[0].ok  # one block without a batch axis
    assert c.put_packed_blocks(NS, [H[2]], [bytearray(b"xyz" * 500)])[0].ok
    assert svc.blocks[H[2]] == b"xyz" * 500
    # non-contiguous input is accepted (copied once)
    wide = np.stack([b, b], axis=-1)[..., 0]
    assert c.put_blocks(NS, [H[3]], [wide])[0].ok and svc.blocks[H[3]] == b.tobytes()


def test_async_calls_overlap(store):
    """Two gets are in flight at once: the servicer holds each until both arrived (a client
    that ran them one after the other would never release the first)."""
    svc, c = store
    blocks = _fill(svc, c)
    svc.gate = threading.Barrier(2, timeout=10)
    outs = [np.zeros((1,) + BLOCK, np.float16) for _ in range(2)]
    fs = [c.get_blocks_async(NS, H[i:i + 1], out=outs[i]) for i in range(2)]
    res = [f.result(timeout=20) for f in fs]
    for i in range(2):
        assert np.array_equal(res[i][0], blocks[i]) and np.shares_memory(res[i][0], outs[i])
    svc.gate = None
    lf = c.lookup_async(NS, H)
    pf = c.put_packed_blocks_async(NS, [H[3]], [b"q" * 10])
    assert pf.result(timeout=10)[0].ok
    assert lf.result(timeout=10).matched_blocks in (3, 4)
    gf = c.get_packed_blocks_async(NS, [H[3]])
    assert gf.result(timeout=10) == [b"q" * 10]
    assert c.put_blocks_async(NS, [H[0]], blocks[:1]).result(timeout=10)[0].ok


def test_per_call_deadline(store):
    svc, c = store
    svc.delay = 60.0
    t0 = time.monotonic()
    with pytest.raises(TurboKVError) as e:
        c.lookup(NS, H, timeout=0.3)
    assert e.value.code == StatusCode.DEADLINE_EXCEEDED
    # Cut short by the 0.3 s deadline, not by the reply (60 s) nor the client's timeout (10 s);
    # the margin is for a loaded machine.
    assert time.monotonic() - t0 < 8.0
    f = c.lookup_async(NS, H, timeout=0.3)
    with pytest.raises(TurboKVError) as e:
        f.result(timeout=5)
    assert e.value.code == StatusCode.DEADLINE_EXCEEDED


def test_queued_async_call_counts_its_wait_against_its_deadline(store):
    svc, c0 = store
    c = Client(c0.target, timeout=10, max_concurrent_calls=1)
    try:
        svc.gate = threading.Event()
        first = c.lookup_async(NS, H)
        second = c.lookup_async(NS, H, timeout=0.2)  # queued behind the first
        time.sleep(0.5)
        svc.gate.set()
        assert first.result(timeout=10).matched_blocks == 0
        with pytest.raises(TurboKVError) as e:
            second.result(timeout=10)
        assert e.value.code == StatusCode.DEADLINE_EXCEEDED and "queued" in e.value.details
        assert svc.calls == 1  # the expired call never reached the server
    finally:
        c.close()


def _wait_until(condition, seconds=30.0):
    """Polls condition() until it holds or `seconds` pass; returns its last value."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_close_cancels_queued_calls(store):
    svc, c0 = store
    c = Client(c0.target, timeout=10, max_concurrent_calls=1)
    svc.gate = threading.Event()
    running = c.lookup_async(NS, H)
    # Running means the pool's thread took it: it has reached the server (held at the gate).
    # A close() before that would cancel it as a queued call.
    assert _wait_until(lambda: svc.calls == 1)
    queued = [c.lookup_async(NS, H) for _ in range(3)]

    # Let the running call finish only once close() has cancelled the queued ones: released
    # earlier, the pool's thread would start one of them. (A close() that never cancels them
    # has the gate released after the bound, and the asserts below fail.)
    def release():
        _wait_until(lambda: all(f.cancelled() for f in queued))
        svc.gate.set()

    threading.Thread(target=release, daemon=True).start()
    c.close()
    assert running.done() and not running.cancelled()
    assert all(f.cancelled() for f in queued)
    with pytest.raises(RuntimeError, match="closed"):
        c.lookup_async(NS, H)


def test_codes_and_stats_are_turbokv_types(store):
    """No grpc type crosses the API: codes are turbokv.StatusCode, stats a dataclass."""
    svc, c = store
    res = c.put_packed_blocks(NS, [H[0]], [b"z"])
    assert type(res[0].code) is StatusCode and res[0].code == StatusCode.OK == 0
    svc.delay = 1.0
    with pytest.raises(TurboKVError) as e:
        c.lookup(NS, H, timeout=0.1)
    assert type(e.value.code) is StatusCode and not isinstance(e.value.code, grpc.StatusCode)
    s = c.stats()
    assert isinstance(s, ServerStats) and s.version == "fake" and s.codec_backend == "x"
    assert s.namespace(NS).blocks == 1 and s.namespace(NS).descriptor["head_dim"] == 8
    assert s.namespace(NS + 1) is None
    assert StatusCode.from_int(99) == StatusCode.UNKNOWN
    import pickle
    err = pickle.loads(pickle.dumps(TurboKVError(StatusCode.NOT_FOUND, "gone")))
    assert err.code == StatusCode.NOT_FOUND and err.details == "gone"


def test_torch_tensors_as_buffers(store):
    torch = pytest.importorskip("torch")
    svc, c = store
    b = torch.from_numpy(_block(3).astype(np.float32)).to(torch.float16)
    assert c.put_blocks(NS, [H[0]], b.unsqueeze(0))[0].ok
    out = torch.zeros((1,) + BLOCK, dtype=torch.float16)
    got = c.get_blocks(NS, H[:1], out=out)
    assert torch.equal(out[0], b) and np.shares_memory(got[0], out.numpy())
    with pytest.raises(ValueError, match="dtype"):
        c.get_blocks(NS, H[:1], out=torch.zeros((1,) + BLOCK, dtype=torch.float32))
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="CPU"):
            c.get_blocks(NS, H[:1], out=out.cuda())
