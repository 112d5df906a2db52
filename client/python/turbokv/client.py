"""gRPC client of the turbokv service (proto/turbokv/v1/turbokv.proto).

Shapes: a raw KV block is ``[num_layers][2][block_tokens][num_kv_heads][head_dim]`` (axis 1:
0 = K, 1 = V), C order, little-endian, in the namespace dtype:

    ======  ==================================================================
    dtype   numpy dtype
    ======  ==================================================================
    fp16    ``np.float16``
    fp32    ``np.float32``
    bf16    ``np.uint16`` holding the bfloat16 bit patterns (``arr.view(np.uint16)``;
            ``ml_dtypes.bfloat16`` arrays are accepted on input too). Returned as uint16.
    ======  ==================================================================

Errors: a failed RPC raises :class:`TurboKVError` with ``.code`` (a ``grpc.StatusCode``) and
``.details``: INVALID_ARGUMENT (bad descriptor, shape, dtype, hash length, malformed packed
block), NOT_FOUND (unknown namespace; a missing *block* is ``None`` in results, never an
error), RESOURCE_EXHAUSTED (store full, request too large), UNAVAILABLE (server unreachable or
shutting down, after retries), DEADLINE_EXCEEDED, DATA_LOSS (corruption, or a response stream
that does not reassemble). Arguments that are wrong before any RPC (shapes, dtypes, lengths)
raise ``ValueError``.

Retries and deadlines: every v1 RPC is idempotent, so every call is retried on UNAVAILABLE
with exponential backoff (``max_attempts`` attempts in all, 50 ms doubling to at most 2 s,
+-20% jitter) within one deadline of ``timeout`` seconds per call (attempts and sleeps
included). Streams are retried as a whole.

Thread safety: a Client may be shared by threads (one gRPC channel).
"""
from __future__ import annotations

import dataclasses
import random
import threading
import time
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from .errors import TurboKVError, code_from_int

try:
    from .v1 import turbokv_pb2 as pb
    from .v1 import turbokv_pb2_grpc as pb_grpc
except ImportError as _e:  # pragma: no cover - exercised only in broken installs
    raise ImportError(
        "turbokv's generated gRPC stubs are missing: install the package with "
        "`pip install ./client/python`, or run `python3 client/python/scripts/gen_stubs.py` "
        "in a checkout (needs grpcio-tools)") from _e

#: Largest ``data`` of one PutBlocks message (the API's limit).
MAX_CHUNK_BYTES = 1 << 20

_DTYPE_TO_PB = {"fp16": pb.DTYPE_FP16, "bf16": pb.DTYPE_BF16, "fp32": pb.DTYPE_FP32}
_PB_TO_DTYPE = {v: k for k, v in _DTYPE_TO_PB.items()}
_DTYPE_ALIASES = {"fp16": "fp16", "float16": "fp16", "f16": "fp16", "bf16": "bf16",
                  "bfloat16": "bf16", "fp32": "fp32", "float32": "fp32", "f32": "fp32"}
# numpy dtype used for each namespace dtype (bf16 travels as its uint16 bit patterns).
_NUMPY = {"fp16": np.dtype("<f2"), "bf16": np.dtype("<u2"), "fp32": np.dtype("<f4")}


def _dtype_name(dtype) -> str:
    key = str(dtype).lower()
    if key not in _DTYPE_ALIASES:
        raise ValueError("unknown dtype %r; expected fp16, bf16 or fp32" % (dtype,))
    return _DTYPE_ALIASES[key]


@dataclasses.dataclass(frozen=True)
class NamespaceInfo:
    """Result of :meth:`Client.register_namespace`.

    ``namespace_id`` is the u64 id (stable across restarts, servers and languages);
    ``raw_block_bytes`` / ``packed_block_bytes`` are the bytes of one block raw (namespace
    dtype) and packed; ``bits_per_value`` = packed_block_bytes * 8 / values per block;
    ``created`` is False when the namespace already existed. ``descriptor`` is the canonical
    descriptor as a dict (codec resolved to explicit sections).
    """
    namespace_id: int
    created: bool
    raw_block_bytes: int
    packed_block_bytes: int
    bits_per_value: float
    model: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_tokens: int
    dtype: str
    descriptor: dict

    @property
    def compression_ratio(self) -> float:
        return self.raw_block_bytes / self.packed_block_bytes if self.packed_block_bytes else 0.0


