#!/usr/bin/env python3
"""Seeds a quality checkpoint from earlier runs, so that a new run computes only what is new.

The harness is deterministic (numpy forward, fixed windows, fixed codec bytes), so a row's
per-window NLL from one run is the NLL another run would compute for that window. This tool
takes the protocol checkpoints (``quality_parts/<protocol>.json``, with any all_kv helper
parts ``all_kv.A-B.json`` merged) of several runs, checks that they use the same windows
(``starts``) and the same per-window reference NLL (exactly equal floats; else it refuses),
and writes one checkpoint per protocol holding, for each selected row, the run with the most
windows of it. ``run.py --resume`` then computes each selected row only on the windows it
lacks. Usage:

  python bench/quality/merge_parts.py --out bench/results/issue12b/quality_parts \\
      --kl-windows 1 --rows "kivi-4,fp8-e4m3,k5v4" \\
      bench/results/quality_parts bench/results/issue12/quality_parts
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import report  # noqa: E402

ALWAYS = ("raw", "fp32 (no KV rounding)")


def _load(parts_dir: str, protocol: str) -> dict | None:
    path = os.path.join(parts_dir, protocol + ".json")
    part = report._load(path)
    if protocol == "all_kv":
        part = report.merge_helpers(part, path)
    return part


def merge(sources: list[dict], rows: list[str] | None, kl_windows: int | None) -> dict:
    base = max(sources, key=lambda p: len(p["ref"]))
    for p in sources:
        if p["starts"] != base["starts"]:
            raise SystemExit("%s checkpoints use other windows" % p["protocol"])
        k = min(len(p["ref"]), len(base["ref"]))
        if p["ref"][:k] != base["ref"][:k]:
            raise SystemExit("%s checkpoints differ in the reference NLL of their common "
                             "windows: not the same model, text or code" % p["protocol"])
        pl = dict(p["plan"], kl_windows=0)
        if pl != dict(base["plan"], kl_windows=0):
            raise SystemExit("%s checkpoints have other plans: %s vs %s"
                             % (p["protocol"], p["plan"], base["plan"]))
    out = dict(base)
    out["plan"] = dict(base["plan"])
    if kl_windows is not None:
        out["plan"]["kl_windows"] = kl_windows
    out["ref"] = list(base["ref"])
    out["windows_done"] = len(out["ref"])
    if out["protocol"] == "all_kv":
        out["window_indices"] = list(range(out["windows_done"]))
        # Vector statistics: those of the run that has the most windows of them.
        st = max(sources, key=lambda p: p.get("stats_windows", p["windows_done"])
                 if p.get("stats") else -1)
        out["stats"], out["stats_acc"] = st.get("stats", {}), st.get("stats_acc", {})
        out["stats_windows"] = st.get("stats_windows", st["windows_done"])
    merged = {}
    names = []
    for p in sources:
        names += [n for n in p["rows"] if n not in names]
    for n in names:
        if rows is not None and n not in rows and n not in ALWAYS:
            continue
        have = [p for p in sources if n in p["rows"]]
        best = max(have, key=lambda p: min(len(p["rows"][n]["nll"]), len(p["ref"])))
        m = dict(best["rows"][n])
        k = min(len(m["nll"]), len(best["ref"]))
        m["nll"], m["count"] = list(m["nll"][:k]), list(m["count"][:k])
        if m.get("attn_kl_per_layer") and not m.get("kl_windows"):
            m["kl_windows"] = int(best.get("kl_windows_done") or 0)
        m["seeded_from_windows"] = k
        merged[n] = m
    # Report order: by bpv, highest first (raw first), baselines among the presets.
    out["rows"] = dict(sorted(merged.items(), key=lambda kv: -float(kv[1]["bpv"])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="+", help="quality_parts directories of earlier runs")
    ap.add_argument("--out", required=True, help="quality_parts directory to write")
    ap.add_argument("--rows", default="", help="rows to keep (default: every row)")
    ap.add_argument("--kl-windows", type=int, default=None,
                    help="the new run's --kl-windows (part of the plan --resume checks)")
    args = ap.parse_args(argv)
    rows = [r for r in args.rows.split(",") if r] or None
    os.makedirs(args.out, exist_ok=True)
    for protocol in ("prefix_reuse", "all_kv"):
        sources = [p for p in (_load(d, protocol) for d in args.sources) if p]
        if not sources:
            continue
        part = merge(sources, rows, args.kl_windows)
        _write(os.path.join(args.out, protocol + ".json"), part)
        print("%s: %d windows; %s" % (protocol, part["windows_done"], ", ".join(
            "%s %d" % (n, len(m["nll"])) for n, m in part["rows"].items())))
    return 0


def _write(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
