"""Issue 12's study table: per row of a checkpoint, bpv, Δppl [95% CI] over the row's own
windows, and the paired difference against a baseline row on the same windows.

  python bench/quality/study_table.py bench/results/issue12c/quality_parts/all_kv.json \\
      --baseline kivi-4 --rows "k5v4,emu k5-g64 v4.375-g64"
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def delta_ci(part: dict, name: str, k: int, resamples: int = 2000, seed: int = 0):
    A = np.array(part["rows"][name]["nll"][:k])
    ref = np.array(part["ref"][:k])
    cnt = np.array(part["rows"][name]["count"][:k], dtype=float)
    f = lambda i: np.exp(A[i].sum() / cnt[i].sum()) / np.exp(ref[i].sum() / cnt[i].sum()) - 1
    rng = np.random.default_rng(seed)
    bs = [f(rng.integers(0, k, k)) for _ in range(resamples)]
    return 100 * f(np.arange(k)), 100 * np.percentile(bs, 2.5), 100 * np.percentile(bs, 97.5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("part")
    ap.add_argument("--baseline", default="kivi-4")
    ap.add_argument("--rows", default="", help="comma-separated (default: every row)")
    ap.add_argument("--windows", type=int, default=0, help="at most this many (default: the "
                    "row's own)")
    a = ap.parse_args(argv)
    from paired import paired
    with open(a.part) as f:
        part = json.load(f)
    names = a.rows.split(",") if a.rows else list(part["rows"])
    print("| row | bpv | windows | Δppl [95%% CI] | %s on the same windows | row − %s [95%% CI] |"
          % (a.baseline, a.baseline))
    print("| --- | --- | --- | --- | --- | --- |")
    for n in names:
        m = part["rows"][n]
        k = len(m["nll"]) if not a.windows else min(a.windows, len(m["nll"]))
        if k == 0:
            continue
        d, lo, hi = delta_ci(part, n, k)
        bd, _, _ = delta_ci(part, a.baseline, k)
        sub = dict(part, ref=part["ref"][:k], rows={x: dict(part["rows"][x], nll=part["rows"][x]["nll"][:k],
                                                          count=part["rows"][x]["count"][:k])
                                                   for x in (n, a.baseline)})
        p = paired(sub, n, a.baseline)
        print("| %s | %.3f | %d | %+.2f%% [%+.2f, %+.2f] | %+.2f%% | %+.2f [%+.2f, %+.2f] |"
              % (n, m["bpv"], k, d, lo, hi, bd, p["a_minus_b_pct"], p["ci95_pct"][0],
                 p["ci95_pct"][1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
