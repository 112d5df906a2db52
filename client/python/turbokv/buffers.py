"""Caller-owned memory: numpy arrays, CPU torch tensors and buffer-protocol objects.

The client reads blocks to put from, and writes fetched blocks into, the caller's memory
without intermediate copies. Accepted objects:

* ``numpy.ndarray`` (any dtype; ``ml_dtypes.bfloat16`` too),
* a CPU ``torch.Tensor`` (pinned or not; viewed through ``Tensor.numpy()``, bf16 as its
  uint16 bit patterns). torch is never imported by turbokv: a tensor is recognised by its type.
  CUDA tensors are refused (turbokv moves host memory; copy to a pinned CPU tensor first),
* any object with the Python buffer protocol (``bytearray``, ``memoryview``, ``mmap``,
  ``array.array``), read as bytes.

Thread safety: stateless functions.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np


def _is_torch_tensor(obj: Any) -> bool:
    return any(c.__name__ == "Tensor" and c.__module__ == "torch" for c in type(obj).__mro__)


def as_array(obj: Any, name: str = "buffer") -> np.ndarray:
    """A numpy array sharing ``obj``'s memory (never a copy).

    Raises:
      ValueError: a tensor that is not on the CPU.
      TypeError: an object that is none of the accepted kinds.
    """
    if isinstance(obj, np.ndarray):
        return obj
    if _is_torch_tensor(obj):
        if obj.device.type != "cpu":
            raise ValueError("%s is a %s tensor; turbokv reads and writes host memory: use a "
                             "CPU (pinned) tensor" % (name, obj.device.type))
        t = obj.detach()
        if str(t.dtype) == "torch.bfloat16":
            torch = sys.modules[type(t).__module__.split(".")[0]]
            return t.view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError("%s must be a numpy array, a CPU torch tensor or a buffer-protocol "
                        "object, got %s" % (name, type(obj).__name__)) from None
    return np.asarray(view)


def byte_view(obj: Any, name: str = "buffer", writable: bool = False) -> np.ndarray:
    """``obj``'s memory as a flat, C-contiguous uint8 array (a view, never a copy).

    Raises:
      ValueError: ``obj`` is not C-contiguous, or not writable when ``writable``.
      TypeError: see :func:`as_array`.
    """
    a = as_array(obj, name)
    if not a.flags.c_contiguous:
        raise ValueError("%s is not C-contiguous (shape %s, strides %s)"
                         % (name, a.shape, a.strides))
    if writable and not a.flags.writeable:
        raise ValueError("%s is read-only" % name)
    return a.reshape(-1).view(np.uint8)


def _typed_ok(a: np.ndarray, want: np.dtype[Any]) -> bool:
    """Whether an ``out`` array of dtype a.dtype may receive values of dtype ``want``:
    the same dtype, raw bytes (uint8/int8), or (for bf16, travelling as uint16) int16 or
    ml_dtypes' bfloat16."""
    if a.dtype.itemsize == 1 and a.dtype.kind in "ui":
        return True
    if a.dtype.newbyteorder("<") == want.newbyteorder("<") and a.dtype.kind == want.kind:
        return True
    return want == np.dtype("<u2") and (a.dtype == np.dtype("<i2") or a.dtype.name == "bfloat16")


def block_slots(out: Any, n: int, block_nbytes: int, want: np.dtype[Any],
                exact: bool = True) -> list[np.ndarray]:
    """Splits ``out`` into ``n`` writable uint8 slots of one block each.

    Args:
      out: one buffer holding the n blocks back to back (``n * block_nbytes`` bytes; any
        shape, C-contiguous), or a sequence of n buffers, one per block.
      block_nbytes: bytes of one block. With ``exact`` (raw blocks) every slot must have
        exactly this many; without (packed blocks, whose size the server reports) a single
        buffer is split into n equal slots and each block is checked to fit its slot as it
        arrives.
      want: the dtype the values will have (a numpy array or tensor must have it, or be
        uint8/int8; other buffer-protocol objects are taken as bytes).
    Raises:
      ValueError: wrong count, size, dtype, layout, or a read-only buffer.
    """
    def check_dtype(obj: Any, label: str) -> np.ndarray:
        a = as_array(obj, label)
        typed = isinstance(obj, np.ndarray) or _is_torch_tensor(obj)
        if typed and not _typed_ok(a, want):
            raise ValueError("%s has dtype %s; the blocks are %s" % (label, a.dtype, want))
        return byte_view(a, label, writable=True)

    if isinstance(out, (list, tuple)):
        seq: Sequence[Any] = out
        if len(seq) != n:
            raise ValueError("out has %d buffers for %d blocks" % (len(seq), n))
        slots = [check_dtype(o, "out[%d]" % i) for i, o in enumerate(seq)]
        for i, s in enumerate(slots):
            if exact and s.nbytes != block_nbytes:
                raise ValueError("out[%d] has %d bytes; one block is %d bytes"
                                 % (i, s.nbytes, block_nbytes))
        return slots
    flat = check_dtype(out, "out")
    if exact and flat.nbytes != n * block_nbytes:
        raise ValueError("out has %d bytes; %d blocks of %d bytes need %d"
                         % (flat.nbytes, n, block_nbytes, n * block_nbytes))
    if n == 0:
        return []
    if flat.nbytes % n:
        raise ValueError("out has %d bytes, not a multiple of the %d blocks" % (flat.nbytes, n))
    size = flat.nbytes // n
    return [flat[i * size:(i + 1) * size] for i in range(n)]


def split_out(out: Any, n: int) -> list[Any]:
    """``out`` as n per-block buffers without checking sizes or dtypes (the client that
    fills them does): a sequence is taken as it is, one buffer is split into n equal
    C-contiguous views of its own dtype.

    Raises:
      ValueError: a sequence of another length, a buffer that is not C-contiguous or whose
        element count is not a multiple of n.
    """
    if isinstance(out, (list, tuple)):
        if len(out) != n:
            raise ValueError("out has %d buffers for %d blocks" % (len(out), n))
        return list(out)
    a = as_array(out, "out")
    if not a.flags.c_contiguous:
        raise ValueError("out is not C-contiguous (shape %s, strides %s)" % (a.shape, a.strides))
    if n == 0:
        return []
    flat = a.reshape(-1)
    if flat.size % n:
        raise ValueError("out has %d elements, not a multiple of the %d blocks" % (flat.size, n))
    k = flat.size // n
    return [flat[i * k:(i + 1) * k] for i in range(n)]
