"""Tables and the hit-ratio-vs-capacity figure of a cache replay run (results JSON as written
by run.py; field definitions in docs/cache.md)."""
from __future__ import annotations

import math
from typing import Any

COLUMNS = [
    # (heading, width, formatter of one run row)
    ("workload", 10, lambda w, r: w),
    ("cap", 4, lambda w, r: "%g%%" % (100 * r["capacity_fraction"])),
    ("N", 3, lambda w, r: str(r.get("nodes") or "-") + ("+%d" % r["joined"]
                                                         if r.get("joined") else "")),
    ("turbokv", 7, lambda w, r: _f(r.get("server", {}).get("hit_ratio"))),
    ("LRU", 6, lambda w, r: _f(r["sim"]["lru"])),
    ("Belady", 6, lambda w, r: _f(r["sim"]["belady"])),
    ("fp16LRU", 7, lambda w, r: _f(r["sim"]["lru_uncompressed"])),
    ("inf", 6, lambda w, r: _f(r["sim"]["infinite"])),
    ("tkv/LRU", 7, lambda w, r: _x(r.get("server", {}).get("hit_ratio"), r["sim"]["lru"])),
    ("live mean/max", 13, lambda w, r: "%s/%s" % (_p(_s(r, "live_over_capacity_mean")),
                                                  _p(_s(r, "live_over_capacity_max")))),
    ("steady", 6, lambda w, r: _p(_s(r, "live_over_capacity_steady_mean"))),
    ("disk", 5, lambda w, r: _p(_s(r, "disk_over_capacity_max"))),
    ("WA", 5, lambda w, r: _f(_s(r, "write_amplification"), 2)),
    ("lk+get ms", 11, lambda w, r: "%s/%s" % (_f(_s(r, "lookup_get_ms_p50"), 1),
                                              _f(_s(r, "lookup_get_ms_p99"), 1))),
    ("blocks mean/max", 15, lambda w, r: "%s/%s" % (_i(_s(r, "blocks_held_mean")),
                                                    _i(_s(r, "blocks_held_max")))),
    ("cap blk", 7, lambda w, r: str(r["capacity_blocks"])),
    ("wrong", 5, lambda w, r: _i(_s(r, "wrong_blocks"))),
    ("err", 4, lambda w, r: _i(_s(r, "errors"))),
    ("s", 5, lambda w, r: _i(_s(r, "wall_s"))),
    ("before/after", 13, lambda w, r: "%s/%s" % (_f(_s(r, "hit_ratio_before")),
                                                 _f(_s(r, "hit_ratio_after")))
     if _s(r, "split_at") else "-"),
]


def _s(run: dict[str, Any], key: str) -> Any:
    return (run.get("server") or {}).get(key)


