"""gRPC client of the turbokv service (proto/turbokv/v1/turbokv.proto).

Shapes: a raw KV block is ``[num_layers][2][block_tokens][num_kv_heads][head_dim]`` (axis 1:
0 = K, 1 = V), C order, little-endian, in the namespace dtype:

    ======  ==================================================================
    dtype   numpy dtype
    ======  ==================================================================
    fp16    ``np.float16``
    fp32    ``np.float32``
    bf16    ``np.uint16`` holding the bfloat16 bit patterns (``arr.view(np.uint16)``;
            ``ml_dtypes.bfloat16`` arrays and bf16 torch tensors are accepted on input too).
            Returned as uint16.
    ======  ==================================================================

Caller-owned memory (turbokv/buffers.py): blocks to put may be numpy arrays, CPU torch tensors
or buffer-protocol objects (read in place, no intermediate copy); ``get_blocks(..., out=)``
and ``get_packed_blocks(..., out=)`` write fetched blocks straight into the caller's buffers
(each chunk is copied once, from the gRPC message into its place).

Errors: a failed call raises :class:`TurboKVError` with ``.code`` (a
:class:`turbokv.StatusCode`) and ``.details``: INVALID_ARGUMENT (bad descriptor, shape,
dtype, hash length, malformed packed block), NOT_FOUND (unknown namespace; a missing *block*
is ``None`` in results, never an error), RESOURCE_EXHAUSTED (store full, request too large),
UNAVAILABLE (server unreachable or shutting down, after retries), DEADLINE_EXCEEDED,
DATA_LOSS (corruption, or a response stream that does not reassemble), CANCELLED (client
closed during the call). Arguments that are wrong before any RPC (shapes, dtypes, lengths,
buffers) raise ``ValueError`` / ``TypeError`` naming the argument: ids and counts out of the
proto's range ("namespace_id must be in [0, 2^64), got -1"; u32 fields [0, 2^32)), hashes that
are not bytes ("hashes[0] must be bytes"). A ``timeout`` <= 0 is DEADLINE_EXCEEDED (the
budget is spent), as for a call that runs out of time.

Retries and deadlines: every v1 RPC is idempotent, so every call is retried on UNAVAILABLE
with exponential backoff (``max_attempts`` attempts in all, 50 ms doubling to at most 2 s,
+-20% jitter) within one deadline of ``timeout`` seconds per call (attempts and sleeps
included; the per-call ``timeout=`` argument overrides the client's). Streams are retried
as a whole (a retried get rewrites ``out``).

Concurrency: ``lookup_async``, ``get_blocks_async``, ``get_packed_blocks_async``,
``put_blocks_async`` and ``put_packed_blocks_async`` take the same arguments and return
``concurrent.futures.Future`` objects, run on a pool of ``max_concurrent_calls`` threads
(turbokv/_async.py: the deadline starts at submission).

Thread safety: a Client may be shared by threads (one gRPC channel).
"""
from __future__ import annotations

import dataclasses
import numbers
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import grpc
import numpy as np

from . import buffers
from ._async import AsyncCalls
from .errors import StatusCode, TurboKVError
from .hasher import PrefixHasher
from .security import Security
from .sharding import ChainContext, chain_context

try:
    from .v1 import turbokv_pb2 as pb
    from .v1 import turbokv_pb2_grpc as pb_grpc
except ImportError as _e:  # pragma: no cover - exercised only in broken installs
    raise ImportError(
        "turbokv's generated gRPC stubs (turbokv.v1) are missing: install the wheel "
        "(tools/build_wheel.sh), or in a checkout run tools/setup.sh and put build/python on "
        "sys.path next to client/python") from _e

#: Largest ``data`` of one PutBlocks message (the API's limit).
MAX_CHUNK_BYTES = 1 << 20
#: Largest packed block the client accepts from a server (the codec refuses blocks over 1 GiB).
MAX_BLOCK_BYTES = 1 << 30

_DTYPE_TO_PB = {"fp16": pb.DTYPE_FP16, "bf16": pb.DTYPE_BF16, "fp32": pb.DTYPE_FP32}
_PB_TO_DTYPE = {v: k for k, v in _DTYPE_TO_PB.items()}
_DTYPE_ALIASES = {"fp16": "fp16", "float16": "fp16", "f16": "fp16", "bf16": "bf16",
                  "bfloat16": "bf16", "fp32": "fp32", "float32": "fp32", "f32": "fp32"}
# numpy dtype used for each namespace dtype (bf16 travels as its uint16 bit patterns).
_NUMPY: dict[str, np.dtype[Any]] = {"fp16": np.dtype("<f2"), "bf16": np.dtype("<u2"),
                                      "fp32": np.dtype("<f4")}

