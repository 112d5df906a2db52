"""The `turbokv` CLI against the real server: ns register, put, lookup, get (raw, packed,
dtype, layer range), stats, bench, and its error reporting. Cross-checks the C++ hashing
(CLI put) against the Python client's hashing (lookup/get through Python)."""
from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.integration


def run(cli, server, *args, check=True):
    p = subprocess.run([cli, "--server", server.address, "--json", *args], capture_output=True,
                       text=True, timeout=120)
    if check:
        assert p.returncode == 0, "turbokv %s failed (%d): %s" % (args, p.returncode, p.stderr)
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1, p.stdout  # --json: exactly one object
        return json.loads(lines[0])
    return p


def _fixture(name):
    kv = os.path.join(FIXTURES, "%s_kv_64_fp16.npy" % name)
    tok = os.path.join(FIXTURES, "%s_tokens_64.npy" % name)
    if not os.path.exists(kv):
        pytest.skip("fixture %s missing" % kv)
    return kv, tok


def _register(cli, server, kv_path, preset="k4v4-g32", bt=16):
    L, _, _, H, D = np.load(kv_path).shape
    return run(cli, server, "ns", "register", "--model", "cli-test", "--num-layers", str(L),
               "--num-kv-heads", str(H), "--head-dim", str(D), "--block-tokens", str(bt),
               "--dtype", "fp16", "--preset", preset)


def test_cli_put_lookup_get_round_trip(turbokv_cli, turbokv_client, turbokv_server, tmp_path):
    from turbokv import PrefixHasher
    kv_path, tok_path = _fixture("smollm2")
    kv, tokens = np.load(kv_path), np.load(tok_path)
    ns = _register(turbokv_cli, turbokv_server, kv_path, preset="raw")
    assert len(ns["namespace_id"]) == 16 and ns["created"] is True
    ns_id = ns["namespace_id"]
    # 60 tokens -> 3 full blocks of 16, 12 dropped.
    kv60 = np.ascontiguousarray(kv[:, :, :60])
    np.save(tmp_path / "kv60.npy", kv60)
    np.save(tmp_path / "tok60.npy", tokens[:60].astype(np.int64))
    put = run(turbokv_cli, turbokv_server, "put", "--namespace", ns_id, "--kv",
              str(tmp_path / "kv60.npy"), "--tokens", str(tmp_path / "tok60.npy"))
    assert put["blocks_sent"] == 3 and put["blocks_stored"] == 3
    assert put["dropped_tokens"] == 12
    assert put["logical_bytes"] == 3 * ns["raw_block_bytes"]
    # Python's PrefixHasher finds what the C++ CLI stored: the two hashers agree.
    chain = PrefixHasher(int(ns_id, 16)).block_hashes(tokens, 16)
    assert turbokv_client.lookup(int(ns_id, 16), chain).matched_blocks == 3
    lk = run(turbokv_cli, turbokv_server, "lookup", "--namespace", ns_id, "--tokens", tok_path)
    assert (lk["matched_blocks"], lk["matched_tokens"], lk["chain_blocks"]) == (3, 48, 4)
    out = tmp_path / "out.npy"
    got = run(turbokv_cli, turbokv_server, "get", "--namespace", ns_id, "--tokens", tok_path,
              "--out", str(out))
    assert got["matched_tokens"] == 48
    arr = np.load(out)
    assert arr.dtype == np.float16 and arr.shape == (30, 2, 48, 3, 64)
    assert arr.tobytes() == np.ascontiguousarray(kv[:, :, :48]).tobytes()  # raw: bit exact
    # Layer range and fp32 output.
    run(turbokv_cli, turbokv_server, "get", "--namespace", ns_id, "--tokens", tok_path,
        "--out", str(out), "--layers", "3:7", "--dtype", "fp32")
    part = np.load(out)
    assert part.dtype == np.float32 and part.shape == (4, 2, 48, 3, 64)
    assert np.array_equal(part, kv[3:7, :, :48].astype(np.float32))
    # Packed: uint8 [matched_blocks][packed_block_bytes], identical to the Python client's.
    pk = run(turbokv_cli, turbokv_server, "get", "--namespace", ns_id, "--tokens", tok_path,
             "--out", str(out), "--packed")
    packed = np.load(out)
    assert packed.dtype == np.uint8 and packed.shape == (3, ns["packed_block_bytes"])
    py = turbokv_client.get_packed_blocks(int(ns_id, 16), chain[:3])
    assert [bytes(r) for r in packed] == py
    assert pk["encoding"] == "packed"


