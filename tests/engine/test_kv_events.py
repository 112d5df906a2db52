"""turbokv-server's block events (``--kv-events-listen``) read by vLLM's own KV-event decoder.

A real server with a small capacity, a real client, and a ZMQ subscriber decoding every message
with ``msgspec.msgpack.Decoder(vllm.distributed.kv_events.KVEventBatch)``:

* a TTL expiry: BlockRemoved names the expired blocks;
* a put of more blocks than fit: BlockStored names exactly the blocks the server stored, none
  of the refused ones (RESOURCE_EXHAUSTED);
* a second put evicts: BlockRemoved names each evicted block once (as many as the server's
  ``evicted_blocks`` grew);
* DeleteBlocks, DropNamespace (AllBlocksCleared on the namespace's topic);
* a router that applies the events in order ends with the server's own view of every
  namespace (checked block by block), every stored block was announced once per put, the
  sequence numbers have no gap, and ``turbokv_kv_events_published_total`` counts them.

The connector's own events (vLLM's endpoint, ``medium="turbokv"``) are checked in
test_vllm_connector.py.
"""
from __future__ import annotations

import collections
import socket
import time
import urllib.request

import pytest

from conftest import ServerProcess

pytest.importorskip("vllm")
pytest.importorskip("zmq")

import numpy as np  # noqa: E402

from kv_event_subscriber import EventSubscriber  # noqa: E402
from turbokv import Client, PrefixHasher  # noqa: E402

L, H, D, BT = 2, 2, 64, 16          # 16 KiB fp16 blocks
MEDIUM = "turbokv"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _blocks(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, L, 2, BT, H, D)).astype(np.float16)


def _register(c: Client, name: str, ttl: int = 0) -> int:
    return c.register_namespace(name, L, H, D, BT, dtype="fp16", preset="raw",
                                ttl_seconds=ttl).namespace_id


def _topic(ns: int) -> str:
    return "turbokv/%016x" % ns


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("%s not in /metrics" % name)


@pytest.fixture
def server(tmp_path, server_binary):
    port = _free_port()
    s = ServerProcess(server_binary, str(tmp_path / "data"), str(tmp_path / "server.log"),
                      metrics=True,
                      extra_args=["--kv-events-listen", "127.0.0.1:%d" % port,
                                  "--capacity", "256KiB"]).start()
    s.kv_events = "tcp://127.0.0.1:%d" % port
    yield s
    s.stop()


def _connect(server, c: Client) -> EventSubscriber:
    """A subscriber that receives everything from now on: PUB/SUB drops what is published
    before the subscription reaches the server, so probe with a scratch namespace first."""
    sub = EventSubscriber(server.kv_events, topic=b"turbokv/")
    probe = _register(c, "probe")
    h = PrefixHasher(probe).block_hashes(list(range(BT)), BT)
    for _ in range(100):
        c.put_blocks(probe, h, _blocks(1, 0))
        if sub.wait_for(lambda: any(t == _topic(probe) for t, _ in sub.events()), 0.2):
            break
    else:
        pytest.fail("no event from the server's KV-event endpoint")
    c.drop_namespace(probe)
    assert sub.wait_for(lambda: any(type(e).__name__ == "AllBlocksCleared"
                                     for _, e in sub.events()))
    return sub


def test_server_events_decode_with_vllms_decoder_and_track_the_store(server):
    c = Client(server.address)
    sub = _connect(server, c)
    start = len(sub.events())
    ns = _register(c, "kv-events-test")
    ns_ttl = _register(c, "kv-events-ttl", ttl=1)

    def removed_of(nsid):
        return [h for t, e in sub.events(MEDIUM)[start:] if t == _topic(nsid)
                and type(e).__name__ == "BlockRemoved" for h in e.block_hashes]

    # 1. TTL: blocks expire a second after their put (the maintenance pass runs every second).
    ht = PrefixHasher(ns_ttl).block_hashes(list(range(3 * BT)), BT)
    assert all(r.ok for r in c.put_blocks(ns_ttl, ht, _blocks(3, 3)))
    assert sub.wait_for(lambda: sorted(removed_of(ns_ttl)) == sorted(ht), 10.0), \
        removed_of(ns_ttl)
    evicted_before = c.stats().evicted_blocks
    # 2. 40 blocks (~660 KiB) into 256 KiB: a chain never evicts its own head, so the tail is
    #    refused.
    h1 = PrefixHasher(ns).block_hashes(list(range(40 * BT)), BT)
    r1 = c.put_blocks(ns, h1, _blocks(40, 1))
    stored1 = [r.block_hash for r in r1 if r.ok]
    refused = [r.block_hash for r in r1 if not r.ok]
    assert stored1 and refused, [r.code for r in r1]
    assert {r.code.name for r in r1 if not r.ok} == {"RESOURCE_EXHAUSTED"}
    # 3. another chain: makes room by evicting the first one's blocks.
    h2 = PrefixHasher(ns).block_hashes(list(range(10000, 10000 + 8 * BT)), BT)
    r2 = c.put_blocks(ns, h2, _blocks(8, 2))
    assert all(r.ok for r in r2), [r.code for r in r2]
    # 4. delete two blocks that are there.
    assert c.delete_blocks(ns, h2[6:8]) == 2
    evicted = c.stats().evicted_blocks - evicted_before
    assert evicted > 0

    # What a router has learnt, event by event, equals what the server holds.
    def router_view():
        view = collections.defaultdict(set)
        stored_count = collections.Counter()
        for topic, ev in sub.events()[start:]:
            kind = type(ev).__name__
            if kind == "BlockStored":
                assert ev.medium == MEDIUM and ev.block_size == BT
                assert ev.parent_block_hash is None and ev.token_ids == []
                view[topic].update(ev.block_hashes)
                stored_count.update(ev.block_hashes)
            elif kind == "BlockRemoved":
                assert ev.medium == MEDIUM
                view[topic].difference_update(ev.block_hashes)
            elif kind == "AllBlocksCleared":
                view[topic].clear()
        return view, stored_count

    time.sleep(0.3)  # the publisher coalesces for 10 ms
    view, stored_count = router_view()
    for nsid, hashes in ((ns, h1 + h2), (ns_ttl, ht)):
        held = {h for h in hashes if c.lookup(nsid, [h]).matched_blocks == 1}
        assert view[_topic(nsid)] == held, nsid
    assert not set(refused) & set(stored_count), "a refused block was announced"
    assert set(stored_count) == set(stored1) | set(h2) | set(ht)
    assert set(stored_count.values()) == {1}, "a block announced more than once"
    # Every eviction announced, once: the removals of ns are its evictions and the deletes.
    removed = removed_of(ns)
    assert len(removed) == len(set(removed)) == evicted + 2, (len(removed), evicted)
    assert set(h2[6:8]) <= set(removed) <= set(stored1) | set(h2)

    # 5. DropNamespace: one AllBlocksCleared on the namespace's topic.
    c.drop_namespace(ns)
    assert sub.wait_for(lambda: any(t == _topic(ns) and type(e).__name__ == "AllBlocksCleared"
                                    for t, e in sub.events()[start:]))
    assert not router_view()[0][_topic(ns)]
    assert not sub.errors, sub.errors
    seqs = sub.seqs()
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a sequence gap: events dropped"
    # Every event a sink call produced was sent, none dropped (the metric refreshes every s).
    total = len(sub.events())

    def published():
        return _metric(server.metrics_port, "turbokv_kv_events_published_total")

    assert sub.wait_for(lambda: published() >= total, 5.0)
    assert _metric(server.metrics_port, "turbokv_kv_events_dropped_total") == 0
    sub.close()
    c.close()
