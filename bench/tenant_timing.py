#!/usr/bin/env python3
"""Does a cross-tenant probe look like a miss? Latency of Lookup and GetBlocks for a hit, a
cross-tenant probe and a true miss, against a real turbokv-server with bearer tokens.

Tenant A stores a prefix of --blocks blocks. Then, interleaved in random order so drift and
noise fall on every case alike:
  hit            A asks for its own prefix in its own namespace
  probe-own-ns   B registered the same descriptor (same model, same cache_salt) and asks for
                 A's prefix hashes in its own namespace: the tenant is in the namespace id, so
                 the keys differ and the store answers a true miss
  probe-foreign  B asks for A's prefix under A's namespace id: NOT_FOUND, the path of an
                 unregistered id
  miss           A asks for hashes nobody stored, in its own namespace
  miss-unknown   B asks under a namespace id nobody registered: NOT_FOUND
Lookup asks for the whole prefix; GetBlocks for its first block (a hit moves that block's
bytes, so it is expected to be slower; probes must match the misses, not the hit).

    python3 bench/tenant_timing.py --build build [--iterations 2000] [--blocks 16]

Prints p50/p99/mean in microseconds per (RPC, case) and the ratio of each probe's p50 to the
matching miss's. Client and server share the machine: figures include gRPC on loopback.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOKEN_A = "timing-tenant-a-token"
TOKEN_B = "timing-tenant-b-token"
SHAPE = dict(num_layers=4, num_kv_heads=2, head_dim=64, block_tokens=16)
CASES = ("hit", "probe-own-ns", "probe-foreign", "miss", "miss-unknown")


def _digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def start_server(binary: str, work: str) -> tuple[subprocess.Popen, int]:
    tokens = os.path.join(work, "tokens")
    with open(tokens, "w") as f:
        f.write("token %s tenant-a\ntoken %s tenant-b\n" % (_digest(TOKEN_A), _digest(TOKEN_B)))
    port_file = os.path.join(work, "port")
    log = open(os.path.join(work, "server.log"), "ab")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--port-file", port_file,
                             "--data-dir", os.path.join(work, "data"), "--metrics-listen", "",
                             "--token-file", tokens, "--log-level", "error"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("turbokv-server exited with %s" % proc.returncode)
        try:
            with open(port_file) as f:
                port = int(f.readline())
            return proc, port
        except (OSError, ValueError):
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("turbokv-server did not start")


def measure(address: str, iterations: int, blocks: int, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """{rpc: {case: [seconds, ...]}} for rpc in Lookup, GetBlocks."""
    import grpc
    import numpy as np
    from turbokv.v1 import turbokv_pb2 as pb
    from turbokv.v1 import turbokv_pb2_grpc as pb_grpc

    from turbokv import Client, Security

    a = Client(address, security=Security(token=TOKEN_A))
    b = Client(address, security=Security(token=TOKEN_B))
    desc = dict(model="timing-model", model_revision="r1", preset="k4v4-g32",
                cache_salt="shared-salt", **SHAPE)
    ns_a = a.register_namespace(**desc).namespace_id
    ns_b = b.register_namespace(**desc).namespace_id
    assert ns_a != ns_b
    rng = np.random.default_rng(seed)
    L, H, D, bt = SHAPE["num_layers"], SHAPE["num_kv_heads"], SHAPE["head_dim"], \
        SHAPE["block_tokens"]
    prefix = [hashlib.sha256(b"prefix-%d" % i).digest() for i in range(blocks)]
    other = [hashlib.sha256(b"nobody-%d" % i).digest() for i in range(blocks)]
    a.put_blocks(ns_a, prefix, rng.normal(0, 1, (blocks, L, 2, bt, H, D)).astype(np.float16))
    unknown = 0x5EC0DE5EC0DE5EC0
    while unknown in (ns_a, ns_b):
        unknown += 1
    ch_a = a.security.channel(address, [])
    ch_b = b.security.channel(address, [])
    stub_a, stub_b = pb_grpc.TurboKVStub(ch_a), pb_grpc.TurboKVStub(ch_b)

    def lookup(stub, ns, hashes, want):
        def run():
            try:
                r = stub.Lookup(pb.LookupRequest(namespace_id=ns, block_hashes=hashes), timeout=10)
                got = r.matched_blocks
            except grpc.RpcError as e:
                got = e.code().name
            assert got == want, (got, want)
        return run

    def get(stub, ns, hashes, want):
        def run():
            try:
                n = sum(1 for r in stub.GetBlocks(pb.GetBlocksRequest(
                    namespace_id=ns, block_hashes=hashes, encoding=pb.ENCODING_PACKED),
                    timeout=10) if r.data)
                got = "found" if n else "missing"
            except grpc.RpcError as e:
                got = e.code().name
            assert got == want, (got, want)
        return run

    nf = "NOT_FOUND"
    plans: dict[str, dict[str, Callable[[], None]]] = {
        "Lookup": {"hit": lookup(stub_a, ns_a, prefix, blocks),
                   "probe-own-ns": lookup(stub_b, ns_b, prefix, 0),
                   "probe-foreign": lookup(stub_b, ns_a, prefix, nf),
                   "miss": lookup(stub_a, ns_a, other, 0),
                   "miss-unknown": lookup(stub_b, unknown, prefix, nf)},
        "GetBlocks": {"hit": get(stub_a, ns_a, prefix[:1], "found"),
                      "probe-own-ns": get(stub_b, ns_b, prefix[:1], "missing"),
                      "probe-foreign": get(stub_b, ns_a, prefix[:1], nf),
                      "miss": get(stub_a, ns_a, other[:1], "missing"),
                      "miss-unknown": get(stub_b, unknown, prefix[:1], nf)},
    }
    out: dict[str, dict[str, list[float]]] = {rpc: {c: [] for c in CASES} for rpc in plans}
    order = [(rpc, case) for rpc in plans for case in CASES]
    shuffle = random.Random(seed)
    for rpc, case in order:  # warm-up: connections, first-call paths
        for _ in range(20):
            plans[rpc][case]()
    for _ in range(iterations):
        shuffle.shuffle(order)
        for rpc, case in order:
            t0 = time.perf_counter()
            plans[rpc][case]()
            out[rpc][case].append(time.perf_counter() - t0)
    for c in (a, b):
        c.close()
    ch_a.close()
    ch_b.close()
    return out


def report(results: dict[str, dict[str, list[float]]]) -> str:
    lines = ["| RPC | case | p50 µs | p99 µs | mean µs | p50 / miss p50 |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for rpc, cases in results.items():
        base = {"probe-own-ns": "miss", "probe-foreign": "miss-unknown"}
        p50 = {c: _percentile(xs, 0.50) for c, xs in cases.items()}
        for case, xs in cases.items():
            ratio = "%.2f" % (p50[case] / p50[base[case]]) if case in base else ""
            lines.append("| %s | %s | %.0f | %.0f | %.0f | %s |" % (
                rpc, case, p50[case] * 1e6, _percentile(xs, 0.99) * 1e6,
                statistics.mean(xs) * 1e6, ratio))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=16)
    args = ap.parse_args()
    for p in (os.path.join(REPO, args.build, "python"), os.path.join(REPO, "client", "python")):
        sys.path.insert(0, p)
    binary = os.path.join(REPO, args.build, "bin", "turbokv-server")
    with tempfile.TemporaryDirectory() as work:
        proc, port = start_server(binary, work)
        try:
            results = measure("127.0.0.1:%d" % port, args.iterations, args.blocks)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