@dataclasses.dataclass(frozen=True)
class BlockResult:
    """Outcome of one block of a put: ``code`` (grpc.StatusCode; OK = stored and durable per
    the server), ``message`` (empty when OK), ``stored_bytes`` (packed bytes stored)."""
    block_hash: bytes
    code: grpc.StatusCode
    message: str
    stored_bytes: int

    @property
    def ok(self) -> bool:
        return self.code == grpc.StatusCode.OK


@dataclasses.dataclass(frozen=True)
class LookupResult:
    """``matched_blocks`` leading hashes of the chain are stored; ``matched_tokens`` =
    matched_blocks * block_tokens."""
    matched_blocks: int
    matched_tokens: int


@dataclasses.dataclass(frozen=True)
class _Shape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_tokens: int
    dtype: str


def _descriptor_dict(d) -> dict:
    c = d.codec

    def section(s):
        return {"bits": s.bits, "group_size": s.group_size, "qjl": s.qjl}

    codec = {
        "preset": c.preset,
        "key": section(c.key) if c.HasField("key") else None,
        "value": section(c.value) if c.HasField("value") else None,
        "protected_first_layers": c.protected_first_layers,
        "protected_last_layers": c.protected_last_layers,
        "protected_bits": c.protected_bits,
        "disable_norm_correction": c.disable_norm_correction,
        "rotation_seed": c.rotation_seed if c.HasField("rotation_seed") else None,
        "qjl_seed": c.qjl_seed if c.HasField("qjl_seed") else None,
    }
    return {
        "model": d.model, "model_revision": d.model_revision,
        "dtype": _PB_TO_DTYPE.get(d.dtype, "unspecified"), "num_layers": d.num_layers,
        "num_kv_heads": d.num_kv_heads, "head_dim": d.head_dim,
        "block_tokens": d.block_tokens, "tp_rank": d.tp_rank, "tp_size": d.tp_size,
        "cache_salt": d.cache_salt, "ttl_seconds": d.ttl_seconds, "codec": codec,
    }


_CODEC_FIELDS = ("protected_first_layers", "protected_last_layers", "protected_bits",
                 "disable_norm_correction", "rotation_seed", "qjl_seed")


def _section(value, name) -> "pb.SectionCodec":
    if isinstance(value, pb.SectionCodec):
        return value
    if not isinstance(value, dict) or not set(value) <= {"bits", "group_size", "qjl"}:
        raise ValueError("%s must be a dict with keys bits, group_size, qjl; got %r"
                         % (name, value))
    return pb.SectionCodec(bits=int(value.get("bits", 0)),
                           group_size=int(value.get("group_size", 0)),
                           qjl=bool(value.get("qjl", False)))


