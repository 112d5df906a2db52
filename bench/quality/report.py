"""Builds bench/results/quality.{json,md,png} (and quality_stats.json) from the protocol parts
written by run.py. Run it alone with ``python bench/quality/run.py --report-only``."""
from __future__ import annotations

import json
import math
import os
import time

import numpy as np

RAW = "raw"
FP32 = "fp32 (no KV rounding)"


def _load(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def bootstrap_ci(nll: np.ndarray, ref: np.ndarray, count: np.ndarray, n: int,
                 seed: int = 12345):
    """Paired bootstrap over windows of the relative perplexity change (percent)."""
    k = len(nll)
    if k < 2 or n <= 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, k, size=(n, k))
    d = (nll[idx].sum(1) - ref[idx].sum(1)) / count[idx].sum(1)
    pct = np.expm1(d) * 100.0
    return float(np.percentile(pct, 2.5)), float(np.percentile(pct, 97.5))


def rows_of(part: dict, n_boot: int) -> list[dict]:
    proto = part["protocol"]
    k = int(part["windows_done"])
    if k == 0:
        return []
    ref_all = np.asarray(part["ref"][:k], dtype=np.float64)
    plan = part["plan"]
    planned = plan["prefix_windows"] if proto == "prefix_reuse" else plan["all_windows"]
    out = []
    entries = list(part["rows"].items())
    if proto == "prefix_reuse" and part.get("fp32"):
        c = part["rows"][RAW]["count"] if RAW in part["rows"] else None
        entries.append((FP32, dict(name=FP32, family="reference", kind="fp32", bpv=32.0,
                                   nll=part["fp32"], count=c or [plan["cont_tokens"]] * k)))
    for name, m in entries:
        # Rows can have fewer windows than the checkpoint (a row added to a resumed run, or
        # seeded from an earlier one): each row is compared with the reference on its own
        # windows, which are always the first ones.
        kr = min(k, len(m["nll"]))
        if kr == 0:
            continue
        nll = np.asarray(m["nll"][:kr], dtype=np.float64)
        cnt = np.asarray(m["count"][:kr], dtype=np.float64)
        ref = ref_all[:kr]
        tokens = int(cnt.sum())
        ppl = math.exp(nll.sum() / tokens)
        ref_ppl = math.exp(ref.sum() / tokens)
        delta = (math.exp((nll.sum() - ref.sum()) / tokens) - 1.0) * 100.0
        lo, hi = bootstrap_ci(nll, ref, cnt, n_boot)
        if name == RAW and delta == 0.0:
            lo = hi = 0.0
        r = dict(name=name, protocol=proto, family=m.get("family", ""), kind=m.get("kind", ""),
                 bpv=round(float(m["bpv"]), 4), ppl=ppl, ref_ppl=ref_ppl,
                 delta_ppl_pct=delta, ci_low_pct=lo, ci_high_pct=hi, tokens=tokens,
                 windows=kr, partial=kr < planned,
                 exact_equal_to_reference=bool(np.array_equal(nll, ref)))
        for extra in ("note", "codec", "namespace_id", "server_bpv", "packed_block_bytes",
                      "server_equals_local_codec", "attn_kl_per_layer", "k_norm_ratio_per_layer",
                      "v_norm_ratio_per_layer", "kl_windows"):
            if m.get(extra) is not None and m.get(extra) != "":
                r[extra] = m[extra]
        if m.get("stored_values"):
            r["stored_bpv"] = m["stored_bytes"] * 8.0 / m["stored_values"]
        if r.get("attn_kl_per_layer"):
            r["attn_kl_mean"] = float(np.mean(r["attn_kl_per_layer"]))
        out.append(r)
    return out


DEFAULT_BOUND_PCT = 0.5  # issue 12: the default is the lowest-bpv preset within 0.5% (prefix reuse)


def choose_default(rows: list[dict]) -> dict | None:
    cands = [r for r in rows if r["protocol"] == "prefix_reuse" and r["family"] ==
             "turbokv preset" and r["name"] != RAW and r["delta_ppl_pct"] <= DEFAULT_BOUND_PCT]
    return min(cands, key=lambda r: r["bpv"]) if cands else None


