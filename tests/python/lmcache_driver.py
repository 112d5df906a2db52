"""One LMCache engine instance (real LMCache, CPU) whose remote storage is the turbokv plugin;
run as its own process by test_lmcache_plugin.py, in a venv with LMCache and turbokv-client.

    python lmcache_driver.py store|retrieve CONFIG.yaml KV.npy TOKENS.npy OUT.json

The engine is built the way LMCache's vLLM integration builds it (LMCacheEngineBuilder from a
YAML config, ``post_init``), with one test seam: LMCache's "GPU connector" (the copy between the
serving engine's paged KV cache and LMCache's chunk buffers) is a CPU copy from / into a dense
``[2][num_layers][tokens][heads * head_dim]`` tensor, because LMCache's own connectors need
CUDA. Everything after it is LMCache's: token database and chunk hashing, storage manager,
local CPU buffer, RemoteBackend, the plugin loader, and the plugin.

* store: ``engine.store(tokens)`` for the whole prompt, then waits until the turbokv server
  holds every chunk (RemoteBackend puts are asynchronous). OUT: chunks stored, seconds.
* retrieve: ``engine.lookup`` of the prompt and of a prompt that diverges after its first
  chunk, ``engine.retrieve`` of the prompt into a zeroed tensor, and the plugin's existence
  checks for each stored key and for keys never stored. OUT: hit tokens, retrieved mask, the
  retrieved tensor (``OUT.npy``), existence results, seconds.
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.cache_engine import LMCacheEngineBuilder
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.gpu_connector import GPUConnectorInterface
from lmcache.v1.metadata import LMCacheMetadata

MODEL = "SmolLM2-135M-fixture"


class DenseCPUConnector(GPUConnectorInterface):
    """The test seam: chunks are copied from kwargs["kv"] on store and into kwargs["kv_out"]
    on retrieve, both ``[2][L][T][H*D]``, token range [start, end)."""

    def __init__(self, kv_shape):
        self.kv_shape = kv_shape  # (L, 2, chunk, H, D)

    def from_gpu(self, memory_obj, start, end, **kwargs):
        memory_obj.tensor.copy_(kwargs["kv"][:, :, start:end])

    def to_gpu(self, memory_obj, start, end, **kwargs):
        kwargs["kv_out"][:, :, start:end].copy_(memory_obj.tensor)

    def batched_from_gpu(self, memory_objs, starts, ends, **kwargs):
        for m, s, e in zip(memory_objs, starts, ends):
            self.from_gpu(m, s, e, **kwargs)

    def batched_to_gpu(self, memory_objs=None, starts=None, ends=None, **kwargs):
        for m, s, e in zip(memory_objs, starts, ends):
            self.to_gpu(m, s, e, **kwargs)

    def get_shape(self, num_tokens):
        L, _, _, H, D = self.kv_shape
        return torch.Size([2, L, num_tokens, H * D])


def build(config_path, kv):
    config = LMCacheEngineConfig.from_file(config_path)
    L, _, _, H, D = kv.shape  # [L][2][T][H][D]
    shape = (L, 2, config.chunk_size, H, D)
    metadata = LMCacheMetadata(model_name=MODEL, world_size=1, local_world_size=1, worker_id=0,
                               local_worker_id=0, kv_dtype=torch.float16, kv_shape=shape,
                               chunk_size=config.chunk_size)
    engine = LMCacheEngineBuilder.get_or_create(
        "turbokv-test", config, metadata, DenseCPUConnector(shape),
        lambda t, r: None, lambda o, r: o)
    engine.post_init()
    return engine, config, metadata


def plugin(engine):
    backends = engine.storage_manager.storage_backends
    remote = [b for name, b in backends.items() if name.startswith("RemoteBackend")]
    assert remote and remote[0].connection is not None, sorted(backends)
    conn = remote[0].connection  # LMCache wraps it in an InstrumentedRemoteConnector
    return getattr(conn, "_connector", conn)


def keys_of(engine, tokens):
    return [k for _, _, k in engine.token_database.process_tokens(tokens)]


def main():
    mode, config_path, kv_path, tokens_path, out_path = sys.argv[1:6]
    kv_np = np.load(kv_path)  # [L][2][T][H][D] fp16
    L, _, T, H, D = kv_np.shape
    kv = torch.from_numpy(np.ascontiguousarray(kv_np.transpose(1, 0, 2, 3, 4))).reshape(
        2, L, T, H * D)
    tokens = torch.from_numpy(np.load(tokens_path).astype(np.int64))
    engine, config, metadata = build(config_path, kv_np)
    conn = plugin(engine)
    out = {"mode": mode, "connector": type(conn).__name__}
    t0 = time.perf_counter()
    if mode == "store":
        engine.store(tokens, kv=kv)
        n = T // config.chunk_size
        deadline = time.monotonic() + 120
        while conn.counters()["puts"] + conn.counters()["put_failures"] < n:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        out.update(chunks=n, counters=conn.counters(), seconds=time.perf_counter() - t0)
    elif mode == "retrieve":
        hit = engine.lookup(tokens)
        other = tokens.clone()
        other[config.chunk_size:] += 1  # same first chunk, then different tokens
        hit_other = engine.lookup(other)
        kv_out = torch.zeros_like(kv)
        t1 = time.perf_counter()
        mask = engine.retrieve(tokens, kv_out=kv_out)
        t_retrieve = time.perf_counter() - t1
        stored = keys_of(engine, tokens)
        never = keys_of(engine, other)[1:]
        foreign = CacheEngineKey(MODEL, 1, 0, 12345, torch.float16)
        out.update(hit_tokens=int(hit), hit_tokens_diverging=int(hit_other),
                   retrieved=int(mask.sum()), retrieve_seconds=t_retrieve,
                   exists_stored=[bool(conn.exists_sync(k)) for k in stored],
                   exists_never=[bool(conn.exists_sync(k)) for k in never + [foreign]],
                   batched_contains=int(conn.batched_contains(stored + never)),
                   counters=conn.counters(), seconds=time.perf_counter() - t0)
        back = kv_out.reshape(2, L, T, H, D).numpy().transpose(1, 0, 2, 3, 4)
        np.save(out_path + ".npy", np.ascontiguousarray(back))
    else:
        raise SystemExit("unknown mode " + mode)
    with open(out_path, "w") as f:
        json.dump(out, f)
    LMCacheEngineBuilder.destroy("turbokv-test")
    os._exit(0)  # LMCache leaves non-daemon threads behind


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
