#!/usr/bin/env python3
"""Can one tenant's idle or slow PutBlocks streams hold up another tenant's puts? (issue 22)

Tenant A registers a raw-preset namespace of large blocks (64 MiB raw by default) and opens
--idle streams that send nothing (the worst case: the server knows neither the namespace nor
the block count), plus --slow streams that send one 1 MiB chunk every --slow-interval seconds. Once the
server holds what A's streams make it hold (turbokv_in_flight_bytes stops changing), tenant B
puts --puts blocks of 16 KiB, one call each, and the latency and outcome of each is printed,
with the in-flight bytes A's streams held. Then A's streams are cancelled.

    python3 bench/tenant_budget.py --build build [--idle 16] [--slow 0] [--puts 10] \
        [--a-block-tokens 512]
    python3 bench/tenant_budget.py --binary /path/to/turbokv-server ...   (another build)

Client and server share the machine; B's latency includes gRPC on loopback and the store.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOKEN_A = "budget-tenant-a-token"
TOKEN_B = "budget-tenant-b-token"
# A: 32 layers x 2 x 512 tokens x 8 heads x 128 dims x fp16 = 64 MiB raw (raw preset: packed
# is as large). B: 2 x 2 x 16 x 2 x 64 x fp16 = 16 KiB raw.
SHAPE_A = dict(num_layers=32, num_kv_heads=8, head_dim=128, block_tokens=512)
SHAPE_B = dict(num_layers=2, num_kv_heads=2, head_dim=64, block_tokens=16)
CHUNK = 1 << 20


def _digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def start_server(binary: str, work: str, extra_args: list[str] = ()) -> tuple:
    """(process, grpc port, metrics port) of a turbokv-server with tenants a and b."""
    tokens = os.path.join(work, "tokens")
    with open(tokens, "w") as f:
        f.write("token %s tenant-a\ntoken %s tenant-b\n" % (_digest(TOKEN_A), _digest(TOKEN_B)))
    port_file = os.path.join(work, "port")
    log = open(os.path.join(work, "server.log"), "ab")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--port-file", port_file,
                             "--data-dir", os.path.join(work, "data"), "--metrics-listen",
                             "127.0.0.1:0", "--token-file", tokens, "--codec-threads", "2",
                             "--log-level", "warn"] + list(extra_args),
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("turbokv-server exited with %s" % proc.returncode)
        try:
            with open(port_file) as f:
                port, metrics = int(f.readline()), int(f.readline())
            return proc, port, metrics
        except (OSError, ValueError):
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("turbokv-server did not start")


def scrape(metrics_port: int) -> dict[str, float]:
    """Unlabelled samples of /metrics: {name: value}."""
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port,
                                  timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def wait_in_flight_settled(metrics_port: int, timeout: float = 60.0,
                           at_least: float = 1.0) -> float:
    """turbokv_in_flight_bytes once it is >= at_least and unchanged over 1 s (the gauge is
    refreshed every second)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        v = scrape(metrics_port).get("turbokv_in_flight_bytes", 0.0)
        if v >= at_least and v == last:
            return v
        last = v
        time.sleep(1.1)
    raise AssertionError("turbokv_in_flight_bytes did not settle (last %s)" % last)


class TenantAStreams:
    """A's streams against `address`: `idle` that send nothing, `slow` that send one chunk every
    `interval` s. Call close() to end them (they are cancelled); outcomes() then gives each
    stream's gRPC status code name."""

    def __init__(self, address: str, ns_id: int, raw_bytes: int, idle: int, slow: int,
                 interval: float = 1.0, timeout: float | None = None):
        import grpc
        from turbokv.v1 import turbokv_pb2 as pb
        from turbokv.v1 import turbokv_pb2_grpc as pb_grpc

        from turbokv import Security
        self._stop = threading.Event()
        self._channel = Security(token=TOKEN_A).channel(address, [])
        stub = pb_grpc.TurboKVStub(self._channel)
        self.futures = []

        def idle_requests():
            self._stop.wait()
            return
            yield  # a generator that yields nothing

        def slow_requests(i):
            h = hashlib.sha256(b"slow-%d" % i).digest()
            data = os.urandom(CHUNK)
            for off in range(0, raw_bytes, CHUNK):
                msg = pb.PutBlocksRequest(namespace_id=ns_id, block_hash=h,
                                          encoding=pb.ENCODING_RAW, block_bytes=raw_bytes,
                                          offset=off, data=data)
                if off == 0:
                    msg.header.block_count = 1
                yield msg
                if self._stop.wait(interval):
                    return

        for _ in range(idle):
            self.futures.append(stub.PutBlocks.future(idle_requests(),
                                                      timeout=timeout))
        for i in range(slow):
            self.futures.append(stub.PutBlocks.future(slow_requests(i),
                                                      timeout=timeout))
        self._grpc = grpc

    def outcomes(self, timeout: float = 60.0) -> list[str]:
        out = []
        for f in self.futures:
            try:
                f.result(timeout=timeout)
                out.append("OK")
            except self._grpc.RpcError as e:
                out.append(e.code().name)
        return out

    def close(self) -> None:
        self._stop.set()
        for f in self.futures:
            f.cancel()
        self._channel.close()


