#!/usr/bin/env python3
"""turbokv-demo: prefix reuse with a real model against a running turbokv server.

For every request of a few real conversations and document Q&A sessions (tools/demo/
scenarios.py) the demo does what a serving engine's turbokv connector does:

1. tokenize the prompt and compute its prefix chain (``PrefixHasher``, block_tokens 16);
2. ``Lookup`` how many leading blocks the server holds;
3. ``GetBlocks`` those blocks decoded to RAW fp16 and prefill only the remaining tokens on top
   of them (``LlamaModel.prefill(..., past_kv=...)``);
4. ``PutBlocks`` the request's new full blocks (RAW fp16; the server compresses them with the
   namespace's TurboQuant preset);
5. generate the reply greedily from that KV (conversations feed it into the next turn).

It also recomputes every prompt from scratch and reports, per request and in total: prompt
tokens reused vs computed, prefill FLOPs and time skipped, bytes sent / stored against raw fp16
and the compression ratio, and the largest difference between the next-token logits from the
reused (compressed, then decompressed) KV and from the full recomputation, with whether the
argmax token agrees.

Usage::

    python tools/demo/turbokv_demo.py --server 127.0.0.1:50051 [--model smollm2|stories260k]
        [--preset k5v4] [--json]

Needs the ``turbokv`` Python client (client/python) with its generated stubs, numpy, and for
SmolLM2 the PyPI packages ``gguf`` and ``tokenizers`` (the GGUF is fetched once into
``$TURBOKV_MODEL_CACHE``). Progress goes to stderr; the table (or ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(_REPO, "client", "python"))
sys.path.insert(0, os.path.join(_REPO, "tools"))  # numpy_llm, the numpy models
sys.path.insert(0, _HERE)

import scenarios as sc  # noqa: E402

BLOCK_TOKENS = 16


@dataclasses.dataclass
class RequestReport:
    """One request's measurements (bytes are payload bytes of KV tensors, not gRPC framing)."""

    scenario: str
    turn: int
    prompt_tokens: int
    full_blocks: int
    matched_blocks: int  # Lookup's answer
    reused_tokens: int  # KV positions taken from GetBlocks (<= prompt_tokens - 1)
    computed_tokens: int  # positions prefilled by the model
    flops_full: float  # prefill FLOPs of the whole prompt
    flops_reuse: float  # prefill FLOPs of the remaining tokens on top of the reused KV
    seconds_full: float  # wall time of the full prefill
    seconds_reuse: float  # wall time of the partial prefill
    seconds_rpc: float  # Lookup + GetBlocks + PutBlocks wall time
    fetched_bytes: int  # GetBlocks RAW fp16 payload received
    put_blocks: int
    sent_bytes: int  # PutBlocks RAW fp16 payload sent
    stored_bytes: int  # what the server says it stored for those blocks
    put_failures: int
    max_abs_logit_delta: float  # max |logits(reused KV) - logits(full recompute)| at the next token
    argmax_agrees: bool
    next_token: str
    reply: str  # the greedy continuation, as decoded

    @property
    def flops_skipped(self) -> float:
        return self.flops_full - self.flops_reuse

    @property
    def compression_ratio(self) -> float | None:
        return self.sent_bytes / self.stored_bytes if self.stored_bytes else None


def _is_ok(code) -> bool:
    """Accepts a turbokv.StatusCode, an int or a name for a per-block result code."""
    name = getattr(code, "name", code)
    return name in ("OK", 0) or code == 0


def _continue_greedy(model, logits: np.ndarray, kv: np.ndarray, max_new: int,
                     stop: Sequence[int]) -> list[int]:
    out: list[int] = []
    for _ in range(max_new):
        nxt = int(np.argmax(logits[-1]))
        if nxt in stop:
            break
        out.append(nxt)
        logits, kv = model.prefill([nxt], past_kv=kv, logits="last")
    return out


