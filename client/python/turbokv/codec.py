"""Local codec: the server's TurboQuant codec in-process, through its C ABI (ctypes).

    from turbokv.codec import LocalCodec
    c = LocalCodec.from_preset("k3v3-g32", num_layers=30, block_tokens=16, num_kv_heads=3,
                               head_dim=64)
    packed = c.encode(block)            # block [L][2][block_tokens][H][D] float16 -> bytes
    out = c.decode(packed)              # -> float32 [L][2][block_tokens][H][D]
    c.bits_per_value                    # from the packed size (header and checksum included)

The packed bytes are exactly those the server stores for the same shape, codec and namespace
id (same library code), so a fake-quantization experiment through this class measures what
the store would return.

The shared library (``libturbokv_codec_c.so``, CMake target ``turbokv_codec_c``,
kernels/include/turbokv/codec/c_api.h) is ``$TURBOKV_CODEC_LIB``, else the copy bundled in
the wheel (``turbokv/_lib/``, tools/build_wheel.sh), else the one under
``$TURBOKV_BUILD_DIR/lib``, else the newest ``<repo>/build*/lib/libturbokv_codec_c.so`` (or
``.../bin/``) of a checkout. :class:`CodecUnavailable` is raised when none is found. Errors from the library raise :class:`CodecError` with the absl
code and message.
"""
from __future__ import annotations

import ctypes
import dataclasses
import glob
import os
from typing import Any

import numpy as np

LIB_NAME = "libturbokv_codec_c.so"
API_VERSION = 1
_REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

DTYPES = {"fp16": 1, "bf16": 2, "fp32": 3}
_NUMPY: dict[int, np.dtype[Any]] = {1: np.dtype("<f2"), 2: np.dtype("<u2"), 3: np.dtype("<f4")}
DEFAULT_ROTATION_SEED = 0x7475726B6F6B7631
DEFAULT_QJL_SEED = 0x716A6C7475726B31


class CodecUnavailable(RuntimeError):
    """The codec shared library was not found or could not be loaded."""


class CodecError(RuntimeError):
    """A codec call failed; ``code`` is the absl/gRPC status code, ``message`` its text.

    ``block_codes``: for a call over many blocks (``cuda_decode.decode_to_device``), the
    status code of each block in order (0 for a block that decoded); empty otherwise.
    """

    def __init__(self, code: int, message: str, block_codes: list[int] | None = None):
        super().__init__("codec error %d: %s" % (code, message))
        self.code = code
        self.message = message
        self.block_codes: list[int] = list(block_codes or [])


