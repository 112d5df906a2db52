#!/usr/bin/env python3
"""Table of bench/service_vs_redis.sh: median of the runs per cell, turbokv / Redis ratios.

Usage: service_vs_redis_report.py CELLS.jsonl [--profiles DIR]
With --profiles, also summarizes perf reports (profile-*.txt in DIR) into shares of the
server's CPU samples by category (codec, memcpy/memset, CRC32C, xxh3, kernel, gRPC, RocksDB).
"""
import argparse
import collections
import json
import os
import re
import statistics

SIZES = [("2m", "2 MiB"), ("368k", "368,640 B"), ("8m", "8 MiB")]


def median(cells, key):
    vals = [c[key] for c in cells]
    return statistics.median(vals) if vals else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cells")
    ap.add_argument("--profiles")
    args = ap.parse_args()
    groups = collections.defaultdict(list)
    runs = set()
    for line in open(args.cells):
        c = json.loads(line)
        runs.add(c["run"])
        groups[(c["label"], c["phase"], c["size"], c["concurrency"])].append(c)

    def g(label, phase, size, conc, key="logical_gb_per_s"):
        return median(groups.get((label, phase, size, conc), []), key)

    print(f"Median of {len(runs)} interleaved runs; GB/s of logical (raw fp16) block bytes; "
          "ratio = turbokv / Redis in the same run.\n")
    print("| block | conc | put turbokv k4v4 GB/s | Redis none | Redis AOF | put ratio none / AOF "
          "| get RAW GB/s | get PACKED GB/s | Redis get | RAW ratio | PACKED ratio "
          "| put p50/p99 ms | RAW get p50/p99 ms | PACKED p50/p99 ms | Redis get p50/p99 ms |")
    print("|" + " --- |" * 15)
    for size, name in SIZES:
        for conc in (1, 4, 8):
            put = g("turbokv", "put", size, conc)
            rn = g("redis-none", "put", size, conc)
            ra = g("redis-aof", "put", size, conc)
            graw = g("turbokv-raw", "get", size, conc)
            gpk = g("turbokv-packed", "get", size, conc)
            rg = g("redis-none", "get", size, conc)
            if all(v != v for v in (put, graw, gpk, rg)):
                continue  # a cell the run left out (--sizes / --concurrency)
            lat = lambda label, phase: "%.1f / %.1f" % (g(label, phase, size, conc, "p50_ms"),
                                                       g(label, phase, size, conc, "p99_ms"))
            print(f"| {name} | {conc} | {put:.3f} | {rn:.3f} | {ra:.3f} | "
                  f"{put / rn:.2f}x / {put / ra:.2f}x | {graw:.3f} | {gpk:.3f} | {rg:.3f} | "
                  f"{graw / rg:.2f}x | {gpk / rg:.2f}x | {lat('turbokv', 'put')} | "
                  f"{lat('turbokv-raw', 'get')} | {lat('turbokv-packed', 'get')} | "
                  f"{lat('redis-none', 'get')} |")
    print()
    # CPU per GB: client + server CPU seconds over the timed part, per logical GB. Unlike GB/s
    # it does not swing with what else the machine runs (the ratio is Redis / turbokv, so > 1
    # means turbokv spends less CPU per byte).
    def cpu(label, phase, size, conc):
        cells = groups.get((label, phase, size, conc), [])
        per = [(c["client_cpu_s"] + c["server_cpu_s"]) / (c["logical_gb_per_s"] * c["seconds"])
               for c in cells if "client_cpu_s" in c and c["logical_gb_per_s"] > 0]
        return statistics.median(per) if per else float("nan")
    print("CPU seconds (client + server) per logical GB, median of the runs; ratio = Redis / "
          "turbokv (> 1: turbokv spends less CPU per byte).\n")
    print("| block | conc | put turbokv | Redis none | Redis AOF | put ratio none / AOF "
          "| get RAW | get PACKED | Redis get | RAW ratio | PACKED ratio |")
    print("|" + " --- |" * 11)
    for size, name in SIZES:
        for conc in (1, 4, 8):
            put, rn, ra = (cpu(l, "put", size, conc) for l in ("turbokv", "redis-none", "redis-aof"))
            graw, gpk, rg = (cpu(l, "get", size, conc)
                             for l in ("turbokv-raw", "turbokv-packed", "redis-none"))
            if all(v != v for v in (put, graw, gpk)):
                continue
            print(f"| {name} | {conc} | {put:.2f} | {rn:.2f} | {ra:.2f} | {rn / put:.2f}x / "
                  f"{ra / put:.2f}x | {graw:.2f} | {gpk:.2f} | {rg:.2f} | {rg / graw:.2f}x | "
                  f"{rg / gpk:.2f}x |")
    print()
    raw = g("turbokv-raw", "prefix", "2m", 1, "p50_ms")
    pk = g("turbokv-packed", "prefix", "2m", 1, "p50_ms")
    rd = g("redis-none", "prefix", "2m", 1, "p50_ms")
    print("Prefix load, 64 Llama-3-8B blocks (1,024 tokens, 128 MiB fp16) in one call, p50 ms: "
          f"turbokv RAW {raw:.1f} ({rd / raw:.2f}x Redis), PACKED {pk:.1f} ({rd / pk:.2f}x Redis), "
          f"Redis 64 pipelined GETs {rd:.1f}.")
    print("Lookup of a 1,000-block chain: p50 %.3f ms, p99 %.3f ms." %
          (g("turbokv", "lookup", "2m", 1, "p50_ms"), g("turbokv", "lookup", "2m", 1, "p99_ms")))
    if args.profiles:
        print()
        summarize_profiles(args.profiles)


CATEGORIES = [
    ("codec", re.compile(r"Encode|Decode|Section|Hadamard|Quantiz|Fwht|turbokv::codec")),
    ("CRC32C (RocksDB)", re.compile(r"crc32c|Crc32c", re.I)),
    ("xxh3 (turbokv checksum)", re.compile(r"XXH3|xxh", re.I)),
    ("memcpy/memset", re.compile(r"memcpy|memmove|memset|__memcpy|copy_user", re.I)),
    ("gRPC / protobuf", re.compile(r"grpc|protobuf|absl|chttp2", re.I)),
    ("RocksDB", re.compile(r"rocksdb")),
    ("kernel", re.compile(r"\[kernel|\[k\]")),
]


def summarize_profiles(d):
    print("Server CPU profile (perf, 2 MiB blocks, concurrency 4), share of samples:\n")
    print("| phase | " + " | ".join(c for c, _ in CATEGORIES) + " | other |")
    print("|" + " --- |" * (len(CATEGORIES) + 2))
    for f in sorted(os.listdir(d)):
        if not (f.startswith("profile-") and f.endswith(".txt")):
            continue
        shares = collections.Counter()
        for line in open(os.path.join(d, f)):
            m = re.match(r"\s+([\d.]+)%\s+(.*)", line)
            if not m:
                continue
            pct, rest = float(m.group(1)), m.group(2)
            for name, rx in CATEGORIES:
                if rx.search(rest):
                    shares[name] += pct
                    break
            else:
                shares["other"] += pct
        cols = " | ".join("%.0f%%" % shares[c] for c, _ in CATEGORIES)
        print(f"| {f[8:-4]} | {cols} | {shares['other']:.0f}% |")


if __name__ == "__main__":
    main()