class Demo:
    """Runs the scenarios through a turbokv client (or anything with its API)."""

    def __init__(self, client, hasher_factory: Callable[[int], object], model, model_key: str,
                 preset: str, block_tokens: int = BLOCK_TOKENS, max_new_tokens: int = 32,
                 log: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
                 cache_salt: str = ""):
        self.client = client
        self.model = model
        self.model_key = model_key
        self.preset = preset
        self.bt = block_tokens
        self.max_new_tokens = max_new_tokens
        self.log = log
        self.info = client.register_namespace(
            model=model.name, model_revision=model.revision, num_layers=model.num_layers,
            num_kv_heads=model.num_kv_heads, head_dim=model.head_dim, block_tokens=block_tokens,
            dtype="fp16", preset=preset, **({"cache_salt": cache_salt} if cache_salt else {}))
        self.ns = self.info.namespace_id
        self.hasher = hasher_factory(self.ns)
        tok = model.tokenizer
        self.add_bos = model_key == "stories260k"
        self.stop = {tok.eos_id} | ({0} if model_key == "smollm2" else set())
        self.reports: list[RequestReport] = []

    # -- one request -------------------------------------------------------------------------
    def request(self, scenario: str, turn: int, prompt: str) -> RequestReport:
        m, bt = self.model, self.bt
        tokens = m.tokenizer.encode(prompt, add_bos=self.add_bos)
        T = len(tokens)
        hashes = self.hasher.block_hashes(tokens, bt)

        t0 = time.perf_counter()
        matched = 0
        if hashes:  # prompts shorter than one block have nothing to look up or store
            matched = int(self.client.lookup(self.ns, hashes, lease_seconds=0).matched_blocks)
        got: list[np.ndarray] = []
        if matched:
            for a in self.client.get_blocks(self.ns, hashes[:matched], dtype="fp16"):
                if a is None:  # evicted between Lookup and GetBlocks: reuse what came back
                    break
                got.append(np.asarray(a))
        t_rpc = time.perf_counter() - t0
        fetched = sum(a.nbytes for a in got)
        past = np.concatenate(got, axis=2) if got else None  # [L][2][16*k][H][D] fp16
        reused = len(got) * bt
        if reused >= T:  # whole prompt cached: still compute the last token for its logits
            reused = T - 1
            past = past[:, :, :reused] if reused else None

        t0 = time.perf_counter()
        logits, kv = m.prefill(tokens[reused:], past_kv=past, logits="last")
        t_reuse = time.perf_counter() - t0
        t0 = time.perf_counter()
        logits_full, _ = m.prefill(tokens, logits="last")
        t_full = time.perf_counter() - t0
        delta = float(np.max(np.abs(logits[-1] - logits_full[-1])))
        agree = int(np.argmax(logits[-1])) == int(np.argmax(logits_full[-1]))

        # Store this request's full blocks that the server did not give us.
        first, n_full = len(got), T // bt
        sent = stored = failures = 0
        if n_full > first:
            L, _, _, H, D = kv.shape
            blocks = kv[:, :, first * bt:n_full * bt].reshape(L, 2, n_full - first, bt, H, D)
            blocks = np.ascontiguousarray(blocks.transpose(2, 0, 1, 3, 4, 5).astype(np.float16))
            t0 = time.perf_counter()
            results = self.client.put_blocks(self.ns, hashes[first:n_full], blocks)
            t_rpc += time.perf_counter() - t0
            sent = blocks.nbytes
            for r in results:
                if _is_ok(r.code):
                    stored += int(r.stored_bytes)
                else:
                    failures += 1

        reply_ids = _continue_greedy(m, logits, kv, self.max_new_tokens, self.stop)
        rep = RequestReport(
            scenario=scenario, turn=turn, prompt_tokens=T, full_blocks=n_full,
            matched_blocks=matched, reused_tokens=reused, computed_tokens=T - reused,
            flops_full=m.prefill_flops(0, T), flops_reuse=m.prefill_flops(reused, T - reused),
            seconds_full=t_full, seconds_reuse=t_reuse, seconds_rpc=t_rpc,
            fetched_bytes=fetched, put_blocks=n_full - first, sent_bytes=sent,
            stored_bytes=stored, put_failures=failures, max_abs_logit_delta=delta,
            argmax_agrees=agree, next_token=m.tokenizer.decode([int(np.argmax(logits[-1]))]),
            reply=m.tokenizer.decode(reply_ids))
        self.reports.append(rep)
        self.log(f"  [{scenario} #{turn}] {T} tokens, reused {reused}, computed {T - reused}; "
                 f"reply: {rep.reply.strip()[:90]!r}")
        return rep

    # -- scenarios -----------------------------------------------------------------------------
    def run(self, only: Sequence[str] | None = None) -> None:
        for s in sc.scenarios_for(self.model_key):
            if only and s.name not in only:
                continue
            self.log(f"scenario {s.name}")
            if isinstance(s, sc.Conversation):
                users: list[str] = []
                replies: list[str] = []
                for i, u in enumerate(s.turns):
                    users.append(u)
                    text = sc.render_conversation_prompt(self.model_key, s, users, replies)
                    rep = self.request(s.name, i + 1, text)
                    # Chat replies become the assistant message; story continuations are
                    # appended verbatim (with their leading space).
                    chat = self.model_key == "smollm2"
                    replies.append(rep.reply.strip() if chat else rep.reply)
            else:
                for i, q in enumerate(s.questions):
                    self.request(s.name, i + 1, sc.render_document_prompt(self.model_key, s, q))

    # -- reporting -----------------------------------------------------------------------------
    def totals(self) -> dict:
        r = self.reports
        sent = sum(x.sent_bytes for x in r)
        stored = sum(x.stored_bytes for x in r)
        ff = sum(x.flops_full for x in r)
        fr = sum(x.flops_reuse for x in r)
        return {
            "requests": len(r),
            "prompt_tokens": sum(x.prompt_tokens for x in r),
            "reused_tokens": sum(x.reused_tokens for x in r),
            "computed_tokens": sum(x.computed_tokens for x in r),
            "flops_full": ff, "flops_reuse": fr, "flops_skipped": ff - fr,
            "flops_skipped_fraction": (ff - fr) / ff if ff else 0.0,
            "seconds_full": sum(x.seconds_full for x in r),
            "seconds_reuse": sum(x.seconds_reuse for x in r),
            "seconds_rpc": sum(x.seconds_rpc for x in r),
            "fetched_bytes": sum(x.fetched_bytes for x in r),
            "put_blocks": sum(x.put_blocks for x in r),
            "sent_bytes": sent, "stored_bytes": stored,
            "compression_ratio": sent / stored if stored else None,
            "put_failures": sum(x.put_failures for x in r),
            "max_abs_logit_delta": max((x.max_abs_logit_delta for x in r), default=0.0),
            "argmax_agree": sum(x.argmax_agrees for x in r),
        }

    def as_json(self, server_stats=None) -> dict:
        reqs = []
        for x in self.reports:
            d = dataclasses.asdict(x)
            d["flops_skipped"] = x.flops_skipped
            d["compression_ratio"] = x.compression_ratio
            reqs.append(d)
        info = self.info
        return {
            "model": {"name": self.model.name, "revision": self.model.revision,
                      "num_layers": self.model.num_layers,
                      "num_kv_heads": self.model.num_kv_heads, "head_dim": self.model.head_dim},
            "namespace": {"namespace_id": info.namespace_id, "preset": self.preset,
                          "block_tokens": self.bt, "dtype": "fp16",
                          "raw_block_bytes": getattr(info, "raw_block_bytes", None),
                          "packed_block_bytes": getattr(info, "packed_block_bytes", None),
                          "bits_per_value": getattr(info, "bits_per_value", None),
                          "created": getattr(info, "created", None)},
            "requests": reqs,
            "totals": self.totals(),
            "server_stats": server_stats,
        }


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024.0
    return str(n)


