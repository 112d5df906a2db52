"""Placement of blocks on nodes: rendezvous hashing and endpoint lists.

The contract (identical in every client language; client/include/turbokv/client/rendezvous.h
is the normative text, ``rendezvous_vectors.json`` beside this file holds the test vectors both
the C++ and the Python tests check)::

    weight(node_id, block_hash) = first 8 bytes of SHA-256(node_id UTF-8 || 0x00 || block_hash),
                                  read as a big-endian uint64
    rank(nodes, block_hash)     = nodes sorted by weight descending, ties by node_id ascending
                                  (bytewise)

Segments: a prefix chain is cut into segments of ``segment_blocks`` (S) consecutive blocks by
absolute position (positions [0, S), [S, 2S), ...), and every block of a segment is placed by the
hash of the segment's first block (its *placement key*)::

    placement_key(chain, i) = chain[(i // S) * S]
    owners(chain, i)        = the first R nodes of rank(nodes, placement_key(chain, i))

S = 1 places each block by its own hash (the placement before segments). This is rendezvous
(highest-random-weight) hashing (Thaler & Ravishankar, "A Name-Based Mapping Scheme for
Rendezvous", 1996): adding a node to N moves only the keys the new node wins, ~1/(N+1) of them,
and removing one moves only the keys it held.

Chain context: a call whose hashes do not start at their chain's head says where they sit
(:class:`ChainContext`): ``position``, the chain index of ``hashes[0]``, and ``segment_head``,
the hash at ``(position // S) * S`` when that is before ``position`` (:func:`chain_context`
builds it from the whole chain).

A node's identity is the endpoint string: ``host:port`` as written in a static list, or
``ip:port`` (``[ip6]:port``) of an address resolved from a ``dns:///name:port`` target.

Endpoint specs: a comma-separated list whose items are ``host:port`` or ``dns:///name:port``
(the name's A/AAAA records, re-resolved every ``dns_refresh_seconds`` by the sharded client).
"""
from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import socket
from collections.abc import Sequence

DNS_PREFIX = "dns:///"
#: Default segment length in blocks: 1, each block by its own hash, which balances the nodes
#: best and hits best in the cache replay benchmark (docs/cluster.md, "Placement").
DEFAULT_SEGMENT_BLOCKS = 1
#: Largest segment_blocks accepted.
MAX_SEGMENT_BLOCKS = 1 << 20


def weight(node_id: str, block_hash: bytes) -> int:
    """The rendezvous weight of ``block_hash`` on ``node_id`` (a uint64)."""
    d = hashlib.sha256(node_id.encode("utf-8") + b"\x00" + bytes(block_hash)).digest()
    return int.from_bytes(d[:8], "big")


def rank(node_ids: Sequence[str], block_hash: bytes) -> list[str]:
    """``node_ids`` ordered by preference for ``block_hash`` (highest weight first)."""
    h = bytes(block_hash)
    return sorted(node_ids, key=lambda n: (-weight(n, h), n.encode("utf-8")))


def owners(node_ids: Sequence[str], block_hash: bytes, replicas: int) -> list[str]:
    """The first ``replicas`` nodes of the rank (all nodes when there are fewer)."""
    return rank(node_ids, block_hash)[:max(1, int(replicas))]


#: The key the cluster's tuning node is ranked by (docs/cluster.md, "One tuning for the
#: cluster"): its eviction-policy tuning is sent to the other nodes with their Lookups.
TUNING_KEY = b"turbokv/policy-tuning"


def tuning_node(node_ids: Sequence[str]) -> str | None:
    """The node whose eviction-policy tuning the others follow: the first of the rank of
    :data:`TUNING_KEY` (so every client picks the same one, and a membership change moves it only
    when that node leaves or a node that outranks it joins). None for no nodes."""
    return rank(node_ids, TUNING_KEY)[0] if node_ids else None


@dataclasses.dataclass(frozen=True)
class ChainContext:
    """Where a call's ``hashes`` sit in their prefix chain (placement needs it).

    Attributes:
      position: chain index of ``hashes[0]`` (0: ``hashes[0]`` is the chain's head). >= 0.
      segment_head: the block hash at chain index ``(position // S) * S`` (S = the client's
        ``segment_blocks``), the first block of ``hashes[0]``'s segment. Required when that
        index is before ``position``; ignored (may be ``b""``) when ``position`` is a multiple
        of S. :func:`chain_context` and ``ShardedClient.chain_context`` fill it in.
    """
    position: int = 0
    segment_head: bytes = b""


#: The context of hashes that start their chain (what every call assumes by default).
CHAIN_HEAD = ChainContext()


def check_segment_blocks(segment_blocks: int) -> int:
    """``segment_blocks`` as an int; ValueError naming it when outside [1, 2^20]."""
    s = int(segment_blocks)
    if not 1 <= s <= MAX_SEGMENT_BLOCKS:
        raise ValueError("segment_blocks must be in [1, %d], got %r"
                         % (MAX_SEGMENT_BLOCKS, segment_blocks))
    return s


