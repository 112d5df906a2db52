#!/usr/bin/env python3
"""Codec quality against the Lloyd-Max theory and speed next to memcpy / zstd-1.

Runs `turbokv-codec eval` on 100,000 random head vectors (head_dim 128) for every
g in {32, 64, 128} and b in {1, 2, 3, 4}, with norm correction off (the theory's setting) and on,
then each preset on the same vectors and on a real-KV .npy, and prints a markdown table.

    python3 bench/codec_theory.py --build build [--real tests/fixtures/smollm2_kv_64_fp16.npy]

rel_mse / theory is the ratio of the measured relative MSE to g*MSE of the (g, b) codebook
(docs/architecture.md, "The codec"); speeds are single-thread GB/s of fp16 source bytes.
"""
import argparse
import json
import subprocess
import sys


def run(tool, *args):
    out = subprocess.run([tool, "eval", "--json", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--vectors", type=int, default=100000)
    ap.add_argument("--real", default="tests/fixtures/smollm2_kv_64_fp16.npy")
    ap.add_argument("--min-seconds", default="0.3")
    a = ap.parse_args()
    tool = f"{a.build}/bin/turbokv-codec"
    common = ["--source", "random", "--vectors", str(a.vectors), "--head-dim", "128", "--seed", "7"]
    print("| g | b | rel_mse (nc off) | theory g·MSE | ratio | mean_cosine off | mean_cosine on | bpv |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    worst = 0.0
    for g in (32, 64, 128):
        for b in (1, 2, 3, 4):
            off = run(tool, *common, "--group-size", str(g), "--bits", str(b), "--norm-correction", "off",
                      "--min-seconds", "0.01")
            on = run(tool, *common, "--group-size", str(g), "--bits", str(b), "--min-seconds", "0.01")
            ratio = off["rel_mse"] / off["theory_g_mse_k"]
            worst = max(worst, abs(ratio - 1))
            print(f"| {g} | {b} | {off['rel_mse']:.6f} | {off['theory_g_mse_k']:.6f} | {ratio:.4f} | "
                  f"{off['mean_cosine']:.6f} | {on['mean_cosine']:.6f} | {off['bits_per_value']:.4f} |")
    print(f"\nlargest |ratio - 1|: {worst:.4f}\n")
    print("| preset | source | rel_mse | mean_cosine | bpv | encode GB/s | decode GB/s | memcpy GB/s | zstd-1 GB/s | zstd-1 ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for preset in ("k8v4", "k4v4-g32", "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "raw"):
        for src in ("random", a.real):
            args = common if src == "random" else ["--source", src]
            r = run(tool, *args, "--preset", preset, "--min-seconds", a.min_seconds)
            name = "random" if src == "random" else src.split("/")[-1]
            print(f"| {preset} | {name} | {r['rel_mse']:.6f} | {r['mean_cosine']:.6f} | {r['bits_per_value']:.4f} | "
                  f"{r['encode_gbps']:.3f} | {r['decode_gbps']:.3f} | {r['memcpy_gbps']:.2f} | "
                  f"{r['zstd1_gbps']:.3f} | {r['zstd1_ratio']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