def _fmt_flops(f: float) -> str:
    return f"{f / 1e9:.2f}G"


def format_table(demo: Demo) -> str:
    cols = [("request", 14, "<"), ("prompt", 6, ">"), ("reused", 6, ">"), ("comp", 5, ">"),
            ("skip%", 6, ">"), ("GFLOP skip", 10, ">"), ("t_full", 7, ">"), ("t_reuse", 7, ">"),
            ("put", 4, ">"), ("sent fp16", 9, ">"), ("stored", 9, ">"), ("ratio", 6, ">"),
            ("max|dlogit|", 11, ">"), ("argmax", 6, ">")]
    head = " ".join(f"{n:{a}{w}}" for n, w, a in cols)
    lines = [head, "-" * len(head)]

    def row(vals):
        return " ".join(f"{str(v):{a}{w}}" for v, (_, w, a) in zip(vals, cols))

    for x in demo.reports:
        ratio = f"{x.compression_ratio:.2f}x" if x.compression_ratio else "-"
        lines.append(row([
            f"{x.scenario[:11]}#{x.turn}", x.prompt_tokens, x.reused_tokens, x.computed_tokens,
            f"{100.0 * x.reused_tokens / x.prompt_tokens:.0f}%", _fmt_flops(x.flops_skipped),
            f"{x.seconds_full:.2f}s", f"{x.seconds_reuse:.2f}s", x.put_blocks,
            _fmt_bytes(x.sent_bytes), _fmt_bytes(x.stored_bytes), ratio,
            f"{x.max_abs_logit_delta:.4f}", "yes" if x.argmax_agrees else "NO"]))
    t = demo.totals()
    lines.append("-" * len(head))
    ratio = f"{t['compression_ratio']:.2f}x" if t["compression_ratio"] else "-"
    lines.append(row([
        "TOTAL", t["prompt_tokens"], t["reused_tokens"], t["computed_tokens"],
        f"{100.0 * t['reused_tokens'] / max(1, t['prompt_tokens']):.0f}%",
        _fmt_flops(t["flops_skipped"]), f"{t['seconds_full']:.2f}s",
        f"{t['seconds_reuse']:.2f}s", t["put_blocks"], _fmt_bytes(t["sent_bytes"]),
        _fmt_bytes(t["stored_bytes"]), ratio, f"{t['max_abs_logit_delta']:.4f}",
        f"{t['argmax_agree']}/{t['requests']}"]))
    info = demo.info
    m = demo.model
    summary = [
        f"model {m.name} ({m.revision}), {m.num_layers} layers x {m.num_kv_heads} KV heads x "
        f"head_dim {m.head_dim}; namespace {info.namespace_id:#018x} preset {demo.preset or '(server default)'}, "
        f"block_tokens {demo.bt}, fp16"
        + (f", {info.bits_per_value:.2f} bpv" if getattr(info, "bits_per_value", None) else ""),
        f"prefill: {t['computed_tokens']} of {t['prompt_tokens']} prompt tokens computed, "
        f"{t['reused_tokens']} reused; {100.0 * t['flops_skipped_fraction']:.1f}% of prefill "
        f"FLOPs skipped ({_fmt_flops(t['flops_skipped'])}); prefill time "
        f"{t['seconds_reuse']:.2f}s with reuse vs {t['seconds_full']:.2f}s recomputing "
        f"(+{t['seconds_rpc']:.2f}s in turbokv RPCs)",
        f"transfer: sent {_fmt_bytes(t['sent_bytes'])} raw fp16 in {t['put_blocks']} blocks, "
        f"server stored {_fmt_bytes(t['stored_bytes'])} ({ratio}); fetched "
        f"{_fmt_bytes(t['fetched_bytes'])} fp16"
        + (f"; {t['put_failures']} put failures" if t["put_failures"] else ""),
        f"quality: next-token logits from reused KV vs full recompute: max |delta| "
        f"{t['max_abs_logit_delta']:.4f}, argmax agrees in {t['argmax_agree']}/"
        f"{t['requests']} requests",
    ]
    return "\n".join(lines + [""] + summary)


