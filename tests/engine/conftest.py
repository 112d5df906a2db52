"""Fixtures of the engine tests (run with the engine venv: tools/setup_engines.sh).

* ``client/python``, the stubs in ``$TURBOKV_BUILD_DIR/python`` (tools/setup.sh) and ``tools``
  (``numpy_llm``) on ``sys.path``, as tests/python's conftest sets them up.
* ``server_binary``: the ``turbokv-server`` binary, found as in tests/python (``$TURBOKV_SERVER_BIN``,
  ``$TURBOKV_BUILD_DIR/bin``, newest ``<repo>/build*/bin``); ``ServerProcess`` from there.
* ``hf_model_dir``: the SmolLM2 HF directory made by tools/make_hf_model.py (cached).

Every test here skips, saying why, when vLLM or torch is not importable: plain
``pytest tests/python`` never collects this folder, and ``tools/test.sh`` runs it with the
engine venv's python.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT_PY = os.path.join(REPO, "client", "python")
if CLIENT_PY not in sys.path:
    sys.path.insert(0, CLIENT_PY)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# The server-process helper of the Python client tests (one copy of it in the repository).
_support = _load("turbokv_python_test_support", os.path.join(REPO, "tests", "python",
                                                                "conftest.py"))
ServerProcess = _support.ServerProcess
find_server_binary = _support.find_server_binary
STUBS_DIR = _support.STUBS_DIR


@pytest.fixture(scope="session")
def server_binary():
    b = find_server_binary()
    if b is None:
        pytest.skip("turbokv-server binary not found (set TURBOKV_BUILD_DIR)")
    return b


@pytest.fixture(scope="session")
def hf_model_dir():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    tool = _load("turbokv_make_hf_model", os.path.join(REPO, "tools", "make_hf_model.py"))
    from numpy_llm import fetch
    out = fetch.cache_dir() / tool.MODEL_DIR_NAME
    try:
        return str(tool.make(out))
    except fetch.ModelUnavailable as e:
        pytest.skip("SmolLM2 GGUF not available: %s" % e)
