"""SGLang's HiCache host pool layouts mapped to turbokv's raw block (torch only, no SGLang import).

A turbokv raw block is ``[num_layers][2][block_tokens][num_kv_heads][head_dim]`` (axis 1: 0 = K,
1 = V). One SGLang page (``page_size`` tokens) is one turbokv block, so ``block_tokens`` =
``page_size``. SGLang's MHA host pool (``sglang/srt/mem_cache/pool_host/mha.py``,
``MHATokenToKVPoolHost.init_kv_buffer``) keeps K and V of every layer in one tensor
``kv_buffer`` whose axes depend on ``--hicache-mem-layout``; with ``S`` = host pool tokens,
``P = S / T`` pages, ``L`` layers, ``T`` = page_size, ``H`` KV heads, ``D`` head_dim:

====================  ============================  =========================  ================
layout                ``kv_buffer``                 one page (token ``i=p*T``)  to [L][2][T][H][D]
====================  ============================  =========================  ================
``layer_first``       ``[2][L][S][H][D]``           ``kv[:, :, i:i+T]``         permute(1,0,2,3,4)
                                                    ``[2][L][T][H][D]``
``page_first``        ``[2][S][L][H][D]``           ``kv[:, i:i+T]``            permute(2,0,1,3,4)
                                                    ``[2][T][L][H][D]``
``page_first_direct`` ``[2][P][L][T][H][D]``        ``kv[:, p]``                permute(1,0,2,3,4)
                                                    ``[2][L][T][H][D]``
``page_head``         ``[2][P][H][T][L][D]``        ``kv[:, p]``                permute(3,0,2,1,4)
                                                    ``[2][H][T][L][D]``
====================  ============================  =========================  ================

``page_first_kv_split`` is an MLA layout (SGLang itself gives MHA models ``page_first_direct``
instead), and ``page_unified`` has no per-layer K/V view; both are refused, as are MLA pools.

SGLang's non-zero-copy interface (``get`` / ``set`` / ``batch_get`` / ``batch_set``) moves "flat
pages": ``HostKVCache.get_data_page(i, flat=True)`` flattens the page slice above, so a flat
page is that slice's memory order (``[2][L][T][H][D]``, ``[2][T][L][H][D]``, ``[2][1][L][T][H][D]``,
``[2][1][H][T][L][D]``), and ``set_from_flat_data_page`` reads it back in the same order.
:func:`flat_page_as_block` views one as a turbokv block.

Every view here is a strided view (no copy): callers copy between it and a contiguous staging
block. Not thread-safe to write one page from two threads (SGLang never does).
"""
from __future__ import annotations

import dataclasses

import torch

#: Host pool layouts this module maps (``--hicache-mem-layout``).
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")

# Permutation from each layout's page slice to [L][2][T][H][D].
_PERMUTE = {
    "layer_first": (1, 0, 2, 3, 4),        # [2][L][T][H][D]
    "page_first": (2, 0, 1, 3, 4),         # [2][T][L][H][D]
    "page_first_direct": (1, 0, 2, 3, 4),  # [2][L][T][H][D] (page axis dropped)
    "page_head": (3, 0, 2, 1, 4),          # [2][H][T][L][D] (page axis dropped)
}

#: Namespace dtype of each torch dtype turbokv stores raw.
TORCH_TO_NS_DTYPE = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


@dataclasses.dataclass(frozen=True)
class PageGeometry:
    """Shape of one SGLang page = one turbokv block.

    layout: one of :data:`LAYOUTS`.
    num_layers, page_size, num_kv_heads, head_dim: ``L``, ``T``, ``H``, ``D`` above (``L``
    counts every layer of the host pool, draft layers included).
    dtype: the host pool's torch dtype (fp16, bf16 or fp32).
    """
    layout: str
    num_layers: int
    page_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def block_shape(self) -> tuple[int, int, int, int, int]:
        """``(L, 2, T, H, D)``: turbokv's raw block."""
        return (self.num_layers, 2, self.page_size, self.num_kv_heads, self.head_dim)

    @property
    def block_nbytes(self) -> int:
        n = 1
        for d in self.block_shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()

    def buffer_shape(self, pool_tokens: int) -> tuple[int, ...]:
        """The ``kv_buffer`` shape SGLang allocates for ``pool_tokens`` host tokens."""
        L, T, H, D = self.num_layers, self.page_size, self.num_kv_heads, self.head_dim
        P = pool_tokens // T
        return {"layer_first": (2, L, pool_tokens, H, D),
                "page_first": (2, pool_tokens, L, H, D),
                "page_first_direct": (2, P, L, T, H, D),
                "page_head": (2, P, H, T, L, D)}[self.layout]

    def flat_page_shape(self) -> tuple[int, ...]:
        """Memory order of a flat page (``get_data_page(i, flat=True)``) of this layout."""
        L, T, H, D = self.num_layers, self.page_size, self.num_kv_heads, self.head_dim
        return {"layer_first": (2, L, T, H, D),
                "page_first": (2, T, L, H, D),
                "page_first_direct": (2, L, T, H, D),
                "page_head": (2, H, T, L, D)}[self.layout]


def check_layout(layout: str) -> None:
    """Raises ValueError for a layout turbokv does not map."""
    if layout in LAYOUTS:
        return
    if layout == "page_first_kv_split":
        raise ValueError("turbokv: --hicache-mem-layout page_first_kv_split is SGLang's MLA "
                         "layout; turbokv stores MHA K/V (MLA is not supported)")
    raise ValueError("turbokv: --hicache-mem-layout %r is not mapped to turbokv blocks; use one "
                     "of %s" % (layout, ", ".join(LAYOUTS)))


def page_block_view(kv_buffer: torch.Tensor, geom: PageGeometry, first_index: int) -> torch.Tensor:
    """The page that starts at host token ``first_index`` as a ``[L][2][T][H][D]`` view.

    Args:
      kv_buffer: the host pool's ``kv_buffer`` (shape ``geom.buffer_shape(S)``).
      first_index: host token index of the page's first token, a multiple of ``page_size``
        (SGLang allocates host memory in whole pages).
    Raises:
      ValueError: ``first_index`` is not page-aligned or out of the pool.
    """
    T = geom.page_size
    if first_index % T:
        raise ValueError("host index %d is not page-aligned (page_size %d)" % (first_index, T))
    layout = geom.layout
    if layout == "layer_first":
        if first_index + T > kv_buffer.shape[2]:
            raise ValueError("host index %d out of the pool" % first_index)
        page = kv_buffer[:, :, first_index:first_index + T]
    elif layout == "page_first":
        if first_index + T > kv_buffer.shape[1]:
            raise ValueError("host index %d out of the pool" % first_index)
        page = kv_buffer[:, first_index:first_index + T]
    else:
        p = first_index // T
        if p >= kv_buffer.shape[1]:
            raise ValueError("host index %d out of the pool" % first_index)
        page = kv_buffer[:, p]
    return page.permute(*_PERMUTE[layout])


def flat_page_as_block(flat: torch.Tensor, geom: PageGeometry) -> torch.Tensor:
    """A flat page (``get_data_page(i, flat=True)``, or the target of ``batch_get``) viewed as
    ``[L][2][T][H][D]``. Raises ValueError when ``flat`` has the wrong number of elements."""
    shape = geom.flat_page_shape()
    n = 1
    for d in shape:
        n *= d
    if flat.numel() != n:
        raise ValueError("flat page has %d elements, expected %d (%s)" % (flat.numel(), n, shape))
    return flat.reshape(shape).permute(*_PERMUTE[geom.layout])