class Client:
    """A connection to one turbokv server.

    Args:
      target: ``"host:port"`` (or any gRPC target).
      timeout: deadline of each call in seconds, retries included. Default 30.
      max_attempts: attempts per call on UNAVAILABLE (1 = no retry). Default 4.
      max_chunk_bytes: largest chunk of a put message, <= 1 MiB. Default 1 MiB.
      options: extra gRPC channel options.
    """

    def __init__(self, target: str, timeout: float = 30.0, max_attempts: int = 4,
                 max_chunk_bytes: int = MAX_CHUNK_BYTES,
                 options: Optional[Sequence[Tuple[str, object]]] = None):
        if not target:
            raise ValueError("empty server target")
        if not 1 <= int(max_attempts) <= 10:
            raise ValueError("max_attempts must be in [1, 10]")
        if not 1024 <= int(max_chunk_bytes) <= MAX_CHUNK_BYTES:
            raise ValueError("max_chunk_bytes must be in [1024, %d]" % MAX_CHUNK_BYTES)
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.target = target
        self.timeout = float(timeout)
        self.max_attempts = int(max_attempts)
        self.max_chunk_bytes = int(max_chunk_bytes)
        opts = [("grpc.max_receive_message_length", 16 << 20), ("grpc.enable_retries", 0)]
        opts.extend(options or [])
        self._channel = grpc.insecure_channel(target, options=opts)
        self._stub = pb_grpc.TurboKVStub(self._channel)
        self._shapes: Dict[int, _Shape] = {}
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- retry loop --------------------------------------------------------------------------
    def _call(self, fn, timeout: Optional[float] = None):
        """Runs fn(remaining_seconds) with retries on UNAVAILABLE, within one deadline."""
        deadline = time.monotonic() + (self.timeout if timeout is None else float(timeout))
        backoff = 0.05
        attempt = 1
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TurboKVError(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
            try:
                return fn(remaining)
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
                details = e.details() if hasattr(e, "details") else str(e)
                if code != grpc.StatusCode.UNAVAILABLE or attempt >= self.max_attempts:
                    raise TurboKVError(code, details or "") from None
                sleep = backoff * random.uniform(0.8, 1.2)
                if time.monotonic() + sleep >= deadline:
                    raise TurboKVError(code, details or "") from None
                time.sleep(sleep)
                backoff = min(backoff * 2, 2.0)
                attempt += 1

    # -- namespaces --------------------------------------------------------------------------
    def register_namespace(self, model: str, num_layers: int, num_kv_heads: int, head_dim: int,
                           block_tokens: int, dtype: str = "fp16", preset: str = "",
                           model_revision: str = "", *, tp_rank: int = 0, tp_size: int = 0,
                           cache_salt: str = "", ttl_seconds: int = 0,
                           timeout: Optional[float] = None, **codec_overrides) -> NamespaceInfo:
        """Registers (or finds) a namespace; idempotent (same descriptor -> same id).

        Args:
          dtype: "fp16", "bf16" or "fp32": dtype of raw blocks put into it.
          preset: "k8v4", "k4v4-g32", "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "raw";
            "" = the server's default.
          codec_overrides: ``key=dict(bits=, group_size=, qjl=)`` and ``value=...`` (both
            set: preset ignored), ``protected_first_layers``, ``protected_last_layers``,
            ``protected_bits`` (8 or 16), ``disable_norm_correction``, ``rotation_seed``,
            ``qjl_seed``.
        Raises:
          TurboKVError: INVALID_ARGUMENT for a bad descriptor or codec.
          ValueError / TypeError: unknown dtype or override.
        """
        codec = pb.CodecConfig(preset=preset)
        for k, v in codec_overrides.items():
            if k in ("key", "value"):
                getattr(codec, k).CopyFrom(_section(v, k))
            elif k in _CODEC_FIELDS:
                if v is not None:
                    setattr(codec, k, v)
            else:
                raise TypeError("unknown codec override %r; known: key, value, %s"
                                % (k, ", ".join(_CODEC_FIELDS)))
        d = pb.NamespaceDescriptor(
            model=model, model_revision=model_revision, dtype=_DTYPE_TO_PB[_dtype_name(dtype)],
            num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim,
            block_tokens=block_tokens, tp_rank=tp_rank, tp_size=tp_size, cache_salt=cache_salt,
            codec=codec, ttl_seconds=ttl_seconds)
        req = pb.RegisterNamespaceRequest(namespace_descriptor=d)
        resp = self._call(lambda t: self._stub.RegisterNamespace(req, timeout=t), timeout)
        cd = resp.namespace_descriptor
        info = NamespaceInfo(
            namespace_id=resp.namespace_id, created=resp.created,
            raw_block_bytes=resp.raw_block_bytes, packed_block_bytes=resp.packed_block_bytes,
            bits_per_value=resp.bits_per_value, model=model, num_layers=num_layers,
            num_kv_heads=num_kv_heads, head_dim=head_dim, block_tokens=block_tokens,
            dtype=_dtype_name(dtype), descriptor=_descriptor_dict(cd))
        self._remember(info.namespace_id, _Shape(num_layers, num_kv_heads, head_dim,
                                                 block_tokens, _dtype_name(dtype)))
        return info

    def _remember(self, ns_id: int, shape: _Shape) -> None:
        with self._lock:
            self._shapes[ns_id] = shape

    def _shape(self, ns_id: int) -> _Shape:
        with self._lock:
            s = self._shapes.get(ns_id)
        if s is not None:
            return s
        for ns in self.stats()["namespaces"]:
            d = ns["descriptor"]
            self._remember(ns["namespace_id"], _Shape(d["num_layers"], d["num_kv_heads"],
                                                      d["head_dim"], d["block_tokens"],
                                                      d["dtype"]))
        with self._lock:
            s = self._shapes.get(ns_id)
        if s is None:
            raise TurboKVError(grpc.StatusCode.NOT_FOUND,
                               "namespace %016x is not registered on the server" % ns_id)
        return s

    def drop_namespace(self, namespace_id: int, timeout: Optional[float] = None) -> int:
        """Drops a namespace and its blocks; returns the number of blocks deleted.
        Raises TurboKVError NOT_FOUND for an unknown namespace."""
        req = pb.DropNamespaceRequest(namespace_id=namespace_id)
        resp = self._call(lambda t: self._stub.DropNamespace(req, timeout=t), timeout)
        with self._lock:
            self._shapes.pop(namespace_id, None)
        return resp.deleted_blocks

    # -- put ---------------------------------------------------------------------------------
    def put_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                   blocks: Union[np.ndarray, Sequence[np.ndarray]],
                   timeout: Optional[float] = None) -> List[BlockResult]:
        """Stores raw blocks: ``blocks[i]`` under ``hashes[i]``.

        Args:
          blocks: ``np.ndarray [n][L][2][block_tokens][H][D]`` or a sequence of ``[L][2]
            [block_tokens][H][D]`` arrays, in the namespace dtype (see the module docstring;
            bf16 as uint16 bit patterns).
        Returns:
          One :class:`BlockResult` per block, in order (a per-block failure is its ``code``).
        Raises:
          ValueError: lengths, shapes or dtype do not match the namespace.
          TurboKVError: NOT_FOUND (namespace), INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...
        """
        shape = self._shape(namespace_id)
        want = (shape.num_layers, 2, shape.block_tokens, shape.num_kv_heads, shape.head_dim)
        npdt = _NUMPY[shape.dtype]
        if isinstance(blocks, np.ndarray) and blocks.ndim == 6:
            blocks = list(blocks)
        payloads = []
        for i, b in enumerate(blocks):
            a = np.asarray(b)
            if tuple(a.shape) != want:
                raise ValueError("block %d has shape %s, namespace needs %s" %
                                 (i, tuple(a.shape), want))
            if shape.dtype == "bf16" and a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":
                a = a.view(np.uint16)
            if a.dtype.newbyteorder("<") != npdt.newbyteorder("<") or a.dtype.kind != npdt.kind:
                raise ValueError("block %d has dtype %s, namespace dtype %s needs %s" %
                                 (i, a.dtype, shape.dtype, npdt))
            payloads.append(np.ascontiguousarray(a, dtype=npdt).tobytes())
        return self._put(namespace_id, hashes, payloads, pb.ENCODING_RAW, timeout)

    def put_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          blocks: Sequence[bytes],
                          timeout: Optional[float] = None) -> List[BlockResult]:
        """Stores packed blocks (kernels/FORMAT.md) as they are; the server validates the
        header, namespace, codec and checksum (per-block INVALID_ARGUMENT otherwise).
        Returns one :class:`BlockResult` per block."""
        return self._put(namespace_id, hashes, [bytes(b) for b in blocks], pb.ENCODING_PACKED,
                         timeout)

    def _put(self, ns_id, hashes, payloads, encoding, timeout) -> List[BlockResult]:
        hashes = [bytes(h) for h in hashes]
        if len(hashes) != len(payloads):
            raise ValueError("%d hashes but %d blocks" % (len(hashes), len(payloads)))
        if not payloads:
            return []
        chunk = self.max_chunk_bytes

        def requests() -> Iterator["pb.PutBlocksRequest"]:
            for h, data in zip(hashes, payloads):
                n = len(data)
                view = memoryview(data)
                for off in range(0, max(n, 1), chunk):
                    yield pb.PutBlocksRequest(namespace_id=ns_id, block_hash=h,
                                              encoding=encoding, block_bytes=n, offset=off,
                                              data=bytes(view[off:off + chunk]))

        resp = self._call(lambda t: self._stub.PutBlocks(requests(), timeout=t), timeout)
        if len(resp.results) != len(payloads):
            raise TurboKVError(grpc.StatusCode.INTERNAL, "PutBlocks returned %d results for "
                               "%d blocks" % (len(resp.results), len(payloads)))
        return [BlockResult(r.block_hash, code_from_int(r.code), r.message, r.stored_bytes)
                for r in resp.results]

    # -- lookup / get ------------------------------------------------------------------------
    def lookup(self, namespace_id: int, hashes: Sequence[bytes], lease_seconds: int = 0,
               timeout: Optional[float] = None) -> LookupResult:
        """How many leading hashes of the prefix chain are stored (index only).

        ``lease_seconds`` > 0 pins the matched blocks against eviction until a get of them
        or the lease ends. Raises TurboKVError NOT_FOUND for an unknown namespace."""
        req = pb.LookupRequest(namespace_id=namespace_id, block_hashes=[bytes(h) for h in hashes],
                               lease_seconds=lease_seconds)
        resp = self._call(lambda t: self._stub.Lookup(req, timeout=t), timeout)
        return LookupResult(resp.matched_blocks, resp.matched_tokens)

    def get_blocks(self, namespace_id: int, hashes: Sequence[bytes], dtype: Optional[str] = None,
                   layers: Optional[Union[Tuple[int, int], range, slice]] = None,
                   timeout: Optional[float] = None) -> List[Optional[np.ndarray]]:
        """Fetches blocks decoded to ``dtype``.

        Args:
          dtype: "fp16", "bf16" (returned as uint16 bit patterns) or "fp32"; None = namespace
            dtype.
          layers: ``(begin, end)`` half-open layer range (or a range / slice with step 1);
            None = all layers.
        Returns:
          One entry per hash: ``np.ndarray [end-begin][2][block_tokens][H][D]`` or None when
          the block is not stored.
        Raises:
          TurboKVError: NOT_FOUND (namespace), INVALID_ARGUMENT (dtype, layer range),
            DATA_LOSS (stream that does not reassemble).
        """
        shape = self._shape(namespace_id)
        begin, end = _layer_range(layers, shape.num_layers)
        dt = _dtype_name(dtype) if dtype is not None else shape.dtype
        req = pb.GetBlocksRequest(namespace_id=namespace_id,
                                  block_hashes=[bytes(h) for h in hashes],
                                  encoding=pb.ENCODING_RAW, dtype=_DTYPE_TO_PB[dt],
                                  layer_begin=begin, layer_end=end)
        raw, got_dtype = self._get(req, len(hashes), timeout)
        out_dt = _PB_TO_DTYPE.get(got_dtype, dt)
        npdt = _NUMPY[out_dt]
        want = (end - begin, 2, shape.block_tokens, shape.num_kv_heads, shape.head_dim)
        out: List[Optional[np.ndarray]] = []
        for i, b in enumerate(raw):
            if b is None:
                out.append(None)
                continue
            n = int(np.prod(want)) * npdt.itemsize
            if len(b) != n:
                raise TurboKVError(grpc.StatusCode.DATA_LOSS, "block %d has %d bytes, expected "
                                   "%d for shape %s %s" % (i, len(b), n, want, out_dt))
            out.append(np.frombuffer(b, dtype=npdt).reshape(want))
        return out

    def get_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          timeout: Optional[float] = None) -> List[Optional[bytes]]:
        """Fetches packed blocks as stored: one ``bytes`` or None (not stored) per hash."""
        req = pb.GetBlocksRequest(namespace_id=namespace_id,
                                  block_hashes=[bytes(h) for h in hashes],
                                  encoding=pb.ENCODING_PACKED)
        raw, _ = self._get(req, len(hashes), timeout)
        return raw

    def _get(self, req, n: int, timeout) -> Tuple[List[Optional[bytes]], int]:
        if n == 0:
            return [], pb.DTYPE_UNSPECIFIED

        def attempt(t):
            return _assemble(self._stub.GetBlocks(req, timeout=t), n, req.encoding)

        return self._call(attempt, timeout)

    # -- delete / stats ----------------------------------------------------------------------
    def delete_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                      timeout: Optional[float] = None) -> int:
        """Deletes blocks; returns how many existed. NOT_FOUND for an unknown namespace."""
        req = pb.DeleteBlocksRequest(namespace_id=namespace_id,
                                     block_hashes=[bytes(h) for h in hashes])
        return self._call(lambda t: self._stub.DeleteBlocks(req, timeout=t), timeout).deleted_blocks

    def stats(self, timeout: Optional[float] = None) -> dict:
        """Server statistics as a dict: capacity_bytes, used_bytes, blocks, logical_bytes,
        evicted_blocks, checksum_failures, codec_backend, durability, version and
        ``namespaces``: a list of dicts (namespace_id int, descriptor dict, blocks,
        stored_bytes, logical_bytes)."""
        r = self._call(lambda t: self._stub.Stats(pb.StatsRequest(), timeout=t), timeout)
        return {
            "capacity_bytes": r.capacity_bytes, "used_bytes": r.used_bytes, "blocks": r.blocks,
            "logical_bytes": r.logical_bytes, "evicted_blocks": r.evicted_blocks,
            "checksum_failures": r.checksum_failures, "codec_backend": r.codec_backend,
            "durability": r.durability, "version": r.version,
            "namespaces": [{
                "namespace_id": ns.namespace_id,
                "descriptor": _descriptor_dict(ns.namespace_descriptor),
                "blocks": ns.blocks, "stored_bytes": ns.stored_bytes,
                "logical_bytes": ns.logical_bytes,
            } for ns in r.namespaces],
        }