def chain_context(chain: Sequence[bytes], start: int, segment_blocks: int) -> ChainContext:
    """The context of ``chain[start:]``: its position and its first segment's head hash.

    ``chain`` is the prefix chain from its head (at least ``start`` hashes; only the one at
    ``(start // segment_blocks) * segment_blocks`` is read). ValueError: ``start`` outside
    [0, len(chain)], bad ``segment_blocks``."""
    s = check_segment_blocks(segment_blocks)
    start = int(start)
    if not 0 <= start <= len(chain):
        raise ValueError("start must be in [0, len(chain) = %d], got %d" % (len(chain), start))
    head = (start // s) * s
    return ChainContext(start, bytes(chain[head]) if head < start else b"")


def placement_keys(hashes: Sequence[bytes], segment_blocks: int,
                   chain: ChainContext | None = None) -> list[bytes]:
    """For each of ``hashes`` (consecutive blocks of one chain, ``hashes[0]`` at
    ``chain.position``), the hash its owners are ranked by: its segment's first block.

    ValueError naming the argument: a negative ``chain.position``; an empty
    ``chain.segment_head`` when ``hashes[0]``'s segment starts before it."""
    s = check_segment_blocks(segment_blocks)
    ctx = CHAIN_HEAD if chain is None else chain
    if not isinstance(ctx, ChainContext):
        raise TypeError("chain must be a turbokv.ChainContext, got %s" % type(ctx).__name__)
    pos = int(ctx.position)
    if pos < 0:
        raise ValueError("chain.position must be >= 0, got %d" % pos)
    out: list[bytes] = []
    lead = pos % s  # blocks of hashes[0]'s segment before hashes[0]
    for j in range(len(hashes)):
        k = j + lead
        if k < s and lead:
            if not ctx.segment_head:
                raise ValueError(
                    "chain.segment_head is required: hashes[0] sits at chain position %d, "
                    "inside the segment that starts at position %d (segment_blocks=%d); pass "
                    "chain=client.chain_context(whole_chain, %d)" % (pos, pos - lead, s, pos))
            out.append(bytes(ctx.segment_head))
        else:
            out.append(bytes(hashes[k - k % s - lead]))
    return out


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One item of an endpoint spec: a static ``host:port`` or a ``dns:///name:port``."""
    host: str
    port: int
    dns: bool

    @property
    def spec(self) -> str:
        hp = format_host_port(self.host, self.port)
        return DNS_PREFIX + hp if self.dns else hp


def format_host_port(host: str, port: int) -> str:
    """``host:port``, with IPv6 literals in brackets."""
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def _split_host_port(text: str) -> tuple[str, int]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1:].startswith(":"):
            raise ValueError("endpoint %r: expected [IPv6]:PORT" % text)
        host, port = text[1:end], text[end + 2:]
    else:
        host, sep, port = text.rpartition(":")
        if not sep or ":" in host:
            raise ValueError("endpoint %r: expected HOST:PORT" % text)
    if not host:
        raise ValueError("endpoint %r has an empty host" % text)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("endpoint %r: port must be in [1, 65535]" % text)
    return host, int(port)


def parse_endpoints(spec) -> list[Endpoint]:
    """Parses ``"h:p,h:p"``, ``"dns:///name:port"`` or a sequence of such items.

    Raises ValueError for an empty list, a missing or bad port, a ``dns://authority/`` form
    (not supported), or a duplicate item."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[Endpoint] = []
    for raw in items:
        item = raw.strip()
        if not item:
            raise ValueError("empty endpoint in %r" % (spec,))
        dns = False
        if item.startswith(DNS_PREFIX):
            dns, item = True, item[len(DNS_PREFIX):]
        elif item.startswith("dns:"):
            raise ValueError("endpoint %r: only dns:///NAME:PORT (no authority) is supported"
                             % raw)
        host, port = _split_host_port(item)
        ep = Endpoint(host, port, dns)
        if ep in out:
            raise ValueError("endpoint %r is listed twice" % raw)
        out.append(ep)
    if not out:
        raise ValueError("no endpoints in %r" % (spec,))
    return out


def resolve(endpoints: Sequence[Endpoint]) -> list[str]:
    """Node ids of an endpoint list: static items as written, DNS items expanded to the
    ``ip:port`` of each A/AAAA record (sorted, duplicates removed).

    Raises OSError (socket.gaierror) when a name does not resolve."""
    nodes: list[str] = []
    for ep in endpoints:
        if not ep.dns:
            nodes.append(format_host_port(ep.host, ep.port))
            continue
        infos = socket.getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM)
        addrs = sorted({ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos},
                       key=lambda a: (a.version, a.packed))
        nodes.extend(format_host_port(str(a), ep.port) for a in addrs)
    unique: list[str] = []
    for n in nodes:
        if n not in unique:
            unique.append(n)
    return unique