def _f(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else "%.*f" % (nd, x)


def _p(x: float | None) -> str:
    return "-" if x is None else "%.0f%%" % (100 * x)


def _i(x: float | None) -> str:
    return "-" if x is None else "%d" % round(x)


def _x(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else "%.2fx" % (a / b)


def header() -> str:
    return "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w, _) in enumerate(COLUMNS))


def row(workload: str, run: dict[str, Any]) -> str:
    return "  ".join(f(workload, run).rjust(w) if i else f(workload, run).ljust(w)
                     for i, (_, w, f) in enumerate(COLUMNS))


def table(results: dict[str, Any]) -> str:
    lines = [header()]
    for name, wl in results["workloads"].items():
        for run in wl["runs"]:
            lines.append(row(name, run))
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    """A Markdown table of every run (the same columns as the console table)."""
    heads = [h for h, _, _ in COLUMNS]
    out = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for name, wl in results["workloads"].items():
        for run in wl["runs"]:
            out.append("| " + " | ".join(f(name, run) for _, _, f in COLUMNS) + " |")
    return "\n".join(out)


def plot(results: dict[str, Any], path: str) -> None:
    """Hit ratio vs capacity, one panel per workload: turbokv (one line per node count), LRU,
    Belady, uncompressed LRU, the infinite bound; then one panel of turbokv's mean live bytes /
    capacity per workload (hidden without server runs). Writes a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["workloads"])
    if not names:
        return
    panels = len(names) + 1  # the last panel: live bytes / capacity of every workload
    cols = min(3, panels)
    nrows = int(math.ceil(panels / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.0 * nrows), squeeze=False)
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    colors = ["tab:red", "tab:orange", "tab:purple", "tab:brown"]
    live_panel = axes.flat[len(names)]
    legend: dict[str, Any] = {}  # label -> handle, one legend for every hit-ratio panel
    for ax, name in zip(axes.flat, names):
        runs: list[dict[str, Any]] = results["workloads"][name]["runs"]
        sims: dict[float, dict[str, Any]] = {}
        for r in runs:
            sims.setdefault(r["capacity_fraction"], r)
        xs = sorted(sims)
        px = [100 * x for x in xs]
        ax.plot(px, [sims[x]["sim"]["belady"] for x in xs], "^-", color="tab:green",
                label="Belady (optimal)")
        ax.plot(px, [sims[x]["sim"]["lru"] for x in xs], "s-", color="tab:blue", label="LRU")
        ax.plot(px, [sims[x]["sim"]["lru_uncompressed"] for x in xs], "v:", color="tab:gray",
                label="LRU, fp16 blocks, same bytes")
        inf = results["workloads"][name]["infinite_hit_ratio"]
        ax.axhline(inf, color="black", lw=0.8, ls="--", label="infinite cache")
        node_counts: list[int] = sorted({int(r["nodes"]) for r in runs if r.get("server")
                                         and r["server"].get("hit_ratio") is not None
                                         and not r.get("joined")})
        for k, n in enumerate(node_counts):
            pts = sorted((r["capacity_fraction"], r["server"]) for r in runs
                         if r.get("server") and r.get("nodes") == n and not r.get("joined")
                         and r["server"].get("hit_ratio") is not None)
            suffix = " %d nodes" % n if n > 1 else ""
            ax.plot([100 * c for c, _ in pts], [s["hit_ratio"] for _, s in pts], "o-",
                    color=colors[k % 4], lw=2, label="turbokv" + suffix)
            lives = [(100 * c, s["live_over_capacity_mean"]) for c, s in pts
                     if s.get("live_over_capacity_mean") is not None]
            if lives:
                live_panel.plot([p for p, _ in lives], [v for _, v in lives], "o-",
                                label=name + suffix)
        ax.set_xscale("log")
        ax.set_xticks(px)
        ax.set_xticklabels(["%g%%" % p for p in px])
        ax.minorticks_off()
        ax.set_ylim(0, max(0.05, inf * 1.1))
        ax.set_xlabel("capacity (share of distinct blocks)")
        ax.set_ylabel("block hit ratio (prefix match)")
        s = results["workloads"][name]["summary"]
        ax.set_title("%s (%d req, %d blocks)" % (name, s["requests"], s["distinct_blocks"]),
                     fontsize=10)
        ax.grid(alpha=0.3)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)
    live_panel.axhline(0.9, color="black", lw=0.8, ls="--", label="90%")
    live_panel.set_ylim(0, 1.05)
    live_panel.set_xscale("log")
    caps = sorted({100 * r["capacity_fraction"] for wl in results["workloads"].values()
                   for r in wl["runs"]})
    live_panel.set_xlim(min(caps) * 0.85, max(caps) * 1.15)
    live_panel.set_xticks(caps)
    live_panel.set_xticklabels(["%g%%" % p for p in caps])
    live_panel.minorticks_off()
    live_panel.set_xlabel("capacity (share of distinct blocks)")
    live_panel.set_ylabel("turbokv live packed bytes / --capacity")
    live_panel.set_title("capacity spent on live blocks (mean over the run)", fontsize=10)
    live_panel.grid(alpha=0.3)
    live_panel.legend(fontsize=7, loc="best")
    meta = results.get("meta", {})
    server = (meta.get("server_source_commit") or meta.get("git_commit") or "?")[:10]
    fig.suptitle("KV-cache replay: block hit ratio vs capacity (turbokv server sources %s, "
                 "preset %s, %s)" % (server, meta.get("preset", "?"),
                                     meta.get("codec_backend", "")), fontsize=11)
    if not live_panel.get_lines()[1:]:  # only the 90% line: no server runs
        live_panel.set_visible(False)
    fig.legend(list(legend.values()), list(legend.keys()), loc="lower center",
               ncol=min(7, len(legend)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05 if nrows > 1 else 0.09, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
