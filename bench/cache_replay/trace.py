"""Mooncake-format request traces: reading, writing and counting.

One request per line, a JSON object:

* ``timestamp``: arrival time in milliseconds from the start of the trace (int, non-decreasing
  in file order; the replay keeps file order).
* ``input_length``: prompt tokens (int).
* ``output_length``: generated tokens (int).
* ``hash_ids``: the request's prefix chain, one id per 512-token block of the prompt (list of
  non-negative ints). Equal ids mean equal prefix blocks: id ``k`` at position ``p`` of two
  chains implies their first ``p + 1`` blocks are the same.

Extra keys on a line are kept in :attr:`Request.extra` and written back out, so a generator
can tag its requests (tenant, conversation) without breaking other readers.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

BLOCK_TOKENS = 512  # tokens per hash id in the Mooncake format


@dataclasses.dataclass(frozen=True)
class Request:
    """One request of a trace (fields as in the module docstring)."""
    timestamp: int
    input_length: int
    output_length: int
    hash_ids: list[int]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        d: dict[str, Any] = dict(self.extra)
        d.update(timestamp=self.timestamp, input_length=self.input_length,
                 output_length=self.output_length, hash_ids=self.hash_ids)
        return json.dumps(d, separators=(", ", ": "))


def read_trace(path: str) -> list[Request]:
    """Reads a JSONL trace. Raises ValueError naming the line on a malformed request (missing
    key, a negative or non-integer id, a chain that repeats an id)."""
    out: list[Request] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
                ids = [int(x) for x in d.pop("hash_ids")]
                req = Request(int(d.pop("timestamp")), int(d.pop("input_length")),
                              int(d.pop("output_length")), ids, d)
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError("%s:%d: not a Mooncake request (%s)" % (path, n, e)) from None
            if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
                raise ValueError("%s:%d: hash_ids must be distinct non-negative ints" % (path, n))
            out.append(req)
    return out


def write_trace(path: str, requests: Iterable[Request]) -> None:
    """Writes requests as JSONL (creating the parent folder)."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in requests:
            f.write(r.to_json())
            f.write("\n")


def chains(requests: Sequence[Request]) -> list[list[int]]:
    """The prefix chains (hash_ids) of the requests, in order."""
    return [r.hash_ids for r in requests]


def summary(requests: Sequence[Request]) -> dict[str, Any]:
    """Counts of a trace: requests, distinct blocks, block references, the share of blocks
    referenced once, the duration (s) and the mean chain length (blocks)."""
    counts: dict[int, int] = {}
    for r in requests:
        for b in r.hash_ids:
            counts[b] = counts.get(b, 0) + 1
    refs = sum(counts.values())
    once = sum(1 for c in counts.values() if c == 1)
    dur = (requests[-1].timestamp - requests[0].timestamp) / 1000.0 if requests else 0.0
    return dict(requests=len(requests), distinct_blocks=len(counts), block_refs=refs,
                blocks_referenced_once=round(once / len(counts), 4) if counts else 0.0,
                duration_s=round(dur, 1),
                mean_chain_blocks=round(refs / len(requests), 2) if requests else 0.0)


def prefix_violations(requests: Sequence[Request], limit: int = 10) -> list[str]:
    """Checks the format's rule that an id names its block and everything before it: every
    occurrence of an id must have the same position and the same parent id. Returns up to
    ``limit`` descriptions of ids that break it (empty: the trace is consistent)."""
    seen: dict[int, tuple] = {}
    bad: list[str] = []
    for n, r in enumerate(requests):
        parent = -1
        for p, b in enumerate(r.hash_ids):
            where = (p, parent)
            first = seen.setdefault(b, where)
            if first != where and len(bad) < limit:
                bad.append("request %d: id %d at position %d after %d; first seen at %d after %d"
                           % (n, b, p, parent, first[0], first[1]))
            parent = b
    return bad
