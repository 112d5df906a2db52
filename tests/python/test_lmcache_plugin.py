"""The LMCache plugin (turbokv.integrations.lmcache) with real LMCache 0.5.6 on CPU and the real
turbokv-server.

Every LMCache instance is its own process (tests/python/lmcache_driver.py) in the LMCache venv
(tools/setup_lmcache.sh; $TURBOKV_LMCACHE_PYTHON overrides), with the client wheel installed
into it by pip like a user would (tools/build_wheel.sh): the install must leave the venv's
grpcio, protobuf, numpy and torch as they were. The KV is real: SmolLM2-135M's K/V of a
64-token prompt (tests/fixtures, 30 layers x 3 KV heads x 64), chunks of 16 tokens.

* preset raw: LMCache's store path puts 4 chunks through the plugin; a new LMCache instance
  finds all 64 tokens, 16 of a prompt diverging after the first chunk, retrieves the prompt
  bit-exactly; existence checks are true for the 4 stored keys only.
* preset k4v4-g32: the same, K and V within the codec's MSE bounds, stored bytes ~3.5x fewer.
* server gone: a new instance sees no hit and retrieves nothing, without an error.
* TLS + token: the plugin's tls_ca / tls_cert / tls_key / token_file keys against a server with
  mutual TLS and a token file (openssl-made certificates, tests/python/pki.py): the chunks are
  stored under the token's tenant and come back bit-exactly; a wrong token and a CA that does
  not sign the server's certificate cost misses, store nothing, and say why in the log.

Skipped, saying why, without the LMCache venv or the server binary. ~3 min (LMCache's import
takes ~20 s per process on 2 cores).
"""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import FIXTURES, REPO, ServerProcess, find_server_binary, require_stubs
from pki import Pki, token_digest

pytestmark = pytest.mark.integration

HERE = os.path.dirname(os.path.abspath(__file__))
CHUNK = 16
# g * MSE of the 4-bit Lloyd-Max codebook per unit-vector coordinate at g = 32 (docs/architecture.md
# "The codec"; the same table as test_client_integration.py): a 4-bit section's relative MSE.
THEORY_4BIT_G32 = 0.008774


def _lmcache_python():
    explicit = os.environ.get("TURBOKV_LMCACHE_PYTHON")
    build = os.environ.get("TURBOKV_BUILD_DIR") or os.path.join(REPO, "build")
    py = explicit or os.path.join(build, "lmcache-venv", "bin", "python")
    if not os.access(py, os.X_OK):
        pytest.skip("LMCache venv not found at %s (bash tools/setup_lmcache.sh, or set "
                    "TURBOKV_LMCACHE_PYTHON)" % py)
    return py


def _versions(py):
    p = subprocess.run([py, "-m", "pip", "--disable-pip-version-check", "list",
                        "--format=json"], capture_output=True, text=True, check=True)
    return {d["name"].lower(): d["version"] for d in json.loads(p.stdout)}


