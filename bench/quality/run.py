#!/usr/bin/env python3
"""turbokv quality harness: perplexity of SmolLM2-135M on WikiText-2 per preset and baseline.

Protocols (bench/quality/README.md):
  prefix_reuse  for each window: prefill P tokens (exact), put the prefix's 16-token blocks
                through a running turbokv-server in the row's namespace, look the prefix up and
                GetBlocks it RAW fp16 as a new request would, then teacher-force the next C
                tokens on the fetched KV; NLL over those C predictions. Baselines that are not
                turbokv codecs (fp8, KIVI) quantize the prefix KV in numpy instead.
  all_kv        every K and V entering attention, layer by layer, passes through the row's
                quantizer (turbokv rows: the codec library via its C ABI, the exact bytes the
                server would store); NLL over every token of the window.
Both are compared with the same windows with fp16 KV (the `raw` namespace dtype), so `raw`
gives exactly 0. Vector-level statistics (relative MSE per layer against docs/architecture.md, "The codec",
K/V norm ratios, attention KL with the model's real queries) come from the all_kv windows.

Usage:
  python bench/quality/run.py                      # full run, both protocols in parallel
  python bench/quality/run.py --quick --out-dir /tmp/q   # smoke test (CI)
  python bench/quality/run.py --report-only        # rebuild json/md/png from the parts
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
sys.path.insert(0, os.path.join(REPO, "tools"))  # numpy_llm, the numpy models
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

DEFAULT_TEXT = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "wikitext-2",
                                             "test.txt"))
BLOCK_TOKENS = 16
QUICK_ROWS = "raw,k8v4,k3v3-g32,k3v2-g32-qjl,turbo3 (k3v3-g64),fp8-e4m3,kivi-2"


# -- small utilities ---------------------------------------------------------------------------
def log(msg: str) -> None:
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def progress(it, total: int, desc: str):
    try:
        from tqdm import tqdm
        return tqdm(it, total=total, desc=desc, file=sys.stderr, mininterval=5.0,
                    dynamic_ncols=False, ncols=100)
    except ImportError:  # a simple bar
        def gen():
            t0 = time.time()
            for i, x in enumerate(it):
                yield x
                el = time.time() - t0
                print("%s %d/%d  %.0fs elapsed, ~%.0fs left" % (
                    desc, i + 1, total, el, el / (i + 1) * (total - i - 1)),
                    file=sys.stderr, flush=True)
        return gen()


def write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def find_server_binary() -> str | None:
    """Same discovery as tests/python/conftest.py."""
    explicit = os.environ.get("TURBOKV_SERVER_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    build = os.environ.get("TURBOKV_BUILD_DIR")
    if build:
        p = os.path.join(build, "bin", "turbokv-server")
        return p if os.access(p, os.X_OK) else None
    found = [p for p in glob.glob(os.path.join(REPO, "build*", "bin", "turbokv-server"))
             if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


class Server:
    """A turbokv-server child on 127.0.0.1:<free port> with a temporary data directory."""

    def __init__(self, binary: str):
        self.binary = binary
        self.tmp = tempfile.TemporaryDirectory(prefix="turbokv-quality-")
        port_file = os.path.join(self.tmp.name, "port")
        self.log_path = os.path.join(self.tmp.name, "server.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--port-file", port_file, "--data-dir",
             os.path.join(self.tmp.name, "data"), "--metrics-listen", "", "--codec-threads", "1",
             "--durability", "none", "--log-level", "warn"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        self.port = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("turbokv-server exited during start-up: " + self.log())
            try:
                with open(port_file) as f:
                    line = f.readline().strip()
                if line:
                    self.port = int(line)
                    break
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("turbokv-server wrote no port file: " + self.log())
        self.address = "127.0.0.1:%d" % self.port

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.tmp.cleanup()


# -- configuration -----------------------------------------------------------------------------
def plan(args) -> dict[str, int]:
    if args.quick:
        d = dict(prefix_windows=2, prefix_tokens=64, cont_tokens=64, all_windows=1,
                 all_tokens=128, kl_windows=1)
    else:
        d = dict(prefix_windows=args.prefix_windows, prefix_tokens=args.prefix_tokens,
                 cont_tokens=args.cont_tokens, all_windows=args.all_windows,
                 all_tokens=args.all_tokens, kl_windows=args.kl_windows)
    if BLOCK_TOKENS != 16:  # recorded only when not the default (old checkpoints stay valid)
        d["block_tokens"] = BLOCK_TOKENS
    return d


def window_starts(n_tokens: int, length: int, count: int) -> list[int]:
    """``count`` windows of ``length`` tokens spread evenly over the text (no overlap)."""
    if count * length > n_tokens:
        raise ValueError("text has %d tokens; %d windows of %d do not fit"
                         % (n_tokens, count, length))
    stride = (n_tokens - length) // max(1, count - 1) if count > 1 else 0
    return [i * stride for i in range(count)]


def load(args):
    import quantizers

    from numpy_llm import load_model
    t0 = time.time()
    model = load_model("smollm2", path=args.model_path)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    ids = np.asarray(model.tokenizer.encode(text), dtype=np.int64)
    log("model %r loaded, %d text tokens from %s (%.1fs)" % (model, ids.size, args.text,
                                                             time.time() - t0))
    rows = quantizers.all_rows() + (quantizers.study_rows() + quantizers.frac_study_rows()
                                    if args.rows else [])
    if args.quick and not args.rows:
        args.rows = QUICK_ROWS
    if args.rows:
        keep = set(args.rows.split(","))
        rows = [r for r in rows if r.name in keep or r.name == "raw"]
    return model, ids, rows


def _resume(args, part: dict, part_path: str, rows) -> int:
    """With --resume, continues a checkpoint of the same plan and windows: returns the windows
    already done and fills ``part`` from it. Selected rows the checkpoint lacks start with no
    windows and are caught up window by window; rows not selected are kept as they are (not
    computed further), so a resumed run never drops results."""
    if not args.resume or not os.path.exists(part_path):
        return 0
    with open(part_path) as f:
        old = json.load(f)
    if old.get("plan") != part["plan"] or old.get("starts") != part["starts"]:
        log("checkpoint %s has another plan; starting over" % part_path)
        return 0
    k = int(old["windows_done"])
    fresh = part["rows"]
    for n, m in fresh.items():  # rows new to the checkpoint: no windows yet (caught up)
        old["rows"].setdefault(n, m)
    part.update(old)
    log("resuming %s after %d windows (%s)" % (part["protocol"], k, ", ".join(
        "%s: %d" % (n, len(m["nll"])) for n, m in part["rows"].items())))
    return k


def _check_resumed_ref(part: dict, window: int, ref_nll: float) -> None:
    """The forward of a resumed checkpoint must be this machine's: NumPy's OpenBLAS picks its
    kernels by CPU (DYNAMIC_ARCH), so another CPU gives other float sums, and the quantized
    rows, whose rounding decisions flip with them, move by several nats per window (issue 12:
    window 0 of all_kv, reference 1439.3824 there vs 1439.3635 here, kivi-4 1431.88 vs 1441.40).
    Rows computed here could not be paired with the checkpoint's; refuse."""
    if part["ref"] and part["ref"][0] != ref_nll:
        raise SystemExit("checkpoint's reference NLL of window %d is %r, this machine computes "
                         "%r: it was made on another CPU or numpy/BLAS build, whose rows cannot "
                         "be paired with rows computed here; use a fresh --out-dir"
                         % (window, part["ref"][0], ref_nll))


