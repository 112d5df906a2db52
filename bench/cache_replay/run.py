"""The cache replay benchmark: every workload x capacity x node count, simulators beside the real
server, a table as it goes, then a JSON and a PNG (docs/cache.md).

    build/venv/bin/python -m bench.cache_replay                       # everything (bash
    build/venv/bin/python -m bench.cache_replay --quick               #  bench/cache_replay.sh)
    build/venv/bin/python -m bench.cache_replay --workloads chat,docs --capacities 10,25 \
        --nodes 1,3 --out-dir /tmp/r
    build/venv/bin/python -m bench.cache_replay --sim-only --trace my.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from . import report, simulators, trace, workloads
from .server import REPO, Server, ServerError, find_server_binary

MOONCAKE = os.path.join(os.path.dirname(REPO), "shared", "data", "traces",
                        "mooncake_synthetic_trace.jsonl")
DEFAULT_CAPACITIES = (5.0, 10.0, 25.0, 50.0)
QUICK_REQUESTS = 800


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _server_source_commit() -> str:
    """The newest commit that touched the server's sources (server/, common/, kernels/, proto/)."""
    try:
        return subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%H %s", "--", "server",
                               "common", "kernels", "proto"], capture_output=True, text=True,
                              check=True).stdout.strip()[:120]
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cpu() -> tuple[str, bool]:
    model, avx512 = platform.processor() or "?", False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("?", "", platform.processor()):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    avx512 = "avx512f" in line.split()
                    break
    except OSError:
        pass
    return model, avx512


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def load_workloads(a: argparse.Namespace) -> list[tuple[str, list[trace.Request], dict]]:
    """(name, requests, source description) of every workload asked for."""
    names = [w.strip() for w in a.workloads.split(",") if w.strip()]
    out = []
    for name in names:
        if name == "mooncake":
            if not os.path.exists(a.mooncake):
                print("skipping mooncake: %s is absent" % a.mooncake, flush=True)
                continue
            reqs = trace.read_trace(a.mooncake)
            src = dict(trace=os.path.relpath(a.mooncake, REPO))
        elif name in workloads.KINDS:
            reqs = workloads.generate(name, a.seed, a.scale)
            src = dict(generator=name, seed=a.seed, scale=a.scale)
        else:
            raise SystemExit("unknown workload %r; known: mooncake, %s"
                             % (name, ", ".join(workloads.KINDS)))
        out.append((name, reqs, src))
    for path in a.trace:
        out.append((os.path.splitext(os.path.basename(path))[0], trace.read_trace(path),
                    dict(trace=path)))
    if a.max_requests:
        out = [(n, r[:a.max_requests], dict(s, max_requests=a.max_requests)) for n, r, s in out]
    return out


def probe(binary: str, server_args: Sequence[str], work_dir: str | None) -> dict[str, Any]:
    """Starts one server to learn the namespace's packed/raw block bytes, preset, version."""
    from turbokv import Client

    from .replay import NAMESPACE, preset_name
    with Server(binary, 256 << 20, server_args, work_dir) as s:
        with Client(s.address) as c:
            info = c.register_namespace(**NAMESPACE)
            st = c.stats()
    return dict(packed_block_bytes=info.packed_block_bytes, raw_block_bytes=info.raw_block_bytes,
                preset=preset_name(info.descriptor), codec=info.descriptor["codec"], server_version=st.version,
                codec_backend=st.codec_backend, durability=st.durability)


