"""The paged-cache layouts of turbokv.integrations.vllm_layout, checked against vLLM's own ops
(CPU) and against the CUDA backends' documented split of the same view (torch only).

Run with the engine venv: ``build/engine-venv/bin/python -m pytest tests/engine``.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from turbokv.integrations import vllm_layout  # noqa: E402


def _cpu_write(isa):
    """vLLM's CPU cache write for one ISA, called as CPUAttentionBackendImpl.do_kv_cache_update
    calls it (the connector itself goes through the layer's do_kv_cache_update; here the op is
    called directly to try every ISA, dtype and head size without building a model)."""
    from vllm import _custom_ops as ops

    def write(k, v, kv, slots):
        b, h, n, d2 = kv.shape
        kc, vc = kv.view(b, h, 2 * n, d2 // 2).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(k, v, kc, vc, slots, isa)
    return write


def _isa(dtype, block_size, head_dim):
    # Test-only use of vLLM's private ISA choice (the connector reads the layer's own `isa`).
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
    return _get_attn_isa(dtype, block_size, head_dim)


def test_avx2_fp32_cpu_cache_stores_k_transposed():
    """On this AVX2 machine vLLM's CPU kernel ("vec") keeps K as [head_dim][block] and V as
    [block][head_dim] inside each (block, head) tile."""
    if torch.cpu._is_avx512_supported():
        pytest.skip("an AVX-512 machine uses another kernel; the general probe tests cover it")
    isa = _isa(torch.float32, 128, 64)
    assert isa == "vec"
    layout = vllm_layout.probe_cpu_layout(_cpu_write(isa), torch.float32, 128, 64, isa=isa)
    assert "K=[D][N]" in layout.name and "V=[N][D]" in layout.name, layout.name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("block_size,head_dim", [(128, 64), (32, 128), (64, 80)])
def test_cpu_layout_matches_what_vllm_attention_writes(dtype, block_size, head_dim):
    """Tokens written by vLLM's cache-write op at random slots read back, through the probed
    layout, as exactly the K and V that were written; scatter then re-gather is the identity
    and rewrites the cache bytes exactly."""
    isa = _isa(dtype, block_size, head_dim)
    layout = vllm_layout.probe_cpu_layout(_cpu_write(isa), dtype, block_size, head_dim, isa=isa)
    heads, blocks = 3, 5
    g = torch.Generator().manual_seed(block_size * head_dim)
    kv = torch.zeros((blocks, heads, block_size, 2 * head_dim), dtype=dtype)
    k = torch.randn((blocks * block_size, heads, head_dim), generator=g).to(dtype)
    v = torch.randn((blocks * block_size, heads, head_dim), generator=g).to(dtype)
    slots = torch.randperm(blocks * block_size, generator=g)
    _cpu_write(isa)(k, v, kv, slots)
    ids = torch.tensor([3, 0, 4], dtype=torch.int64)
    gk, gv = layout.gather(kv, ids)
    assert gk.shape == (3, block_size, heads, head_dim)
    where = torch.empty_like(slots)
    where[slots] = torch.arange(slots.numel())          # slot -> row of k / v written there
    rows = where.view(blocks, block_size)[ids]           # [3][block_size]
    assert torch.equal(gk, k[rows]) and torch.equal(gv, v[rows])
    before = kv.clone()
    kv[ids] = 0
    layout.scatter(kv, ids, gk, gv)
    assert torch.equal(kv, before)


@pytest.mark.parametrize("hnd", [False, True])
def test_content_split_layout_is_the_cuda_backends_split(hnd):
    """FLASH_ATTN & co. read K and V as ``kv.transpose(1, 2).split(head_dim, -1)`` of the
    logical [B][H][N][2D] view, whatever its physical order (NHD or HND)."""
    blocks, heads, n, d = 4, 2, 16, 64
    if hnd:
        kv = torch.randn((blocks, heads, n, 2 * d))
    else:  # physically [B][N][H][2D], logically [B][H][N][2D]
        kv = torch.randn((blocks, n, heads, 2 * d)).permute(0, 2, 1, 3)
    key_cache, value_cache = kv.transpose(1, 2).split(d, dim=-1)   # [B][N][H][D]
    layout = vllm_layout.ContentSplitLayout(d)
    ids = torch.tensor([2, 1], dtype=torch.int64)
    gk, gv = layout.gather(kv, ids)
    assert torch.equal(gk, key_cache[ids]) and torch.equal(gv, value_cache[ids])
    before = kv.clone()
    kv[ids] = 0
    layout.scatter(kv, ids, gk, gv)
    assert torch.equal(kv, before)


def test_unmapped_backend_is_refused_by_name():
    with pytest.raises(NotImplementedError, match="ROCM_ATTN"):
        vllm_layout.make_layout("ROCM_ATTN", 64, torch.float16, 16)


def test_probe_rejects_an_op_that_drops_positions():
    def lossy(k, v, kv, slots):
        kv[0, :, :-1, :64] = k.transpose(0, 1)[:, :-1, :]
        kv[0, :, :, 64:] = v.transpose(0, 1)
    with pytest.raises(ValueError, match="unwritten"):
        vllm_layout.probe_cpu_layout(lossy, torch.float32, 32, 64)


def test_an_arbitrary_tile_permutation_round_trips():
    """A kernel whose tiles are neither [N][D] nor [D][N] goes through the index path: what is
    scattered lands where the permutation says, and gathers back exactly."""
    n, d, heads, blocks = 16, 32, 2, 4
    g = torch.Generator().manual_seed(5)
    k_index, v_index = torch.randperm(n * d, generator=g), torch.randperm(n * d, generator=g)
    layout = vllm_layout.CpuTileLayout(n, d, k_index, v_index)
    assert "K=permuted V=permuted" in layout.name
    kv = torch.zeros((blocks, heads, n, 2 * d))
    ids = torch.tensor([2, 0], dtype=torch.int64)
    k, v = torch.randn((2, n, heads, d), generator=g), torch.randn((2, n, heads, d), generator=g)
    layout.scatter(kv, ids, k, v)
    tiles = kv.view(blocks, heads, 2, n * d)
    # (token t, dim j) of head h of block ids[0] is at k_index[t * d + j] in its K tile.
    assert torch.equal(tiles[2, 1, 0, k_index[3 * d + 7]], k[0, 3, 1, 7])
    assert torch.equal(tiles[0, 0, 1, v_index[5 * d + 2]], v[1, 5, 0, 2])
    gk, gv = layout.gather(kv, ids)
    assert torch.equal(gk, k) and torch.equal(gv, v)
    assert not tiles[[1, 3]].any()