def register(address: str, token: str, name: str, shape: dict, preset: str):
    from turbokv import Client, Security
    with Client(address, timeout=30.0, max_attempts=1, security=Security(token=token)) as c:
        return c.register_namespace(name, preset=preset, **shape)


def put_b(address: str, ns_id: int, n: int, timeout: float = 60.0) -> list[tuple]:
    """n puts of one 16 KiB block by tenant B: [(seconds, code name or "OK"), ...]."""
    import numpy as np

    from turbokv import Client, Security
    rng = np.random.default_rng(0)
    out = []
    with Client(address, timeout=timeout, max_attempts=1,
                security=Security(token=TOKEN_B)) as c:
        for _ in range(n):
            block = rng.standard_normal(
                (SHAPE_B["num_layers"], 2, SHAPE_B["block_tokens"], SHAPE_B["num_kv_heads"],
                 SHAPE_B["head_dim"])).astype(np.float16)
            t0 = time.perf_counter()
            try:
                r = c.put_blocks(ns_id, [os.urandom(32)], [block], timeout=timeout)
                code = "OK" if r[0].code == 0 else "block code %d: %s" % (r[0].code,
                                                                          r[0].message)
            except Exception as e:  # noqa: BLE001 - reported, not swallowed
                code = "%s: %s" % (type(e).__name__, str(e)[:120])
            out.append((time.perf_counter() - t0, code))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--binary", default=None)
    ap.add_argument("--a-block-tokens", type=int, default=SHAPE_A["block_tokens"],
                    help="tokens of A's blocks (512: 64 MiB raw, 1024: 128 MiB)")
    ap.add_argument("--idle", type=int, default=16)
    ap.add_argument("--slow", type=int, default=0)
    ap.add_argument("--slow-interval", type=float, default=1.0)
    ap.add_argument("--puts", type=int, default=10)
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra turbokv-server flag (repeatable), e.g. --server-arg=--foo=1")
    args = ap.parse_args()
    binary = args.binary or os.path.join(REPO, args.build, "bin", "turbokv-server")
    for p in (os.path.join(REPO, args.build, "python"), os.path.join(REPO, "client", "python")):
        sys.path.insert(0, p)
    with tempfile.TemporaryDirectory() as work:
        proc, port, metrics = start_server(binary, work, args.server_arg)
        address = "127.0.0.1:%d" % port
        try:
            ns_a = register(address, TOKEN_A, "budget-a",
                            dict(SHAPE_A, block_tokens=args.a_block_tokens), "raw")
            ns_b = register(address, TOKEN_B, "budget-b", SHAPE_B, "k4v4-g32")
            baseline = put_b(address, ns_b.namespace_id, args.puts)
            a = TenantAStreams(address, ns_a.namespace_id, ns_a.raw_block_bytes, args.idle,
                               args.slow, args.slow_interval)
            try:
                if args.slow == 0:
                    held = wait_in_flight_settled(metrics)
                else:  # slow streams keep changing it: what it is after 3 s
                    time.sleep(3.0)
                    held = scrape(metrics).get("turbokv_in_flight_bytes", 0.0)
                during = put_b(address, ns_b.namespace_id, args.puts)
            finally:
                a.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print("binary: %s" % binary)
    print("A: %d idle + %d slow streams of %d MiB raw blocks; in-flight bytes held: %.0f "
          "(%.1f MiB)" % (args.idle, args.slow, ns_a.raw_block_bytes >> 20, held, held / 2**20))
    for name, rows in (("B alone", baseline), ("B with A's streams", during)):
        secs = [s for s, _ in rows]
        codes = {}
        for _, c in rows:
            codes[c] = codes.get(c, 0) + 1
        print("%-20s put latency ms: median %.1f  max %.1f  outcomes %s" % (
            name, 1e3 * statistics.median(secs), 1e3 * max(secs), codes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
