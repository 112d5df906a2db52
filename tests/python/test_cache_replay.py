"""The cache replay benchmark (bench/cache_replay, docs/cache.md).

* The simulators give hand-computed answers on tiny traces, and the issue's LRU/Belady figures
  on the public Mooncake trace (skipped when ../shared is absent).
* The generated workloads are deterministic, prefix-consistent and of the size they promise.
* A smoke run of the whole benchmark against the real ``turbokv-server`` (a tiny chat
  workload, two capacities, one and two nodes): no wrong block, no error, the server's hits
  within the infinite bound, Belady at least LRU, the JSON fields present.
"""
from __future__ import annotations

import json
import os
import random
import sys

import pytest

from conftest import REPO, find_server_binary, require_stubs

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from bench.cache_replay import simulators as sims  # noqa: E402
from bench.cache_replay import trace, workloads  # noqa: E402

MOONCAKE = os.path.join(os.path.dirname(REPO), "shared", "data", "traces",
                        "mooncake_synthetic_trace.jsonl")


# -- simulators on hand-made traces -----------------------------------------------------------
def test_lru_and_belady_on_a_three_request_trace():
    # Capacity 2. After [1,2] and [3], LRU holds {2,3} (1 was least recent), so [1,2] misses
    # at its first block; Belady evicts 3 (never used again) and [1,2] hits both blocks.
    chains = [[1, 2], [3], [1, 2]]
    lru = sims.lru(chains, 2)
    assert (lru.hit_blocks, lru.ref_blocks, lru.per_request) == (0, 5, [0, 0, 0])
    bel = sims.belady(chains, 2)
    assert (bel.hit_blocks, bel.per_request) == (2, [0, 0, 2])
    assert bel.hit_ratio == pytest.approx(0.4)
    assert sims.infinite(chains).per_request == [0, 0, 2]


def test_lru_touches_the_chain_head_first():
    # A 3-block chain into 2 blocks: LRU keeps the tail {2,3}, so the repeat misses at block 1;
    # Belady keeps the blocks needed soonest (1, 2: position orders the same request) and
    # evicts 3, the deepest: the repeat matches 2 blocks.
    chains = [[1, 2, 3], [1, 2, 3]]
    assert sims.lru(chains, 2).per_request == [0, 0]
    assert sims.belady(chains, 2).per_request == [0, 2]
    assert sims.lru(chains, 3).per_request == [0, 3]
    assert sims.lru(chains, 0).hit_blocks == sims.belady(chains, 0).hit_blocks == 0


def test_hits_count_only_the_leading_blocks():
    # Block 1 is evicted, 2 and 3 stay: the second request matches nothing (prefix match).
    chains = [[1, 2, 3], [4, 2, 3], [1, 2, 3]]
    assert sims.infinite(chains).per_request == [0, 0, 3]
    assert sims.lru(chains, 3).per_request == [0, 0, 0]
    assert sims.belady(chains, 4).per_request == [0, 0, 3]


def test_belady_bounds_lru_on_random_traces():
    rnd = random.Random(7)
    for _ in range(40):
        chains = [[rnd.randrange(30) for _ in range(rnd.randint(1, 6))] for _ in range(60)]
        chains = [list(dict.fromkeys(c)) for c in chains]
        inf = sims.infinite(chains).hit_blocks
        for cap in (0, 3, 8, 20, 40):
            lru, bel = sims.lru(chains, cap).hit_blocks, sims.belady(chains, cap).hit_blocks
            assert lru <= bel <= inf, (cap, lru, bel, inf)


@pytest.mark.skipif(not os.path.exists(MOONCAKE), reason="../shared (Mooncake trace) is absent")
def test_mooncake_figures_of_issue_21():
    reqs = trace.read_trace(MOONCAKE)
    s = trace.summary(reqs)
    assert (s["requests"], s["distinct_blocks"], s["block_refs"]) == (3993, 43924, 121877)
    chains = trace.chains(reqs)
    want_lru = {5: 0.155, 10: 0.260, 25: 0.443, 50: 0.589}
    want_belady = {5: 0.396, 10: 0.506, 25: 0.626, 50: 0.640}
    for pct in (5, 10, 25, 50):
        cap = int(s["distinct_blocks"] * pct / 100)
        assert round(sims.lru(chains, cap).hit_ratio, 3) == want_lru[pct]
        assert round(sims.belady(chains, cap).hit_ratio, 3) == want_belady[pct]
    assert trace.prefix_violations(reqs) == []