def simulate(chains: list[list[int]], cap_blocks: int, raw_blocks: int) -> dict[str, Any]:
    return dict(lru=simulators.lru(chains, cap_blocks).hit_ratio,
                belady=simulators.belady(chains, cap_blocks).hit_ratio,
                lru_uncompressed=simulators.lru(chains, raw_blocks).hit_ratio,
                lru_uncompressed_blocks=raw_blocks)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cache_replay", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="mooncake," + ",".join(workloads.KINDS),
                    help="comma list of mooncake (the public trace, skipped when absent) and "
                         "generated kinds %s (default: all)" % ", ".join(workloads.KINDS))
    ap.add_argument("--trace", action="append", default=[], metavar="JSONL",
                    help="also replay this Mooncake-format trace (repeatable)")
    ap.add_argument("--mooncake", default=MOONCAKE, help="path of the public trace")
    ap.add_argument("--capacities", default=",".join("%g" % c for c in DEFAULT_CAPACITIES),
                    help="percent of each workload's distinct blocks (default 5,10,25,50)")
    ap.add_argument("--nodes", default="1",
                    help="comma list of node counts; N > 1 runs N servers of capacity/N each "
                         "behind ShardedClient (default 1)")
    ap.add_argument("--segment-blocks", type=int, default=None,
                    help="with N > 1: blocks of a chain placed together by ShardedClient "
                         "(default turbokv.sharding.DEFAULT_SEGMENT_BLOCKS; 1: each block by "
                         "its own hash)")
    ap.add_argument("--join-at", type=float, default=0.0, metavar="FRACTION",
                    help="membership change: for each N > 1 also a run in which an (N+1)th "
                         "server of capacity/N joins after this share of the requests; every "
                         "run then also reports its hit ratio before and after that point "
                         "(default 0: none)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated workloads")
    ap.add_argument("--scale", type=float, default=1.0, help="size of the generated workloads")
    ap.add_argument("--max-requests", type=int, default=0,
                    help="replay only each workload's first N requests (0 = all)")
    ap.add_argument("--quick", action="store_true",
                    help="a few minutes: %d requests of each workload, capacities 10,50"
                         % QUICK_REQUESTS)
    ap.add_argument("--out-dir", default=os.path.join(REPO, "bench", "results", "cache"))
    ap.add_argument("--name", default="cache_replay",
                    help="file stem of the outputs (<name>.json, .png, .md)")
    ap.add_argument("--sim-only", action="store_true",
                    help="simulators only (no server): for policy work")
    ap.add_argument("--server-bin", help="turbokv-server binary (default: build/bin)")
    ap.add_argument("--server-arg", action="append", default=[], metavar="FLAG",
                    help="extra server flag, e.g. --server-arg=--durability=wal (repeatable)")
    ap.add_argument("--put-encoding", choices=("raw", "packed"), default="raw",
                    help="raw: the server encodes puts (default); packed: encoded here")
    ap.add_argument("--real-time", action="store_true",
                    help="replay at the trace's timestamps (default: back to back)")
    ap.add_argument("--speed", type=float, default=1.0, help="real-time speed-up factor")
    ap.add_argument("--sample-every", type=int, default=10,
                    help="requests between Stats and disk samples (default 10)")
    ap.add_argument("--work-dir", default=None,
                    help="where the servers' temporary data directories go (default $TMPDIR)")
    ap.add_argument("--progress", type=float, default=30.0,
                    help="seconds between progress lines of a long replay (0 = none)")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite <name>.md and <name>.png from <out-dir>/<name>.json")
    a = ap.parse_args(argv)
    if a.report_only:
        with open(os.path.join(a.out_dir, a.name + ".json")) as f:
            write_reports(json.load(f), a.out_dir, a.name)
        return 0
    if a.quick:
        a.max_requests = a.max_requests or QUICK_REQUESTS
        if a.capacities == ap.get_default("capacities"):
            a.capacities = "10,50"
    caps = _floats(a.capacities)
    nodes = [int(x) for x in a.nodes.split(",") if x.strip()]
    if not caps or any(not 0 < c for c in caps) or not nodes or any(n < 1 for n in nodes):
        ap.error("capacities must be > 0 and nodes >= 1")
    if not 0.0 <= a.join_at < 1.0:
        ap.error("--join-at must be in [0, 1)")
    from turbokv.sharding import DEFAULT_SEGMENT_BLOCKS, check_segment_blocks
    if a.segment_blocks is None:
        a.segment_blocks = DEFAULT_SEGMENT_BLOCKS
    try:
        check_segment_blocks(a.segment_blocks)
    except ValueError as e:
        ap.error(str(e))
    # (node count, servers joining mid-run) per capacity
    setups = [(n, 0) for n in nodes] + [(n, 1) for n in nodes if n > 1 and a.join_at > 0]

    from .replay import BlockContent, ReplayOptions, replay
    t_all = time.monotonic()
    cpu, avx512 = _cpu()
    meta: dict[str, Any] = dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"), git_commit=_git_commit(),
        server_source_commit=_server_source_commit(),
        command=" ".join(shlex.quote(x) for x in [sys.executable, "-m", "bench.cache_replay"]
                         + list(argv if argv is not None else sys.argv[1:])),
        cpu=cpu, avx512f=avx512, cpus=os.cpu_count(), capacities_percent=caps, nodes=nodes,
        put_encoding=a.put_encoding, real_time=a.real_time, speed=a.speed,
        sample_every=a.sample_every, server_args=a.server_arg, sim_only=a.sim_only,
        segment_blocks=a.segment_blocks, join_at=a.join_at or None)
    binary = None
    if a.sim_only:
        # Block sizes of the server's default preset for this shape (k5v4): only the
        # uncompressed-LRU column depends on them.
        meta.update(packed_block_bytes=40012, raw_block_bytes=131072, preset="(assumed k5v4)")
    else:
        try:
            binary = find_server_binary(a.server_bin)
            meta.update(server_bin=binary, **probe(binary, a.server_arg, a.work_dir))
        except ServerError as e:
            print("error: %s" % e, file=sys.stderr)
            return 2
    packed, raw = meta["packed_block_bytes"], meta["raw_block_bytes"]
    os.makedirs(a.out_dir, exist_ok=True)
    json_path = os.path.join(a.out_dir, a.name + ".json")
    results: dict[str, Any] = dict(meta=meta, workloads={})
    print("cache replay: %s, packed block %d B (preset %s), raw %d B; capacities %s%%; "
          "nodes %s; -> %s" % ("simulators only" if a.sim_only else binary, packed,
                               meta["preset"], raw, ",".join("%g" % c for c in caps),
                               ",".join(map(str, nodes)), json_path), flush=True)
    print(report.header(), flush=True)
    content = BlockContent()
    opts = ReplayOptions(sample_every=a.sample_every, real_time=a.real_time, speed=a.speed,
                         put_encoding=a.put_encoding, progress_every_s=a.progress,
                         segment_blocks=a.segment_blocks)
    failed = False
    for name, reqs, src in load_workloads(a):
        chains = trace.chains(reqs)
        summ = trace.summary(reqs)
        inf = simulators.infinite(chains).hit_ratio
        wl: dict[str, Any] = dict(source=src, summary=summ, infinite_hit_ratio=inf, runs=[])
        results["workloads"][name] = wl
        digests: dict[int, bytes] = {}  # expected packed digests, shared by the runs
        wl_opts = dataclasses.replace(opts, split_at=int(a.join_at * len(reqs)))
        for cap in caps:
            cap_blocks = int(summ["distinct_blocks"] * cap / 100.0)
            cap_bytes = cap_blocks * packed
            sim = simulate(chains, cap_blocks, cap_bytes // raw)
            sim["infinite"] = inf
            for n, joins in (setups if not a.sim_only else [(None, 0)]):
                run: dict[str, Any] = dict(capacity_fraction=cap / 100.0,
                                           capacity_blocks=cap_blocks, capacity_bytes=cap_bytes,
                                           nodes=n, sim=dict(sim))
                if n is not None and n > 1:
                    run["segment_blocks"] = a.segment_blocks
                if joins:
                    run["joined"] = joins
                if n is not None:
                    assert binary is not None
                    servers = [Server(binary, cap_bytes // n, a.server_arg, a.work_dir)
                               for _ in range(n)]
                    joiner = (Server(binary, cap_bytes // n, a.server_arg, a.work_dir)
                              if joins else None)
                    try:
                        for s in servers:
                            s.start()
                        run["server"] = replay(servers, reqs, content, wl_opts,
                                               label="%s %g%% x%d%s" % (
                                                   name, cap, n, "+1" if joins else ""),
                                               digests=digests, joiner=joiner)
                    except Exception as e:  # a run that cannot finish is reported, not hidden
                        run["server"] = dict(errors=1, error_messages=[str(e)], hit_ratio=None)
                        failed = True
                    finally:
                        for s in servers + ([joiner] if joiner else []):
                            s.stop()
                    held = run["server"].get("blocks_held_mean")
                    if held:
                        run["sim"]["lru_at_server_mean_blocks"] = simulators.lru(
                            chains, int(held)).hit_ratio
                    srv = run["server"]
                    if srv.get("wrong_blocks") or srv.get("errors"):
                        failed = True
                        print("  !! %s: wrong %s, errors %s: %s" % (
                            name, srv.get("wrong_blocks"), srv.get("errors"),
                            "; ".join(srv.get("error_messages", []))), flush=True)
                wl["runs"].append(run)
                print(report.row(name, run), flush=True)
                with open(json_path, "w") as f:  # after every run: a cut-short run keeps data
                    json.dump(results, f, indent=1, sort_keys=False)
    meta["wall_s"] = round(time.monotonic() - t_all, 1)
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    png = write_reports(results, a.out_dir, a.name)
    print("wrote %s, %s (%.0f s)" % (json_path, png, meta["wall_s"]), flush=True)
    return 1 if failed else 0


def write_reports(results: dict[str, Any], out_dir: str, name: str) -> str:
    """Writes <name>.md (the table) and <name>.png (the curves); returns the PNG's path, or
    "(none)" when matplotlib is missing."""
    meta = results["meta"]
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write("Command: `%s`\n\nCommit %s (server sources: %s); %s (avx512f: %s), %s CPUs; "
                "%s s.\n\n%s\n" % (
                    meta["command"], meta["git_commit"], meta.get("server_source_commit", "?"),
                    meta["cpu"], meta["avx512f"], meta["cpus"], meta.get("wall_s", "?"),
                    report.markdown(results)))
    png = os.path.join(out_dir, name + ".png")
    try:
        report.plot(results, png)
    except ImportError as e:
        print("no plot (%s): pip install -r tools/requirements.txt" % e, file=sys.stderr)
        png = "(none)"
    return png


if __name__ == "__main__":
    sys.exit(main())