def format_server_stats(stats: dict | None, namespace_id: int) -> str:
    """One line from ``Client.stats()`` (the ServerStats or its dict): the server as a whole
    and the demo's namespace."""
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        stats = dataclasses.asdict(stats)
    if not stats or "error" in stats:
        return f"server stats unavailable: {(stats or {}).get('error', 'no answer')}"

    def ratio(logical, stored):
        return f"{logical / stored:.2f}x" if stored else "-"

    line = (f"server: codec {stats.get('codec_backend')}, {stats.get('blocks')} blocks, "
            f"{_fmt_bytes(stats.get('used_bytes', 0))} used for "
            f"{_fmt_bytes(stats.get('logical_bytes', 0))} logical "
            f"({ratio(stats.get('logical_bytes', 0), stats.get('used_bytes', 0))}), "
            f"{stats.get('evicted_blocks', 0)} evicted, "
            f"{stats.get('checksum_failures', 0)} checksum failures")
    for ns in stats.get("namespaces", []):
        if ns.get("namespace_id") == namespace_id:
            line += (f"; this namespace: {ns['blocks']} blocks, "
                     f"{_fmt_bytes(ns['stored_bytes'])} stored for "
                     f"{_fmt_bytes(ns['logical_bytes'])} logical "
                     f"({ratio(ns['logical_bytes'], ns['stored_bytes'])})")
    return line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="turbokv-demo", description="Prefix reuse with a real model against turbokv.")
    ap.add_argument("--server", required=True, help="HOST:PORT of a turbokv server")
    ap.add_argument("--model", default="smollm2", choices=["smollm2", "stories260k"])
    ap.add_argument("--model-path", help="checkpoint (default: cache / ../shared/data)")
    ap.add_argument("--preset", default="",
                    help="TurboQuant preset of the namespace (default: the server's --default-preset)")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="reply length cap")
    ap.add_argument("--scenario", action="append", help="run only these scenarios")
    ap.add_argument("--timeout", type=float, default=60.0, help="RPC deadline, seconds")
    ap.add_argument("--cache-salt", default="",
                    help="namespace cache salt; a new salt starts from an empty cache")
    ap.add_argument("--json", action="store_true", help="print one JSON object, no table")
    args = ap.parse_args(argv)

    from numpy_llm import load_model
    from turbokv import Client, PrefixHasher, TurboKVError

    t0 = time.perf_counter()
    model = load_model(args.model, path=args.model_path)
    print(f"loaded {model} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    client = Client(args.server, timeout=args.timeout)
    try:
        demo = Demo(client, PrefixHasher, model, args.model, args.preset,
                    max_new_tokens=args.max_new_tokens, cache_salt=args.cache_salt)
        demo.run(args.scenario)
        try:
            stats = json.loads(json.dumps(dataclasses.asdict(client.stats()), default=str))
        except TurboKVError as e:
            stats = {"error": str(e)}
    except TurboKVError as e:
        print(f"turbokv-demo: RPC failed: {e.code.name}: {getattr(e, 'details', e)}",
              file=sys.stderr)
        return 1
    finally:
        close = getattr(client, "close", None)
        if close:
            close()
    if args.json:
        json.dump(demo.as_json(stats), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_table(demo))
        print(format_server_stats(stats, demo.ns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