# -- generated workloads ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", workloads.KINDS)
def test_workloads_are_deterministic_and_prefix_consistent(kind, tmp_path):
    a = workloads.generate(kind, seed=5, scale=0.1)
    b = workloads.generate(kind, seed=5, scale=0.1)
    c = workloads.generate(kind, seed=6, scale=0.1)
    assert len(a) == 400
    assert [r.to_json() for r in a] == [r.to_json() for r in b]
    assert [r.hash_ids for r in a] != [r.hash_ids for r in c]
    assert trace.prefix_violations(a) == []
    assert all(r.hash_ids and len(r.hash_ids) == -(-r.input_length // 512) for r in a)
    ts = [r.timestamp for r in a]
    assert ts == sorted(ts)
    # Some reuse, some misses: the workload is neither trivial nor uncacheable.
    inf = sims.infinite(trace.chains(a)).hit_ratio
    assert 0.2 < inf < 0.98
    # The CLI writes the same requests.
    out = tmp_path / ("%s.jsonl" % kind)
    assert workloads.main(["--kind", kind, "--seed", "5", "--scale", "0.1",
                           "--out", str(out)]) == 0
    assert [r.to_json() for r in trace.read_trace(str(out))] == [r.to_json() for r in a]


def test_workload_sizes_at_scale_one():
    for kind in workloads.KINDS:
        s = trace.summary(workloads.generate(kind, seed=1))
        assert s["requests"] == 4000
        assert 60_000 < s["block_refs"] < 160_000, (kind, s)


def test_workload_params_override():
    p = workloads.parse_params("docs", ["zipf_s=1.3", "documents=50"])
    assert (p.zipf_s, p.documents) == (1.3, 50)
    with pytest.raises(ValueError, match="no parameter"):
        workloads.parse_params("docs", ["nope=1"])


# -- the whole benchmark against the real server ------------------------------------------------
def test_replay_smoke_against_the_real_server(tmp_path):
    require_stubs()
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server is not built")
    try:
        from turbokv.codec import load_library
        load_library()
    except Exception as e:  # CodecUnavailable
        pytest.skip("local codec library unavailable: %s" % e)
    from bench.cache_replay import run
    out = tmp_path / "out"
    rc = run.main(["--workloads", "chat", "--scale", "0.04", "--capacities", "25,50",
                   "--nodes", "1,2", "--out-dir", str(out), "--server-bin", binary,
                   "--work-dir", str(tmp_path), "--sample-every", "5", "--progress", "0"])
    assert rc == 0
    res = json.loads((out / "cache_replay.json").read_text())
    assert (out / "cache_replay.png").stat().st_size > 10_000
    meta = res["meta"]
    for key in ("git_commit", "cpu", "packed_block_bytes", "raw_block_bytes", "preset",
                "server_version", "codec_backend"):
        assert key in meta, key
    assert meta["packed_block_bytes"] < meta["raw_block_bytes"] == 2 * 512 * 64 * 2
    wl = res["workloads"]["chat"]
    assert wl["summary"]["requests"] == 160
    runs = wl["runs"]
    assert [(r["capacity_fraction"], r["nodes"]) for r in runs] == [
        (0.25, 1), (0.25, 2), (0.5, 1), (0.5, 2)]
    for r in runs:
        srv, sim = r["server"], r["sim"]
        assert srv["wrong_blocks"] == 0 and srv["errors"] == 0, srv
        assert srv["missing_after_lookup"] == 0
        assert srv["ref_blocks"] == wl["summary"]["block_refs"]
        assert 0 < srv["hit_ratio"] <= wl["infinite_hit_ratio"] + 1e-12
        assert sim["lru"] <= sim["belady"] <= sim["infinite"] == wl["infinite_hit_ratio"]
        assert sim["lru_uncompressed"] <= sim["lru"]
        assert r["capacity_bytes"] == r["capacity_blocks"] * meta["packed_block_bytes"]
        assert srv["accepted_packed_bytes"] == srv["put_ok_blocks"] * meta["packed_block_bytes"]
        assert srv["put_ok_blocks"] + srv["hit_blocks"] == srv["ref_blocks"]
        for key in ("live_over_capacity_mean", "live_over_capacity_max",
                    "disk_over_capacity_max", "write_amplification", "cancelled_write_bytes",
                    "lookup_get_ms_p50", "lookup_get_ms_p99", "blocks_held_mean",
                    "blocks_held_max"):
            assert srv[key] is not None, key
        assert 0 < srv["live_over_capacity_mean"] <= srv["live_over_capacity_max"]
        assert srv["blocks_held_max"] <= r["capacity_blocks"]
        assert srv["write_amplification"] > 0
    # At 25% the store must have evicted (at 10% a 2-node server of this tiny workload holds
    # 78 blocks, less than some chats' whole chain with RocksDB's WAL beside it); all
    # requests hit something at 50%.
    assert runs[0]["server"]["evicted_blocks"] > 0
