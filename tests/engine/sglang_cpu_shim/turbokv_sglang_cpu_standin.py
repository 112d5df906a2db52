"""A test-only stand-in for the CUDA-only pieces SGLang's CPU path needs (sglang 0.5.23).

SGLang on PyPI runs its CPU engine (``SGLANG_USE_CPU_ENGINE=1``) only with a CPU build of
``sgl_kernel`` that PyPI does not have, and its HiCache host pool assumes CUDA. This module
replaces exactly these pieces, in SGLang's processes only (``sitecustomize.py`` beside it runs
:func:`install` when ``TURBOKV_SGLANG_CPU_STANDIN=1``); everything else, model, scheduler,
radix cache, HiCache controller, host pool classes, storage factory and the server, is SGLang's
own code. turbokv's backend (``turbokv.integrations.sglang``) never imports this.

1. ``sgl_kernel`` (the sglang-kernel wheel, CUDA-only: its ``__init__`` loads ``common_ops.so``,
   which needs ``libcuda.so.1``). A placeholder package: every name SGLang imports from it
   (``from sgl_kernel import X``, ``sgl_kernel.scalar_type.scalar_types``, ...) resolves to a
   placeholder object that raises ``NotImplementedError("stand-in: sgl_kernel.X called")`` when
   called, and whose attributes are placeholders too (SGLang builds quantization tables from
   ``scalar_types`` at import). SGLang's CPU path for a Llama model without Intel AMX calls
   none of them (a call would fail the request, loudly); the names used are written to
   ``$TURBOKV_SGLANG_STANDIN_LOG`` (one line each) when that is set.
2. ``HostKVCache.__init__`` (``sglang/srt/mem_cache/pool_host/base.py``): called with
   ``pin_memory=False``. SGLang's MHA host pool passes ``pin_memory=True``, which makes
   ``alloc_with_host_register`` call ``cudaHostRegister`` (through ``torch.cuda.cudart()``:
   "Found no NVIDIA driver") and ``get_dummy_flat_data_page`` allocate pinned memory.
   In the same module, ``HICACHE_HOST_MEMORY_RESERVE_BYTES`` (host memory SGLang keeps free
   besides the HiCache pool: 10 GiB, sized for a GPU host) is set to 1 GiB, so that a 1 GB
   pool fits on a small CI machine (else: "Not enough host memory available").
3. The host<->device copies of ``sglang/srt/mem_cache/pool_host/mha.py`` for
   ``--hicache-io-backend direct``, which that module imports from ``sgl_kernel.kvcacheio`` only
   on CUDA/ROCm/XPU (on CPU the names are undefined: ``NameError:
   transfer_kv_all_layer_direct_lf_pf``). Pure-torch versions, with the argument lists of
   ``sgl_kernel/kvcacheio.py``, are put into that module's namespace: ``transfer_kv_direct``
   (host layout ``layer_first``), ``transfer_kv_per_layer_direct_pf_lf`` and
   ``transfer_kv_all_layer_direct_lf_pf`` (``page_first_direct``). The ``kernel`` I/O backend
   (and with it the ``page_first`` and ``page_head`` layouts) is not stood in for.

Shapes (SGLang's, ``MHATokenToKVPoolHost.init_kv_buffer``; device rows are token indices of
``[tokens][H][D]`` per-layer tensors): host ``k_buffer`` is ``[L][S][H][D]`` (layer_first) or
``[P][L][T][H][D]`` (page_first_direct); a host token index ``i`` is page ``i // T``, offset
``i % T``.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable
from typing import Any

_LOG = os.environ.get("TURBOKV_SGLANG_STANDIN_LOG", "")


def _note(line: str) -> None:
    if _LOG:
        with open(_LOG, "a") as f:
            f.write("%d %s\n" % (os.getpid(), line))


# -- 1. sgl_kernel placeholder ---------------------------------------------------------------
class _Placeholder:
    """A name imported from ``sgl_kernel``: raises when called; attributes are placeholders."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _note("CALLED " + self._name)
        raise NotImplementedError("stand-in: %s called (no CPU build of sgl_kernel here)"
                                  % self._name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(self._name + "." + name)

    def __repr__(self) -> str:
        return "<stand-in %s>" % self._name


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        _note("import %s.%s" % (self.__name__, name))
        value = _Placeholder(self.__name__ + "." + name)
        setattr(self, name, value)
        return value


class _SglKernelFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "sgl_kernel" or fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _PlaceholderModule(spec.name)
        module.__path__ = []  # a package: submodules resolve here too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


# -- post-import hooks ----------------------------------------------------------------------
_HOOKS: dict[str, Callable[[types.ModuleType], None]] = {}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs ``_HOOKS[name](module)`` right after SGLang's module ``name`` has executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        hook = _HOOKS.get(fullname)
        if hook is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            hook(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


# -- 2. host pool without CUDA registration or pinned memory --------------------------------
def _patch_pool_host_base(mod: types.ModuleType) -> None:
    init = mod.HostKVCache.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["pin_memory"] = False
        init(self, *args, **kwargs)

    mod.HostKVCache.__init__ = __init__
    mod.HICACHE_HOST_MEMORY_RESERVE_BYTES = 1 << 30
    _note("patched HostKVCache.__init__ pin_memory=False, host memory reserve 1 GiB")


# -- 3. host<->device copies in torch (direct I/O backend) -----------------------------------
def _split(indices: Any, page_size: int) -> Any:
    return indices // page_size, indices % page_size


def transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size,
                       **_: Any) -> None:
    """layer_first, either direction: per layer tensor pair, ``dst[dst_i] = src[src_i]``."""
    for s, d in zip(src_layers, dst_layers):
        d[dst_indices.to(d.device)] = s[src_indices.to(s.device)]


def transfer_kv_per_layer_direct_pf_lf(src_ptrs, dst_ptrs, src_indices, dst_indices, layer_id,
                                       page_size, **_: Any) -> None:
    """page_first_direct host ``[P][L][T][H][D]`` (K, V) -> device layer ``[N][H][D]``."""
    p, o = _split(src_indices, page_size)
    for s, d in zip(src_ptrs, dst_ptrs):
        d[dst_indices] = s[p, layer_id, o]


def transfer_kv_all_layer_direct_lf_pf(src_ptrs, dst_ptrs, src_indices, dst_indices, page_size,
                                       **_: Any) -> None:
    """device layers (K of every layer, then V) -> page_first_direct host ``[P][L][T][H][D]``."""
    num_layers = len(src_ptrs) // 2
    p, o = _split(dst_indices, page_size)
    for kv, dst in enumerate(dst_ptrs):
        for layer in range(num_layers):
            dst[p, layer, o] = src_ptrs[kv * num_layers + layer][src_indices]


_TRANSFER_OPS = (transfer_kv_direct, transfer_kv_per_layer_direct_pf_lf,
                 transfer_kv_all_layer_direct_lf_pf)


def _patch_pool_host_mha(mod: types.ModuleType) -> None:
    for op in _TRANSFER_OPS:
        if hasattr(mod, op.__name__):   # a real build provides it: leave SGLang's alone
            continue
        setattr(mod, op.__name__, op)
    _note("patched pool_host.mha transfer ops")


_HOOKS["sglang.srt.mem_cache.pool_host.base"] = _patch_pool_host_base
_HOOKS["sglang.srt.mem_cache.pool_host.mha"] = _patch_pool_host_mha

_installed = False


def install() -> None:
    """Puts the stand-ins in place (idempotent); call before SGLang is imported."""
    global _installed
    if _installed:
        return
    _installed = True
    sys.meta_path.insert(0, _PostImportFinder())
    sys.meta_path.insert(0, _SglKernelFinder())
