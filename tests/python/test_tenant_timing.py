"""A cross-tenant probe must look like a miss (issue 11): Lookup and GetBlocks latency for a
hit, a probe of another tenant's prefix (from one's own namespace with the same descriptor,
and under the other tenant's namespace id) and true misses, against the real server
(bench/tenant_timing.py; run it directly for more samples). Prints p50/p99; the only timed
check is a generous one on the interleaved medians (a probe's p50 within 3x of its miss's)."""
from __future__ import annotations

import os
import sys

import pytest

from conftest import REPO, find_server_binary, require_stubs

pytestmark = pytest.mark.integration
sys.path.insert(0, os.path.join(REPO, "bench"))


def test_cross_tenant_probe_times_like_a_miss(tmp_path, capsys):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    require_stubs()
    import tenant_timing as tt
    proc, port = tt.start_server(binary, str(tmp_path))
    try:
        # measure() asserts every sample's outcome: hits found, probes and misses not.
        results = tt.measure("127.0.0.1:%d" % port, iterations=150, blocks=16)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with capsys.disabled():
        print("\n" + tt.report(results))
    for rpc, cases in results.items():
        p50 = {c: sorted(xs)[len(xs) // 2] for c, xs in cases.items()}
        assert p50["probe-own-ns"] < 3 * p50["miss"], (rpc, p50)
        assert p50["probe-foreign"] < 3 * p50["miss-unknown"], (rpc, p50)