def _fmt_delta(r: dict | None) -> str:
    if r is None:
        return "—"
    s = "%+.3f%%" % r["delta_ppl_pct"]
    if not math.isnan(r["ci_low_pct"]):
        s += " [%+.2f, %+.2f]" % (r["ci_low_pct"], r["ci_high_pct"])
    return s


def _plot(rows: list[dict], path: str) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return "matplotlib not available: %s" % e
    colors = {"turbokv preset": "tab:blue", "turbokv ablation": "tab:cyan",
              "community (emulated)": "tab:orange", "baseline": "tab:red"}
    fig, axes = plt.subplots(1, 2, figsize=(14, 6), sharey=True)
    for ax, proto in zip(axes, ("prefix_reuse", "all_kv")):
        pts = [r for r in rows if r["protocol"] == proto and r["family"] in colors]
        for fam, col in colors.items():
            fr = [r for r in pts if r["family"] == fam]
            if not fr:
                continue
            x = [r["bpv"] for r in fr]
            y = [r["delta_ppl_pct"] for r in fr]
            lo = [r["delta_ppl_pct"] - r["ci_low_pct"] if not math.isnan(r["ci_low_pct"])
                  else 0 for r in fr]
            hi = [r["ci_high_pct"] - r["delta_ppl_pct"] if not math.isnan(r["ci_high_pct"])
                  else 0 for r in fr]
            ax.errorbar(x, y, yerr=[lo, hi], fmt="o", color=col, label=fam, capsize=3, ms=5)
            for r in fr:
                ax.annotate(r["name"], (r["bpv"], r["delta_ppl_pct"]), fontsize=7,
                            xytext=(4, 3), textcoords="offset points")
        ax.axhline(1.0, color="gray", ls="--", lw=0.8)
        ax.axhline(0.0, color="black", lw=0.5)
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_xlabel("bits per value (measured)")
        tok = max([r["tokens"] for r in pts] or [0])
        ax.set_title("%s (%d tokens per row)" % (proto, tok))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Δ perplexity vs fp16 KV (%), 95% bootstrap CI")
    axes[0].legend(loc="upper right", fontsize=8)
    fig.suptitle("SmolLM2-135M, WikiText-2 test: perplexity change vs bits per value")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _stats_md(stats: dict, all_rows: list[dict], where: str = "") -> list[str]:
    lines = []
    cfgs = stats.get("configs", {})
    if not cfgs:
        return lines
    lines += ["## Vector-level statistics (real KV%s)" % where, "",
              "Relative MSE = mean over groups of ‖u − û‖²/‖u‖² (the quantity docs/architecture.md's "
              "g·MSE predicts), norm correction off unless marked; ratio = measured / theory.",
              "", "| g | b | theory | K rel MSE | V rel MSE | all / theory | worst layer "
              "ratio (K, V) | best layer ratio (K, V) | norm correction on: all / theory |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, c in cfgs.items():
        if c["norm_correction"]:
            continue
        th = c["theory"]
        k = np.asarray(c["rel_mse_per_layer_k"])
        v = np.asarray(c["rel_mse_per_layer_v"])
        on = cfgs.get(key.replace("-nonc", "-nc"))
        lines.append("| %d | %d | %.5f | %.5f | %.5f | %.3f | %.3f, %.3f | %.3f, %.3f | %s |" % (
            c["group_size"], c["bits"], th, k.mean(), v.mean(), c["rel_mse_all_over_theory"],
            k.max() / th, v.max() / th, k.min() / th, v.min() / th,
            "%.3f" % on["rel_mse_all_over_theory"] if on else "—"))
    lines.append("")
    c3 = cfgs.get("g32-b3-nonc")
    c3on = cfgs.get("g32-b3-nc")
    kl = {r["name"]: r for r in all_rows if r["protocol"] == "all_kv"
          and r.get("attn_kl_per_layer")}
    if c3 and "k_over_v_norm_per_layer" in stats:
        lines += ["Per layer (g = 32, b = 3): relative MSE / theory with norm correction off, "
                  "decoded/original norm ratio off → on, mean ‖K‖/‖V‖, and attention "
                  "KL(exact ‖ quantized) in nats per query with the model's real queries.", "",
                  "| layer | ‖K‖/‖V‖ | K MSE/th | V MSE/th | K norm ratio off→on | "
                  "V norm ratio off→on | KL k3v3-g32-nonc | KL k3v3-g32 | KL turbo3 | KL fp8 | "
                  "KL kivi-2 |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
                  "| --- |"]
        th = c3["theory"]

        def klv(name, l):
            r = kl.get(name)
            return "%.4f" % r["attn_kl_per_layer"][l] if r else "—"
        for l in range(len(c3["rel_mse_per_layer_k"])):
            lines.append("| %d | %.1f | %.3f | %.3f | %.3f → %.3f | %.3f → %.3f | %s | %s | %s "
                         "| %s | %s |" % (
                             l, stats["k_over_v_norm_per_layer"][l],
                             c3["rel_mse_per_layer_k"][l] / th, c3["rel_mse_per_layer_v"][l] / th,
                             c3["norm_ratio_per_layer_k"][l], c3on["norm_ratio_per_layer_k"][l],
                             c3["norm_ratio_per_layer_v"][l], c3on["norm_ratio_per_layer_v"][l],
                             klv("k3v3-g32-nonc", l), klv("k3v3-g32", l),
                             klv("turbo3 (k3v3-g64)", l), klv("fp8-e4m3", l), klv("kivi-2", l)))
        lines.append("")
    names = [n for n in kl if n != RAW]
    if names:  # every row's attention KL per layer (keys quantized alone, layer by layer)
        lines += ["Attention KL(exact ‖ quantized keys) per layer, nats per query, every row "
                  "with KL (%s):" % ", ".join("`%s`" % n for n in names), "",
                  "| layer | " + " | ".join(names) + " |",
                  "| --- | " + " | ".join("---" for _ in names) + " |"]
        nl = len(kl[names[0]]["attn_kl_per_layer"])
        for l in range(nl):
            lines.append("| %d | %s |" % (l, " | ".join(
                "%.4f" % kl[n]["attn_kl_per_layer"][l] for n in names)))
        lines.append("| mean | %s |" % " | ".join(
            "%.4f" % float(np.mean(kl[n]["attn_kl_per_layer"])) for n in names))
        lines.append("")
    return lines


BASELINE_FAMILIES = ("baseline", "community (emulated)")


def _delta_on(nll: np.ndarray, ref: np.ndarray, cnt: np.ndarray) -> float:
    return float(np.expm1((nll.sum() - ref.sum()) / cnt.sum()) * 100.0)


def bar_rows(part: dict, n_boot: int, seed: int = 12345) -> list[dict]:
    """Issue 12's bar, per baseline row B of one protocol: the turbokv presets with bpv ≤ B's,
    each compared with B on the windows both have (the first ``k``): the preset's Δppl with
    its 95% CI, B's Δppl on the same windows, and the paired difference (preset − B) with its
    95% CI. ``met``: the preset's upper CI end is at most B's point estimate."""
    k_all = int(part["windows_done"])
    ref_all = np.asarray(part["ref"][:k_all], dtype=np.float64)
    rows = part["rows"]
    out = []
    for bn, b in rows.items():
        if b.get("family") not in BASELINE_FAMILIES or not b["nll"]:
            continue
        cands = []
        for tn, t in rows.items():
            if t.get("family") != "turbokv preset" or tn == RAW or not t["nll"]:
                continue
            if float(t["bpv"]) > float(b["bpv"]):
                continue
            k = min(len(t["nll"]), len(b["nll"]), k_all)
            if k < 2:
                continue
            T = np.asarray(t["nll"][:k], dtype=np.float64)
            B = np.asarray(b["nll"][:k], dtype=np.float64)
            ref, cnt = ref_all[:k], np.asarray(t["count"][:k], dtype=np.float64)
            rng = np.random.default_rng(seed)
            idx = rng.integers(0, k, size=(n_boot, k))
            c = cnt[idx].sum(1)
            dt = np.expm1((T[idx].sum(1) - ref[idx].sum(1)) / c) * 100.0
            db = np.expm1((B[idx].sum(1) - ref[idx].sum(1)) / c) * 100.0
            t_pt, b_pt = _delta_on(T, ref, cnt), _delta_on(B, ref, cnt)
            hi = float(np.percentile(dt, 97.5))
            cands.append(dict(protocol=part["protocol"], baseline=bn, baseline_bpv=float(b["bpv"]),
                              preset=tn, preset_bpv=float(t["bpv"]), windows=k,
                              tokens=int(cnt.sum()), preset_dppl_pct=t_pt,
                              preset_ci_pct=[float(np.percentile(dt, 2.5)), hi],
                              baseline_dppl_pct=b_pt,
                              diff_pct=t_pt - b_pt,
                              diff_ci_pct=[float(np.percentile(dt - db, 2.5)),
                                           float(np.percentile(dt - db, 97.5))],
                              met=hi <= b_pt))
        if not cands:  # no preset is as cheap as B
            cands.append(dict(protocol=part["protocol"], baseline=bn,
                              baseline_bpv=float(b["bpv"]), preset=None, met=False,
                              baseline_dppl_pct=_delta_on(
                                  np.asarray(b["nll"][:k_all], dtype=np.float64),
                                  ref_all[:len(b["nll"])],
                                  np.asarray(b["count"][:k_all], dtype=np.float64))))
        out += sorted(cands, key=lambda r: r.get("preset_bpv", 0.0))
    return out


def _bar_md(bars: list[dict]) -> list[str]:
    """One line per (protocol, baseline): the cheapest preset that meets the bar, else the
    preset that comes closest (smallest upper CI end minus the baseline's point)."""
    if not bars:
        return []
    L = ["## Against each baseline (issue 12's bar)", "",
         "Per protocol and baseline row B: among the turbokv presets with bpv ≤ B's, the "
         "cheapest that **meets** the bar (its upper 95% CI end ≤ B's Δppl on the same "
         "windows), else the one that comes closest; the paired difference (preset − B) with "
         "its 95% CI. Every pair is in `quality_bar.json`.", "",
         "| protocol | baseline (bpv) | preset (bpv) | windows | preset Δppl [95% CI] | "
         "baseline Δppl | difference [95% CI] | met |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    keys = []
    for r in bars:
        if (r["protocol"], r["baseline"]) not in keys:
            keys.append((r["protocol"], r["baseline"]))
    for key in keys:
        c = [r for r in bars if (r["protocol"], r["baseline"]) == key]
        if c[0]["preset"] is None:
            r = c[0]
            L.append("| %s | %s (%.2f) | — (no preset at ≤ %.2f bpv) | — | — | %+.2f%% | — "
                     "| no |"
                     % (r["protocol"], r["baseline"], r["baseline_bpv"], r["baseline_bpv"],
                        r["baseline_dppl_pct"]))
            continue
        met = [r for r in c if r["met"]]
        r = min(met, key=lambda x: x["preset_bpv"]) if met else min(
            c, key=lambda x: x["preset_ci_pct"][1] - x["baseline_dppl_pct"])
        L.append("| %s | %s (%.2f) | %s (%.2f) | %d | %+.2f%% [%+.2f, %+.2f] | %+.2f%% | "
                 "%+.2f [%+.2f, %+.2f] | %s |" % (
                     r["protocol"], r["baseline"], r["baseline_bpv"], r["preset"],
                     r["preset_bpv"], r["windows"], r["preset_dppl_pct"],
                     r["preset_ci_pct"][0], r["preset_ci_pct"][1], r["baseline_dppl_pct"],
                     r["diff_pct"], r["diff_ci_pct"][0], r["diff_ci_pct"][1],
                     "**met**" if r["met"] else "no"))
    L.append("")
    return L


def merge_helpers(main: dict | None, path: str) -> dict | None:
    """Adds the windows of helper checkpoints ``all_kv.A-B.json`` (run.py --all-window-range)
    beside ``path`` to the main all_kv checkpoint. Window results are keyed by window index;
    the main checkpoint wins on overlap. Vector statistics and KL stay the main process's."""
    import glob
    helpers = [_load(p) for p in sorted(glob.glob(path[:-len(".json")] + ".*-*.json"))]
    helpers = [h for h in helpers if h and h.get("windows_done")]
    if main is None or not helpers:
        return main
    k = int(main["windows_done"])
    idx = list(range(k))
    ref = list(main["ref"][:k])
    rows = {n: dict(m, nll=list(m["nll"][:k]), count=list(m["count"][:k]))
            for n, m in main["rows"].items()}
    for h in helpers:
        if h["plan"] != main["plan"]:
            continue
        for j, wi in enumerate(h["window_indices"][:h["windows_done"]]):
            if wi in idx:
                continue
            idx.append(wi)
            ref.append(h["ref"][j])
            for n, m in rows.items():  # a row the main checkpoint lacks windows of stops
                if n in h["rows"] and len(m["nll"]) == len(idx) - 1:
                    m["nll"].append(h["rows"][n]["nll"][j])
                    m["count"].append(h["rows"][n]["count"][j])
    out = dict(main, ref=ref, rows=rows, windows_done=len(idx), window_indices=sorted(idx),
               stats_windows=main.get("stats_windows", k))
    return out


def build(paths: dict[str, str], out_dir: str, n_boot: int, command: str | None,
          elapsed_s: float | None = None) -> list[dict]:
    parts = {p: _load(path) for p, path in paths.items()}
    parts["all_kv"] = merge_helpers(parts.get("all_kv"), paths["all_kv"])
    rows: list[dict] = []
    for p in ("prefix_reuse", "all_kv"):
        if parts.get(p):
            rows += rows_of(parts[p], n_boot)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "quality.json"), "w") as f:
        json.dump(rows, f, indent=1)
    pr, ak = parts.get("prefix_reuse") or {}, parts.get("all_kv") or {}
    stats = dict(ak.get("stats") or {})
    meta_path = os.path.join(out_dir, "quality_meta.json")
    old_meta = _load(meta_path) or {}
    meta = dict(
        command=command or old_meta.get("command"),
        generated_utc=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        elapsed_s=elapsed_s if elapsed_s is not None else old_meta.get("elapsed_s"),
        greedy_sample=pr.get("greedy_sample"), prefix_reuse_plan=pr.get("plan"),
        all_kv_plan=ak.get("plan"), hooked_forward_identical=ak.get("hooked_forward_identical"),
        prefix_windows_done=pr.get("windows_done"), all_windows_done=ak.get("windows_done"),
        kl_windows_done=ak.get("kl_windows_done"),
        vector_stats_windows=ak.get("stats_windows", ak.get("windows_done")))
    with open(os.path.join(out_dir, "quality_stats.json"), "w") as f:
        json.dump(dict(meta, vector_stats=stats), f, indent=1)
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    plot_err = _plot(rows, os.path.join(out_dir, "quality.png"))

    by = {(r["name"], r["protocol"]): r for r in rows}
    names = []
    for r in rows:
        if r["name"] not in names:
            names.append(r["name"])
    d = choose_default(rows)
    partial = any(r["partial"] for r in rows)
    L = ["# Perplexity per preset and baseline: SmolLM2-135M on WikiText-2 test", ""]
    if partial:
        L += ["**PARTIAL RESULTS**: the run did not finish every planned window; the token "
              "counts below are what finished.", ""]
    L += ["Generated %s UTC by `%s` (%s)." % (
        meta["generated_utc"], meta["command"] or "?",
        "%.0f s" % meta["elapsed_s"] if meta["elapsed_s"] else "time not recorded"), ""]
    pp, ap_ = pr.get("plan") or {}, ak.get("plan") or {}
    if pp:
        L.append("* prefix_reuse: %d windows × (prefix %d tokens stored through turbokv-server, "
                 "block_tokens 16, fetched RAW fp16 + %d teacher-forced tokens evaluated); "
                 "reference = the same prefix KV in fp16 (what `raw` stores)." % (
                     pr.get("windows_done", 0), pp["prefix_tokens"], pp["cont_tokens"]))
    if ap_:
        L.append("* all_kv: %d windows × %d tokens, every K and V entering attention "
                 "quantized layer by layer (turbokv rows: the codec library via its C ABI, "
                 "identical bytes to the server); reference = fp16 KV." % (
                     ak.get("windows_done", 0), ap_["all_tokens"]))
    fp = by.get((FP32, "all_kv"))
    if fp:
        L.append("* Model's own perplexity (numpy fp32, exact KV, all_kv windows): **%.3f**; "
                 "with fp16 KV: %.3f." % (fp["ppl"], fp["ref_ppl"]))
    fpp = by.get((FP32, "prefix_reuse"))
    if fpp:
        L.append("* prefix_reuse continuation perplexity: fp32 KV %.3f, fp16 KV (reference) "
                 "%.3f." % (fpp["ppl"], fpp["ref_ppl"]))
    if pr.get("greedy_sample"):
        L.append("* Greedy sample (exact KV): %r" % pr["greedy_sample"])
    L.append("* CIs: 95%% paired bootstrap over windows (%d resamples)." % n_boot)
    L.append("")
    L += ["| row | family | bpv | prefix_reuse ppl | prefix_reuse Δppl [95% CI] | all_kv ppl | "
          "all_kv Δppl [95% CI] | tokens (prefix_reuse / all_kv) | mean attn KL (nats) |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in names:
        a, b = by.get((n, "prefix_reuse")), by.get((n, "all_kv"))
        r0 = a or b
        L.append("| %s | %s | %.3f | %s | %s | %s | %s | %s / %s | %s |" % (
            n, r0["family"], r0["bpv"], "%.3f" % a["ppl"] if a else "—", _fmt_delta(a),
            "%.3f" % b["ppl"] if b else "—", _fmt_delta(b), a["tokens"] if a else "—",
            b["tokens"] if b else "—",
            "%.4f" % b["attn_kl_mean"] if b and "attn_kl_mean" in b else "—"))
    L.append("")
    if d:
        L += ["**Default preset**: `%s` — the lowest-bpv preset whose prefix-reuse "
              "Δperplexity is ≤ 0.5%%: %.3f bpv, %s over %d tokens." % (
                  d["name"], d["bpv"], _fmt_delta(d), d["tokens"]), ""]
    else:
        L += ["**Default preset**: no lossy preset stays within 0.5% on prefix reuse.", ""]
    if by.get((RAW, "prefix_reuse")):
        L.append("`raw` through the server: Δppl %+.3f%% (per-window NLL identical to the "
                 "reference: %s)." % (by[(RAW, "prefix_reuse")]["delta_ppl_pct"],
                                      by[(RAW, "prefix_reuse")]["exact_equal_to_reference"]))
    eq = [r["name"] for r in rows if r.get("server_equals_local_codec") is False]
    chk = [r for r in rows if "server_equals_local_codec" in r]
    if chk:
        L.append("Server GetBlocks RAW equals the local codec's decode bit for bit for %d of %d "
                 "codec rows%s." % (len(chk) - len(eq), len(chk),
                                     (" (differs: %s)" % ", ".join(eq)) if eq else ""))
    L.append("")
    where = ""
    if ak.get("plan"):
        where = ": %s all_kv windows × %d tokens × 3 KV heads per layer; KL: first %s windows" % (
            meta["vector_stats_windows"], ak["plan"]["all_tokens"], ak.get("kl_windows_done"))
    bars = []
    for p in ("prefix_reuse", "all_kv"):
        if parts.get(p) and parts[p].get("windows_done"):
            bars += bar_rows(parts[p], n_boot)
    with open(os.path.join(out_dir, "quality_bar.json"), "w") as f:
        json.dump(bars, f, indent=1)
    L += _bar_md(bars)
    L += _stats_md(stats, rows, where)
    if plot_err:
        L.append("Plot not written: %s" % plot_err)
    else:
        L.append("![Δppl vs bpv](quality.png)")
    with open(os.path.join(out_dir, "quality.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    return rows
