"""mypy over the client package exactly as the wheel ships it: client/python/turbokv plus the
generated stubs ($TURBOKV_BUILD_DIR/python/turbokv/v1), with the settings of
client/python/pyproject.toml ([tool.mypy]). Skipped when mypy is not installed
(tools/requirements.txt installs it)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import CLIENT_PY, STUBS_DIR


def test_package_is_mypy_clean(tmp_path):
    pytest.importorskip("mypy")
    stubs = os.path.join(STUBS_DIR, "turbokv", "v1")
    if not os.path.isfile(os.path.join(stubs, "turbokv_pb2.pyi")):
        pytest.skip("generated stubs missing in %s (tools/setup.sh)" % stubs)
    pkg = tmp_path / "turbokv"
    shutil.copytree(os.path.join(CLIENT_PY, "turbokv"), pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "v1", "_lib"))
    shutil.copytree(stubs, pkg / "v1", ignore=shutil.ignore_patterns("__pycache__"))
    assert (pkg / "py.typed").is_file()
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                        os.path.join(CLIENT_PY, "pyproject.toml"), "--cache-dir",
                        str(tmp_path / "cache"), "-p", "turbokv"], cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success: no issues found" in p.stdout
