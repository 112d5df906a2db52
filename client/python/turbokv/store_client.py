"""The client interface that both ``Client`` (one server) and ``ShardedClient`` (a cluster)
implement, as a ``typing.Protocol``: code that stores and fetches blocks (the vLLM connector,
the LMCache plugin, the SGLang backend, your own) is written against ``StoreClient`` and works
with either. mypy checks both classes against it (``_conforms`` below; tests/python/test_typing.py
runs mypy on the package).

Shapes, dtypes, units and error codes are those of the implementations' docstrings
(``turbokv.client.Client``): hashes are 8..32-byte block hashes of one prefix chain, in order;
a raw block is ``[num_layers][2][block_tokens][num_kv_heads][head_dim]`` of the namespace's
dtype; timeouts are seconds (None: the client's default); failures raise ``TurboKVError`` with
a gRPC status code, per-block outcomes come back as ``BlockResult``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from .sharding import ChainContext

if TYPE_CHECKING:
    from .client import BlockResult, Layers, LookupResult, NamespaceInfo, ServerStats


@runtime_checkable
class StoreClient(Protocol):
    """What a turbokv client offers, whether it talks to one server or to a cluster."""

    def close(self) -> None: ...

    def register_namespace(self, model: str, num_layers: int, num_kv_heads: int, head_dim: int,
                           block_tokens: int, dtype: str = "fp16", preset: str = "",
                           model_revision: str = "", **kwargs: Any) -> NamespaceInfo:
        """Registers (idempotently) a namespace; keyword arguments as ``Client``'s."""
        ...

    def drop_namespace(self, namespace_id: int, timeout: float | None = None) -> int: ...

    def chain_context(self, chain: Sequence[bytes], start: int) -> ChainContext: ...

    def put_blocks(self, namespace_id: int, hashes: Sequence[bytes], blocks: Any,
                   timeout: float | None = None, *, chain: ChainContext | None = None,
                   chain_continues: bool = False) -> list[BlockResult]: ...

    def put_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          blocks: Sequence[Any], timeout: float | None = None, *,
                          chain: ChainContext | None = None,
                          chain_continues: bool = False) -> list[BlockResult]: ...

    def lookup(self, namespace_id: int, hashes: Sequence[bytes], lease_seconds: int = 0,
               timeout: float | None = None, *,
               chain: ChainContext | None = None) -> LookupResult: ...

    def get_blocks(self, namespace_id: int, hashes: Sequence[bytes], dtype: str | None = None,
                   layers: Layers = None, timeout: float | None = None, out: Any = None, *,
                   chain: ChainContext | None = None) -> list[np.ndarray | None]: ...

    def get_packed_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                          timeout: float | None = None, out: Any = None, *,
                          chain: ChainContext | None = None) -> list[Any]: ...

    def delete_blocks(self, namespace_id: int, hashes: Sequence[bytes],
                      timeout: float | None = None, *,
                      chain: ChainContext | None = None) -> int: ...

    def stats(self, timeout: float | None = None) -> ServerStats: ...


if TYPE_CHECKING:
    from .client import Client
    from .sharded_client import ShardedClient

    def _conforms(one: Client, many: ShardedClient) -> tuple[StoreClient, StoreClient]:
        """Never called: mypy fails here if either client drifts from the interface."""
        return one, many
