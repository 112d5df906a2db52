"""Smoke test of the quality harness (bench/quality/run.py --quick) and the local codec.

The quick mode runs a handful of rows over a few short WikiText-2 windows through a real
turbokv-server and the codec's C ABI (about 45 s on 2 busy cores). Skipped, saying why, when the
SmolLM2 GGUF cannot be obtained (``TURBOKV_NO_DOWNLOAD=1`` uses only a cached file), the
turbokv-server binary or the codec shared library (CMake target ``turbokv_codec_c``) is missing,
or the evaluation text is absent.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import CLIENT_PY, REPO, find_server_binary, require_stubs

WIKITEXT = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "wikitext-2", "test.txt"))


def _codec_or_skip():
    from turbokv import codec
    try:
        codec.load_library()
    except codec.CodecUnavailable as e:
        pytest.skip(str(e))
    return codec


def test_local_codec_matches_presets_and_raw_is_exact():
    codec = _codec_or_skip()
    bpv = {}
    for p in ("raw", "k8v6", "k6v6", "k6v5", "k8v4", "k6v4", "k5v4", "k4v4-g32", "k4v3-g32",
              "k3v3-g32", "k3v2-g32-qjl", "k3v2"):
        bpv[p] = codec.LocalCodec.from_preset(p, 30, 16, 3, 64).bits_per_value
    # docs/architecture.md, "The codec" bpv plus the header and checksum of a 30-layer, 16-token block.
    assert bpv["k4v4-g32"] == pytest.approx(4.5, abs=0.02)
    assert bpv["k3v3-g32"] == pytest.approx(3.5, abs=0.02)
    assert bpv["k3v2-g32-qjl"] == pytest.approx(3.25, abs=0.02)
    # issue 12: 5 / 6 key bits; k5v4's values at g = 64 keep it under KIVI-4's 5.0 bpv
    assert bpv["k5v4"] == pytest.approx((5.5 + 4.25) / 2, abs=0.02)
    assert bpv["k6v4"] == pytest.approx(5.5, abs=0.02)
    assert bpv["k6v5"] == pytest.approx(6.0, abs=0.02)
    assert bpv["k8v6"] == pytest.approx((8.25 + 6.25) / 2, abs=0.02)
    # k6v6 stays under 6.5 bpv (under fp8's 8), k3v2 under KIVI-2's 3.0 (V at g = 64)
    assert bpv["k6v6"] == pytest.approx((6.5 + 6.25) / 2, abs=0.02) and bpv["k6v6"] <= 6.5
    assert bpv["k3v2"] == pytest.approx((3.5 + 2.25) / 2, abs=0.02) and bpv["k3v2"] <= 3.0
    assert bpv["raw"] == pytest.approx(16.0, abs=0.02)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 2, 16, 3, 64)).astype(np.float16)
    raw = codec.LocalCodec.from_preset("raw", 30, 16, 3, 64)
    assert np.array_equal(raw.roundtrip(x, "fp16").view(np.uint16), x.view(np.uint16))
    c = codec.LocalCodec(30, 16, 3, 64, codec.CodecParams(3, 32, False, 3, 32, False,
                                                          norm_correction=False))
    y = c.roundtrip(x)
    g = x.astype(np.float64).reshape(-1, 32)
    rel = np.mean(np.sum((g - y.reshape(-1, 32)) ** 2, 1) / np.sum(g ** 2, 1))
    assert rel == pytest.approx(0.03226, rel=0.05)  # docs/architecture.md: g*MSE at g = 32, b = 3
    with pytest.raises(codec.CodecError) as e:
        codec.LocalCodec(30, 16, 3, 64, codec.CodecParams(3, 48, False, 3, 32, False))
    assert e.value.code == 3 and "48" in e.value.message
    with pytest.raises(ValueError):
        c.encode(x[:, :, :8])


@pytest.mark.integration
def test_quality_quick(tmp_path):
    require_stubs()
    _codec_or_skip()
    if find_server_binary() is None:
        pytest.skip("turbokv-server binary not found: set TURBOKV_SERVER_BIN or "
                    "TURBOKV_BUILD_DIR (looked for <repo>/build*/bin/turbokv-server)")
    if not os.path.exists(WIKITEXT):
        pytest.skip("WikiText-2 test text not found at %s" % WIKITEXT)
    import numpy_llm as models
    try:
        models.ensure_smollm2(download=os.environ.get("TURBOKV_NO_DOWNLOAD") != "1")
    except models.ModelUnavailable as e:
        pytest.skip("SmolLM2 GGUF unavailable: %s" % e)
    out = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=CLIENT_PY, OPENBLAS_NUM_THREADS="2")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "quality", "run.py"), "--quick",
         "--jobs", "1", "--text", WIKITEXT, "--out-dir", str(out), "--bootstrap", "200"],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "quality.json").read_text())
    by = {(r["name"], r["protocol"]): r for r in rows}
    for proto in ("prefix_reuse", "all_kv"):
        raw = by[("raw", proto)]
        assert raw["delta_ppl_pct"] == 0.0 and raw["exact_equal_to_reference"], raw
        assert raw["tokens"] > 100
        for r in rows:
            if r["protocol"] == proto:
                for k in ("name", "bpv", "ppl", "delta_ppl_pct", "ci_low_pct", "ci_high_pct",
                          "tokens"):
                    assert k in r
        # k8v4 is near-lossless; 2-bit keys with QJL clearly are not.
        assert abs(by[("k8v4", proto)]["delta_ppl_pct"]) < 3.0
        assert by[("k3v2-g32-qjl", proto)]["delta_ppl_pct"] > by[("k8v4", proto)][
            "delta_ppl_pct"]
    assert 5 < by[("raw", "all_kv")]["ppl"] < 200  # the numpy model is sane on WikiText-2
    for r in rows:
        if r["protocol"] == "prefix_reuse" and r["kind"] == "codec":
            assert r["server_equals_local_codec"], r["name"]
            assert r["stored_bpv"] == pytest.approx(r["bpv"], abs=1e-4)
    assert by[("kivi-2", "all_kv")]["bpv"] == 3.0 and by[("fp8-e4m3", "all_kv")]["bpv"] == 8.0
    stats = json.loads((out / "quality_stats.json").read_text())
    assert stats["hooked_forward_identical"] is True
    cfg = stats["vector_stats"]["configs"]["g32-b3-nonc"]
    assert 0.7 < cfg["rel_mse_all_over_theory"] < 1.3
    md = (out / "quality.md").read_text()
    assert "Default preset" in md and "| raw |" in md
    assert (out / "quality.png").exists() or "Plot not written" in md
