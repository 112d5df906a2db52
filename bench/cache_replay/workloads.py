"""Generated KV-cache workloads in the Mooncake trace format (see trace.py), and their CLI.

    build/venv/bin/python -m bench.cache_replay.workloads --kind chat --seed 1 --out chat.jsonl
    build/venv/bin/python -m bench.cache_replay.workloads --kind all --seed 1 --out-dir /tmp/w
    build/venv/bin/python -m bench.cache_replay.workloads --kind docs --scale 0.25 \
        --param zipf_s=1.2 --out docs.jsonl

Four kinds, each a dataclass of documented parameters (``--param name=value`` overrides one):

* ``sysprompt`` (:class:`SysPromptParams`): tenants with long system prompts (plus one of a few
  per-tenant variants, e.g. tool sets), each request followed by unique user text; tenant
  popularity is Zipf.
* ``chat`` (:class:`ChatParams`): interleaved multi-turn conversations with think time; each
  turn's input is the previous turn's input and output plus the new user message; some
  conversations are abandoned after a turn or two.
* ``agent`` (:class:`AgentParams`): agent loops: a long, growing context (agent type's system
  prompt and tools, the task, then per step a short tool call and the tool's output appended),
  many steps with short gaps.
* ``docs`` (:class:`DocsParams`): a Zipf-popular mix of documents (one or two per request,
  after a shared instruction), each followed by a short question.

Every workload is a pure function of (kind, seed, scale, parameters): the same call writes the
same bytes. Random draws use only ``random.Random.random()`` (whose sequence Python keeps
stable across versions) and transforms written here. ``scale`` multiplies the request count
and the populations (tenants, documents), so the working set grows with it; at scale 1 each
kind has about the public Mooncake trace's 4,000 requests and 70-140 thousand block references.

Block ids follow the format's rule: a block id names its content *and* everything before it.
:class:`Context` keeps that true: a token stream whose complete 512-token blocks get stable
ids, whose last, partial block gets a fresh id on every request (the next request extends it,
so it is a different block), and which can be forked at a prefix (the fork shares the parent's
complete blocks of that prefix and nothing after).
"""
from __future__ import annotations

import argparse
import bisect
import dataclasses
import heapq
import math
import os
import random
import sys
from collections.abc import Callable, Sequence

from .trace import BLOCK_TOKENS, Request, summary, write_trace

KINDS = ("sysprompt", "chat", "agent", "docs")
BASE_REQUESTS = 4000  # requests at scale 1 (the public trace has 3,993)


# -- random draws (stable across Python versions: built on Random.random() only) ------------
class Draw:
    """Seeded draws. ``lognormal(median, sigma, lo, hi)`` clips to [lo, hi]; ``zipf`` samples
    a rank in [0, n) with P(k) proportional to 1 / (k + 1)^s."""

    def __init__(self, seed: int):
        self._r = random.Random(seed)
        self._zipf_cdf: dict[tuple[int, float], list[float]] = {}

    def uniform(self, lo: float = 0.0, hi: float = 1.0) -> float:
        return lo + (hi - lo) * self._r.random()

    def integer(self, lo: int, hi: int) -> int:
        """Uniform in [lo, hi] inclusive."""
        return min(hi, lo + int(self._r.random() * (hi - lo + 1)))

    def chance(self, p: float) -> bool:
        return self._r.random() < p

    def exponential(self, rate: float) -> float:
        return -math.log(1.0 - self._r.random()) / rate

    def normal(self) -> float:
        u1 = 1.0 - self._r.random()  # (0, 1]
        u2 = self._r.random()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def lognormal(self, median: float, sigma: float, lo: float, hi: float) -> float:
        return min(hi, max(lo, median * math.exp(sigma * self.normal())))

    def tokens(self, median: float, sigma: float, lo: int, hi: int) -> int:
        return int(round(self.lognormal(median, sigma, lo, hi)))

    def zipf(self, n: int, s: float) -> int:
        key = (n, s)
        cdf = self._zipf_cdf.get(key)
        if cdf is None:
            acc, cdf = 0.0, []
            for k in range(n):
                acc += 1.0 / (k + 1) ** s
                cdf.append(acc)
            cdf = [c / acc for c in cdf]
            self._zipf_cdf[key] = cdf
        return min(n - 1, bisect.bisect_left(cdf, self._r.random()))

    def shuffled(self, n: int) -> list[int]:
        """A permutation of range(n) (Fisher-Yates on random())."""
        p = list(range(n))
        for i in range(n - 1, 0, -1):
            j = int(self._r.random() * (i + 1))
            p[i], p[j] = p[j], p[i]
        return p


