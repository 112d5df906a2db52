"""SGLang 0.5.23 host pools built on CPU by SGLang's own constructors, for the backend tests
(tests/engine/test_sglang_storage.py, test_sglang_controller.py).

``host_pool`` builds a real ``MHATokenToKVPool`` (the device pool) on ``"cpu"`` and the
``MHATokenToKVPoolHost`` over it exactly as SGLang's scheduler and its own
``storage/aibrix_kvcache/unit_test.py`` do; the one difference from a GPU server is
``pin_memory=False`` (pinning needs CUDA). ``init_kv_buffer``, ``alloc``, ``get_data_page``,
``get_dummy_flat_data_page`` and ``set_from_flat_data_page`` are SGLang's.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

L, T, H, D = 3, 4, 2, 8          # layers, page_size (tokens), KV heads, head_dim
DEVICE_TOKENS = 64               # device pool tokens; the host pool holds twice that + a page


def host_pool(layout: str, seed: int = 0, dtype: torch.dtype = torch.float32,
              page_size: int = T) -> MHATokenToKVPoolHost:
    """A host pool in ``layout`` of ``L`` layers, ``H`` heads of ``D``, filled with K/V drawn
    from N(0, 1) (seeded) in ``dtype``; at least 16 pages."""
    device = MHATokenToKVPool(DEVICE_TOKENS, page_size, dtype, H, D, L, "cpu", False,
                              start_layer=0, end_layer=L - 1)
    pool = MHATokenToKVPoolHost(device.get_device_pool_infos()[0].buffer_info, 2.0, 0,
                                page_size, layout, pin_memory=False,
                                device_capacity_tokens=device.size,
                                start_layer=device.start_layer, end_layer=device.end_layer,
                                write_back_staging=device.hicache_write_back_staging)
    g = torch.Generator().manual_seed(seed)
    pool.kv_buffer.copy_(torch.randn(tuple(pool.kv_buffer.shape), generator=g).to(dtype))
    return pool


def page_tensor(pool: MHATokenToKVPoolHost, first_index: int) -> torch.Tensor:
    """Page ``first_index // page_size`` as ``[L][2][T][H][D]``, read through SGLang's
    ``get_data_page(flat=False)`` (an independent path from turbokv's views)."""
    p = pool.get_data_page(first_index, flat=False)
    if pool.layout == "layer_first":          # [2][L][T][H][D]
        return p.permute(1, 0, 2, 3, 4)
    if pool.layout == "page_first":           # [2][T][L][H][D]
        return p.permute(2, 0, 1, 3, 4)
    if pool.layout == "page_first_direct":    # [2][1][L][T][H][D]
        return p[:, 0].permute(1, 0, 2, 3, 4)
    return p[:, 0].permute(3, 0, 2, 1, 4)     # page_head [2][1][H][T][L][D]


def indices(pages: Iterable[int], page_size: int = T) -> torch.Tensor:
    """Host token indices (int64) of whole pages, page by page (as SGLang's controller passes)."""
    return torch.cat([torch.arange(p * page_size, (p + 1) * page_size)
                      for p in pages]).to(torch.int64)
