"""A KV-event subscriber for the engine tests: a ZMQ SUB socket read on a background thread, every
message decoded with vLLM's own decoder (``msgspec.msgpack.Decoder(KVEventBatch)`` from
``vllm.distributed.kv_events``, as vLLM's example subscriber does). Works for vLLM's publisher
(the test binds, vLLM connects) and for turbokv-server's ``--kv-events-listen`` (the test
connects).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class EventSubscriber:
    """Collects ``(topic, seq, KVEventBatch)`` of every message. ``bind=True`` binds
    ``tcp://127.0.0.1:<free port>`` (``endpoint`` tells where), else connects to ``endpoint``.
    Raises on a message vLLM's decoder rejects (it is recorded in ``errors``)."""

    def __init__(self, endpoint: str | None = None, bind: bool = False, topic: bytes = b""):
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch
        self._zmq = zmq
        self._decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self._sock = zmq.Context.instance().socket(zmq.SUB)
        self._sock.setsockopt(zmq.SUBSCRIBE, topic)
        self._sock.setsockopt(zmq.RCVHWM, 0)
        if bind:
            port = self._sock.bind_to_random_port("tcp://127.0.0.1")
            self.endpoint = "tcp://127.0.0.1:%d" % port
        else:
            assert endpoint is not None
            self._sock.connect(endpoint)
            self.endpoint = endpoint
        self.messages: list[tuple[str, int, Any]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kv-event-sub", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = self._zmq.Poller()
        poller.register(self._sock, self._zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            topic, seq, payload = self._sock.recv_multipart()
            try:
                batch = self._decoder.decode(payload)
            except Exception as e:  # noqa: BLE001 - recorded, the test fails on it
                with self._lock:
                    self.errors.append("%s: %r" % (e, payload[:200]))
                continue
            with self._lock:
                self.messages.append((topic.decode(), int.from_bytes(seq, "big"), batch))

    def events(self, medium: str | None = None) -> list[tuple[str, Any]]:
        """``(topic, event)`` in arrival order; only events of ``medium`` when given
        (AllBlocksCleared has no medium and is always kept)."""
        with self._lock:
            msgs = list(self.messages)
        out = []
        for topic, _, batch in msgs:
            for ev in batch.events:
                m = getattr(ev, "medium", None)
                if medium is None or m == medium or not hasattr(ev, "medium"):
                    out.append((topic, ev))
        return out

    def seqs(self) -> list[int]:
        with self._lock:
            return [s for _, s, _ in self.messages]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.02)
        return predicate()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close(linger=0)