class _Shape(ctypes.Structure):
    _fields_ = [("num_layers", ctypes.c_int32), ("block_tokens", ctypes.c_int32),
                ("num_kv_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("dtype", ctypes.c_int32)]


class _Params(ctypes.Structure):
    _fields_ = [("key_bits", ctypes.c_int32), ("key_group_size", ctypes.c_int32),
                ("key_qjl", ctypes.c_int32), ("value_bits", ctypes.c_int32),
                ("value_group_size", ctypes.c_int32), ("value_qjl", ctypes.c_int32),
                ("protected_first_layers", ctypes.c_int32),
                ("protected_last_layers", ctypes.c_int32), ("protected_bits", ctypes.c_int32),
                ("norm_correction", ctypes.c_int32), ("rotation_seed", ctypes.c_uint64),
                ("qjl_seed", ctypes.c_uint64)]


@dataclasses.dataclass(frozen=True)
class CodecParams:
    """Explicit codec parameters (``CodecSpec`` in kernels/include/turbokv/codec/types.h).

    bits: 0 = raw (verbatim), 1-4 or 8 = TurboQuant, 16 = fp16. group sizes: powers of two in
    [8, 256] dividing head_dim.
    """
    key_bits: int = 4
    key_group_size: int = 32
    key_qjl: bool = False
    value_bits: int = 4
    value_group_size: int = 32
    value_qjl: bool = False
    protected_first_layers: int = 0
    protected_last_layers: int = 0
    protected_bits: int = 8
    norm_correction: bool = True
    rotation_seed: int = DEFAULT_ROTATION_SEED
    qjl_seed: int = DEFAULT_QJL_SEED

    def _c(self) -> _Params:
        return _Params(self.key_bits, self.key_group_size, int(self.key_qjl), self.value_bits,
                       self.value_group_size, int(self.value_qjl), self.protected_first_layers,
                       self.protected_last_layers, self.protected_bits, int(self.norm_correction),
                       self.rotation_seed, self.qjl_seed)

    def server_overrides(self) -> dict:
        """The same codec as ``Client.register_namespace`` keyword overrides."""
        return dict(key=dict(bits=self.key_bits, group_size=self.key_group_size,
                             qjl=self.key_qjl),
                    value=dict(bits=self.value_bits, group_size=self.value_group_size,
                               qjl=self.value_qjl),
                    protected_first_layers=self.protected_first_layers,
                    protected_last_layers=self.protected_last_layers,
                    protected_bits=self.protected_bits,
                    disable_norm_correction=not self.norm_correction,
                    rotation_seed=self.rotation_seed, qjl_seed=self.qjl_seed)


def find_library() -> str | None:
    """``$TURBOKV_CODEC_LIB``, else the wheel's ``turbokv/_lib/``, else
    ``$TURBOKV_BUILD_DIR/{lib,bin}/``, else the newest
    ``<repo>/build*/{lib,bin}/libturbokv_codec_c.so``."""
    explicit = os.environ.get("TURBOKV_CODEC_LIB")
    if explicit:
        return explicit if os.path.exists(explicit) else None
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", LIB_NAME)
    if os.path.exists(bundled):
        return bundled
    build = os.environ.get("TURBOKV_BUILD_DIR")
    if build:
        for sub in ("lib", "bin"):
            p = os.path.join(build, sub, LIB_NAME)
            if os.path.exists(p):
                return p
    found = [p for sub in ("lib", "bin")
             for p in glob.glob(os.path.join(_REPO, "build*", sub, LIB_NAME))]
    return max(found, key=os.path.getmtime) if found else None


_LIB = None


def load_library(path: str | None = None) -> ctypes.CDLL:
    """Loads (once) and returns the C ABI library. Raises CodecUnavailable."""
    global _LIB
    if _LIB is not None and path is None:
        return _LIB
    p = path or find_library()
    if p is None:
        raise CodecUnavailable(
            "%s not found: build the CMake target turbokv_codec_c (cmake --build build "
            "--target turbokv_codec_c) or set TURBOKV_CODEC_LIB" % LIB_NAME)
    try:
        lib = ctypes.CDLL(p)
    except OSError as e:
        raise CodecUnavailable("cannot load %s: %s" % (p, e)) from e
    lib.tkv_api_version.restype = ctypes.c_int
    if lib.tkv_api_version() != API_VERSION:
        raise CodecUnavailable("%s has C API version %d; expected %d"
                               % (p, lib.tkv_api_version(), API_VERSION))
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.tkv_last_error.restype = ctypes.c_char_p
    lib.tkv_preset_params.argtypes = [ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(_Params)]
    lib.tkv_codec_create.argtypes = [ctypes.POINTER(_Shape), ctypes.POINTER(_Params),
                                     ctypes.c_uint64, ctypes.POINTER(vp)]
    lib.tkv_codec_destroy.argtypes = [vp]
    lib.tkv_codec_destroy.restype = None
    for f in ("tkv_codec_raw_bytes", "tkv_codec_packed_bytes"):
        getattr(lib, f).argtypes = [vp]
        getattr(lib, f).restype = sz
    lib.tkv_codec_bits_per_value.argtypes = [vp]
    lib.tkv_codec_bits_per_value.restype = ctypes.c_double
    lib.tkv_codec_encode.argtypes = [vp, vp, sz, vp, sz]
    lib.tkv_codec_decode.argtypes = [vp, vp, sz, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                     vp, sz, ctypes.c_int32]
    if path is None:
        _LIB = lib
    return lib


def _check(lib, rc: int) -> None:
    if rc != 0:
        raise CodecError(rc, (lib.tkv_last_error() or b"").decode(errors="replace"))


def preset_params(preset: str, head_dim: int) -> CodecParams:
    """The explicit parameters of a preset at this head_dim."""
    lib = load_library()
    p = _Params()
    _check(lib, lib.tkv_preset_params(preset.encode(), head_dim, ctypes.byref(p)))
    return CodecParams(p.key_bits, p.key_group_size, bool(p.key_qjl), p.value_bits,
                       p.value_group_size, bool(p.value_qjl), p.protected_first_layers,
                       p.protected_last_layers, p.protected_bits, bool(p.norm_correction),
                       p.rotation_seed, p.qjl_seed)


class LocalCodec:
    """One codec (shape + parameters), as the server builds it for a namespace.

    Thread-safe for encode/decode. Blocks are ``[num_layers][2][block_tokens][num_kv_heads]
    [head_dim]`` in the shape's dtype (fp16 by default; bf16 as uint16 bit patterns).
    """

    def __init__(self, num_layers: int, block_tokens: int, num_kv_heads: int, head_dim: int,
                 params: CodecParams, dtype: str = "fp16", namespace_id: int = 0):
        self._lib = load_library()
        self.params = params
        self.dtype = dtype
        self.shape: tuple[int, int, int, int, int] = (num_layers, 2, block_tokens,
                                                      num_kv_heads, head_dim)
        self._dcode = DTYPES[dtype]
        s = _Shape(num_layers, block_tokens, num_kv_heads, head_dim, self._dcode)
        h = ctypes.c_void_p()
        _check(self._lib, self._lib.tkv_codec_create(ctypes.byref(s), ctypes.byref(params._c()),
                                                     namespace_id, ctypes.byref(h)))
        self._h: ctypes.c_void_p | None = h
        self.raw_bytes = int(self._lib.tkv_codec_raw_bytes(h))
        self.packed_bytes = int(self._lib.tkv_codec_packed_bytes(h))
        self.bits_per_value = float(self._lib.tkv_codec_bits_per_value(h))

    @classmethod
    def from_preset(cls, preset: str, num_layers: int, block_tokens: int, num_kv_heads: int,
                    head_dim: int, dtype: str = "fp16", namespace_id: int = 0) -> LocalCodec:
        return cls(num_layers, block_tokens, num_kv_heads, head_dim,
                   preset_params(preset, head_dim), dtype, namespace_id)

    def close(self) -> None:
        if getattr(self, "_h", None):
            self._lib.tkv_codec_destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def encode(self, block: np.ndarray) -> bytes:
        """block: the raw layout in the codec's dtype (C order). Returns the packed bytes."""
        a = np.ascontiguousarray(block, dtype=_NUMPY[self._dcode])
        if a.shape != self.shape:
            raise ValueError("block shape %s != codec shape %s" % (a.shape, self.shape))
        out = ctypes.create_string_buffer(self.packed_bytes)
        _check(self._lib, self._lib.tkv_codec_encode(self._h, a.ctypes.data, a.nbytes, out,
                                                     self.packed_bytes))
        return out.raw

    def decode(self, packed: Any, out_dtype: str = "fp32", layers: tuple[int, int] = (0, -1),
               verify_checksum: bool = False, out: Any = None) -> np.ndarray:
        """Decodes layers [layers[0], layers[1]) (-1 = to the last) to ``out_dtype``.

        ``packed``: bytes or any C-contiguous buffer (e.g. a slot filled by
        ``Client.get_packed_blocks(..., out=)``). ``out``: caller-owned memory for the result
        (numpy array, CPU torch tensor or buffer of exactly the decoded size, in
        ``out_dtype`` or uint8); returns the ``[end-begin][2][block_tokens][H][D]`` view.
        """
        from . import buffers
        begin, end = layers
        end_ = self.shape[0] if end < 0 else end
        code = DTYPES[out_dtype]
        shape = (end_ - begin,) + self.shape[1:]
        npdt = _NUMPY[code]
        if out is None:
            dst = np.empty(shape, dtype=npdt)
        else:
            nbytes = int(np.prod(shape)) * npdt.itemsize
            dst = buffers.block_slots(out, 1, nbytes, npdt)[0].view(npdt).reshape(shape)
        src = packed if isinstance(packed, bytes) else buffers.byte_view(packed, "packed")
        ptr = ctypes.c_char_p(src) if isinstance(src, bytes) else src.ctypes.data
        _check(self._lib, self._lib.tkv_codec_decode(self._h, ptr, len(src), code, begin, end,
                                                     dst.ctypes.data, dst.nbytes,
                                                     int(verify_checksum)))
        return dst

    def roundtrip(self, block: np.ndarray, out_dtype: str = "fp32") -> np.ndarray:
        """decode(encode(block)): what the store returns for this block."""
        return self.decode(self.encode(block), out_dtype)