def _rows_behind(part: dict, rows, wi: int):
    """The rows whose checkpoint lacks window ``wi`` (a row added to a resumed checkpoint, or
    one seeded from an earlier run with more windows, is computed only where it is missing;
    windows are filled in order, so ``len(nll)`` is the next window a row needs)."""
    return [r for r in rows if len(part["rows"][r.name]["nll"]) <= wi]


def _row_meta(row, q) -> dict:
    d = dict(name=row.name, family=row.family, kind=row.kind, note=row.note, bpv=q.bpv,
             packed_block_bytes=q.packed_block_bytes)
    if q.params is not None:
        p = q.params
        d["codec"] = dict(key_bits=p.key_bits, key_group_size=p.key_group_size,
                          key_qjl=p.key_qjl, value_bits=p.value_bits,
                          value_group_size=p.value_group_size, value_qjl=p.value_qjl,
                          norm_correction=p.norm_correction,
                          protected_first_layers=p.protected_first_layers,
                          protected_last_layers=p.protected_last_layers)
    return d


# -- protocol: prefix reuse --------------------------------------------------------------------
def run_prefix_reuse(args, model, ids, rows, part_path: str) -> None:
    import quantizers

    from turbokv import Client, PrefixHasher
    from turbokv.codec import LocalCodec
    cfg = plan(args)
    P, C, n = cfg["prefix_tokens"], cfg["cont_tokens"], cfg["prefix_windows"]
    if P % BLOCK_TOKENS:
        raise ValueError("prefix tokens %d must be a multiple of %d" % (P, BLOCK_TOKENS))
    starts = window_starts(ids.size, P + C + 1, n)
    L, H, D = model.num_layers, model.num_kv_heads, model.head_dim

    # Sanity: greedy generation from a short prompt with exact KV.
    prompt = "The history of the Roman Empire"
    gen = model.generate_greedy(model.tokenizer.encode(prompt), 24)
    sample = prompt + model.tokenizer.decode(gen)
    log("greedy sample: %r" % sample)

    binary = args.server_bin or find_server_binary()
    server = None
    if args.server:
        address = args.server
    else:
        if binary is None:
            raise SystemExit("turbokv-server binary not found (set TURBOKV_SERVER_BIN or "
                             "TURBOKV_BUILD_DIR, or pass --server HOST:PORT)")
        server = Server(binary)
        address = server.address
    if not args.prefix_ablations:
        rows = [r for r in rows if r.family != "turbokv ablation"]
    client = Client(address, timeout=120.0)
    reader = Client(address, timeout=120.0)  # the "new request" that finds and fetches
    part = dict(protocol="prefix_reuse", plan=cfg, starts=starts, server=address,
                server_binary=binary, greedy_sample=sample, rows={}, ref=[], fp32=[],
                windows_done=0)
    try:
        ns, quants = {}, {}
        for r in rows:
            q = quantizers.LayerQuantizer(r, L, H, D)
            quants[r.name] = q
            meta = _row_meta(r, q)
            if r.kind == "codec":
                kw = dict(model=model.name, model_revision=model.revision, num_layers=L,
                          num_kv_heads=H, head_dim=D, block_tokens=BLOCK_TOKENS, dtype="fp16",
                          cache_salt="turbokv-quality")
                if r.preset:
                    info = client.register_namespace(preset=r.preset, **kw)
                else:
                    info = client.register_namespace(**kw, **q.params.server_overrides())
                ns[r.name] = info.namespace_id
                meta.update(namespace_id="%016x" % info.namespace_id,
                            server_bpv=info.bits_per_value,
                            server_packed_block_bytes=info.packed_block_bytes,
                            server_descriptor_codec=info.descriptor["codec"])
                if info.packed_block_bytes != q.packed_block_bytes:
                    raise RuntimeError("%s: server packs %d bytes per block, local codec %d"
                                       % (r.name, info.packed_block_bytes, q.packed_block_bytes))
            meta.update(nll=[], count=[], stored_bytes=0, stored_values=0)
            part["rows"][r.name] = meta
        nb = P // BLOCK_TOKENS
        fresh = {n_: dict(m) for n_, m in part["rows"].items()}
        done = _resume(args, part, part_path, rows)
        for n_, m in fresh.items():  # server namespace ids may differ on a new server
            if n_ in part["rows"]:
                part["rows"][n_].update({k: v for k, v in m.items()
                                         if k not in ("nll", "count", "stored_bytes",
                                                      "stored_values",
                                                      "server_equals_local_codec")})
        first = min([len(part["rows"][r.name]["nll"]) for r in rows] + [done])
        stop = min(n, args.stop_after) if args.stop_after else n

        def window_kv(wi):
            w = ids[starts[wi]:starts[wi] + P + C + 1]
            _, kv = model.prefill(w[:P], logits="last")
            return w, kv

        def cont_nll(w, past) -> float:
            lg, _ = model.prefill(w[P:P + C], past_kv=past)
            from forward import token_nll
            return float(np.sum(token_nll(lg, w[P + 1:P + C + 1])))

        if done and first < stop:
            w0, kv0 = window_kv(0)
            _check_resumed_ref(part, 0, cont_nll(w0, kv0.astype(np.float16)))
        for wi in progress(range(first, stop), max(0, stop - first), "prefix_reuse"):
            todo = _rows_behind(part, rows, wi)
            if not todo:
                continue
            w, kv = window_kv(wi)
            kv16 = kv.astype(np.float16)

            if wi >= len(part["ref"]):
                part["ref"].append(cont_nll(w, kv16))
            blocks = np.ascontiguousarray(
                kv16.reshape(L, 2, nb, BLOCK_TOKENS, H, D).transpose(2, 0, 1, 3, 4, 5))
            for r in todo:
                meta = part["rows"][r.name]
                if r.kind == "codec":
                    hashes = PrefixHasher(ns[r.name]).block_hashes(w[:P], BLOCK_TOKENS)
                    res = client.put_blocks(ns[r.name], hashes, blocks)
                    bad = [x for x in res if not x.ok]
                    if bad:
                        raise RuntimeError("%s: put failed: %s %s" % (r.name, bad[0].code,
                                                                      bad[0].message))
                    meta["stored_bytes"] += sum(int(x.stored_bytes) for x in res)
                    meta["stored_values"] += int(blocks.size)
                    m = reader.lookup(ns[r.name], hashes)
                    if m.matched_blocks != nb:
                        raise RuntimeError("%s: lookup matched %d of %d blocks"
                                           % (r.name, m.matched_blocks, nb))
                    got = reader.get_blocks(ns[r.name], hashes[:m.matched_blocks], dtype="fp16")
                    if any(g is None for g in got):
                        raise RuntimeError("%s: GetBlocks returned a missing block" % r.name)
                    past = np.concatenate([np.asarray(g) for g in got], axis=2)
                    if "server_equals_local_codec" not in meta:  # its first window: the
                        # server returns exactly the local codec's values
                        lc = LocalCodec(L, BLOCK_TOKENS, H, D, quants[r.name].params,
                                        namespace_id=ns[r.name])
                        local = lc.decode(lc.encode(blocks[0]), "fp16")
                        meta["server_equals_local_codec"] = bool(
                            np.array_equal(local.view(np.uint16),
                                           np.asarray(got[0]).view(np.uint16)))
                    client.delete_blocks(ns[r.name], hashes)
                elif r.kind == "fp32":
                    past = kv
                else:
                    past = quants[r.name].full_kv(kv16)
                meta["nll"].append(cont_nll(w, past))
                meta["count"].append(int(C))
            part["windows_done"] = max(part["windows_done"], wi + 1)
            write_json(part_path, part)
    finally:
        client.close()
        reader.close()
        if server is not None:
            server.stop()
    log("prefix_reuse done: %d windows x %d tokens" % (n, C))