# -- prefix-consistent block ids --------------------------------------------------------------
class Ids:
    """Allocates block ids 0, 1, 2, ... in order of first use."""

    def __init__(self) -> None:
        self.next = 0

    def new(self) -> int:
        self.next += 1
        return self.next - 1


class Context:
    """A token stream with prefix-consistent block ids (see the module docstring).

    ``tokens``: its length. ``fork(ids, at)``: a new context holding this one's first ``at``
    tokens (at <= tokens). ``chain()``: the block ids of the whole stream now
    (ceil(tokens / 512) ids).
    """

    def __init__(self, ids: Ids, tokens: int = 0, full: list[int] | None = None):
        self._ids = ids
        self.tokens = tokens
        self._full: list[int] = full or []

    def _complete(self, n: int) -> list[int]:
        while len(self._full) < n:
            self._full.append(self._ids.new())
        return self._full[:n]

    def append(self, tokens: int) -> Context:
        if tokens < 0:
            raise ValueError("tokens must be >= 0")
        self.tokens += tokens
        return self

    def fork(self, at: int | None = None) -> Context:
        at = self.tokens if at is None else at
        if not 0 <= at <= self.tokens:
            raise ValueError("fork at %d outside [0, %d]" % (at, self.tokens))
        return Context(self._ids, at, self._complete(at // BLOCK_TOKENS))

    def chain(self) -> list[int]:
        full = self._complete(self.tokens // BLOCK_TOKENS)
        if self.tokens % BLOCK_TOKENS:
            return full + [self._ids.new()]
        return full


@dataclasses.dataclass
class _Thread:
    """One conversation or agent session in progress: its context, the number of its next
    turn or step, its id, and when it stops (last turn or step; 0 = no planned stop)."""
    ctx: Context
    turn: int
    id: int
    stop_after: int


def _request(t_s: float, ctx: Context, output: int, **extra) -> Request:
    return Request(int(round(t_s * 1000)), ctx.tokens, output, ctx.chain(), extra)


# -- the four kinds ---------------------------------------------------------------------------
@dataclasses.dataclass
class SysPromptParams:
    """Shared system prompts. Token lengths are lognormal (median, sigma) clipped to a range.

    Per tenant: a system prompt (``prompt_*``) then one of ``variants`` suffixes
    (``variant_*``, e.g. a tool set or few-shot examples, uniform choice) shared by that
    tenant's requests; a request picks its tenant by Zipf(``zipf_s``) over ``tenants`` x scale
    (tenant 0 most popular) and adds unique user text (``user_*``). Arrivals: Poisson,
    ``rate_per_s`` requests per second.
    """
    tenants: int = 300
    zipf_s: float = 0.9
    prompt_median: float = 6000
    prompt_sigma: float = 0.7
    prompt_min: int = 1000
    prompt_max: int = 32000
    variants: int = 3
    variant_median: float = 1500
    variant_sigma: float = 0.6
    variant_min: int = 200
    variant_max: int = 8000
    user_median: float = 2500
    user_sigma: float = 0.9
    user_min: int = 20
    user_max: int = 16000
    output_median: float = 200
    output_sigma: float = 0.8
    output_max: int = 2000
    rate_per_s: float = 4.0


def gen_sysprompt(p: SysPromptParams, seed: int, requests: int, scale: float) -> list[Request]:
    d, ids = Draw(seed), Ids()
    n_tenants = max(1, int(round(p.tenants * scale)))
    prompts: dict[int, Context] = {}
    variants: dict[tuple[int, int], Context] = {}
    out: list[Request] = []
    t = 0.0
    for _ in range(requests):
        t += d.exponential(p.rate_per_s)
        tenant = d.zipf(n_tenants, p.zipf_s)
        if tenant not in prompts:
            prompts[tenant] = Context(ids).append(
                d.tokens(p.prompt_median, p.prompt_sigma, p.prompt_min, p.prompt_max))
        v = d.integer(0, p.variants - 1)
        if (tenant, v) not in variants:
            variants[(tenant, v)] = prompts[tenant].fork().append(
                d.tokens(p.variant_median, p.variant_sigma, p.variant_min, p.variant_max))
        ctx = variants[(tenant, v)].fork().append(
            d.tokens(p.user_median, p.user_sigma, p.user_min, p.user_max))
        out.append(_request(t, ctx, d.tokens(p.output_median, p.output_sigma, 1, p.output_max),
                            tenant=tenant))
    return out


@dataclasses.dataclass
class ChatParams:
    """Interleaved multi-turn chats.

    Conversations start as a Poisson process (``conversations_per_s``). A conversation opens
    with one of ``system_prompts`` shared prompts (Zipf(``system_zipf_s``); none with
    probability ``p_no_system``), then turns: turn 1's user message is a pasted document with
    probability ``p_paste`` (``paste_*``), else a short message (``user_*``); each later turn
    appends the previous reply and a new user message, so its chain is the previous turn's
    input+output blocks plus new ones. Think time between a reply and the next turn:
    lognormal(``think_median_s``, ``think_sigma``) clipped to [``think_min_s``,
    ``think_max_s``] seconds, plus the reply's decode time (``decode_s_per_token`` x output
    tokens). After each turn a conversation ends with probability ``p_end``; with probability
    ``p_abandon`` it is abandoned after turn 1 or 2 (the user walks away); it also ends when
    its context would pass ``max_context`` tokens.
    """
    conversations_per_s: float = 0.8
    system_prompts: int = 8
    system_zipf_s: float = 1.0
    p_no_system: float = 0.2
    system_median: float = 1500
    system_sigma: float = 0.6
    p_paste: float = 0.4
    paste_median: float = 8000
    paste_sigma: float = 0.8
    paste_max: int = 24000
    user_median: float = 300
    user_sigma: float = 1.0
    user_max: int = 4000
    output_median: float = 500
    output_sigma: float = 0.7
    output_max: int = 2000
    think_median_s: float = 45.0
    think_sigma: float = 0.9
    think_min_s: float = 5.0
    think_max_s: float = 900.0
    decode_s_per_token: float = 0.02
    p_end: float = 0.12
    p_abandon: float = 0.2
    max_context: int = 32000


def gen_chat(p: ChatParams, seed: int, requests: int, scale: float) -> list[Request]:
    d, ids = Draw(seed), Ids()
    systems: dict[int, Context] = {}
    out: list[Request] = []
    events: list[tuple[float, int, _Thread]] = []  # (time s, sequence, conversation)
    seq = 0
    next_start = d.exponential(p.conversations_per_s)
    n_conv = 0
    while len(out) < requests:
        if not events or next_start <= events[0][0]:
            t = next_start
            next_start += d.exponential(p.conversations_per_s)
            if d.chance(p.p_no_system):
                ctx = Context(ids)
            else:
                k = d.zipf(p.system_prompts, p.system_zipf_s)
                if k not in systems:
                    systems[k] = Context(ids).append(
                        d.tokens(p.system_median, p.system_sigma, 100, 8000))
                ctx = systems[k].fork()
            abandon_after = d.integer(1, 2) if d.chance(p.p_abandon) else 0
            if d.chance(p.p_paste):
                first = d.tokens(p.paste_median, p.paste_sigma, 500, p.paste_max)
            else:
                first = d.tokens(p.user_median, p.user_sigma, 1, p.user_max)
            conv = _Thread(ctx.append(first), 1, n_conv, abandon_after)
            n_conv += 1
        else:
            t, _, conv = heapq.heappop(events)
        ctx = conv.ctx
        output = d.tokens(p.output_median, p.output_sigma, 1, p.output_max)
        out.append(_request(t, ctx, output, conversation=conv.id, turn=conv.turn))
        ended = d.chance(p.p_end) or conv.turn == conv.stop_after
        user = d.tokens(p.user_median, p.user_sigma, 1, p.user_max)
        if ended or ctx.tokens + output + user > p.max_context:
            continue
        ctx.append(output + user)
        conv.turn += 1
        think = d.lognormal(p.think_median_s, p.think_sigma, p.think_min_s, p.think_max_s)
        heapq.heappush(events, (t + output * p.decode_s_per_token + think, seq, conv))
        seq += 1
    return out


@dataclasses.dataclass
class AgentParams:
    """Agent loops.

    Sessions start as a Poisson process (``sessions_per_s``). A session's context opens with
    its agent type's system prompt and tool definitions (one of ``agent_types``, Zipf
    (``type_zipf_s``); ``system_*`` tokens) and the task (``task_*``); then each step is one
    request over the whole context, whose reply is a short tool call (``call_*``) after which
    the tool's output (``tool_*``) is appended. Gap to the next step: the call's decode time
    (``decode_s_per_token`` per token) plus the tool's run time (lognormal(``tool_median_s``,
    ``tool_sigma``) clipped to [``tool_min_s``, ``tool_max_s``]). A session runs
    uniform[``steps_min``, ``steps_max``] steps or until its context would pass
    ``max_context`` tokens.
    """
    sessions_per_s: float = 0.5
    agent_types: int = 6
    type_zipf_s: float = 1.0
    system_median: float = 5000
    system_sigma: float = 0.4
    system_min: int = 2000
    system_max: int = 12000
    task_median: float = 600
    task_sigma: float = 0.8
    task_max: int = 8000
    call_median: float = 120
    call_sigma: float = 0.6
    call_max: int = 1000
    tool_median: float = 600
    tool_sigma: float = 1.1
    tool_max: int = 8000
    tool_median_s: float = 2.0
    tool_sigma_s: float = 0.8
    tool_min_s: float = 0.2
    tool_max_s: float = 30.0
    decode_s_per_token: float = 0.02
    steps_min: int = 5
    steps_max: int = 40
    max_context: int = 40000


def gen_agent(p: AgentParams, seed: int, requests: int, scale: float) -> list[Request]:
    d, ids = Draw(seed), Ids()
    types: dict[int, Context] = {}
    out: list[Request] = []
    events: list[tuple[float, int, _Thread]] = []  # (time s, sequence, session)
    seq = 0
    next_start = d.exponential(p.sessions_per_s)
    n_sess = 0
    while len(out) < requests:
        if not events or next_start <= events[0][0]:
            t = next_start
            next_start += d.exponential(p.sessions_per_s)
            k = d.zipf(p.agent_types, p.type_zipf_s)
            if k not in types:
                types[k] = Context(ids).append(
                    d.tokens(p.system_median, p.system_sigma, p.system_min, p.system_max))
            ctx = types[k].fork().append(d.tokens(p.task_median, p.task_sigma, 20, p.task_max))
            sess = _Thread(ctx, 1, n_sess, d.integer(p.steps_min, p.steps_max))
            n_sess += 1
        else:
            t, _, sess = heapq.heappop(events)
        ctx = sess.ctx
        call = d.tokens(p.call_median, p.call_sigma, 5, p.call_max)
        out.append(_request(t, ctx, call, session=sess.id, step=sess.turn))
        tool = d.tokens(p.tool_median, p.tool_sigma, 10, p.tool_max)
        if sess.turn >= sess.stop_after or ctx.tokens + call + tool > p.max_context:
            continue
        ctx.append(call + tool)
        sess.turn += 1
        gap = call * p.decode_s_per_token + d.lognormal(p.tool_median_s, p.tool_sigma_s,
                                                        p.tool_min_s, p.tool_max_s)
        heapq.heappush(events, (t + gap, seq, sess))
        seq += 1
    return out


@dataclasses.dataclass
class DocsParams:
    """A Zipf mix of documents.

    ``documents`` x scale documents of lognormal(``doc_median``, ``doc_sigma``) tokens clipped
    to [``doc_min``, ``doc_max``]; each request reads one document (two with probability
    ``p_two_docs``, in the order drawn) picked by Zipf(``zipf_s``) over a random permutation of
    the documents, after a shared instruction of ``instruction_tokens`` tokens, and asks a
    short question (``question_*``). Arrivals: Poisson, ``rate_per_s`` per second.
    """
    documents: int = 3000
    zipf_s: float = 0.9
    doc_median: float = 9000
    doc_sigma: float = 0.6
    doc_min: int = 600
    doc_max: int = 32000
    p_two_docs: float = 0.2
    instruction_tokens: int = 700
    question_median: float = 60
    question_sigma: float = 0.8
    question_max: int = 600
    output_median: float = 150
    output_sigma: float = 0.7
    output_max: int = 1500
    rate_per_s: float = 4.0


def gen_docs(p: DocsParams, seed: int, requests: int, scale: float) -> list[Request]:
    d, ids = Draw(seed), Ids()
    n_docs = max(1, int(round(p.documents * scale)))
    perm = d.shuffled(n_docs)
    lengths: dict[int, int] = {}
    instruction = Context(ids).append(p.instruction_tokens)
    # A context per distinct document sequence: (doc,) or (doc1, doc2).
    contexts: dict[tuple[int, ...], Context] = {(): instruction}
    out: list[Request] = []
    t = 0.0
    for _ in range(requests):
        t += d.exponential(p.rate_per_s)
        docs = [perm[d.zipf(n_docs, p.zipf_s)]]
        if d.chance(p.p_two_docs):
            other = perm[d.zipf(n_docs, p.zipf_s)]
            if other != docs[0]:
                docs.append(other)
        for i in range(1, len(docs) + 1):
            key = tuple(docs[:i])
            if key not in contexts:
                doc = docs[i - 1]
                if doc not in lengths:
                    lengths[doc] = d.tokens(p.doc_median, p.doc_sigma, p.doc_min, p.doc_max)
                contexts[key] = contexts[key[:-1]].fork().append(lengths[doc])
        ctx = contexts[tuple(docs)].fork().append(
            d.tokens(p.question_median, p.question_sigma, 3, p.question_max))
        out.append(_request(t, ctx, d.tokens(p.output_median, p.output_sigma, 1, p.output_max),
                            docs=docs))
    return out


GENERATORS: dict[str, tuple[type, Callable[..., list[Request]]]] = {
    "sysprompt": (SysPromptParams, gen_sysprompt),
    "chat": (ChatParams, gen_chat),
    "agent": (AgentParams, gen_agent),
    "docs": (DocsParams, gen_docs),
}


def parse_params(kind: str, overrides: Sequence[str]):
    """The kind's parameter dataclass with ``name=value`` overrides applied (value parsed as
    the field's type). Raises ValueError on an unknown name or a bad value."""
    cls = GENERATORS[kind][0]
    params = cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or name not in fields:
            raise ValueError("%s has no parameter %r; known: %s"
                             % (kind, name, ", ".join(sorted(fields))))
        typ = type(getattr(params, name))
        setattr(params, name, typ(float(value)) if typ is int else typ(value))
    return params


def generate(kind: str, seed: int = 1, scale: float = 1.0, params=None,
             requests: int | None = None) -> list[Request]:
    """The requests of one workload (deterministic in its arguments).

    requests: how many (default BASE_REQUESTS x scale). params: the kind's parameter
    dataclass (default: its defaults). Raises ValueError for an unknown kind or scale <= 0.
    """
    if kind not in GENERATORS:
        raise ValueError("unknown workload %r; known: %s" % (kind, ", ".join(KINDS)))
    if scale <= 0:
        raise ValueError("scale must be > 0")
    cls, fn = GENERATORS[kind]
    n = requests if requests is not None else max(1, int(round(BASE_REQUESTS * scale)))
    return fn(params if params is not None else cls(), seed, n, scale)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.cache_replay.workloads",
        description="Writes a generated KV-cache workload as a Mooncake-format JSONL trace "
                    "and prints its counts.")
    ap.add_argument("--kind", required=True, choices=KINDS + ("all",))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies requests and populations (default 1: ~4,000 requests)")
    ap.add_argument("--requests", type=int, default=None,
                    help="request count (default 4000 x scale)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override one generator parameter (repeatable; not with --kind all)")
    ap.add_argument("--out", help="output JSONL (one kind)")
    ap.add_argument("--out-dir", help="output folder: writes <kind>-s<seed>.jsonl per kind")
    a = ap.parse_args(argv)
    kinds = KINDS if a.kind == "all" else (a.kind,)
    if a.kind == "all" and a.param:
        ap.error("--param needs a single --kind")
    if (a.out is None) == (a.out_dir is None):
        ap.error("give exactly one of --out and --out-dir")
    if a.out and len(kinds) > 1:
        ap.error("--kind all needs --out-dir")
    for kind in kinds:
        try:
            params = parse_params(kind, a.param)
        except ValueError as e:
            ap.error(str(e))
        reqs = generate(kind, a.seed, a.scale, params, a.requests)
        path = a.out or os.path.join(a.out_dir, "%s-s%d.jsonl" % (kind, a.seed))
        write_trace(path, reqs)
        s = summary(reqs)
        print("%s: %s requests, %s distinct blocks, %s block refs, %.0f%% blocks referenced "
              "once, %.0f s -> %s" % (kind, s["requests"], s["distinct_blocks"], s["block_refs"],
                                      100 * s["blocks_referenced_once"], s["duration_s"], path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
