#!/usr/bin/env python3
"""Where a HiCache load from turbokv spends its time: SGLang's host pool filled by
``TurboKVStorage.batch_get_v1`` against the client's own ``get_blocks`` of the same blocks.

A real ``turbokv-server`` (127.0.0.1, fresh data dir) holds ``--pages`` pages of SmolLM2-135M's
geometry by default (30 layers, 3 KV heads, head_dim 64, page 64 tokens, fp32: 2.95 MB a page),
stored by the backend from an SGLang 0.5.23 host pool (``MHATokenToKVPoolHost`` built on CPU by
SGLang's constructors, ``--layout``). Then, ``--repeat`` rounds, the cases in turn:

  client      ``Client.get_blocks(ns, hashes, out=staging)`` into one contiguous buffer: the
              anchor (what the client alone achieves for these blocks)
  copy        the backend's copy from such a buffer into the host pool's page views only
  load        ``TurboKVStorage.batch_get_v1(keys, host_indices)``: the whole load as SGLang's
              cache controller calls it (fetch + copy into the pool)
  load-flat   ``TurboKVStorage.batch_get`` into SGLang's flat pages (the page-copy interface)

Prints, per case, the median seconds and MB/s (raw bytes moved) and each case's median over the
client's. Run with SGLang importable next to the engine venv's torch::

    PYTHONPATH=$(bash tools/setup_engines.sh --print-sglang-api) \\
      build/engine-venv/bin/python bench/sglang_load.py --build build [--pages 16] [--repeat 7]

Client and server share the machine (gRPC on loopback).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(binary: str, work: str) -> tuple[subprocess.Popen, str]:
    port_file = os.path.join(work, "port")
    log = open(os.path.join(work, "server.log"), "ab")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--port-file", port_file,
                             "--data-dir", os.path.join(work, "data"), "--metrics-listen", "",
                             "--log-level", "error"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("turbokv-server exited with %s" % proc.returncode)
        try:
            with open(port_file) as f:
                return proc, "127.0.0.1:%d" % int(f.readline())
        except (OSError, ValueError):
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError("turbokv-server did not start")


def host_pool(layout: str, pages: int, layers: int, heads: int, head_dim: int, page: int):
    """An SGLang MHA host pool on CPU (fp32, not pinned) with at least ``2 * pages`` pages."""
    import torch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
    dev = MHATokenToKVPool(pages * page, page, torch.float32, heads, head_dim, layers, "cpu",
                           False, start_layer=0, end_layer=layers - 1)
    pool = MHATokenToKVPoolHost(dev.get_device_pool_infos()[0].buffer_info, 2.0, 0, page, layout,
                                pin_memory=False, device_capacity_tokens=dev.size,
                                start_layer=dev.start_layer, end_layer=dev.end_layer,
                                write_back_staging=dev.hicache_write_back_staging)
    pool.kv_buffer.normal_()
    return pool


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--pages", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--layout", default="page_first_direct")
    ap.add_argument("--preset", default="raw")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--json", default="", help="also write the figures here")
    args = ap.parse_args()
    sys.path[:0] = [os.path.join(REPO, "client", "python"), os.path.join(args.build, "python")]
    import torch
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    from turbokv import Client
    from turbokv.integrations.sglang import TurboKVStorage, block_hash
    from turbokv.integrations.sglang_layout import page_block_view

    torch.set_num_threads(1)   # SGLang's I/O threads copy on one core each
    work = tempfile.mkdtemp(prefix="turbokv-sglang-load-")
    proc, address = start_server(os.path.join(args.build, "bin", "turbokv-server"), work)
    try:
        n, page = args.pages, args.page
        pool = host_pool(args.layout, n, args.layers, args.heads, args.head_dim, page)
        extra = {"backend_name": "turbokv", "module_path": "turbokv.integrations.sglang",
                 "class_name": "TurboKVStorage", "interface_v1": 1, "server": address,
                 "preset": args.preset}
        cfg = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                   attn_cp_size=1, is_mla_model=False,
                                   enable_storage_metrics=False, is_page_first_layout=False,
                                   model_name="bench-model", extra_config=extra)
        backend = TurboKVStorage(cfg, {})
        backend.register_mem_pool_host(pool)
        keys = ["%064x" % (0xB10C + i) for i in range(n)]
        src = torch.arange(0, n * page, dtype=torch.int64)
        dst = torch.arange(n * page, 2 * n * page, dtype=torch.int64)
        assert all(backend.batch_set_v1(keys, src))
        g = backend.geom
        ns = backend._namespace()
        hashes = [block_hash(k) for k in keys]
        client = Client(address)
        staging = torch.empty((n,) + g.block_shape, dtype=g.dtype)
        views = [page_block_view(pool.kv_buffer, g, int(i)) for i in dst[::page]]
        flats = [pool.get_dummy_flat_data_page() for _ in range(n)]
        nbytes = n * g.block_nbytes

        def client_get() -> None:
            got = client.get_blocks(ns, hashes, out=staging)
            assert all(b is not None for b in got)

        def copy() -> None:
            for j in range(n):
                views[j].copy_(staging[j])

        def load() -> None:
            assert all(backend.batch_get_v1(keys, dst))

        def load_flat() -> None:
            assert all(f is not None for f in backend.batch_get(keys, flats))

        cases: dict[str, Callable[[], None]] = {"client": client_get, "copy": copy,
                                                "load": load, "load-flat": load_flat}
        times: dict[str, list[float]] = {c: [] for c in cases}
        for fn in cases.values():
            fn()                                          # warm-up
        for _ in range(args.repeat):
            for c, fn in cases.items():
                t0 = time.perf_counter()
                fn()
                times[c].append(time.perf_counter() - t0)
        for j in range(n):                                # the load put the right pages there
            assert torch.equal(page_block_view(pool.kv_buffer, g, int(dst[j * page])),
                               page_block_view(pool.kv_buffer, g, int(src[j * page])))
        anchor = statistics.median(times["client"])
        out = {"pages": n, "page_bytes": g.block_nbytes, "layout": args.layout,
               "preset": args.preset, "repeat": args.repeat, "cases": {}}
        print("%d pages of %.2f MB (%s, %s), median of %d" % (
            n, g.block_nbytes / 1e6, args.layout, args.preset, args.repeat))
        print("%-10s %10s %10s %10s" % ("case", "seconds", "MB/s", "x client"))
        for c, ts in times.items():
            m = statistics.median(ts)
            out["cases"][c] = {"median_s": m, "mb_per_s": nbytes / 1e6 / m,
                               "over_client": m / anchor}
            print("%-10s %10.4f %10.0f %10.2f" % (c, m, nbytes / 1e6 / m, m / anchor))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        backend.close()
        client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
