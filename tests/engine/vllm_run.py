"""Runs one vLLM engine in this process and writes what it did as JSON (used by the engine tests
and by the figures in docs/vllm.md; run it with the engine venv's python).

    python tests/engine/vllm_run.py SPEC.json OUT.json

SPEC: ``model`` (HF directory), ``prompts`` (lists of token ids), ``max_tokens``, ``logprobs``,
``prefix_caching`` (bool), ``kv`` (null = no connector, else ``kv_connector_extra_config`` plus
an optional ``role``), ``kv_events_endpoint`` (optional: vLLM publishes its KV events there,
``KVEventsConfig(publisher="zmq")``; an address without ``*`` is connected to, so a test's SUB
socket can bind it), ``profile`` (optional path: pyinstrument profiles the prompts and writes
its text report there), ``client_get`` (optional: ``{"kv": the connector's extra config,
"tokens": ids, "blocks": n, "before": [prompt indices], "after": [prompt indices]}``: the
Python client's own GetBlocks of the first ``n`` blocks of ``tokens`` (raw preset, the
namespace the connector uses) into one preallocated buffer, timed in this process right before
or right after those prompts, while the engine is idle), ``reset_prefix_cache_before``
(optional prompt indices: vLLM's own prefix cache is emptied, ``LLM.reset_prefix_cache``,
before them, so that a prompt vLLM ran already is recomputed or loaded again). Prompts run one at a time, so each
one's time to first token is its own.

OUT: per prompt ``tokens`` (generated ids), ``logprobs`` (per generated token, {id: logprob} of
the top ``logprobs``), ``num_cached_tokens``, ``ttft_s`` (vLLM's first-token latency, else the
wall time of a 1-token request), ``wall_s``, ``external_hit_tokens`` (this prompt's), ``loads``
(the connector's load timings of this prompt: blocks, bytes, queued_s, fetch_s, wait_s, inject_s,
total_s), ``client_get`` (when asked for around this prompt: ``when``, ``blocks``, ``bytes``,
``seconds``); then ``external_hit_tokens`` (vLLM's ``vllm:external_prefix_cache_hits``, all
prompts), ``turbokv`` (the connector's counters by side) and ``startup_s``.

Environment the caller sets: VLLM_HOST_IP=127.0.0.1 (keep vLLM on loopback), HF_HUB_OFFLINE=1,
VLLM_CPU_KVCACHE_SPACE=1, VLLM_ENABLE_V1_MULTIPROCESSING=0, PYTHONPATH=client/python plus the
stubs folder ($BUILD/python).
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any


def _external_hits(llm: Any) -> int:
    return sum(int(m.value) for m in llm.get_metrics()
               if m.name == "vllm:external_prefix_cache_hits")


def _connectors(llm: Any) -> dict[str, Any]:
    """The scheduler's and the worker's TurboKVConnector of an in-process engine."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group
    out = {}
    core = getattr(llm.llm_engine.engine_core, "engine_core", None)   # InprocClient
    sched = getattr(getattr(core, "scheduler", None), "connector", None)
    if sched is not None:
        out["scheduler"] = sched
    if has_kv_transfer_group():
        out["worker"] = get_kv_transfer_group()
    return out


