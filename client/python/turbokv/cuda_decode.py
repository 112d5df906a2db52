"""Decode packed blocks straight into GPU memory (the serving engine's own device).

    from turbokv.codec import LocalCodec
    from turbokv.cuda_decode import decode_to_device
    codec = LocalCodec.from_preset("k4v4-g32", num_layers=32, block_tokens=16,
                                   num_kv_heads=8, head_dim=128)
    packed = [...]                      # bytes from Client.get_blocks(..., encoding="packed")
    out = torch.empty((len(packed),) + codec.shape, dtype=torch.float16, device="cuda")
    decode_to_device(codec, packed, out)   # out[i] = block i, [L][2][block_tokens][H][D]

Only the packed bytes (3.5-5x fewer than fp16) cross PCIe: they are staged through pinned
memory and decoded by turbokv's CUDA kernels on the tensor's device, on torch's current
stream (after the work already queued there); the call returns when ``out`` holds the values.
The values are identical to ``LocalCodec.decode(packed, out_dtype)``.

``out`` is a contiguous CUDA ``torch.Tensor`` of dtype float16, bfloat16 or float32 with
``len(packed) * codec decoded bytes`` bytes (any shape), or an integer device pointer with
``out_dtype``, ``out_bytes`` and ``device`` given. torch is not a dependency of this package:
it is only looked at when ``out`` is a tensor.

Needs ``libturbokv_codec_c.so`` built with CUDA (``cuda_available()`` says whether it can be
used and why not). Errors raise :class:`turbokv.codec.CodecError` (``code`` 14 UNAVAILABLE:
no CUDA backend or device; 3 INVALID_ARGUMENT: bad arguments; 15 DATA_LOSS: a damaged block,
whose slot in ``out`` is zeros; the exception's ``block_codes`` lists every block's code).
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence

from .codec import DTYPES, CodecError, LocalCodec, load_library

__all__ = ["cuda_available", "decode_to_device"]

_TORCH_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def _lib():
    lib = load_library()
    if not getattr(lib, "_tkv_cuda_ready", False):
        vp, sz, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32
        lib.tkv_cuda_available.argtypes = [i32]
        lib.tkv_cuda_available.restype = ctypes.c_int
        lib.tkv_cuda_decode_to_device.argtypes = [
            vp, i32, ctypes.POINTER(vp), ctypes.POINTER(sz), sz, i32, i32, i32, vp, sz, vp, i32,
            ctypes.POINTER(i32)]
        lib.tkv_cuda_decode_to_device.restype = ctypes.c_int
        lib._tkv_cuda_ready = True
    return lib


def cuda_available(device: int = 0) -> tuple[bool, str]:
    """(True, "") when CUDA device ``device`` can decode; else (False, why)."""
    lib = _lib()
    rc = lib.tkv_cuda_available(device)
    return (rc == 0, "" if rc == 0 else (lib.tkv_last_error() or b"").decode(errors="replace"))


def decode_to_device(codec: LocalCodec, packed: Sequence[bytes], out,
                     layers: tuple[int, int] = (0, -1), *, out_dtype: str | None = None,
                     out_bytes: int | None = None, device: int | None = None,
                     stream: int | None = None, verify_checksum: bool = False) -> None:
    """Decodes layers ``[layers[0], layers[1])`` of each packed block into ``out`` on the GPU.

    out: a CUDA torch.Tensor (dtype, device and stream taken from it) or an int device pointer
    (then out_dtype "fp16"|"bf16"|"fp32", out_bytes and device are required). stream: a
    cudaStream_t as int (default: torch's current stream for a tensor, else the legacy default
    stream). Raises CodecError (see the module docstring), TypeError / ValueError for arguments
    that cannot be right.
    """
    lib = _lib()
    if isinstance(out, int):
        if out_dtype is None or out_bytes is None or device is None:
            raise ValueError("a device pointer needs out_dtype, out_bytes and device")
        ptr, nbytes, dev, dt = out, int(out_bytes), int(device), out_dtype
    else:
        if not (hasattr(out, "is_cuda") and hasattr(out, "data_ptr")):
            raise TypeError("out must be a CUDA torch.Tensor or an int device pointer, not %s"
                            % type(out).__name__)
        if not out.is_cuda:
            raise TypeError("out must be a CUDA tensor (this one is on %s)" % out.device)
        if not out.is_contiguous():
            raise ValueError("out must be contiguous")
        tensor_dt = _TORCH_DTYPES.get(str(out.dtype).replace("torch.", ""))
        if tensor_dt is None or (out_dtype is not None and out_dtype != tensor_dt):
            raise TypeError("out dtype %s is not float16, bfloat16 or float32%s"
                            % (out.dtype, "" if out_dtype is None else " matching " + out_dtype))
        dt = tensor_dt
        ptr, nbytes, dev = out.data_ptr(), out.numel() * out.element_size(), out.device.index
        if stream is None:
            import torch  # only reached with a tensor, so torch is there
            stream = torch.cuda.current_stream(out.device).cuda_stream
    if dt not in DTYPES:
        raise ValueError("out_dtype %r is not one of %s" % (dt, sorted(DTYPES)))
    n = len(packed)
    begin, end = layers
    end_ = codec.shape[0] if end < 0 else end
    per_block = (end_ - begin) * 2 * codec.shape[2] * codec.shape[3] * codec.shape[4] * {
        "fp16": 2, "bf16": 2, "fp32": 4}[dt]
    if nbytes != n * per_block:
        raise ValueError("out holds %d bytes; %d blocks of layers [%d, %d) in %s need %d"
                         % (nbytes, n, begin, end_, dt, n * per_block))
    keep = [bytes(p) for p in packed]  # contiguous buffers that outlive the call
    ptrs = (ctypes.c_void_p * n)(*[ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p) for b in keep])
    lens = (ctypes.c_size_t * n)(*[len(b) for b in keep])
    codes = (ctypes.c_int32 * max(1, n))()
    rc = lib.tkv_cuda_decode_to_device(codec._h, dev, ptrs, lens, n, DTYPES[dt], begin, end,
                                       ptr, nbytes, stream or 0, int(verify_checksum), codes)
    if rc != 0:
        raise CodecError(rc, (lib.tkv_last_error() or b"").decode(errors="replace"),
                         list(codes)[:n])
