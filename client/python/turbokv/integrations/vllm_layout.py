"""How vLLM's paged KV cache maps to turbokv's raw block layout (torch only, no vLLM import).

vLLM (0.32) hands a connector one tensor per attention layer, a *logical* view
``[num_blocks][num_kv_heads][kernel_block_size][2 * head_dim]`` (RFC 42082: blocks first,
"B, H, N, C"). What the last two axes hold depends on the attention backend:

``CPU_ATTN`` (vLLM's CPU backend; ``CpuTileLayout``)
    The tensor is contiguous. For each (block, head), its ``kernel_block_size * 2 * head_dim``
    elements are two tiles of ``kernel_block_size * head_dim``: the K tile, then the V tile
    (the backend views the tensor as ``[B][H][2 * N][D]`` and splits axis 2 in halves). The order
    *inside* a tile belongs to the backend's ISA kernel (``vec``, ``vec16``, ``amx``, ``neon``,
    ...): on AVX2 with fp32 (``vec``) the K tile is stored transposed, ``[head_dim][N]``, and the
    V tile is ``[N][head_dim]``. Rather than hard-code each kernel, :func:`probe_cpu_layout`
    writes index patterns through the backend's own cache write (the attention impl's
    ``do_kv_cache_update``, which calls ``cpu_attn_reshape_and_cache`` with the layer's ISA) into
    a scratch block and reads back where each (token, dim) landed; the resulting permutation is
    used for both directions (a plain copy when a tile is ``[N][D]`` or ``[D][N]``).

``FLASH_ATTN``, ``FLASHINFER``, ``TRITON_ATTN``, ``FLEX_ATTENTION`` (CUDA; ``ContentSplitLayout``)
    The last axis is the per-token content ``K[0:head_dim] | V[head_dim:2*head_dim]``; the
    physical stride order (NHD or HND) is the tensor's own business, and indexing the logical
    view through torch handles it. (These backends split the same view with
    ``kv_cache.transpose(1, 2).split(head_dim, dim=-1)``.)

turbokv's raw block is ``[num_layers][2][block_tokens][num_kv_heads][head_dim]``. Both layouts
here convert one layer of a list of *kernel* blocks to and from K and V tensors of shape
``[n][kernel_block_size][num_kv_heads][head_dim]`` (token-major, like the raw block), which the
connector stacks over layers.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

CPU_BACKENDS = ("CPU_ATTN",)
CONTENT_SPLIT_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")


class PagedLayout:
    """One attention layer's paged cache <-> token-major K and V.

    ``kv`` is vLLM's per-layer view ``[num_kernel_blocks][H][N][2D]``; ``block_ids`` a 1-D
    int64 tensor of kernel block indices on ``kv.device``; K and V are ``[n][N][H][D]`` in
    ``kv.dtype`` on ``kv.device``.
    """

    name = "?"

    def gather(self, kv: torch.Tensor, block_ids: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def scatter(self, kv: torch.Tensor, block_ids: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> None:
        raise NotImplementedError


def check_view(kv: torch.Tensor, num_kv_heads: int, head_dim: int) -> int:
    """Returns the kernel block size N of a ``[B][H][N][2D]`` view; raises ValueError otherwise."""
    if kv.dim() != 4 or kv.shape[1] != num_kv_heads or kv.shape[3] != 2 * head_dim:
        raise ValueError("expected a KV cache view [num_blocks][%d][block_size][%d], got shape %s"
                         % (num_kv_heads, 2 * head_dim, tuple(kv.shape)))
    return int(kv.shape[2])


class ContentSplitLayout(PagedLayout):
    """CUDA backends: content axis = K | V per token (see the module docstring)."""

    name = "content-split (K | V on the last axis)"

    def __init__(self, head_dim: int):
        self.head_dim = int(head_dim)

    def gather(self, kv: torch.Tensor, block_ids: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        sel = kv.index_select(0, block_ids)                       # [n][H][N][2D]
        d = self.head_dim
        return (sel[..., :d].permute(0, 2, 1, 3).contiguous(),    # [n][N][H][D]
                sel[..., d:].permute(0, 2, 1, 3).contiguous())

    def scatter(self, kv: torch.Tensor, block_ids: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> None:
        both = torch.cat([k, v], dim=-1).permute(0, 2, 1, 3)     # [n][H][N][2D]
        kv.index_copy_(0, block_ids, both.to(kv.dtype))


class CpuTileLayout(PagedLayout):
    """vLLM's CPU backend: per (block, head) a K tile then a V tile, each a permutation of
    ``[N][D]`` given by ``k_index`` / ``v_index`` (int64 ``[N * D]``: element ``n * D + d`` is
    the position inside the tile that holds (token n, dim d)). Tiles in the natural ``[N][D]``
    order or transposed ``[D][N]`` (every ISA kernel seen so far) are copied with strided
    views; any other permutation goes through ``index_select`` / ``index_copy_``."""

    def __init__(self, block_size: int, head_dim: int, k_index: torch.Tensor,
                 v_index: torch.Tensor, isa: str = "?"):
        self.block_size = int(block_size)
        self.head_dim = int(head_dim)
        tile = self.block_size * self.head_dim
        for name, idx in (("K", k_index), ("V", v_index)):
            if idx.shape != (tile,) or not torch.equal(torch.sort(idx).values,
                                                       torch.arange(tile)):
                raise ValueError("%s tile index is not a permutation of %d positions" % (name, tile))
        self.k_index = k_index.to(torch.int64)
        self.v_index = v_index.to(torch.int64)
        self.isa = isa
        self._k_order = describe_tile(self.k_index, block_size, head_dim)
        self._v_order = describe_tile(self.v_index, block_size, head_dim)
        self.name = "cpu-tile isa=%s K=%s V=%s" % (isa, self._k_order, self._v_order)
        self._dev_index: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def _indices(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = str(device)
        if key not in self._dev_index:
            self._dev_index[key] = (self.k_index.to(device), self.v_index.to(device))
        return self._dev_index[key]

    def _tiles(self, kv: torch.Tensor) -> torch.Tensor:
        if not kv.is_contiguous():
            raise ValueError("the CPU backend's KV cache must be contiguous")
        b, h, n, _ = kv.shape
        return kv.view(b, h, 2, n * self.head_dim)

    def _read(self, half: torch.Tensor, order: str, index: torch.Tensor) -> torch.Tensor:
        """``half`` [n][H][N*D] (one tile per block and head) -> [n][N][H][D] contiguous."""
        cnt, h = half.shape[0], half.shape[1]
        n, d = self.block_size, self.head_dim
        if order == "[N][D]":
            return half.view(cnt, h, n, d).permute(0, 2, 1, 3).contiguous()
        if order == "[D][N]":
            return half.view(cnt, h, d, n).permute(0, 3, 1, 2).contiguous()
        return half.index_select(2, index).view(cnt, h, n, d).permute(0, 2, 1, 3).contiguous()

    def _write(self, half: torch.Tensor, order: str, index: torch.Tensor,
               x: torch.Tensor) -> None:
        """``x`` [n][N][H][D] -> ``half`` [n][H][N*D] (a view of a fresh tensor)."""
        cnt, h = half.shape[0], half.shape[1]
        n, d = self.block_size, self.head_dim
        if order == "[N][D]":
            half.view(cnt, h, n, d).copy_(x.permute(0, 2, 1, 3))
        elif order == "[D][N]":
            half.view(cnt, h, d, n).copy_(x.permute(0, 2, 3, 1))
        else:
            half.index_copy_(2, index, x.permute(0, 2, 1, 3).reshape(cnt, h, -1))

    def gather(self, kv: torch.Tensor, block_ids: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        tiles = self._tiles(kv).index_select(0, block_ids)        # [n][H][2][N*D]
        ki, vi = self._indices(kv.device)
        return (self._read(tiles[:, :, 0, :], self._k_order, ki),
                self._read(tiles[:, :, 1, :], self._v_order, vi))  # [n][N][H][D] each

    def scatter(self, kv: torch.Tensor, block_ids: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> None:
        tiles = self._tiles(kv)
        ki, vi = self._indices(kv.device)
        cnt, h = k.shape[0], k.shape[2]
        new = torch.empty((cnt, h, 2, self.block_size * self.head_dim), dtype=kv.dtype,
                          device=kv.device)
        self._write(new[:, :, 0, :], self._k_order, ki, k.to(kv.dtype))
        self._write(new[:, :, 1, :], self._v_order, vi, v.to(kv.dtype))
        tiles.index_copy_(0, block_ids, new)


def describe_tile(index: torch.Tensor, block_size: int, head_dim: int) -> str:
    """"[N][D]" for the natural order, "[D][N]" for the transpose, else "permuted"."""
    n, d = block_size, head_dim
    natural = torch.arange(n * d)
    # In a [D][N] tile, (token n, dim d) sits at d * N + n.
    transposed = (torch.arange(d).view(1, d) * n + torch.arange(n).view(n, 1)).reshape(-1)
    if torch.equal(index, natural):
        return "[N][D]"
    if torch.equal(index, transposed):
        return "[D][N]"
    return "permuted"


#: ``write(key, value, kv_cache, slot_mapping)``: the backend's cache write, with the semantics
#: of vLLM's ``AttentionImpl.do_kv_cache_update(layer, ...)``: key/value ``[T][H][D]``, kv_cache
#: a logical ``[num_blocks][H][N][2D]`` view, slot_mapping int64 ``[T]``.
WriteOp = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


def probe_cpu_layout(write: WriteOp, dtype: torch.dtype, block_size: int, head_dim: int,
                     isa: str = "?", num_heads: int = 2) -> CpuTileLayout:
    """Finds where the CPU backend's cache-write op puts each (token, dim) of K and V.

    Args:
      write: the backend's cache write (:data:`WriteOp`), called with a scratch
        ``[1][H][N][2D]`` cache.
      dtype: the KV cache dtype (the ISA kernel may lay out each dtype differently).
    Returns:
      The layout, identical for every head (checked).
    Raises:
      ValueError: the op's writes are not a permutation of the tile, or differ between heads.

    Writes one bit of the flat index ``n * D + d`` per pass (values 0 and 1 are exact in every
    dtype), after one pass of all ones that checks every position is written.
    """
    n, d, h = int(block_size), int(head_dim), int(num_heads)
    flat = torch.arange(n * d, dtype=torch.int64).view(n, 1, d).expand(n, h, d)
    slots = torch.arange(n, dtype=torch.int64)
    bits = max(1, (n * d - 1).bit_length())

    def run(k_vals, v_vals):
        cache = torch.zeros((1, h, n, 2 * d), dtype=dtype)
        write(k_vals.to(dtype).contiguous(), v_vals.to(dtype).contiguous(), cache, slots)
        return cache.view(1, h, 2, n * d)[0].to(torch.float32)    # [H][2][N*D]

    ones = run(torch.ones((n, h, d)), torch.ones((n, h, d)))
    if not bool((ones == 1).all()):
        raise ValueError("the cache-write op left %d of %d tile positions unwritten"
                         % (int((ones != 1).sum()), ones.numel()))
    pos_code = torch.zeros((h, 2, n * d), dtype=torch.int64)
    for b in range(bits):
        pattern = ((flat >> b) & 1).to(torch.float32)
        got = run(pattern, pattern)
        pos_code |= (got.round().to(torch.int64) & 1) << b
    # pos_code[h, kv, p] = flat index (n*D + d) stored at tile position p; invert it.
    layouts = []
    for head in range(h):
        idx = []
        for half in range(2):
            code = pos_code[head, half]
            if not torch.equal(torch.sort(code).values, torch.arange(n * d)):
                raise ValueError("the cache-write op's %s tile is not a permutation of [N][D] "
                                 "(isa %s, dtype %s)" % ("KV"[half], isa, dtype))
            inv = torch.empty_like(code)
            inv[code] = torch.arange(n * d)
            idx.append(inv)
        layouts.append(idx)
    for head in range(1, h):
        if not all(torch.equal(a, b) for a, b in zip(layouts[0], layouts[head])):
            raise ValueError("the CPU cache layout differs between heads (isa %s)" % isa)
    return CpuTileLayout(n, d, layouts[0][0], layouts[0][1], isa=isa)


def make_layout(backend_name: str, head_dim: int, dtype: torch.dtype, block_size: int,
                cpu_write: WriteOp | None = None, isa: str = "?") -> PagedLayout:
    """The layout of an attention backend by its vLLM name (``AttentionBackend.get_name()``).

    Raises:
      NotImplementedError: a backend whose layout is not mapped (MLA, ROCm, ...).
    """
    if backend_name in CPU_BACKENDS:
        if cpu_write is None:
            raise ValueError("the CPU layout needs the backend's cache-write op to probe")
        return probe_cpu_layout(cpu_write, dtype, block_size, head_dim, isa=isa)
    if backend_name in CONTENT_SPLIT_BACKENDS:
        return ContentSplitLayout(head_dim)
    raise NotImplementedError(
        "turbokv's vLLM connector has no mapping for the %s attention backend (mapped: %s)"
        % (backend_name, ", ".join(CPU_BACKENDS + CONTENT_SPLIT_BACKENDS)))
