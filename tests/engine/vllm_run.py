"""Runs one vLLM engine in this process and writes what it did as JSON (used by the engine tests
and by the README figures; run it with the engine venv's python).

    python tests/engine/vllm_run.py SPEC.json OUT.json

SPEC: ``model`` (HF directory), ``prompts`` (lists of token ids), ``max_tokens``, ``logprobs``,
``prefix_caching`` (bool), ``kv`` (null = no connector, else ``kv_connector_extra_config`` plus
an optional ``role``). Prompts run one at a time, so each one's time to first token is its own.

OUT: per prompt ``tokens`` (generated ids), ``logprobs`` (per generated token, {id: logprob} of
the top ``logprobs``), ``num_cached_tokens``, ``ttft_s`` (vLLM's first-token latency, else the
wall time of a 1-token request), ``wall_s``; then ``external_hit_tokens`` (vLLM's
``vllm:external_prefix_cache_hits``), ``turbokv`` (the connector's counters by side) and
``startup_s``.

Environment the caller sets: VLLM_HOST_IP=127.0.0.1 (keep vLLM on loopback), HF_HUB_OFFLINE=1,
VLLM_CPU_KVCACHE_SPACE=1, VLLM_ENABLE_V1_MULTIPROCESSING=0, PYTHONPATH=client/python plus the
stubs folder ($BUILD/python).
"""
from __future__ import annotations

import json
import sys
import time


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    t0 = time.monotonic()
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    kv = spec.get("kv")
    ktc = None
    if kv is not None:
        extra = {k: v for k, v in kv.items() if k != "role"}
        ktc = KVTransferConfig(kv_connector="TurboKVConnector",
                               kv_connector_module_path="turbokv.integrations.vllm",
                               kv_role=kv.get("role", "kv_both"),
                               kv_load_failure_policy="recompute",
                               kv_connector_extra_config=extra)
    llm = LLM(model=spec["model"], dtype="float32", enforce_eager=True, seed=0,
              max_model_len=spec.get("max_model_len", 2048), max_num_seqs=4,
              enable_prefix_caching=bool(spec.get("prefix_caching", False)),
              kv_transfer_config=ktc, disable_log_stats=False)
    startup = time.monotonic() - t0
    params = SamplingParams(temperature=0.0, max_tokens=int(spec.get("max_tokens", 16)),
                            logprobs=int(spec.get("logprobs", 5)), ignore_eos=True)
    results = []
    for ids in spec["prompts"]:
        t = time.monotonic()
        out = llm.generate([TokensPrompt(prompt_token_ids=list(ids))], params,
                           use_tqdm=False)[0]
        wall = time.monotonic() - t
        comp = out.outputs[0]
        ttft = getattr(out.metrics, "first_token_latency", 0.0) if out.metrics else 0.0
        results.append({
            "tokens": list(comp.token_ids),
            "logprobs": [{str(k): v.logprob for k, v in step.items()}
                         for step in (comp.logprobs or [])],
            "num_cached_tokens": out.num_cached_tokens,
            "ttft_s": ttft,
            "wall_s": wall,
        })
    report = {"prompts": results, "startup_s": startup}
    if ktc is not None:
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        group = get_kv_transfer_group()
        worker = getattr(group, "_worker", None)
        if worker is not None and not worker.wait_idle(timeout=120):
            report["saves_pending"] = True
        from turbokv.integrations.vllm import TurboKVConnector
        report["turbokv"] = {side: c.totals()
                             for side, c in TurboKVConnector._counters_by_role.items()}
    hits = 0
    for m in llm.get_metrics():
        if m.name == "vllm:external_prefix_cache_hits":
            hits += int(m.value)
    report["external_hit_tokens"] = hits
    with open(out_path, "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
