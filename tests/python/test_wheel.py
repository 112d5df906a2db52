"""The client wheel as a user gets it: built by the project command (tools/build_wheel.sh),
installed with pip into fresh venvs, run from outside the checkout against the real server.

* Building writes nothing into the source tree (client/python, proto).
* The wheel holds the client, its stubs, py.typed, the bundled codec library and the
  integrations, and not the numpy model code.
* In a fresh venv (pip resolves the newest grpcio/protobuf/numpy) and in a venv that pins old
  ones (grpcio 1.51.3, protobuf 4.21.12, numpy 1.26.4: what serving stacks of 2023 pin), the
  install leaves the pinned versions alone, and the installed client encodes and decodes a
  packed block locally, byte-identical to what the server stores and returns.

Needs network access to PyPI for the venvs (pip's cache makes reruns fast). ~3 min.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO

pytestmark = pytest.mark.integration

OLD_PINS = ["grpcio==1.51.3", "protobuf==4.21.12", "numpy==1.26.4"]

CHECK = r'''
import json, sys
import numpy as np, grpc, google.protobuf
import turbokv
from turbokv import Client, PrefixHasher, StatusCode
from turbokv.codec import LocalCodec
assert "site-packages" in turbokv.__file__, turbokv.__file__
c = Client(sys.argv[1], timeout=60)
info = c.register_namespace(model="wheel", num_layers=3, num_kv_heads=2, head_dim=64,
                            block_tokens=16, preset="k4v4-g32")
ns = info.namespace_id
block = np.random.default_rng(0).normal(0, 1, (3, 2, 16, 2, 64)).astype(np.float16)
lc = LocalCodec.from_preset("k4v4-g32", 3, 16, 2, 64, namespace_id=ns)
packed = lc.encode(block)
assert len(packed) == info.packed_block_bytes
h1, h2 = PrefixHasher(ns).block_hashes(np.arange(32), 16)
assert c.put_blocks(ns, [h1], block[None])[0].code == StatusCode.OK  # the server encodes
assert c.put_packed_blocks(ns, [h2], [packed])[0].ok                 # we encoded
server_packed, ours = c.get_packed_blocks(ns, [h1, h2])
assert server_packed == packed and ours == packed
decoded = c.get_blocks(ns, [h2])[0]
local = lc.decode(packed, "fp16")
assert np.array_equal(decoded.view(np.uint16), local.view(np.uint16))
into = np.zeros_like(local)
assert lc.decode(packed, "fp16", out=into).base is not None and np.array_equal(into, local)
assert info.prefix_hasher().block_hashes(np.arange(32)) == [h1, h2]
rel = float(((local.astype(np.float64) - block) ** 2).sum() / (block.astype(np.float64) ** 2).sum())
assert 0.0 < rel < 0.02, rel
print(json.dumps({"grpcio": grpc.__version__, "protobuf": google.protobuf.__version__,
                  "numpy": np.__version__, "rel_mse": rel, "bpv": lc.bits_per_value}))
'''


def _tree_state():
    return subprocess.run(["git", "status", "--porcelain", "--ignored", "--", "client/python",
                           "proto"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def wheel():
    build = os.environ.get("TURBOKV_BUILD_DIR") or os.path.join(REPO, "build")
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        pytest.skip("no configured build folder (tools/setup.sh)")
    before = _tree_state()
    p = subprocess.run(["bash", "tools/build_wheel.sh"], cwd=REPO, capture_output=True,
                       text=True, env=dict(os.environ, BUILD=build), timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _tree_state() == before, "building the wheel changed the source tree"
    path = p.stdout.strip().splitlines()[-1]
    assert os.path.isfile(path) and path.endswith("-py3-none-linux_x86_64.whl"), path
    return path


def _venv(tmp, name, pins=()):
    d = os.path.join(str(tmp), name)
    subprocess.run([sys.executable, "-m", "venv", d], check=True)
    py = os.path.join(d, "bin", "python")
    if pins:
        _pip(py, "install", "-q", *pins)
    return py


def _pip(py, *args):
    p = subprocess.run([py, "-m", "pip", "--disable-pip-version-check", *args],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _versions(py):
    out = _pip(py, "list", "--format=json")
    return {d["name"].lower(): d["version"] for d in json.loads(out)}


def _check(py, server, tmp):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TURBOKV_CODEC_LIB",
                                                            "TURBOKV_BUILD_DIR")}
    p = subprocess.run([py, "-c", CHECK, server.address], cwd=str(tmp), env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for must in ("turbokv/__init__.py", "turbokv/client.py", "turbokv/py.typed",
                 "turbokv/v1/turbokv_pb2.py", "turbokv/v1/turbokv_pb2.pyi",
                 "turbokv/v1/turbokv_pb2_grpc.py", "turbokv/_lib/libturbokv_codec_c.so"):
        assert must in names, must
    assert not [n for n in names if n.startswith("turbokv/models")], "model code in the wheel"
    meta = zipfile.ZipFile(wheel).read(
        [n for n in names if n.endswith(".dist-info/METADATA")][0]).decode()
    assert "Name: turbokv-client" in meta
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert not [r for r in requires if "torch" in r or "lmcache" in r or "vllm" in r], requires
    assert "Requires-Dist: grpcio>=1.51" in requires
    assert "Requires-Dist: protobuf>=4.21" in requires


def test_fresh_venv_encodes_decodes_and_talks_to_server(wheel, turbokv_server, tmp_path):
    py = _venv(tmp_path, "fresh")
    _pip(py, "install", "-q", wheel)
    got = _check(py, turbokv_server, tmp_path)
    assert got["bpv"] > 4.0 and got["rel_mse"] > 0


def test_install_keeps_old_grpcio_protobuf(wheel, turbokv_server, tmp_path):
    py = _venv(tmp_path, "old", OLD_PINS)
    before = _versions(py)
    _pip(py, "install", "-q", wheel)
    after = _versions(py)
    for pkg in ("grpcio", "protobuf", "numpy"):
        assert after[pkg] == before[pkg], (pkg, before[pkg], after[pkg])
    got = _check(py, turbokv_server, tmp_path)
    assert (got["grpcio"], got["protobuf"], got["numpy"]) == ("1.51.3", "4.21.12", "1.26.4")