# -- protocol: all-KV fake quantization + vector statistics ------------------------------------
THEORY_GMSE = {  # docs/architecture.md, "The codec": g * MSE for b = 1, 2, 3, 4
    8: (0.3224, 0.09477, 0.02606, 0.006870), 16: (0.3432, 0.1058, 0.03008, 0.008094),
    32: (0.3534, 0.1116, 0.03226, 0.008774), 64: (0.3584, 0.1145, 0.03339, 0.009132),
    128: (0.3609, 0.1160, 0.03397, 0.009315), 256: (0.3621, 0.1167, 0.03426, 0.009408),
}
STAT_CONFIGS = [(g, b) for g in (32, 64) for b in (2, 3, 4)]


def _vector_stats(kv16: np.ndarray, acc: dict) -> None:
    """Relative MSE per group (norm correction off and on) and decoded/original norm ratios,
    accumulated per layer and K/V; kv16 [L][2][T][H][D] float16."""
    from turbokv.codec import CodecParams, LocalCodec
    L, _, T, H, D = kv16.shape
    x = kv16.astype(np.float32)
    for g, b in STAT_CONFIGS:
        for nc in (False, True):
            key = "g%d-b%d-%s" % (g, b, "nc" if nc else "nonc")
            c = LocalCodec(L, T, H, D, CodecParams(b, g, False, b, g, False, norm_correction=nc))
            y = c.decode(c.encode(kv16), "fp32")
            xg = x.reshape(L, 2, T * H, D // g, g)
            yg = y.reshape(L, 2, T * H, D // g, g)
            n2 = np.sum(xg.astype(np.float64) ** 2, -1)
            e2 = np.sum((xg.astype(np.float64) - yg) ** 2, -1)
            ok = n2 > 0
            rel = np.where(ok, e2 / np.where(ok, n2, 1.0), 0.0)
            a = acc.setdefault(key, dict(rel_sum=np.zeros((L, 2)), groups=np.zeros((L, 2)),
                                         err=np.zeros((L, 2)), energy=np.zeros((L, 2)),
                                         ratio_sum=np.zeros((L, 2)), vectors=np.zeros((L, 2))))
            a["rel_sum"] += rel.sum((2, 3))
            a["groups"] += ok.sum((2, 3))
            a["err"] += e2.sum((2, 3))
            a["energy"] += n2.sum((2, 3))
            nx = np.sqrt(np.sum(x.astype(np.float64) ** 2, -1))  # [L][2][T][H]
            ny = np.sqrt(np.sum(y.astype(np.float64) ** 2, -1))
            okv = nx > 0
            a["ratio_sum"] += np.where(okv, ny / np.where(okv, nx, 1.0), 0.0).sum((2, 3))
            a["vectors"] += okv.sum((2, 3))
    nrm = np.sqrt(np.sum(x.astype(np.float64) ** 2, -1)).mean((2, 3))  # [L][2]
    acc.setdefault("mean_norm_sum", np.zeros((L, 2)))
    acc["mean_norm_sum"] += nrm
    acc["mean_norm_windows"] = acc.get("mean_norm_windows", 0) + 1


def _stats_json(acc: dict) -> dict:
    out = {"configs": {}, "theory_gmse": {str(g): v for g, v in THEORY_GMSE.items()}}
    for g, b in STAT_CONFIGS:
        for nc in (False, True):
            key = "g%d-b%d-%s" % (g, b, "nc" if nc else "nonc")
            a = acc.get(key)
            if a is None:
                continue
            rel = a["rel_sum"] / np.maximum(a["groups"], 1)
            th = THEORY_GMSE[g][b - 1]
            out["configs"][key] = dict(
                group_size=g, bits=b, norm_correction=nc, theory=th,
                rel_mse_per_layer_k=rel[:, 0].tolist(), rel_mse_per_layer_v=rel[:, 1].tolist(),
                rel_mse_energy_weighted_k=(a["err"][:, 0] / a["energy"][:, 0]).tolist(),
                rel_mse_energy_weighted_v=(a["err"][:, 1] / a["energy"][:, 1]).tolist(),
                rel_mse_all=float(a["rel_sum"].sum() / a["groups"].sum()),
                rel_mse_all_over_theory=float(a["rel_sum"].sum() / a["groups"].sum() / th),
                groups=int(a["groups"].sum()),
                norm_ratio_per_layer_k=(a["ratio_sum"][:, 0] / a["vectors"][:, 0]).tolist(),
                norm_ratio_per_layer_v=(a["ratio_sum"][:, 1] / a["vectors"][:, 1]).tolist())
    if "mean_norm_sum" in acc:
        mn = acc["mean_norm_sum"] / acc["mean_norm_windows"]
        out["mean_norm_per_layer_k"] = mn[:, 0].tolist()
        out["mean_norm_per_layer_v"] = mn[:, 1].tolist()
        out["k_over_v_norm_per_layer"] = (mn[:, 0] / mn[:, 1]).tolist()
    return out


def run_all_kv(args, model, ids, rows, part_path: str) -> None:
    import quantizers
    from forward import attention_kl, attention_probs, forward, token_nll
    cfg = plan(args)
    T, n = cfg["all_tokens"], cfg["all_windows"]
    starts = window_starts(ids.size, T, n)
    first, last = 0, n
    if args.all_window_range:  # a helper process for windows [first, last) (report merges)
        first, last = (int(x) for x in args.all_window_range.split(":"))
    L, H, D = model.num_layers, model.num_kv_heads, model.head_dim
    group = model.num_heads // H
    # The hooked forward must equal the model's own prefill (identity hook).
    probe = ids[:64]
    lg_a, _ = model.prefill(probe)
    lg_b, _, _ = forward(model, probe)
    identical = bool(np.array_equal(lg_a, lg_b))
    log("hooked forward equals LlamaModel.prefill bit for bit: %s" % identical)
    if not identical:
        raise RuntimeError("the hooked forward differs from LlamaModel.prefill")
    to16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    quants = {r.name: quantizers.LayerQuantizer(r, L, H, D) for r in rows}
    fp32_row = quantizers.Row("fp32 (no KV rounding)", "fp32", "reference")
    part = dict(protocol="all_kv", plan=cfg, starts=starts, hooked_forward_identical=identical,
                rows={}, ref=[], windows_done=0, stats={}, kl_windows_done=0,
                window_indices=[])
    for r in rows + [fp32_row]:
        q = quants.get(r.name) or quantizers.LayerQuantizer(r, L, H, D)
        quants[r.name] = q
        part["rows"][r.name] = dict(_row_meta(r, q), nll=[], count=[],
                                    attn_kl_per_layer=None, k_norm_ratio_per_layer=None,
                                    v_norm_ratio_per_layer=None)
    acc: dict = {}
    kl_acc = {r.name: np.zeros((3, L)) for r in rows}  # kl, k ratio, v ratio sums
    done = _resume(args, part, part_path, rows)
    if done:
        acc = {k: ({kk: np.asarray(vv) for kk, vv in v.items()} if isinstance(v, dict)
                   else (np.asarray(v) if isinstance(v, list) else v))
               for k, v in part.get("stats_acc", {}).items()}
        for r in rows:
            m = part["rows"][r.name]
            if m.get("attn_kl_per_layer"):
                kd = int(m.get("kl_windows") or part["kl_windows_done"])
                kl_acc[r.name] = np.asarray([m["attn_kl_per_layer"], m["k_norm_ratio_per_layer"],
                                             m["v_norm_ratio_per_layer"]]) * kd
    part.setdefault("stats_windows", part["windows_done"] if acc else 0)
    if first:
        part["kl_windows_done"] = cfg["kl_windows"]  # KL belongs to the main process
        done = max(done, first)
    else:
        done = min([len(part["rows"][r.name]["nll"]) for r in rows] + [done])
    # KL windows per row: a row added to a resumed checkpoint gets its own over the same
    # first windows (kl_acc holds sums over windows 0..kl_done[row]-1).
    kl_done = {r.name: (int(part["rows"][r.name].get("kl_windows") or part["kl_windows_done"])
                        if part["rows"][r.name].get("attn_kl_per_layer") else 0) for r in rows}
    if args.stop_after:
        last = min(last, args.stop_after)
    if args.resume and part["ref"] and done < last:
        w0 = ids[starts[first]:starts[first] + T]
        lg0, _, _ = forward(model, w0, lambda l, k, v: (to16(k), to16(v)))
        _check_resumed_ref(part, first, float(np.sum(token_nll(lg0[:-1], w0[1:]))))
    for wi in progress(range(done, last), max(0, last - done), "all_kv"):
        todo = rows + [fp32_row] if first else _rows_behind(part, rows + [fp32_row], wi)
        if not todo:
            continue
        w = ids[starts[wi]:starts[wi] + T]
        targets = w[1:]
        kl_rows = [r for r in todo if r.kind != "fp32" and wi < cfg["kl_windows"]
                   and kl_done.get(r.name, 0) == wi]
        keep_q = bool(kl_rows) and not first
        fresh_window = wi - first >= part["windows_done"]
        stats_now = not first and fresh_window and not args.no_vector_stats
        need_ref = wi - first >= len(part["ref"])
        if need_ref or stats_now or keep_q:  # else the rows' forwards are all this window needs
            lg, kv_ref, queries = forward(model, w, lambda l, k, v: (to16(k), to16(v)),
                                          keep_queries=keep_q)
            if need_ref:
                part["ref"].append(float(np.sum(token_nll(lg[:-1], targets))))
            kv16 = kv_ref.astype(np.float16)
        if stats_now:
            _vector_stats(kv16, acc)
            part["stats_windows"] = part.get("stats_windows", 0) + 1
        if keep_q:
            kqs = {}
            for r in kl_rows:
                kq = quants[r.name].full_kv(kv16)
                kqs[r.name] = kq[:, 0]
                for l in range(L):
                    for j in (0, 1):
                        nx = np.linalg.norm(kv_ref[l, j].astype(np.float64), axis=-1)
                        ny = np.linalg.norm(kq[l, j].astype(np.float64), axis=-1)
                        kl_acc[r.name][1 + j, l] += float(np.mean(ny[nx > 0] / nx[nx > 0]))
            for l in range(L):
                p = attention_probs(queries[l], kv_ref[l, 0], group)
                for r in kl_rows:
                    kl_acc[r.name][0, l] += attention_kl(p, attention_probs(
                        queries[l], kqs[r.name][l], group))
            del kqs
            part["kl_windows_done"] = max(part["kl_windows_done"], wi + 1)
            for r in kl_rows:
                kl_done[r.name] = wi + 1
                a = kl_acc[r.name] / (wi + 1)
                part["rows"][r.name].update(attn_kl_per_layer=a[0].tolist(),
                                            k_norm_ratio_per_layer=a[1].tolist(),
                                            v_norm_ratio_per_layer=a[2].tolist(),
                                            kl_windows=wi + 1)
        for r in todo:
            q = quants[r.name]
            if r.kind == "fp32":
                hook = None
            elif r.kind == "codec":
                hook = q.layer_kv  # casts to fp16 itself (the block dtype)
            else:
                hook = lambda l, k, v, q=q: q.layer_kv(l, to16(k), to16(v))  # noqa: E731
            lg_r, _, _ = forward(model, w, hook)
            meta = part["rows"][r.name]
            meta["nll"].append(float(np.sum(token_nll(lg_r[:-1], targets))))
            meta["count"].append(int(T - 1))
        part["windows_done"] = max(part["windows_done"], wi + 1 - first)
        part["window_indices"] = list(range(first, first + part["windows_done"]))
        if acc:
            part["stats"] = _stats_json(acc)
            part["stats_acc"] = {k: ({kk: vv.tolist() for kk, vv in v.items()}
                                     if isinstance(v, dict)
                                     else (v.tolist() if isinstance(v, np.ndarray) else v))
                                 for k, v in acc.items()}
        write_json(part_path, part)
    log("all_kv done: %d windows x %d tokens" % (n, T - 1))


# -- main --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--text", default=DEFAULT_TEXT, help="evaluation text (WikiText-2 test)")
    ap.add_argument("--model-path", default=None, help="SmolLM2 GGUF (default: cache/PyPI)")
    ap.add_argument("--quick", action="store_true", help="smoke test: a few short windows")
    ap.add_argument("--prefix-windows", type=int, default=64)
    ap.add_argument("--prefix-tokens", type=int, default=256, help="P: stored prefix")
    ap.add_argument("--cont-tokens", type=int, default=256, help="C: evaluated continuation")
    ap.add_argument("--all-windows", type=int, default=33)
    ap.add_argument("--all-tokens", type=int, default=512, help="window length (all_kv)")
    ap.add_argument("--kl-windows", type=int, default=2, help="all_kv windows for attention KL")
    ap.add_argument("--all-window-range", default="", help="A:B: only all_kv windows [A, B), "
                    "into <parts>/all_kv.A-B.json (a helper; the report merges it)")
    ap.add_argument("--prefix-ablations", action="store_true",
                    help="also run the ablation rows in prefix_reuse (all_kv always runs them)")
    ap.add_argument("--block-tokens", type=int, default=16,
                    help="tokens per stored block: 16 (vLLM) or 256 (LMCache's chunk); sets the "
                    "prefix_reuse blocks and every row's bpv (all_kv quantizes head vectors, "
                    "which does not depend on it)")
    ap.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    ap.add_argument("--protocol", choices=("both", "prefix_reuse", "all_kv"), default="both")
    ap.add_argument("--jobs", type=int, default=2, help="run the two protocols in parallel")
    ap.add_argument("--server", default="", help="use a running server instead of starting one")
    ap.add_argument("--server-bin", default="", help="turbokv-server binary to start")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--parts-dir", default="", help="per-protocol checkpoints "
                    "(default: <out-dir>/quality_parts)")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--record-command", default="", help="with --report-only: the command(s) "
                    "that produced the parts, written into the results")
    ap.add_argument("--record-elapsed", type=float, default=0.0,
                    help="with --report-only: wall seconds of that run")
    ap.add_argument("--resume", action="store_true",
                    help="continue the checkpoints in the parts directory (same plan)")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="compute windows below this index only (the plan, hence the "
                    "checkpoint, stays the full one; a later --resume continues it)")
    ap.add_argument("--no-vector-stats", action="store_true",
                    help="all_kv: skip the vector-level statistics (a resumed checkpoint keeps "
                    "its own)")
    ap.add_argument("--bootstrap", type=int, default=2000)
    args = ap.parse_args(argv)
    global BLOCK_TOKENS
    import quantizers
    BLOCK_TOKENS = quantizers.BLOCK_TOKENS = args.block_tokens
    parts = args.parts_dir or os.path.join(args.out_dir, "quality_parts")
    os.makedirs(parts, exist_ok=True)
    command = "python bench/quality/run.py " + " ".join(shlex.quote(a) for a in
                                                        (argv if argv is not None else sys.argv[1:]))
    paths = {p: os.path.join(parts, p + ".json") for p in ("prefix_reuse", "all_kv")}
    if args.all_window_range:
        paths["all_kv"] = os.path.join(parts, "all_kv.%s.json"
                                       % args.all_window_range.replace(":", "-"))
    import report
    if args.report_only:
        report.build(paths, args.out_dir, args.bootstrap, command=args.record_command or None,
                     elapsed_s=args.record_elapsed or None)
        return 0
    t0 = time.time()
    protocols = ["prefix_reuse", "all_kv"] if args.protocol == "both" else [args.protocol]
    if len(protocols) == 2 and args.jobs >= 2:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        base = [a for a in (argv if argv is not None else sys.argv[1:])]
        procs = []
        for p in protocols:
            cmd = [sys.executable, os.path.abspath(__file__)] + base + ["--protocol", p,
                                                                         "--jobs", "1"]
            procs.append(subprocess.Popen(cmd, env=env))
        rcs = [pr.wait() for pr in procs]
        if any(rcs):
            log("a protocol failed: exit codes %s" % rcs)
            return 1
    else:
        model, ids, rows = load(args)
        for p in protocols:
            (run_prefix_reuse if p == "prefix_reuse" else run_all_kv)(args, model, ids, rows,
                                                                      paths[p])
    if args.protocol == "both":
        report.build(paths, args.out_dir, args.bootstrap, command=command,
                     elapsed_s=time.time() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