def test_cli_lossy_preset_quality(turbokv_cli, turbokv_server, tmp_path):
    kv_path, tok_path = _fixture("smollm2")
    ns = _register(turbokv_cli, turbokv_server, kv_path, preset="k4v4-g32")
    assert 4.0 < ns["bits_per_value"] < 5.5
    put = run(turbokv_cli, turbokv_server, "put", "--namespace", ns["namespace_id"], "--kv",
              kv_path, "--tokens", tok_path)
    assert put["blocks_stored"] == 4 and put["compression_ratio"] > 2.9
    out = tmp_path / "out.npy"
    run(turbokv_cli, turbokv_server, "get", "--namespace", ns["namespace_id"], "--tokens",
        tok_path, "--out", str(out))
    x = np.load(kv_path).astype(np.float64)
    y = np.load(out).astype(np.float64)
    rel = ((x - y) ** 2).sum() / (x ** 2).sum()
    assert 0.005 < rel < 0.0097, rel


def test_cli_delete_and_ns_drop(turbokv_cli, turbokv_server):
    kv_path, tok_path = _fixture("stories260k")
    ns = _register(turbokv_cli, turbokv_server, kv_path)
    ns_id = ns["namespace_id"]
    put = run(turbokv_cli, turbokv_server, "put", "--namespace", ns_id, "--kv", kv_path,
              "--tokens", tok_path)
    assert put["blocks_stored"] == 4
    d = run(turbokv_cli, turbokv_server, "delete", "--namespace", ns_id, "--tokens", tok_path)
    assert (d["chain_blocks"], d["deleted_blocks"]) == (4, 4)
    lk = run(turbokv_cli, turbokv_server, "lookup", "--namespace", ns_id, "--tokens", tok_path)
    assert lk["matched_blocks"] == 0
    run(turbokv_cli, turbokv_server, "put", "--namespace", ns_id, "--kv", kv_path,
        "--tokens", tok_path)
    dropped = run(turbokv_cli, turbokv_server, "ns", "drop", "--namespace", ns_id)
    assert dropped["deleted_blocks"] == 4
    p = run(turbokv_cli, turbokv_server, "lookup", "--namespace", ns_id, "--tokens", tok_path,
            check=False)
    assert p.returncode == 1 and "NOT_FOUND" in p.stderr  # the namespace is gone


