"""Shared pytest fixtures for the Python tests.

* The checkout's ``client/python`` is put first on ``sys.path`` (tests exercise the tree, not an
  installed copy), with the gRPC stubs from ``$TURBOKV_BUILD_DIR/python`` (generated there by
  tools/setup.sh; ``turbokv`` joins them through ``pkgutil.extend_path``).
* ``<repo>/tools`` is on ``sys.path`` for ``numpy_llm`` (the numpy models, tools/numpy_llm).
* ``turbokv_server``: a real ``turbokv-server`` binary on 127.0.0.1 with a free port (``--listen
  127.0.0.1:0 --port-file``), metrics disabled and a fresh temporary ``--data-dir``, one per test.
  The binary is ``$TURBOKV_SERVER_BIN``, else ``$TURBOKV_BUILD_DIR/bin/turbokv-server``, else the
  newest ``<repo>/build*/bin/turbokv-server``; tests using it are skipped, saying so, when none
  exists.
* ``turbokv_cli``: the ``turbokv`` CLI binary, found the same way (``$TURBOKV_CLI_BIN``).
* ``turbokv_client``: a ``turbokv.Client`` connected to ``turbokv_server``.

Run: ``TURBOKV_BUILD_DIR=build python -m pytest tests/python``.
"""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT_PY = os.path.join(REPO, "client", "python")
FIXTURES = os.path.join(REPO, "tests", "fixtures")


def _stubs_dir():
    """$TURBOKV_BUILD_DIR/python, else the newest <repo>/build*/python with stubs."""
    build = os.environ.get("TURBOKV_BUILD_DIR")
    if build:
        return os.path.join(build, "python")
    found = glob.glob(os.path.join(REPO, "build*", "python", "turbokv", "v1", "turbokv_pb2.py"))
    if not found:
        return os.path.join(REPO, "build", "python")
    return os.path.dirname(os.path.dirname(os.path.dirname(max(found, key=os.path.getmtime))))


STUBS_DIR = _stubs_dir()
for _p in (STUBS_DIR, CLIENT_PY):  # the tree first, its stubs from the build folder
    if _p not in sys.path:
        sys.path.insert(0, _p)
if os.path.join(REPO, "tools") not in sys.path:  # numpy_llm: the numpy models of demo/bench
    sys.path.append(os.path.join(REPO, "tools"))
_STUBS_ERROR = None
if not os.path.isfile(os.path.join(STUBS_DIR, "turbokv", "v1", "turbokv_pb2.py")):
    _STUBS_ERROR = ("the turbokv gRPC stubs are not generated in %s: run tools/setup.sh (or "
                    "client/python/scripts/gen_stubs.py --out-root %s --venv ...)"
                    % (STUBS_DIR, STUBS_DIR))


def require_stubs():
    """Skips the calling test when the gRPC stubs are not available."""
    try:
        import turbokv.client  # noqa: F401
    except ImportError as e:
        pytest.skip(_STUBS_ERROR or str(e))


def _find_binary(name: str, env_var: str):
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    build = os.environ.get("TURBOKV_BUILD_DIR")
    if build:
        p = os.path.join(build, "bin", name)
        return p if os.access(p, os.X_OK) else None
    found = [p for p in glob.glob(os.path.join(REPO, "build*", "bin", name)) if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def find_server_binary():
    return _find_binary("turbokv-server", "TURBOKV_SERVER_BIN")


def find_cli_binary():
    return _find_binary("turbokv", "TURBOKV_CLI_BIN")


class ServerProcess:
    """A turbokv-server child process on 127.0.0.1:<free port>."""

    def __init__(self, binary: str, data_dir: str, log_path: str, extra_args=(),
                 metrics: bool = False, listen_host: str = "127.0.0.1"):
        self.binary = binary
        self.listen_host = listen_host  # the gRPC port binds listen_host:0
        self.metrics = metrics  # serve /metrics on 127.0.0.1:<free port> (metrics_port)
        self.metrics_port = None
        self.data_dir = data_dir
        self.log_path = log_path
        self.extra_args = list(extra_args)
        self.proc = None
        self.port = None

    @property
    def address(self) -> str:
        return "127.0.0.1:%d" % self.port

    def start(self, timeout: float = 30.0) -> ServerProcess:
        port_file = os.path.join(os.path.dirname(self.log_path),
                                 "port-%d" % int(time.time() * 1e6))
        args = [self.binary, "--listen", self.listen_host + ":0", "--port-file", port_file,
                "--data-dir", self.data_dir, "--metrics-listen",
                "127.0.0.1:0" if self.metrics else "", "--codec-threads", "2",
                "--log-level", "warn"] + self.extra_args
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("turbokv-server exited with %s during start-up; log:\n%s"
                                   % (self.proc.returncode, self.log()))
            try:
                with open(port_file) as f:
                    first = f.readline().strip()
                    second = f.readline().strip()
                if first and (second or not self.metrics):
                    self.port = int(first)
                    self.metrics_port = int(second) if second else None
                    return self
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("turbokv-server did not write its port file within %.0f s; log:\n%s"
                           % (timeout, self.log()))

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self._log.close()

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-4000:]
        except OSError:
            return ""


@pytest.fixture
def turbokv_server(tmp_path):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found: set TURBOKV_SERVER_BIN or "
                    "TURBOKV_BUILD_DIR (looked for <repo>/build*/bin/turbokv-server)")
    server = ServerProcess(binary, str(tmp_path / "data"), str(tmp_path / "server.log"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def turbokv_client(turbokv_server):
    require_stubs()
    from turbokv import Client
    c = Client(turbokv_server.address, timeout=60.0)
    yield c
    c.close()


@pytest.fixture
def turbokv_cli():
    binary = find_cli_binary()
    if binary is None:
        pytest.skip("turbokv CLI binary not found: set TURBOKV_CLI_BIN or TURBOKV_BUILD_DIR "
                    "(looked for <repo>/build*/bin/turbokv)")
    return binary


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs the turbokv-server binary")
