"""turbokv.cuda_decode: packed blocks decoded into GPU memory.

Without a usable CUDA device (this CI) the tests check what a caller sees there: a clear
UNAVAILABLE, argument errors before any device work. With one (tests/gpu/run_gpu_checks.sh runs
this file on the GPU machine) the decoded tensor must equal LocalCodec.decode byte for byte.
"""
import numpy as np
import pytest

from turbokv import codec as tkv_codec

try:
    tkv_codec.load_library()
except tkv_codec.CodecUnavailable as e:  # pragma: no cover - needs the build
    pytest.skip(str(e), allow_module_level=True)

from turbokv.cuda_decode import cuda_available, decode_to_device  # noqa: E402

SHAPE = dict(num_layers=3, block_tokens=16, num_kv_heads=2, head_dim=128)


def _blocks(c, n, seed=0):
    rng = np.random.default_rng(seed)
    raws = [rng.standard_normal(c.shape).astype(np.float16) for _ in range(n)]
    return raws, [c.encode(r) for r in raws]


def test_reports_why_no_device():
    ok, why = cuda_available(0)
    if ok:
        pytest.skip("a CUDA device is usable here")
    assert why and ("no CUDA device is usable" in why or "built without the CUDA backend" in why)
    c = tkv_codec.LocalCodec.from_preset("k4v4-g32", **SHAPE)
    _, packed = _blocks(c, 2)
    nbytes = 2 * 3 * 2 * 16 * 2 * 128 * 2
    with pytest.raises(tkv_codec.CodecError) as e:
        decode_to_device(c, packed, 0x10000, out_dtype="fp16", out_bytes=nbytes, device=0)
    assert e.value.code == 14  # UNAVAILABLE
    assert e.value.message == why


def test_argument_errors_come_first():
    c = tkv_codec.LocalCodec.from_preset("k4v4-g32", **SHAPE)
    _, packed = _blocks(c, 2)
    with pytest.raises(ValueError, match="needs out_dtype, out_bytes and device"):
        decode_to_device(c, packed, 0x10000)
    with pytest.raises(ValueError, match=r"out holds 100 bytes; 2 blocks of layers \[1, 3\) in fp32 need 131072"):
        decode_to_device(c, packed, 0x10000, (1, 3), out_dtype="fp32", out_bytes=100, device=0)
    with pytest.raises(TypeError, match="CUDA torch.Tensor or an int device pointer"):
        decode_to_device(c, packed, np.zeros(10))


def test_cpu_tensor_is_refused():
    torch = pytest.importorskip("torch")
    c = tkv_codec.LocalCodec.from_preset("k4v4-g32", **SHAPE)
    _, packed = _blocks(c, 1)
    with pytest.raises(TypeError, match="must be a CUDA tensor"):
        decode_to_device(c, packed, torch.empty((1,) + c.shape, dtype=torch.float16))


@pytest.mark.parametrize("preset", ["k4v4-g32", "k8v4", "k3v2-g32-qjl"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_matches_local_decode_on_a_device(preset, dtype):
    torch = pytest.importorskip("torch")
    ok, why = cuda_available(0)
    if not ok or not torch.cuda.is_available():
        pytest.skip("no usable CUDA device: " + why)
    c = tkv_codec.LocalCodec.from_preset(preset, **SHAPE)
    _, packed = _blocks(c, 5, seed=3)
    damaged = bytearray(packed[3])
    damaged[-1] ^= 0xFF  # checksum
    packed[3] = bytes(damaged)
    tdt = getattr(torch, dtype)
    code = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}[dtype]
    for layers in [(0, -1), (1, 3)]:
        n_layers = (3 if layers[1] < 0 else layers[1]) - layers[0]
        out = torch.full((5, n_layers) + c.shape[1:], 7.0, dtype=tdt, device="cuda")
        with pytest.raises(tkv_codec.CodecError) as e:
            decode_to_device(c, packed, out, layers, verify_checksum=True)
        assert e.value.code == 15 and e.value.message.startswith("block 3: ")
        assert e.value.block_codes == [0, 0, 0, 15, 0]
        got = out.view(torch.int16).cpu().numpy() if dtype != "float32" else out.cpu().numpy()
        assert not got[3].any(), "a failed block is zeros"
        for i in (0, 1, 2, 4):
            want = c.decode(packed[i], code, layers)
            assert got[i].tobytes() == want.tobytes(), "block %d" % i
