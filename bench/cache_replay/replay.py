"""Replays a prefix-chain trace against real turbokv servers and measures what they do.

Per request (time-compressed by default: back to back): ``Lookup(chain)``, ``GetBlocks`` of
the matched prefix as PACKED bytes, then ``PutBlocks`` of the rest of the chain. The server's
hit for the request is the number of leading blocks that Lookup matched *and* Get returned
with the expected bytes; the put starts after them (an engine recomputes everything after its
first miss).

Block content (:class:`BlockContent`): block id -> a deterministic pseudo-random fp16 block
``[1][2][512][1][64]`` (rows of a fixed pool of random head vectors, picked by a splitmix64
hash of (id, row)). Blocks are put RAW (the server encodes them) unless ``put_encoding`` is
"packed" (the replay encodes them with the local codec and puts the packed bytes). Every
fetched block is checked against the local codec's encoding of the same raw block
(``turbokv.codec.LocalCodec``, the server's codec library through its C ABI, same namespace
id and codec parameters): byte for byte on the first fetch of a block id, by a BLAKE2b-256
digest of those bytes afterwards (:class:`_Expected`). A difference is a *wrong* block.

Measured (see docs/cache.md for the exact definitions): hits, wrong blocks, errors, Lookup+Get
and Put latency, and every ``sample_every`` requests the servers' Stats (live packed bytes,
used bytes, blocks) and the allocated bytes of their data directories; at the end each
server's /proc/PID/io.
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .server import Server

SHAPE = (1, 2, 512, 1, 64)  # [num_layers][2][block_tokens][num_kv_heads][head_dim]
NAMESPACE: dict[str, Any] = dict(model="cache-replay", num_layers=1, num_kv_heads=1, head_dim=64,
                 block_tokens=512, dtype="fp16")
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class BlockContent:
    """Deterministic raw blocks and block hashes from block ids.

    ``raw(id)``: fp16 ``SHAPE``; row r (one head vector of 64) is ``pool[splitmix64(id << 11
    | r) % pool_size]``, the pool being ``pool_size`` standard-normal vectors from numpy's
    PCG64 seeded with ``seed``. ``block_hash(id)``: 16 bytes, BLAKE2b of the id (8 bytes LE).
    """

    def __init__(self, seed: int = 0x7475726B, pool_size: int = 4096):
        rng = np.random.Generator(np.random.PCG64(seed))
        self.pool = rng.standard_normal((pool_size, SHAPE[-1]), dtype=np.float32).astype(
            np.float16)
        self.rows = int(np.prod(SHAPE[:-1]))
        self._row_ids = np.arange(self.rows, dtype=np.uint64)
        self._hashes: dict[int, bytes] = {}

    def raw(self, block_id: int) -> np.ndarray:
        keys = _splitmix64((np.uint64(block_id) << np.uint64(11)) | self._row_ids)
        idx = (keys % np.uint64(len(self.pool))).astype(np.intp)
        return self.pool[idx].reshape(SHAPE)

    def block_hash(self, block_id: int) -> bytes:
        h = self._hashes.get(block_id)
        if h is None:
            h = hashlib.blake2b(int(block_id).to_bytes(8, "little"), digest_size=16).digest()
            self._hashes[block_id] = h
        return h


def codec_params_from_descriptor(desc: dict[str, Any]):
    """The explicit ``turbokv.codec.CodecParams`` of a registered namespace's canonical
    descriptor (``NamespaceInfo.descriptor``). Raises ValueError when the descriptor has no
    explicit key/value sections."""
    from turbokv import codec as tc
    c = desc["codec"]
    if not c.get("key") or not c.get("value"):
        raise ValueError("descriptor codec has no explicit sections: %r" % (c,))
    kw = dict(key_bits=c["key"]["bits"], key_group_size=c["key"]["group_size"],
              key_qjl=c["key"]["qjl"], value_bits=c["value"]["bits"],
              value_group_size=c["value"]["group_size"], value_qjl=c["value"]["qjl"],
              protected_first_layers=c["protected_first_layers"],
              protected_last_layers=c["protected_last_layers"],
              protected_bits=c["protected_bits"],
              norm_correction=not c["disable_norm_correction"])
    if c.get("rotation_seed") is not None:
        kw["rotation_seed"] = c["rotation_seed"]
    if c.get("qjl_seed") is not None:
        kw["qjl_seed"] = c["qjl_seed"]
    return tc.CodecParams(**kw)


class _Expected:
    """The packed bytes a fetched block must have: the local codec's encoding of
    ``content.raw(id)``. The first fetch of an id is compared byte for byte with a fresh
    encoding; its BLAKE2b-256 digest is kept, and later fetches of the id are compared by
    digest (a local encode costs ~0.5 ms, a digest ~0.05 ms)."""

    def __init__(self, codec: Any, content: BlockContent,
                 digests: dict[int, bytes] | None = None):
        self._codec = codec
        self._content = content
        self._digests: dict[int, bytes] = {} if digests is None else digests

    def matches(self, block_id: int, data: bytes) -> bool:
        d = self._digests.get(block_id)
        if d is not None:
            return hashlib.blake2b(data, digest_size=32).digest() == d
        want = self._codec.encode(self._content.raw(block_id))
        self._digests[block_id] = hashlib.blake2b(want, digest_size=32).digest()
        return data == want


PRESETS = ("k8v6", "k8v4", "k6v6", "k6v5", "k6v4", "k5v4", "k4v4-g32", "k4v3-g32", "k3v3-g32",
           "k3v2-g32-qjl", "k3v2", "raw")


def preset_name(desc: dict[str, Any]) -> str:
    """The preset whose parameters a canonical descriptor's codec has ("custom" for none):
    the server resolves the default preset to explicit sections and leaves the name empty."""
    from turbokv import codec as tc
    if desc["codec"].get("preset"):
        return desc["codec"]["preset"]
    params = codec_params_from_descriptor(desc)
    for name in PRESETS:
        try:
            if tc.preset_params(name, desc["head_dim"]) == params:
                return name
        except tc.CodecError:
            continue
    return "custom"


@dataclasses.dataclass
class ReplayOptions:
    """How to replay. ``sample_every``: requests between Stats/disk samples (the last request
    is always sampled). ``real_time``: wait for each request's timestamp / ``speed``.
    ``put_encoding``: "raw" (the server encodes) or "packed" (encoded here).
    ``max_error_messages``: how many distinct error texts to keep. ``segment_blocks``: the
    ShardedClient's placement segment with several nodes (turbokv.sharding; 1: each block by
    its own hash). ``split_at``: a request index; hits before and after it are also reported
    apart (``hit_ratio_before`` / ``hit_ratio_after``; 0: not split)."""
    sample_every: int = 10
    real_time: bool = False
    speed: float = 1.0
    put_encoding: str = "raw"
    max_error_messages: int = 5
    progress_every_s: float = 0.0  # > 0: print a progress line this often
    segment_blocks: int = 1
    split_at: int = 0


def _pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def replay(servers: Sequence[Server], requests: Sequence[Any], content: BlockContent,
           opts: ReplayOptions, label: str = "",
           digests: dict[int, bytes] | None = None,
           joiner: Server | None = None) -> dict[str, Any]:
    """Replays ``requests`` (trace.Request) against started ``servers`` (one: a Client; more:
    a ShardedClient over all of them). Returns the server-side figures (docs/cache.md).
    ``digests``: block id -> digest of its expected packed bytes, shared by the runs of one
    workload (filled here; the namespace id and codec must be the same across them).
    ``joiner``: a server not started yet that joins the cluster before request
    ``opts.split_at`` (started there and added to the ShardedClient's endpoints; capacity
    figures then count it from the start, so they are a lower bound).

    Raises turbokv errors only from RegisterNamespace; per-request failures are counted.
    """
    from turbokv import Client, ShardedClient
    from turbokv.codec import LocalCodec

    servers = list(servers)
    capacity = sum(s.capacity_bytes for s in servers) + (joiner.capacity_bytes if joiner else 0)
    if len(servers) == 1 and joiner is None:
        client: Any = Client(servers[0].address, timeout=120.0)
    else:
        client = ShardedClient(",".join(s.address for s in servers), timeout=120.0,
                               segment_blocks=opts.segment_blocks)
    try:
        info = client.register_namespace(**NAMESPACE)
        ns = info.namespace_id
        codec = LocalCodec(NAMESPACE["num_layers"], NAMESPACE["block_tokens"],
                           NAMESPACE["num_kv_heads"], NAMESPACE["head_dim"],
                           codec_params_from_descriptor(info.descriptor), "fp16", ns)
        if codec.packed_bytes != info.packed_block_bytes:
            raise RuntimeError("local codec packs %d bytes a block, the server %d"
                               % (codec.packed_bytes, info.packed_block_bytes))
        expect = _Expected(codec, content, digests)
        io0 = [s.io() for s in servers]
        hit_blocks = ref_blocks = lookup_blocks = 0
        split_hits = split_refs = 0  # at the split: hits and references before it
        wrong = missing = errors = 0
        error_messages: list[str] = []
        put_ok = put_failed = put_stored_bytes = 0
        lat_lookup_get: list[float] = []
        lat_put: list[float] = []
        samples: list[dict[str, float]] = []
        first_eviction_sample: int | None = None

        def error(msg: str) -> None:
            nonlocal errors
            errors += 1
            if msg not in error_messages and len(error_messages) < opts.max_error_messages:
                error_messages.append(msg)

        def sample(i: int) -> None:
            nonlocal first_eviction_sample
            try:
                st = client.stats()
            except Exception as e:  # a sample lost is an error, not the end of the run
                error("Stats: %s" % e)
                return
            if st.nodes and any(v is None for v in st.nodes.values()):
                error("Stats: node(s) %s did not answer"
                      % ", ".join(sorted(k for k, v in st.nodes.items() if v is None)))
            nss = st.namespace(ns)
            live = nss.stored_bytes if nss is not None else 0
            blocks = nss.blocks if nss is not None else 0
            samples.append(dict(request=i, live_bytes=live, used_bytes=st.used_bytes,
                                blocks=blocks, evicted_blocks=st.evicted_blocks,
                                disk_bytes=sum(s.disk_bytes() for s in servers)))
            if first_eviction_sample is None and st.evicted_blocks > 0:
                first_eviction_sample = len(samples) - 1

        t_start = time.monotonic()
        t_last_progress = t_start
        ts0 = requests[0].timestamp if requests else 0
        for i, req in enumerate(requests):
            if opts.real_time:
                due = t_start + (req.timestamp - ts0) / 1000.0 / opts.speed
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if opts.split_at and i == opts.split_at:
                split_hits, split_refs = hit_blocks, ref_blocks
                if joiner is not None:
                    joiner.start()
                    io0.append(joiner.io())
                    servers.append(joiner)
                    client.set_endpoints(",".join(s.address for s in servers))
            chain = req.hash_ids
            hashes = [content.block_hash(b) for b in chain]
            ref_blocks += len(chain)
            hit = 0
            t0 = time.perf_counter()
            try:
                m = client.lookup(ns, hashes).matched_blocks
                got = client.get_packed_blocks(ns, hashes[:m]) if m else []
                lat_lookup_get.append(time.perf_counter() - t0)
                lookup_blocks += m
                for b, data in zip(chain, got):
                    if data is None:
                        missing += 1
                        break
                    if not expect.matches(b, data):
                        wrong += 1
                        break
                    hit += 1
            except Exception as e:
                error("Lookup/Get: %s" % e)
            hit_blocks += hit
            rest = chain[hit:]
            if rest:
                t1 = time.perf_counter()
                try:
                    # Where hashes[hit:] sit in their chain: a cluster places by segment.
                    ctx = client.chain_context(hashes, hit)
                    if opts.put_encoding == "packed":
                        results = client.put_packed_blocks(
                            ns, hashes[hit:], [codec.encode(content.raw(b)) for b in rest],
                            chain=ctx)
                    else:
                        results = client.put_blocks(
                            ns, hashes[hit:], np.stack([content.raw(b) for b in rest]),
                            chain=ctx)
                    lat_put.append(time.perf_counter() - t1)
                    for r in results:
                        if r.ok:
                            put_ok += 1
                            put_stored_bytes += r.stored_bytes
                        else:
                            put_failed += 1
                            error("Put: %s %s" % (r.code.name, r.message))
                except Exception as e:
                    error("Put: %s" % e)
            if (i + 1) % opts.sample_every == 0 or i + 1 == len(requests):
                sample(i + 1)
            now = time.monotonic()
            if opts.progress_every_s > 0 and now - t_last_progress >= opts.progress_every_s:
                t_last_progress = now
                print("    %s %d/%d requests, hit %.3f, %.0f s" % (
                    label, i + 1, len(requests), hit_blocks / max(ref_blocks, 1),
                    now - t_start), flush=True)
        wall = time.monotonic() - t_start
        io1 = [s.io() for s in servers]
        dead = [s.address for s in servers if not s.alive()]
        if dead:
            error("server(s) died: %s" % ", ".join(dead))
    finally:
        client.close()

    def mean_max(key: str, rows: list[dict[str, float]]):
        vals = [r[key] for r in rows]
        return (float(np.mean(vals)) if vals else None, float(max(vals)) if vals else None)

    steady = samples[first_eviction_sample:] if first_eviction_sample is not None else []
    live_mean, live_max = mean_max("live_bytes", samples)
    steady_mean, _ = mean_max("live_bytes", steady)
    used_mean, used_max = mean_max("used_bytes", samples)
    blocks_mean, blocks_max = mean_max("blocks", samples)
    _, disk_max = mean_max("disk_bytes", samples)
    write_bytes = sum(b["write_bytes"] - a["write_bytes"] for a, b in zip(io0, io1))
    cancelled = sum(b["cancelled_write_bytes"] - a["cancelled_write_bytes"]
                    for a, b in zip(io0, io1))

    def ratio(x: float | None) -> float | None:
        return None if x is None else x / capacity

    return dict(
        hit_blocks=hit_blocks, ref_blocks=ref_blocks,
        hit_ratio=hit_blocks / ref_blocks if ref_blocks else 0.0,
        split_at=opts.split_at or None,
        hit_ratio_before=split_hits / split_refs if opts.split_at and split_refs else None,
        hit_ratio_after=((hit_blocks - split_hits) / (ref_blocks - split_refs)
                         if opts.split_at and ref_blocks > split_refs else None),
        nodes_at_end=len(servers),
        lookup_matched_blocks=lookup_blocks, wrong_blocks=wrong,
        missing_after_lookup=missing, errors=errors, error_messages=error_messages,
        put_ok_blocks=put_ok, put_failed_blocks=put_failed,
        accepted_packed_bytes=put_stored_bytes,
        live_over_capacity_mean=ratio(live_mean), live_over_capacity_max=ratio(live_max),
        live_over_capacity_steady_mean=ratio(steady_mean),
        used_over_capacity_mean=ratio(used_mean), used_over_capacity_max=ratio(used_max),
        disk_over_capacity_max=ratio(disk_max), disk_bytes_max=disk_max,
        blocks_held_mean=blocks_mean, blocks_held_max=blocks_max,
        evicted_blocks=samples[-1]["evicted_blocks"] if samples else 0,
        write_bytes=write_bytes, cancelled_write_bytes=cancelled,
        write_amplification=write_bytes / put_stored_bytes if put_stored_bytes else None,
        write_amplification_net=((write_bytes - cancelled) / put_stored_bytes
                                 if put_stored_bytes else None),
        lookup_get_ms_p50=_ms(_pct(lat_lookup_get, 50)),
        lookup_get_ms_p99=_ms(_pct(lat_lookup_get, 99)),
        put_ms_p50=_ms(_pct(lat_put, 50)), put_ms_p99=_ms(_pct(lat_put, 99)),
        samples=len(samples), wall_s=round(wall, 2),
        requests_per_s=round(len(requests) / wall, 1) if wall > 0 else None,
        packed_block_bytes=info.packed_block_bytes, raw_block_bytes=info.raw_block_bytes,
        preset=preset_name(info.descriptor), capacity_bytes=capacity,
    )


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000.0, 3)
