"""The store's eviction policy replayed in-process on the generated workloads.

``turbokv-policy-sim`` (bench/policy_sim.cc) replays a Mooncake-format trace through the
server's own policy code (server/storage/lrfu_policy.h, the default ``--eviction-policy lrfu``),
through LRU and through Belady's optimum, without RocksDB or a server. For each of the four
workloads bench/cache_replay generates (shared system prompts, multi-turn chats, agent loops, a
Zipf mix of documents; seed 1, the benchmark's default size) and each capacity of the benchmark
(5/10/25/50% of the distinct blocks), LRFU must hit at least as often as LRU, and no policy
above the optimum. (The Mooncake trace itself is replayed by eviction_unit_tests.)
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, _find_binary

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from bench.cache_replay import trace, workloads  # noqa: E402

CAPACITIES = (5, 10, 25, 50)


@pytest.fixture(scope="module")
def policy_sim():
    path = _find_binary("turbokv-policy-sim", "TURBOKV_POLICY_SIM_BIN")
    if path is None:
        pytest.skip("turbokv-policy-sim is not built (needs nlohmann-json3-dev)")
    return path


@pytest.mark.parametrize("kind", workloads.KINDS)
def test_lrfu_hits_at_least_as_often_as_lru(kind, policy_sim, tmp_path):
    path = str(tmp_path / f"{kind}.jsonl")
    trace.write_trace(path, workloads.generate(kind, seed=1))
    out = str(tmp_path / "sim.json")
    subprocess.run([policy_sim, "--trace", path, "--policy", "lrfu", "--capacity",
                    *[str(c) for c in CAPACITIES], "--json", out],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    with open(out) as f:
        report = json.load(f)
    assert len(report) == 1
    points = report[0]["points"]
    assert [p["capacity_percent"] for p in points] == list(CAPACITIES)
    for p in points:
        lrfu, lru, opt = p["policy_hit_ratio"], p["lru_hit_ratio"], p["belady_hit_ratio"]
        assert lrfu >= lru, f"{kind} at {p['capacity_percent']}%: LRFU {lrfu:.4f} < LRU {lru:.4f}"
        assert opt + 1e-12 >= lrfu, f"{kind}: LRFU {lrfu:.4f} above Belady {opt:.4f}"
        assert 0 < lru <= report[0]["infinite_hit_ratio"] + 1e-12