def test_cli_stats_and_human_output(turbokv_cli, turbokv_server):
    kv_path, _ = _fixture("stories260k")
    ns = _register(turbokv_cli, turbokv_server, kv_path)
    s = run(turbokv_cli, turbokv_server, "stats")
    assert any(n["namespace_id"] == ns["namespace_id"] for n in s["namespaces"])
    p = subprocess.run([turbokv_cli, "--server", turbokv_server.address, "stats"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "codec_backend:" in p.stdout


def test_cli_stats_and_ns_list_show_the_ttl(turbokv_cli, turbokv_server):
    kv_path, tok_path = _fixture("stories260k")
    L, _, _, H, D = np.load(kv_path).shape
    ttl = run(turbokv_cli, turbokv_server, "ns", "register", "--model", "ttl-test",
              "--num-layers", str(L), "--num-kv-heads", str(H), "--head-dim", str(D),
              "--block-tokens", "16", "--dtype", "fp16", "--preset", "raw", "--ttl-seconds",
              "3600")
    forever = _register(turbokv_cli, turbokv_server, kv_path)
    run(turbokv_cli, turbokv_server, "put", "--namespace", ttl["namespace_id"], "--kv", kv_path,
        "--tokens", tok_path)
    # --json: the same objects as before, each with ttl_seconds (0 = never).
    s = run(turbokv_cli, turbokv_server, "stats")
    by_id = {n["namespace_id"]: n for n in s["namespaces"]}
    assert by_id[ttl["namespace_id"]]["ttl_seconds"] == 3600
    assert by_id[forever["namespace_id"]]["ttl_seconds"] == 0
    assert by_id[ttl["namespace_id"]]["blocks"] == 4
    assert set(by_id[ttl["namespace_id"]]) == {
        "namespace_id", "model", "dtype", "num_layers", "num_kv_heads", "head_dim",
        "block_tokens", "ttl_seconds", "blocks", "stored_bytes", "logical_bytes"}
    listed = run(turbokv_cli, turbokv_server, "ns", "list")
    assert {n["namespace_id"]: n["ttl_seconds"] for n in listed["namespaces"]} == {
        ttl["namespace_id"]: 3600, forever["namespace_id"]: 0}
    # For people: one table row per namespace, the TTL in its own column.
    raw_bytes = 4 * ttl["raw_block_bytes"]
    assert by_id[ttl["namespace_id"]]["logical_bytes"] == raw_bytes
    stored = by_id[ttl["namespace_id"]]["stored_bytes"]  # raw blocks plus their trailers
    assert raw_bytes < stored < raw_bytes * 1.02
    for args in (["stats"], ["ns", "list"]):
        p = subprocess.run([turbokv_cli, "--server", turbokv_server.address, *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        header = next(l for l in lines if l.startswith("NAMESPACE"))
        assert header.split() == ["NAMESPACE", "MODEL", "DTYPE", "BLOCK", "SHAPE", "TP", "TTL",
                                  "BLOCKS", "STORED", "LOGICAL", "CODEC"], header
        rows = {l.split()[0]: l for l in lines[lines.index(header) + 1:]}
        assert set(rows) == {ttl["namespace_id"], forever["namespace_id"]}, p.stdout
        ttl_col = header.index("TTL")
        assert rows[ttl["namespace_id"]][ttl_col:].startswith("3600 s ")
        assert rows[forever["namespace_id"]][ttl_col:].startswith("never ")
        assert rows[ttl["namespace_id"]].split()[1:4] == [
            "ttl-test", "fp16", "[%d][2][16][%d][%d]" % (L, H, D)]
        # common/byte_size.h's FormatByteSize: 4 significant digits (C's %.4g), right-aligned.
        assert re.search(r" 4 +%s KiB +%s KiB  raw \(stored verbatim\)" % (
            re.escape("%.4g" % (stored / 1024)), re.escape("%.4g" % (raw_bytes / 1024))),
            rows[ttl["namespace_id"]]), p.stdout
        assert "{" not in p.stdout  # no JSON blob
    p = subprocess.run([turbokv_cli, "--server", turbokv_server.address, "stats"],
                       capture_output=True, text=True, timeout=60)
    assert "namespaces: 2\n" in p.stdout and "codec_backend: " in p.stdout


@pytest.mark.parametrize("text,digits", [("00000000000001", 14), ("0x00ff", 4),
                                         ("00000000000000001", 17)])
def test_cli_refuses_a_namespace_id_of_other_than_16_digits(turbokv_cli, turbokv_server, tmp_path,
                                                            text, digits):
    kv_path, tok_path = _fixture("stories260k")
    # Refused before any RPC (it used to be zero-padded into another namespace's id).
    expected = "expected exactly 16 hex digits, as `turbokv ns register` and `ns list` print it"
    for sub in (["lookup", "--tokens", tok_path], ["put", "--kv", kv_path, "--tokens", tok_path],
                ["get", "--tokens", tok_path, "--out", str(tmp_path / "o.npy")],
                ["delete", "--tokens", tok_path], ["ns", "drop"]):
        p = subprocess.run([turbokv_cli, "--server", turbokv_server.address, *sub, "--namespace",
                            text], capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and p.stdout == "", (sub, p.stdout, p.stderr)
        assert p.stderr.strip() == ('turbokv: error: INVALID_ARGUMENT: namespace id "%s" has %d '
                                    'digits; %s' % (text, digits, expected)), p.stderr
    p = run(turbokv_cli, turbokv_server, "lookup", "--namespace", text, "--tokens", tok_path,
            check=False)
    err = json.loads(p.stderr)["error"]
    assert p.returncode == 1 and err["code"] == "INVALID_ARGUMENT"
    assert err["message"] == 'namespace id "%s" has %d digits; %s' % (text, digits, expected)
    assert not (tmp_path / "o.npy").exists()


def test_cli_errors(turbokv_cli, turbokv_server, tmp_path):
    kv_path, tok_path = _fixture("stories260k")
    # Unknown namespace: NOT_FOUND, exit 1, message on stderr, nothing on stdout.
    p = subprocess.run([turbokv_cli, "--server", turbokv_server.address, "lookup",
                        "--namespace", "00000000000000ff", "--tokens", tok_path],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "NOT_FOUND" in p.stderr and p.stdout == ""
    p = run(turbokv_cli, turbokv_server, "lookup", "--namespace", "00000000000000ff", "--tokens",
            tok_path, check=False)
    assert p.returncode == 1 and json.loads(p.stderr)["error"]["code"] == "NOT_FOUND"
    # KV of the wrong dtype: INVALID_ARGUMENT with the expected dtype named.
    ns = _register(turbokv_cli, turbokv_server, kv_path)
    np.save(tmp_path / "kv32.npy", np.load(kv_path).astype(np.float32))
    p = run(turbokv_cli, turbokv_server, "put", "--namespace", ns["namespace_id"], "--kv",
            str(tmp_path / "kv32.npy"), "--tokens", tok_path, check=False)
    assert p.returncode == 1 and "INVALID_ARGUMENT" in p.stderr and "<f2" in p.stderr
    # Fortran-ordered npy: rejected with a clear message.
    np.save(tmp_path / "kvF.npy", np.asfortranarray(np.load(kv_path)))
    p = run(turbokv_cli, turbokv_server, "put", "--namespace", ns["namespace_id"], "--kv",
            str(tmp_path / "kvF.npy"), "--tokens", tok_path, check=False)
    assert p.returncode == 1 and "Fortran" in p.stderr
    # --out into a missing directory: a local NOT_FOUND naming it (was PERMISSION_DENIED).
    run(turbokv_cli, turbokv_server, "put", "--namespace", ns["namespace_id"], "--kv", kv_path,
        "--tokens", tok_path)
    p = run(turbokv_cli, turbokv_server, "get", "--namespace", ns["namespace_id"], "--tokens",
            tok_path, "--out", str(tmp_path / "missing" / "o.npy"), check=False)
    assert p.returncode == 1 and json.loads(p.stderr)["error"]["code"] == "NOT_FOUND", p.stderr
    assert "directory %s does not exist" % (tmp_path / "missing") in p.stderr
    # Unreachable server: UNAVAILABLE.
    p = subprocess.run([turbokv_cli, "--server", "127.0.0.1:1", "--timeout", "3", "stats"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "UNAVAILABLE" in p.stderr
    # Usage error: exit 2.
    p = subprocess.run([turbokv_cli, "put"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2


@pytest.mark.parametrize("args,message", [
    (["ns", "register", "--model", "m", "--num-layers", "-3", "--num-kv-heads", "1",
      "--head-dim", "64", "--block-tokens", "16"], "--num-layers: Value -3 not in range 1 to 65535"),
    (["ns", "register", "--model", "m", "--num-layers", "3", "--num-kv-heads", "1", "--head-dim",
      "64", "--block-tokens", "16", "--ttl-seconds", "99999999999999"],
     "--ttl-seconds: Value 99999999999999 not in range 0 to 4294967295"),
    (["lookup", "--namespace", "0000000000000001", "--tokens", __file__, "--lease-seconds", "-1"],
     "--lease-seconds: Value -1 not in range 0 to 4294967295"),
    (["--timeout", "0", "stats"], "--timeout: Value 0 not in range 0.001000 to 86400.000000"),
    (["bench", "--pool-blocks", "-5"], "--pool-blocks: Value -5 not in range 1 to 4096"),
    (["bench", "--pool-blocks", "0"], "--pool-blocks: Value 0 not in range 1 to 4096"),
])
def test_cli_number_errors_name_the_range(turbokv_cli, args, message):
    # Parse errors, before any RPC: exit 2 and the allowed range in the message.
    p = subprocess.run([turbokv_cli, "--server", "127.0.0.1:1", *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_cli_help_describes_every_option(turbokv_cli):
    for sub in (["ns", "register"], ["bench"]):
        p = subprocess.run([turbokv_cli, *sub, "--help"], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0
        # CLI11 prints the description after 2+ spaces, or on the next line when the flag
        # and its type are long; an undescribed option is the flag and its type alone.
        lines = p.stdout.splitlines() + [""]
        for i, l in enumerate(lines):
            if not l.startswith("  --") or l.startswith("  --help"):
                continue
            described = (len(re.split(r"\s{2,}", l.strip())) > 1
                         or re.match(r"\s{8,}\S", lines[i + 1]) is not None)
            assert described, "%s: %s has no description" % (" ".join(sub), l)
    p = subprocess.run([turbokv_cli, "ns", "register", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert "k5v4" in p.stdout and "raw" in p.stdout and "0 = never" in p.stdout


def test_cli_bench_short(turbokv_cli, turbokv_server):
    b = run(turbokv_cli, turbokv_server, "bench", "--seconds", "2", "--concurrency", "2",
            "--num-layers", "4", "--num-kv-heads", "2", "--head-dim", "64", "--batch", "4")
    assert b["put"]["blocks"] > 0 and b["get"]["blocks"] == b["put"]["blocks"]
    assert b["get_missing_blocks"] == 0 and b["put_failed_blocks"] == 0
    assert b["put"]["logical_gb_per_s"] > b["put"]["stored_gb_per_s"] > 0
    assert 0 < b["put"]["p50_ms"] <= b["put"]["p90_ms"] <= b["put"]["p99_ms"]
    assert b["dropped_blocks"] == b["put"]["blocks"]
