"""The ``*_async`` methods shared by Client and ShardedClient: the blocking methods run on a
small thread pool of the client and return ``concurrent.futures.Future`` objects.

Deadline: a call's ``timeout`` (default: the client's) starts when the call is *submitted*,
not when a pool thread picks it up, so time spent queued behind other calls counts; a call
whose deadline passed while queued fails with DEADLINE_EXCEEDED without touching the network.

The futures are plain ``concurrent.futures.Future`` objects: ``result(timeout)``,
``add_done_callback``, ``concurrent.futures.wait`` / ``as_completed``, and
``asyncio.wrap_future(f)`` to await one in an event loop. ``cancel()`` succeeds only while the
call is still queued. Closing the client cancels queued calls and waits for running ones.
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import StatusCode, TurboKVError

if TYPE_CHECKING:
    from .client import BlockResult, LookupResult


class AsyncCalls:
    """Mixin: ``self.timeout`` (seconds) and ``self.max_concurrent_calls`` must be set by
    the class; ``_close_async()`` is called by its ``close()``."""

    timeout: float
    max_concurrent_calls: int
    _async_pool: concurrent.futures.ThreadPoolExecutor | None = None
    _async_lock: threading.Lock | None = None
    _async_closed: bool = False

    def _submit(self, method: Callable[..., Any], timeout: float | None, *args: Any,
                **kwargs: Any) -> concurrent.futures.Future[Any]:
        budget = self.timeout if timeout is None else float(timeout)
        if budget <= 0:
            raise ValueError("timeout must be positive")
        deadline = time.monotonic() + budget

        def run() -> Any:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TurboKVError(StatusCode.DEADLINE_EXCEEDED,
                                   "deadline of %.3f s passed while the call was queued "
                                   "(max_concurrent_calls %d)"
                                   % (budget, self.max_concurrent_calls))
            return method(*args, timeout=remaining, **kwargs)

        return self._pool().submit(run)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        lock = self.__dict__.setdefault("_async_lock", threading.Lock())
        with lock:
            if self._async_closed:
                raise RuntimeError("the turbokv client is closed")
            if self._async_pool is None:
                self._async_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.max_concurrent_calls, thread_name_prefix="turbokv-call")
            return self._async_pool

    def _close_async(self) -> None:
        lock = self.__dict__.setdefault("_async_lock", threading.Lock())
        with lock:
            self._async_closed = True
            pool, self._async_pool = self._async_pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    # -- the async variants (same arguments as the blocking methods) --------------------------
    def lookup_async(self, namespace_id: int, hashes: Sequence[bytes], lease_seconds: int = 0,
                     timeout: float | None = None, *, chain: Any = None
                     ) -> concurrent.futures.Future[LookupResult]:
        """:meth:`lookup` on the client's pool: a Future of a LookupResult."""
        return self._submit(getattr(self, "lookup"), timeout, namespace_id, hashes,
                            lease_seconds, chain=chain)

    def get_blocks_async(self, namespace_id: int, hashes: Sequence[bytes],
                         dtype: str | None = None, layers: Any = None,
                         timeout: float | None = None,
                         out: Any = None, *, chain: Any = None
                         ) -> concurrent.futures.Future[list[np.ndarray | None]]:
        """:meth:`get_blocks` on the client's pool: a Future of the list of arrays (views into
        ``out`` when given; do not touch ``out`` until the future is done)."""
        return self._submit(getattr(self, "get_blocks"), timeout, namespace_id, hashes,
                            dtype=dtype, layers=layers, out=out, chain=chain)

    def get_packed_blocks_async(self, namespace_id: int, hashes: Sequence[bytes],
                                timeout: float | None = None, out: Any = None, *,
                                chain: Any = None) -> concurrent.futures.Future[list[Any]]:
        """:meth:`get_packed_blocks` on the client's pool."""
        return self._submit(getattr(self, "get_packed_blocks"), timeout, namespace_id, hashes,
                            out=out, chain=chain)

    def put_blocks_async(self, namespace_id: int, hashes: Sequence[bytes], blocks: Any,
                         timeout: float | None = None, *, chain: Any = None,
                         chain_continues: bool = False
                         ) -> concurrent.futures.Future[list[BlockResult]]:
        """:meth:`put_blocks` on the client's pool: a Future of the list of BlockResult.
        ``blocks`` is read while the call runs: do not modify it until the future is done."""
        return self._submit(getattr(self, "put_blocks"), timeout, namespace_id, hashes, blocks,
                            chain=chain, chain_continues=chain_continues)

    def put_packed_blocks_async(self, namespace_id: int, hashes: Sequence[bytes],
                                blocks: Sequence[Any], timeout: float | None = None, *,
                                chain: Any = None, chain_continues: bool = False
                                ) -> concurrent.futures.Future[list[BlockResult]]:
        """:meth:`put_packed_blocks` on the client's pool (``chain``, ``chain_continues`` as
        in the blocking calls)."""
        return self._submit(getattr(self, "put_packed_blocks"), timeout, namespace_id, hashes,
                            blocks, chain=chain, chain_continues=chain_continues)