T = TypeVar("T")
Layers = tuple[int, int] | range | slice | None


def _dtype_name(dtype: Any) -> str:
    key = str(dtype).lower()
    if key not in _DTYPE_ALIASES:
        raise ValueError("unknown dtype %r; expected fp16, bf16 or fp32" % (dtype,))
    return _DTYPE_ALIASES[key]


def _uint(name: str, value: Any, bits: int = 32, low: int = 0) -> int:
    """``value`` as an int in [low, 2^bits); ValueError / TypeError naming ``name`` (protobuf's
    own "Value out of range: -1" names neither the argument nor the range)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int, got %s" % (name, type(value).__name__))
    v = int(value)
    if not low <= v < 1 << bits:
        raise ValueError("%s must be in [%d, 2^%d), got %d" % (name, low, bits, v))
    return v


def _block_hashes(hashes: Sequence[Any]) -> list[bytes]:
    """Block hashes as bytes; a str (a hex digest, say) is a TypeError naming its index."""
    if isinstance(hashes, (str, bytes, bytearray)):
        raise TypeError("hashes must be a sequence of bytes block hashes, got one %s"
                        % type(hashes).__name__)
    out = []
    for i, h in enumerate(hashes):
        if not isinstance(h, (bytes, bytearray, memoryview, np.ndarray)):
            raise TypeError("hashes[%d] must be bytes (a block hash, e.g. PrefixHasher's), "
                            "got %s" % (i, type(h).__name__))
        out.append(bytes(h))
    return out


def _code(e: grpc.RpcError) -> StatusCode:
    """The StatusCode of a grpc error (the one place grpc's enum is read)."""
    code = e.code() if hasattr(e, "code") else None
    return StatusCode.from_int(code.value[0]) if code is not None else StatusCode.UNKNOWN


@dataclasses.dataclass(frozen=True)
class NamespaceInfo:
    """Result of :meth:`Client.register_namespace`.

    ``namespace_id`` is the u64 id (stable across restarts, servers and languages);
    ``raw_block_bytes`` / ``packed_block_bytes`` are the bytes of one block raw (namespace
    dtype) and packed; ``bits_per_value`` = packed_block_bytes * 8 / values per block;
    ``created`` is False when the namespace already existed. ``descriptor`` is the canonical
    descriptor as a dict (codec resolved to explicit sections; keys as in the proto's
    NamespaceDescriptor, ``codec`` a dict of CodecConfig's fields).
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
    descriptor: dict[str, Any]

    @property
    def compression_ratio(self) -> float:
        return self.raw_block_bytes / self.packed_block_bytes if self.packed_block_bytes else 0.0

    def prefix_hasher(self, extra_key: bytes = b"") -> PrefixHasher:
        """A PrefixHasher of this namespace bound to its block_tokens (refuses other block
        sizes, whose hashes would never match)."""
        return PrefixHasher(self.namespace_id, extra_key, block_tokens=self.block_tokens)


@dataclasses.dataclass(frozen=True)
class BlockResult:
    """Outcome of one block of a put: ``code`` (:class:`StatusCode`; OK = stored and durable
    per the server), ``message`` (empty when OK), ``stored_bytes`` (packed bytes stored)."""
    block_hash: bytes
    code: StatusCode
    message: str
    stored_bytes: int

    @property
    def ok(self) -> bool:
        return self.code == StatusCode.OK


@dataclasses.dataclass(frozen=True)
class PolicyTuning:
    """What a server's LRFU eviction policy chose to rank blocks by (proto PolicyTuning):
    ``half_life`` of a block's decayed access count and ``unseen_age`` of a block stored with no
    history, both in turnovers of the server's capacity in blocks. A :class:`ShardedClient`
    sends its cluster's tuning node's choice to the other nodes (docs/cluster.md)."""
    half_life: float
    unseen_age: float


@dataclasses.dataclass(frozen=True)
class LookupResult:
    """``matched_blocks`` leading hashes of the chain are stored; ``matched_tokens`` =
    matched_blocks * block_tokens; ``tuning``: the server's eviction-policy tuning after the
    call (None from an LRU server, or from a ShardedClient)."""
    matched_blocks: int
    matched_tokens: int
    tuning: PolicyTuning | None = None


@dataclasses.dataclass(frozen=True)
class NamespaceStats:
    """One namespace in :class:`ServerStats`: ``blocks`` stored, ``stored_bytes`` (packed
    value bytes on disk), ``logical_bytes`` (the raw bytes those blocks represent in the
    namespace dtype), ``descriptor`` (canonical, as in :class:`NamespaceInfo`), ``tenant`` (who
    registered it; "" on a server without authentication; a caller sees only its own tenant's
    namespaces, an admin every tenant's)."""
    namespace_id: int
    descriptor: dict[str, Any]
    blocks: int
    stored_bytes: int
    logical_bytes: int
    tenant: str = ""


@dataclasses.dataclass(frozen=True)
class ServerStats:
    """Result of :meth:`Client.stats` (units: bytes, blocks; counters since the server
    started: ``evicted_blocks``, ``checksum_failures``; server-wide, so 0 for a caller that is
    not admin on a server with authentication).

    ``capacity_bytes`` is the hard budget of stored bytes, ``used_bytes`` the stored bytes
    (values and keys), ``logical_bytes`` the raw bytes the stored blocks represent;
    ``codec_backend`` is "cpu-avx2", "cpu-avx512", "cpu-scalar" or "cuda", ``durability``
    "none", "wal" or "fsync". From a ShardedClient the counters are sums over the nodes that
    answered, ``namespaces`` are merged by id, and ``nodes`` holds each node's own stats
    (None for a node that did not answer); from a Client ``nodes`` is None.
    """
    capacity_bytes: int
    used_bytes: int
    blocks: int
    logical_bytes: int
    evicted_blocks: int
    checksum_failures: int
    codec_backend: str
    durability: str
    version: str
    namespaces: list[NamespaceStats]
    nodes: dict[str, ServerStats | None] | None = None

    def namespace(self, namespace_id: int) -> NamespaceStats | None:
        """The stats of one namespace; None when the server does not know it."""
        return next((n for n in self.namespaces if n.namespace_id == namespace_id), None)


@dataclasses.dataclass(frozen=True)
class _Shape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_tokens: int
    dtype: str


def _descriptor_dict(d: Any) -> dict[str, Any]:
    c = d.codec

    def section(s: Any) -> dict[str, Any]:
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


def _section(value: Any, name: str) -> Any:
    if isinstance(value, pb.SectionCodec):
        return value
    if not isinstance(value, dict) or not set(value) <= {"bits", "group_size", "qjl"}:
        raise ValueError("%s must be a dict with keys bits, group_size, qjl; got %r"
                         % (name, value))
    return pb.SectionCodec(bits=int(value.get("bits", 0)),
                           group_size=int(value.get("group_size", 0)),
                           qjl=bool(value.get("qjl", False)))


def _block_view(a: np.ndarray, i: int, want: tuple[int, ...], npdt: np.dtype[Any],
                dtype_name: str) -> memoryview:
    """Validates block i of a put and returns its bytes (a view; a copy only when the caller's
    array is not C-contiguous)."""
    if tuple(a.shape) != want:
        raise ValueError("block %d has shape %s, namespace needs %s" % (i, tuple(a.shape), want))
    if dtype_name == "bf16" and a.dtype.itemsize == 2 and a.dtype.name == "bfloat16":
        a = a.view(np.uint16)
    if a.dtype.newbyteorder("<") != npdt.newbyteorder("<") or a.dtype.kind != npdt.kind:
        raise ValueError("block %d has dtype %s, namespace dtype %s needs %s" %
                         (i, a.dtype, dtype_name, npdt))
    return np.ascontiguousarray(a, dtype=npdt).reshape(-1).view(np.uint8).data


class Client(AsyncCalls):
    """A connection to one turbokv server.

    Args:
      target: ``"host:port"`` (or any gRPC target).
      timeout: deadline of each call in seconds, retries included. Default 30.
      max_attempts: attempts per call on UNAVAILABLE (1 = no retry). Default 4.
      max_chunk_bytes: largest chunk of a put message, <= 1 MiB. Default 1 MiB.
      options: extra gRPC channel options.
      max_concurrent_calls: threads running the ``*_async`` calls (created on first use).
        Default 8.
      security: TLS and bearer-token settings (:class:`turbokv.Security`); None: plaintext,
        no token.
    """

    def __init__(self, target: str, timeout: float = 30.0, max_attempts: int = 4,
                 max_chunk_bytes: int = MAX_CHUNK_BYTES,
                 options: Sequence[tuple[str, Any]] | None = None,
                 max_concurrent_calls: int = 8, security: Security | None = None):
        if not target:
            raise ValueError("empty server target")
        if not 1 <= int(max_attempts) <= 10:
            raise ValueError("max_attempts must be in [1, 10]")
        if not 1024 <= int(max_chunk_bytes) <= MAX_CHUNK_BYTES:
            raise ValueError("max_chunk_bytes must be in [1024, %d]" % MAX_CHUNK_BYTES)
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if not 1 <= int(max_concurrent_calls) <= 256:
            raise ValueError("max_concurrent_calls must be in [1, 256]")
        self.target = target
        self.timeout = float(timeout)
        self.max_attempts = int(max_attempts)
        self.max_chunk_bytes = int(max_chunk_bytes)
        self.max_concurrent_calls = int(max_concurrent_calls)
        opts: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 16 << 20),
                                       ("grpc.enable_retries", 0)]
        opts.extend(options or [])
        self.security = security or Security()
        self._channel = self.security.channel(target, opts)
        self._stub = pb_grpc.TurboKVStub(self._channel)
        self._shapes: dict[int, _Shape] = {}
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Cancels queued ``*_async`` calls, waits for running ones, closes the channel."""
        self._close_async()
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- retry loop --------------------------------------------------------------------------
    def _deadline(self, timeout: float | None) -> float:
        budget = self.timeout if timeout is None else float(timeout)
        if budget <= 0:
            raise TurboKVError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
        return time.monotonic() + budget

    def _call(self, fn: Callable[[float], T], deadline: float) -> T:
        """Runs fn(remaining_seconds) with retries on UNAVAILABLE, until ``deadline``
        (time.monotonic() seconds)."""
        backoff = 0.05
        attempt = 1
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TurboKVError(StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")
            try:
                return fn(remaining)
            except grpc.RpcError as e:
                code = _code(e)
                details = (e.details() if hasattr(e, "details") else str(e)) or ""
                if code != StatusCode.UNAVAILABLE or attempt >= self.max_attempts:
                    raise TurboKVError(code, details) from None
                sleep = backoff * random.uniform(0.8, 1.2)
                if time.monotonic() + sleep >= deadline:
                    raise TurboKVError(code, details) from None
                time.sleep(sleep)
                backoff = min(backoff * 2, 2.0)
                attempt += 1

    # -- namespaces --------------------------------------------------------------------------
    def register_namespace(self, model: str, num_layers: int, num_kv_heads: int, head_dim: int,
                           block_tokens: int, dtype: str = "fp16", preset: str = "",
                           model_revision: str = "", *, tp_rank: int = 0, tp_size: int = 0,
                           cache_salt: str = "", ttl_seconds: int | None = None,
                           timeout: float | None = None,
                           **codec_overrides: Any) -> NamespaceInfo:
        """Registers (or finds) a namespace; idempotent (same descriptor -> same id).

        Args:
          dtype: "fp16", "bf16" or "fp32": dtype of raw blocks put into it.
          preset: "k8v6", "k8v4", "k6v6", "k6v5", "k6v4", "k5v4", "k4v4-g32", "k4v3-g32",
            "k3v3-g32", "k3v2-g32-qjl", "k3v2", "raw"; "" = the server's default.
          ttl_seconds: blocks expire this long after their last put or get; 0 = never.
            None (default): a new namespace never expires, an existing one keeps its TTL.
          codec_overrides: ``key=dict(bits=, group_size=, qjl=)`` and ``value=...`` (both
            set: preset ignored), ``protected_first_layers``, ``protected_last_layers``,
            ``protected_bits`` (8 or 16), ``disable_norm_correction``, ``rotation_seed``,
            ``qjl_seed``.
        Raises:
          TurboKVError: INVALID_ARGUMENT for a bad descriptor or codec.
          ValueError / TypeError: unknown dtype or override.
        """
        # The proto's uint32 range here; the server checks the rest (0, > 65535, ...).
        num_layers, num_kv_heads, head_dim, block_tokens = (
            _uint(n, v) for n, v in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads),
                                     ("head_dim", head_dim), ("block_tokens", block_tokens)))
        tp_rank, tp_size = _uint("tp_rank", tp_rank), _uint("tp_size", tp_size)
        if ttl_seconds is not None:
            ttl_seconds = _uint("ttl_seconds", ttl_seconds)
        deadline = self._deadline(timeout)
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
            codec=codec)
        if ttl_seconds is not None:
            d.ttl_seconds = int(ttl_seconds)
        req = pb.RegisterNamespaceRequest(namespace_descriptor=d)
        resp = self._call(lambda t: self._stub.RegisterNamespace(req, timeout=t), deadline)
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

    def _shape(self, ns_id: int, deadline: float) -> _Shape:
        with self._lock:
            s = self._shapes.get(ns_id)
        if s is not None:
            return s
        for ns in self.stats(timeout=deadline - time.monotonic()).namespaces:
            d = ns.descriptor
            self._remember(ns.namespace_id, _Shape(d["num_layers"], d["num_kv_heads"],
                                                   d["head_dim"], d["block_tokens"], d["dtype"]))
        with self._lock:
            s = self._shapes.get(ns_id)
        if s is None:
            raise TurboKVError(StatusCode.NOT_FOUND,
                               "namespace %016x is not registered on the server" % ns_id)
        return s

    def drop_namespace(self, namespace_id: int, timeout: float | None = None) -> int:
        """Drops a namespace and its blocks; returns the number of blocks deleted.
        Raises TurboKVError NOT_FOUND for an unknown namespace."""
        req = pb.DropNamespaceRequest(namespace_id=_uint("namespace_id", namespace_id, 64))
        resp = self._call(lambda t: self._stub.DropNamespace(req, timeout=t),
                          self._deadline(timeout))
        with self._lock:
            self._shapes.pop(namespace_id, None)
        return int(resp.deleted_blocks)

    def chain_context(self, chain: Sequence[bytes], start: int) -> ChainContext:
        """The ``chain=`` argument for a call on ``chain[start:]``: ``ChainContext(start)``
        (one server needs no segment head; ShardedClient.chain_context fills it in).
        ValueError: ``start`` outside [0, len(chain)]."""
        return chain_context(chain, start, 1)

    # -- put ---------------------------------------------------------------------------------
    def put_blocks(self, namespace_id: int, hashes: Sequence[bytes], blocks: Any,
                   timeout: float | None = None, *,
                   chain: ChainContext | None = None,
                   chain_continues: bool = False) -> list[BlockResult]:
        """Stores raw blocks: ``blocks[i]`` under ``hashes[i]``.

        Args:
          blocks: ``[n][L][2][block_tokens][H][D]`` (one numpy array or CPU torch tensor), or
            a sequence of ``[L][2][block_tokens][H][D]`` arrays/tensors, in the namespace
            dtype (see the module docstring; bf16 as uint16 bit patterns or bf16 tensors).
            Read in place (copied only when not C-contiguous).
          chain: where ``hashes`` sit in their prefix chain. One server holds every block, so
            it is ignored here; it is accepted so that engines can drive a Client and a
            ShardedClient alike (see ``chain_context``).
          chain_continues: the request puts more blocks of this chain after ``hashes`` (in
            another call or on another node; ShardedClient sets it on the per-node calls that
            do not hold its call's last block). Sent in the stream's header
            (``PutBlocksHeader.chain_continues``): the server's eviction policy then does not
            take the last of ``hashes`` for the request's last, partly filled block
            (docs/cluster.md, "Placement").
        Returns:
          One :class:`BlockResult` per block, in order (a per-block failure is its ``code``).
        Raises:
          ValueError: lengths, shapes or dtype do not match the namespace.
          TurboKVError: NOT_FOUND (namespace), INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...
        """
        namespace_id = _uint("namespace_id", namespace_id, 64)
        hashes = _block_hashes(hashes)
        deadline = self._deadline(timeout)
        shape = self._shape(namespace_id, deadline)
        want = (shape.num_layers, 2, shape.block_tokens, shape.num_kv_heads, shape.head_dim)
        npdt = _NUMPY[shape.dtype]
        if not isinstance(blocks, (list, tuple)):
            arr = buffers.as_array(blocks, "blocks")
            items: Sequence[Any] = list(arr) if arr.ndim == len(want) + 1 else [arr]
        else:
            items = blocks
        payloads = [_block_view(buffers.as_array(b, "blocks[%d]" % i), i, want, npdt,
                                shape.dtype) for i, b in enumerate(items)]
        return self._put(namespace_id, hashes, payloads, pb.ENCODING_RAW, deadline,
                         chain_continues)

    def put_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          blocks: Sequence[Any], timeout: float | None = None, *,
                          chain: ChainContext | None = None,
                          chain_continues: bool = False) -> list[BlockResult]:
        """Stores packed blocks (kernels/FORMAT.md) as they are: ``bytes`` or any
        C-contiguous buffer (uint8 arrays, CPU tensors). The server validates the header,
        namespace, codec and checksum (per-block INVALID_ARGUMENT otherwise).
        Returns one :class:`BlockResult` per block. ``chain``: ignored, ``chain_continues`` as
        in put_blocks."""
        namespace_id = _uint("namespace_id", namespace_id, 64)
        hashes = _block_hashes(hashes)
        payloads = [b if isinstance(b, bytes) else
                    buffers.byte_view(b, "blocks[%d]" % i).data
                    for i, b in enumerate(blocks)]
        return self._put(namespace_id, hashes, payloads, pb.ENCODING_PACKED,
                         self._deadline(timeout), chain_continues)

    def _put(self, ns_id: int, hashes: Sequence[bytes], payloads: Sequence[Any], encoding: Any,
             deadline: float, chain_continues: bool = False) -> list[BlockResult]:
        # ns_id and hashes come checked (_uint, _block_hashes) from put_blocks / put_packed_blocks.
        if len(hashes) != len(payloads):
            raise ValueError("%d hashes but %d blocks" % (len(hashes), len(payloads)))
        if not payloads:
            return []
        chunk = self.max_chunk_bytes

        # The stream's header rides on its first message: with the block count the server
        # reads the end of the stream without reserving in-flight budget (PutBlocksHeader).
        header = pb.PutBlocksHeader(block_count=len(payloads), chain_continues=chain_continues)

        def requests() -> Iterator[Any]:
            first = True
            for h, data in zip(hashes, payloads):
                n = len(data)
                if isinstance(data, bytes) and n <= chunk:
                    msg = pb.PutBlocksRequest(namespace_id=ns_id, block_hash=h,
                                              encoding=encoding, block_bytes=n, offset=0,
                                              data=data)
                    if first:
                        msg.header.CopyFrom(header)
                        first = False
                    yield msg
                    continue
                view = memoryview(data)
                for off in range(0, max(n, 1), chunk):
                    msg = pb.PutBlocksRequest(namespace_id=ns_id, block_hash=h,
                                              encoding=encoding, block_bytes=n, offset=off,
                                              data=bytes(view[off:off + chunk]))
                    if first:
                        msg.header.CopyFrom(header)
                        first = False
                    yield msg

        resp = self._call(lambda t: self._stub.PutBlocks(requests(), timeout=t), deadline)
        if len(resp.results) != len(payloads):
            raise TurboKVError(StatusCode.INTERNAL, "PutBlocks returned %d results for "
                               "%d blocks" % (len(resp.results), len(payloads)))
        return [BlockResult(r.block_hash, StatusCode.from_int(r.code), r.message,
                            r.stored_bytes) for r in resp.results]

    # -- lookup / get ------------------------------------------------------------------------
    def lookup(self, namespace_id: int, hashes: Sequence[bytes], lease_seconds: int = 0,
               timeout: float | None = None, *,
               chain: ChainContext | None = None,
               follow_tuning: PolicyTuning | None = None) -> LookupResult:
        """How many leading hashes of the prefix chain are stored (index only).

        ``lease_seconds`` > 0 pins the matched blocks against eviction until a get of them
        or the lease ends. ``chain``: ignored (as in put_blocks). ``follow_tuning``: the
        server's eviction policy takes this tuning instead of its own choice (what a
        ShardedClient sends; ignored by an LRU server or one started with
        ``--ignore-client-tuning``). Raises TurboKVError NOT_FOUND for an unknown namespace."""
        req = pb.LookupRequest(namespace_id=_uint("namespace_id", namespace_id, 64),
                               block_hashes=_block_hashes(hashes),
                               lease_seconds=_uint("lease_seconds", lease_seconds))
        if follow_tuning is not None:
            req.follow_tuning.half_life = follow_tuning.half_life
            req.follow_tuning.unseen_age = follow_tuning.unseen_age
        resp = self._call(lambda t: self._stub.Lookup(req, timeout=t), self._deadline(timeout))
        tuning = (PolicyTuning(resp.tuning.half_life, resp.tuning.unseen_age)
                  if resp.HasField("tuning") else None)
        return LookupResult(resp.matched_blocks, resp.matched_tokens, tuning)

    def get_blocks(self, namespace_id: int, hashes: Sequence[bytes], dtype: str | None = None,
                   layers: Layers = None, timeout: float | None = None,
                   out: Any = None, *,
                   chain: ChainContext | None = None) -> list[np.ndarray | None]:
        """Fetches blocks decoded to ``dtype``.

        Args:
          dtype: "fp16", "bf16" (returned as uint16 bit patterns) or "fp32"; None = namespace
            dtype.
          layers: ``(begin, end)`` half-open layer range (or a range / slice with step 1);
            None = all layers.
          out: caller-owned memory for the blocks: one writable C-contiguous buffer of
            exactly ``len(hashes) * block_nbytes`` bytes (block i at byte ``i *
            block_nbytes``; e.g. an array ``[n][end-begin][2][block_tokens][H][D]``), or a
            sequence of ``len(hashes)`` buffers of ``block_nbytes`` each; ``block_nbytes =
            (end-begin) * 2 * block_tokens * H * D * itemsize(dtype)``. numpy arrays, CPU
            torch tensors (pinned or not) or buffer-protocol objects; a typed buffer must have
            the output dtype (or be uint8). The slot of a missing block is left as it was; on
            an error the contents of ``out`` are unspecified.
          chain: ignored (as in put_blocks).
        Returns:
          One entry per hash: ``np.ndarray [end-begin][2][block_tokens][H][D]`` (a view into
          ``out`` when given, else a new writable array) or None when the block is not stored.
        Raises:
          ValueError: a bad layer range, dtype or ``out``.
          TurboKVError: NOT_FOUND (namespace), INVALID_ARGUMENT (dtype, layer range),
            DATA_LOSS (stream that does not reassemble), DEADLINE_EXCEEDED, UNAVAILABLE.
        """
        namespace_id = _uint("namespace_id", namespace_id, 64)
        hashes = _block_hashes(hashes)
        deadline = self._deadline(timeout)
        shape = self._shape(namespace_id, deadline)
        begin, end = _layer_range(layers, shape.num_layers)
        dt = _dtype_name(dtype) if dtype is not None else shape.dtype
        npdt = _NUMPY[dt]
        want = (end - begin, 2, shape.block_tokens, shape.num_kv_heads, shape.head_dim)
        nbytes = int(np.prod(want)) * npdt.itemsize
        slots = (buffers.block_slots(out, len(hashes), nbytes, npdt)
                 if out is not None else None)
        req = pb.GetBlocksRequest(namespace_id=namespace_id,
                                  block_hashes=hashes,
                                  encoding=pb.ENCODING_RAW, dtype=_DTYPE_TO_PB[dt],
                                  layer_begin=begin, layer_end=end)
        raw, got_dtype = self._get(req, len(hashes), deadline, slots, nbytes)
        if got_dtype not in (pb.DTYPE_UNSPECIFIED, _DTYPE_TO_PB[dt]):
            raise TurboKVError(StatusCode.DATA_LOSS, "GetBlocks returned dtype %d, asked for %s"
                               % (got_dtype, dt))
        return [None if b is None else b.view(npdt).reshape(want) for b in raw]

    def get_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          timeout: float | None = None, out: Any = None, *,
                          chain: ChainContext | None = None) -> list[Any]:
        """Fetches packed blocks as stored (``chain``: ignored, as in put_blocks).

        Args:
          out: caller-owned memory (as in :meth:`get_blocks`): one writable buffer split
            into ``len(hashes)`` equal slots, or a sequence of one buffer per hash; each slot
            must hold at least the namespace's ``packed_block_bytes``.
        Returns:
          One entry per hash, None when not stored: ``bytes``, or with ``out`` a uint8
          ``np.ndarray`` view of the filled part of the slot.
        Raises:
          ValueError: ``out`` is malformed or a block does not fit its slot.
          TurboKVError: NOT_FOUND (namespace), DATA_LOSS, DEADLINE_EXCEEDED, UNAVAILABLE.
        """
        deadline = self._deadline(timeout)
        slots = (buffers.block_slots(out, len(hashes), 0, np.dtype(np.uint8), exact=False)
                 if out is not None else None)
        req = pb.GetBlocksRequest(namespace_id=_uint("namespace_id", namespace_id, 64),
                                  block_hashes=_block_hashes(hashes),
                                  encoding=pb.ENCODING_PACKED)
        raw, _ = self._get(req, len(hashes), deadline, slots, None)
        if slots is not None:
            return list(raw)
        return [None if b is None else b.tobytes() for b in raw]

    def _get(self, req: Any, n: int, deadline: float, slots: list[np.ndarray] | None,
             expected_bytes: int | None) -> tuple[list[np.ndarray | None], int]:
        if n == 0:
            return [], pb.DTYPE_UNSPECIFIED

        def attempt(t: float) -> tuple[list[np.ndarray | None], int]:
            return _assemble(self._stub.GetBlocks(req, timeout=t), n, req.encoding, slots,
                             expected_bytes)

        return self._call(attempt, deadline)

    # -- delete / stats ----------------------------------------------------------------------
    def delete_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                      timeout: float | None = None, *,
                      chain: ChainContext | None = None) -> int:
        """Deletes blocks; returns how many existed. NOT_FOUND for an unknown namespace.
        ``chain``: ignored (as in put_blocks)."""
        req = pb.DeleteBlocksRequest(namespace_id=_uint("namespace_id", namespace_id, 64),
                                     block_hashes=_block_hashes(hashes))
        resp = self._call(lambda t: self._stub.DeleteBlocks(req, timeout=t),
                          self._deadline(timeout))
        return int(resp.deleted_blocks)

    def stats(self, timeout: float | None = None) -> ServerStats:
        """Server statistics (:class:`ServerStats`). The server sends its namespaces in pages
        (``--max-stats-namespaces``); this follows every page, within one ``timeout``, and
        takes the server-wide counters from the first page."""
        deadline = self._deadline(timeout)

        def page(req: Any) -> Any:
            return self._call(lambda t: self._stub.Stats(req, timeout=t), deadline)

        req = pb.StatsRequest()
        r = first = page(req)
        namespaces: list[NamespaceStats] = []
        while True:
            namespaces.extend(NamespaceStats(
                namespace_id=ns.namespace_id,
                descriptor=_descriptor_dict(ns.namespace_descriptor), blocks=ns.blocks,
                stored_bytes=ns.stored_bytes, logical_bytes=ns.logical_bytes, tenant=ns.tenant)
                for ns in r.namespaces)
            # Stop at the last page, or on a cursor that does not advance (as the C++ client).
            if not r.HasField("next_page_after") or (
                    req.HasField("page_after") and r.next_page_after <= req.page_after):
                break
            req = pb.StatsRequest(page_after=r.next_page_after)
            r = page(req)
        r = first
        return ServerStats(
            capacity_bytes=r.capacity_bytes, used_bytes=r.used_bytes, blocks=r.blocks,
            logical_bytes=r.logical_bytes, evicted_blocks=r.evicted_blocks,
            checksum_failures=r.checksum_failures, codec_backend=r.codec_backend,
            durability=r.durability, version=r.version, namespaces=namespaces)


def _layer_range(layers: Layers, num_layers: int) -> tuple[int, int]:
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


def _assemble(responses: Iterable[Any], n: int, encoding: int,
              slots: list[np.ndarray] | None = None,
              expected_bytes: int | None = None) -> tuple[list[np.ndarray | None], int]:
    """Reassembles a GetBlocks response stream into n blocks (None = missing).

    Each block is written, chunk by chunk, into ``slots[i]`` (caller-owned uint8 views) or a
    new uint8 array; the result holds uint8 views of the blocks. ``expected_bytes``: the size
    every block must have (raw blocks), else at most the slot or MAX_BLOCK_BYTES.

    Raises TurboKVError DATA_LOSS on out-of-range indices, out-of-order or overlapping
    chunks, size changes, sizes other than expected, blocks never reported, or incomplete
    blocks; ValueError when a block does not fit its caller-owned slot."""
    bufs: list[np.ndarray | None] = [None] * n
    sizes = [-1] * n
    filled = [0] * n
    missing = [False] * n
    dtype = pb.DTYPE_UNSPECIFIED

    def loss(msg: str) -> TurboKVError:
        return TurboKVError(StatusCode.DATA_LOSS, "GetBlocks " + msg)

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
        buf = bufs[i]
        if buf is None:
            if r.offset != 0:
                raise loss("block %d starts at offset %d" % (i, r.offset))
            size = int(r.block_bytes)
            if expected_bytes is not None and size != expected_bytes:
                raise loss("block %d has %d bytes, expected %d" % (i, size, expected_bytes))
            if slots is not None:
                if size > slots[i].nbytes:
                    raise ValueError("block %d has %d bytes; its out slot has %d"
                                     % (i, size, slots[i].nbytes))
                buf = slots[i][:size]
            elif size > MAX_BLOCK_BYTES:
                raise loss("block %d claims %d bytes (limit %d)" % (i, size, MAX_BLOCK_BYTES))
            else:
                buf = np.empty(size, dtype=np.uint8)
            bufs[i] = buf
            sizes[i] = size
        elif r.block_bytes != sizes[i]:
            raise loss("block %d changed size" % i)
        data = r.data  # (each read of a bytes field makes a new bytes object)
        k = len(data)
        if r.offset != filled[i] or (filled[i] == sizes[i] and k == 0 and sizes[i] > 0):
            raise loss("block %d chunk at offset %d, expected %d" % (i, r.offset, filled[i]))
        if r.offset + k > sizes[i]:
            raise loss("block %d chunk exceeds block_bytes %d" % (i, sizes[i]))
        if k:
            buf[filled[i]:filled[i] + k] = np.frombuffer(data, dtype=np.uint8)
            filled[i] += k
    out: list[np.ndarray | None] = []
    for i in range(n):
        if missing[i]:
            out.append(None)
        elif bufs[i] is None:
            raise loss("stream ended without a response for block %d" % i)
        elif filled[i] != sizes[i]:
            raise loss("stream ended with block %d incomplete (%d of %d bytes)"
                       % (i, filled[i], sizes[i]))
        else:
            out.append(bufs[i])
    return out, dtype
