"""Paired comparison of two rows of one protocol checkpoint (quality_parts/*.json).

Prints each row's Δppl against the fp16 reference and the difference of the two with a 95%
paired bootstrap CI over windows (both rows and the reference resampled together), and the
share of windows where the second row has the lower NLL. Usage:

  python bench/quality/paired.py bench/results/quality_parts/prefix_reuse.json \
      "k4v4-g32" "turbo4 (k4v4-g64)"
"""
from __future__ import annotations

import json
import sys

import numpy as np


def paired(part: dict, a: str, b: str, resamples: int = 4000, seed: int = 0) -> dict:
    A = np.array(part["rows"][a]["nll"])
    B = np.array(part["rows"][b]["nll"])
    k = min(len(A), len(B))
    A, B = A[:k], B[:k]
    ref = np.array(part["ref"][:k])
    cnt = np.array(part["rows"][a]["count"][:k], dtype=float)

    def delta(idx):
        base = np.exp(ref[idx].sum() / cnt[idx].sum())
        return (np.exp(A[idx].sum() / cnt[idx].sum()) / base - 1,
                np.exp(B[idx].sum() / cnt[idx].sum()) / base - 1)

    rng = np.random.default_rng(seed)
    da, db = delta(np.arange(k))
    bs = np.array([delta(rng.integers(0, k, k)) for _ in range(resamples)])
    diff = bs[:, 0] - bs[:, 1]
    return dict(windows=k, a=a, b=b, a_dppl_pct=100 * da, b_dppl_pct=100 * db,
                a_minus_b_pct=100 * (da - db),
                ci95_pct=[100 * float(np.percentile(diff, 2.5)),
                          100 * float(np.percentile(diff, 97.5))],
                share_windows_b_lower_nll=float(np.mean(B < A)))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or len(argv) % 2 == 0:
        print(__doc__)
        return 2
    with open(argv[0]) as f:
        part = json.load(f)
    for i in range(1, len(argv), 2):
        r = paired(part, argv[i], argv[i + 1])
        print("%s vs %s over %d windows: %+.2f%% vs %+.2f%%; difference %+.2f points "
              "[%+.2f, %+.2f]; second lower in %.0f%% of windows"
              % (r["a"], r["b"], r["windows"], r["a_dppl_pct"], r["b_dppl_pct"],
                 r["a_minus_b_pct"], r["ci95_pct"][0], r["ci95_pct"][1],
                 100 * r["share_windows_b_lower_nll"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