@pytest.fixture(scope="module")
def lmcache_py():
    py = _lmcache_python()
    require_stubs()
    build = os.environ.get("TURBOKV_BUILD_DIR") or os.path.join(REPO, "build")
    p = subprocess.run(["bash", "tools/build_wheel.sh"], cwd=REPO, capture_output=True,
                       text=True, env=dict(os.environ, BUILD=build), timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    wheel = p.stdout.strip().splitlines()[-1]
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["uninstall", "-y", "turbokv-client"], capture_output=True)
    before = _versions(py)
    p = subprocess.run(pip + ["install", wheel], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    after = _versions(py)
    moved = {k: (before[k], after.get(k)) for k in before if after.get(k) != before[k]}
    assert not moved, "installing the client moved packages of the LMCache venv: %s" % moved
    assert after["turbokv-client"] == "0.1.0"
    return py


def _kv_paths():
    kv = os.path.join(FIXTURES, "smollm2_kv_64_fp16.npy")
    tok = os.path.join(FIXTURES, "smollm2_tokens_64.npy")
    if not (os.path.exists(kv) and os.path.exists(tok)):
        pytest.skip("fixture %s missing" % kv)
    return kv, tok


def _config(tmp_path, address, preset, extra=None, name=None):
    path = tmp_path / ("lmcache-%s.yaml" % (name or preset))
    path.write_text("\n".join([
        "chunk_size: %d" % CHUNK,
        "local_cpu: true",
        "max_local_cpu_size: 0.5",
        "remote_serde: naive",
        "save_unfull_chunk: false",
        'remote_storage_plugins: ["turbokv"]',
        "extra_config:",
        "  remote_storage_plugin.turbokv.module_path: turbokv.integrations.lmcache",
        "  remote_storage_plugin.turbokv.class_name: TurboKVConnectorAdapter",
        '  remote_storage_plugin.turbokv.server: "%s"' % address,
        '  remote_storage_plugin.turbokv.preset: "%s"' % preset,
        "  remote_storage_plugin.turbokv.timeout_seconds: 5"] +
        ['  remote_storage_plugin.turbokv.%s: "%s"' % kv for kv in sorted((extra or {}).items())] +
        [""]))
    return str(path)


def _drive(py, mode, config, tmp_path, tag):
    kv, tok = _kv_paths()
    out = str(tmp_path / ("%s-%s.json" % (tag, mode)))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TURBOKV_CODEC_LIB")}
    env.update(PYTHONHASHSEED="0", OMP_NUM_THREADS="2")  # LMCache's builtin chunk hash
    p = subprocess.run([py, os.path.join(HERE, "lmcache_driver.py"), mode, config, kv, tok,
                        out], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    with open(out) as f:
        got = json.load(f)
    assert got["connector"] == "TurboKVConnector"
    got["log"] = p.stdout + p.stderr
    return got, (np.load(out + ".npy") if mode == "retrieve" else None)


def _rel_mse(ref, got):
    ref = ref.astype(np.float64)
    return float(((got.astype(np.float64) - ref) ** 2).sum() / (ref ** 2).sum())


def _store_and_retrieve(py, server, tmp_path, preset):
    config = _config(tmp_path, server.address, preset)
    stored, _ = _drive(py, "store", config, tmp_path, preset)
    assert stored["chunks"] == 4
    assert stored["counters"]["puts"] == 4 and stored["counters"]["put_failures"] == 0
    got, kv_back = _drive(py, "retrieve", config, tmp_path, preset)
    assert got["hit_tokens"] == 64 and got["retrieved"] == 64
    assert got["hit_tokens_diverging"] == CHUNK  # only the shared first chunk
    assert got["exists_stored"] == [True] * 4
    assert got["exists_never"] == [False] * 4
    assert got["batched_contains"] == 4  # consecutive stored keys, then the missing ones
    assert got["counters"]["failures"] == 0
    return got, kv_back


def test_raw_preset_round_trips_bit_exactly(lmcache_py, turbokv_server, turbokv_client,
                                            tmp_path):
    _, kv_back = _store_and_retrieve(lmcache_py, turbokv_server, tmp_path, "raw")
    ref = np.load(_kv_paths()[0])
    assert kv_back.dtype == ref.dtype and kv_back.tobytes() == ref.tobytes()
    ns = turbokv_client.stats().namespaces
    assert len(ns) == 1 and ns[0].blocks == 4
    d = ns[0].descriptor
    assert (d["model"], d["num_layers"], d["num_kv_heads"], d["head_dim"], d["block_tokens"],
            d["dtype"], d["tp_size"]) == ("SmolLM2-135M-fixture", 30, 3, 64, CHUNK, "fp16", 1)


def test_compressing_preset_within_codec_tolerance(lmcache_py, turbokv_server,
                                                   turbokv_client, tmp_path):
    got, kv_back = _store_and_retrieve(lmcache_py, turbokv_server, tmp_path, "k4v4-g32")
    ref = np.load(_kv_paths()[0])
    for section, name in ((0, "K"), (1, "V")):
        rel = _rel_mse(ref[:, section], kv_back[:, section])
        assert 0.6 * THEORY_4BIT_G32 < rel < 1.12 * THEORY_4BIT_G32, (name, rel)
    ns = turbokv_client.stats().namespaces[0]
    ratio = ns.logical_bytes / ns.stored_bytes
    assert 3.0 < ratio < 4.0, ratio  # 4-bit codes + per-group norms vs fp16
    print("LMCache k4v4-g32: %d chunks, %.2fx fewer bytes than fp16 (%d vs %d), retrieve of "
          "64 tokens %.3f s" % (ns.blocks, ratio, ns.stored_bytes, ns.logical_bytes,
                                got["retrieve_seconds"]))

    # The server goes away: a new LMCache instance gets misses, not errors.
    turbokv_server.stop()
    down, kv_down = _drive(lmcache_py, "retrieve", _config(tmp_path, turbokv_server.address,
                                                             "k4v4-g32"), tmp_path, "down")
    assert down["hit_tokens"] == 0 and down["retrieved"] == 0
    assert down["exists_stored"] == [False] * 4 and down["batched_contains"] == 0
    assert down["counters"]["failures"] > 0 and down["counters"]["hits"] == 0
    assert not kv_down.any()  # nothing was written into the engine's KV


def test_unreachable_server_from_the_start_costs_misses(lmcache_py, tmp_path):
    config = _config(tmp_path, "127.0.0.1:1", "k4v4-g32")
    stored, _ = _drive(lmcache_py, "store", config, tmp_path, "unreachable")
    assert stored["counters"]["puts"] == 0 and stored["counters"]["put_failures"] == 4
    got, kv_back = _drive(lmcache_py, "retrieve", config, tmp_path, "unreachable")
    assert got["hit_tokens"] == 0 and got["retrieved"] == 0 and not kv_back.any()


TOKEN = "lmcache-tenant-token-0123456789"


def test_tls_and_token(lmcache_py, tmp_path):
    """LMCache through the plugin to a server with mutual TLS and bearer tokens."""
    from turbokv import Client, Security
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    pki = Pki(str(tmp_path / "pki"))
    cert, key = pki.client("lmcache-worker")
    tokens = tmp_path / "tokens"
    tokens.write_text("token %s tenant-lmc\ntoken %s ops admin\n"
                      % (token_digest(TOKEN), token_digest(TOKEN + "-ops")))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    wrong_token = tmp_path / "wrong-token"
    wrong_token.write_text("not-" + TOKEN + "\n")
    server = ServerProcess(binary, str(tmp_path / "data"), str(tmp_path / "server.log"),
                           extra_args=["--tls-cert", pki.server_cert, "--tls-key",
                                       pki.server_key, "--tls-client-ca", pki.ca,
                                       "--token-file", str(tokens)]).start()
    tls = dict(tls_ca=pki.ca, tls_cert=cert, tls_key=key)
    try:
        good = _config(tmp_path, server.address, "raw", dict(tls, token_file=str(token_file)),
                       name="tls-good")
        stored, _ = _drive(lmcache_py, "store", good, tmp_path, "tls-good")
        assert stored["counters"]["puts"] == 4 and stored["counters"]["put_failures"] == 0
        got, kv_back = _drive(lmcache_py, "retrieve", good, tmp_path, "tls-good")
        assert got["hit_tokens"] == 64 and got["retrieved"] == 64
        assert got["exists_stored"] == [True] * 4 and got["counters"]["failures"] == 0
        ref = np.load(_kv_paths()[0])
        assert kv_back.tobytes() == ref.tobytes()
        sec = Security(ca_file=pki.ca, cert_file=cert, key_file=key, token=TOKEN + "-ops")
        with Client(server.address, timeout=30.0, security=sec) as ops:
            ns = ops.stats().namespaces
        assert [(n.tenant, n.blocks) for n in ns] == [("tenant-lmc", 4)]

        # Refused: a token the server does not know (the TLS is fine), and a CA that did not
        # sign the server's certificate (no connection). Misses, nothing stored, the reason in
        # the log.
        for name, extra, want in (
                ("tls-wrong-token", dict(tls, token_file=str(wrong_token)),
                 "the bearer token is not valid"),
                ("tls-wrong-ca", dict(tls, tls_ca=pki.rogue_ca, token_file=str(token_file)),
                 "UNAVAILABLE")):
            config = _config(tmp_path, server.address, "raw", extra, name=name)
            stored, _ = _drive(lmcache_py, "store", config, tmp_path, name)
            assert stored["counters"]["puts"] == 0, name
            assert stored["counters"]["put_failures"] == 4, name
            assert "turbokv unreachable or failing" in stored["log"], stored["log"][-3000:]
            assert want in stored["log"], (name, stored["log"][-3000:])
            assert TOKEN not in stored["log"]
            got, kv_out = _drive(lmcache_py, "retrieve", config, tmp_path, name)
            assert got["hit_tokens"] == 0 and got["retrieved"] == 0, name
            assert got["exists_stored"] == [False] * 4 and not kv_out.any(), name
        with Client(server.address, timeout=30.0, security=sec) as ops:
            assert [(n.tenant, n.blocks) for n in ops.stats().namespaces] == [("tenant-lmc", 4)]
        assert "audit: refused" in server.log() and "invalid_token" in server.log()
    finally:
        server.stop()