class _ClientGet:
    """The Python client's GetBlocks of the blocks a prompt's load fetches, in this process."""

    def __init__(self, cfg: dict[str, Any], num_layers: int, num_kv_heads: int, head_dim: int,
                 block_tokens: int):
        import torch

        from turbokv import Client, PrefixHasher
        kv = cfg["kv"]
        self.client = Client(kv["server"])
        ns = self.client.register_namespace(
            kv["model"], num_layers, num_kv_heads, head_dim, block_tokens, dtype="fp32",
            preset="raw", model_revision=kv.get("model_revision", ""), tp_rank=0,
            tp_size=1).namespace_id
        n = int(cfg["blocks"])
        self.ns = ns
        self.hashes = PrefixHasher(ns).block_hashes(list(cfg["tokens"]), block_tokens)[:n]
        self.buf = torch.empty((n, num_layers, 2, block_tokens, num_kv_heads, head_dim))

    def time(self, when: str) -> dict[str, Any]:
        t = time.perf_counter()
        got = self.client.get_blocks(self.ns, self.hashes, out=self.buf)
        seconds = time.perf_counter() - t
        return {"when": when, "blocks": sum(b is not None for b in got),
                "bytes": self.buf.numel() * self.buf.element_size(), "seconds": seconds}


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    t0 = time.monotonic()
    from vllm import LLM, SamplingParams
    from vllm.config import KVEventsConfig, KVTransferConfig
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
    events: KVEventsConfig | None = None
    if spec.get("kv_events_endpoint"):
        events = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                                endpoint=spec["kv_events_endpoint"])
    llm = LLM(model=spec["model"], dtype="float32", enforce_eager=True, seed=0,
              max_model_len=spec.get("max_model_len", 2048), max_num_seqs=4,
              enable_prefix_caching=bool(spec.get("prefix_caching", False)),
              kv_transfer_config=ktc, kv_events_config=events, disable_log_stats=False)
    startup = time.monotonic() - t0
    conns = _connectors(llm) if ktc is not None else {}
    worker = conns.get("worker")
    transfer = getattr(getattr(worker, "worker", None), "transfer", None)
    params = SamplingParams(temperature=0.0, max_tokens=int(spec.get("max_tokens", 16)),
                            logprobs=int(spec.get("logprobs", 5)), ignore_eos=True)
    profiler = None
    if spec.get("profile"):
        from pyinstrument import Profiler
        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
    cg_spec = spec.get("client_get")
    cg = None
    if cg_spec:
        hf = llm.llm_engine.model_config.hf_config
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        cg = _ClientGet(cg_spec, hf.num_hidden_layers, hf.num_key_value_heads, head_dim,
                        int(cg_spec["block_tokens"]))
    results: list[dict[str, Any]] = []
    hits_before = _external_hits(llm)
    for i, ids in enumerate(spec["prompts"]):
        client_get = None
        if i in spec.get("reset_prefix_cache_before", ()) and not llm.reset_prefix_cache():
            raise RuntimeError("vLLM did not reset its prefix cache before prompt %d" % i)
        if cg is not None and i in cg_spec.get("before", ()):
            client_get = cg.time("before")
        t = time.monotonic()
        out = llm.generate([TokensPrompt(prompt_token_ids=list(ids))], params,
                           use_tqdm=False)[0]
        wall = time.monotonic() - t
        comp = out.outputs[0]
        ttft = getattr(out.metrics, "first_token_latency", 0.0) if out.metrics else 0.0
        hits = _external_hits(llm)
        loads = ([dataclasses.asdict(x) for x in transfer.take_timings()]
                 if transfer is not None else [])
        if cg is not None and i in cg_spec.get("after", ()):
            client_get = cg.time("after")
        results.append({
            "tokens": list(comp.token_ids),
            "logprobs": [{str(k): v.logprob for k, v in step.items()}
                         for step in (comp.logprobs or [])],
            "num_cached_tokens": out.num_cached_tokens,
            "ttft_s": ttft,
            "wall_s": wall,
            "external_hit_tokens": hits - hits_before,
            "loads": loads,
            "client_get": client_get,
        })
        hits_before = hits
    if cg is not None:
        cg.client.close()
    if profiler is not None:
        profiler.stop()
        with open(spec["profile"], "w") as f:
            f.write(profiler.output_text(unicode=False, color=False, show_all=False))
    report: dict[str, Any] = {"prompts": results, "startup_s": startup}
    if ktc is not None:
        if transfer is not None and not transfer.wait_idle(timeout=120):
            report["saves_pending"] = True
        if events is not None:
            # Workers report what they stored to the scheduler in an engine step, and vLLM
            # steps only while it has requests: a 1-token request carries the reports of the
            # puts that finished after the last prompt, then the publisher thread sends them.
            llm.generate([TokensPrompt(prompt_token_ids=[1, 2, 3])],
                         SamplingParams(max_tokens=1), use_tqdm=False)
            time.sleep(1.0)
        report["turbokv"] = {side: c.counters.totals() for side, c in conns.items()}
    report["external_hit_tokens"] = _external_hits(llm)
    with open(out_path, "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