def _layer_range(layers, num_layers: int) -> Tuple[int, int]:
    if layers is None:
        return 0, num_layers
    if isinstance(layers, (range, slice)):
        if layers.step not in (None, 1):
            raise ValueError("layer ranges must have step 1")
        begin = layers.start or 0
        end = num_layers if layers.stop is None else layers.stop
    else:
        begin, end = layers
    begin, end = int(begin), int(end)
    if not 0 <= begin < end <= num_layers:
        raise ValueError("layer range [%d, %d) is not within [0, %d)" % (begin, end, num_layers))
    return begin, end


def _assemble(responses: Iterable, n: int, encoding: int) -> Tuple[List[Optional[bytes]], int]:
    """Reassembles a GetBlocks response stream into n blocks (None = missing).

    Raises TurboKVError DATA_LOSS on out-of-range indices, out-of-order or overlapping
    chunks, size changes, blocks never reported, or incomplete blocks."""
    bufs: List[Optional[bytearray]] = [None] * n
    sizes = [-1] * n
    missing = [False] * n
    dtype = pb.DTYPE_UNSPECIFIED

    def loss(msg):
        return TurboKVError(grpc.StatusCode.DATA_LOSS, "GetBlocks " + msg)

    for r in responses:
        i = r.index
        if i >= n:
            raise loss("response for index %d of %d blocks" % (i, n))
        if not r.found:
            if bufs[i] is not None or missing[i]:
                raise loss("block %d reported missing after other responses" % i)
            missing[i] = True
            continue
        if missing[i]:
            raise loss("data for block %d after reporting it missing" % i)
        if r.encoding != encoding:
            raise loss("block %d came in encoding %d, requested %d" % (i, r.encoding, encoding))
        if encoding == pb.ENCODING_RAW:
            if dtype == pb.DTYPE_UNSPECIFIED:
                dtype = r.dtype
            elif r.dtype != dtype:
                raise loss("blocks of different dtypes")
        if bufs[i] is None:
            if r.offset != 0:
                raise loss("block %d starts at offset %d" % (i, r.offset))
            bufs[i] = bytearray()
            sizes[i] = r.block_bytes
        elif r.block_bytes != sizes[i]:
            raise loss("block %d changed size" % i)
        buf = bufs[i]
        if r.offset != len(buf) or (len(buf) == sizes[i] and len(r.data) == 0 and sizes[i] > 0):
            raise loss("block %d chunk at offset %d, expected %d" % (i, r.offset, len(buf)))
        if r.offset + len(r.data) > sizes[i]:
            raise loss("block %d chunk exceeds block_bytes %d" % (i, sizes[i]))
        buf += r.data
    out: List[Optional[bytes]] = []
    for i in range(n):
        if missing[i]:
            out.append(None)
        elif bufs[i] is None:
            raise loss("stream ended without a response for block %d" % i)
        elif len(bufs[i]) != sizes[i]:
            raise loss("stream ended with block %d incomplete (%d of %d bytes)"
                       % (i, len(bufs[i]), sizes[i]))
        else:
            out.append(bytes(bufs[i]))
    return out, dtype
