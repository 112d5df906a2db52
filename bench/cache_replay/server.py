"""Real turbokv-server processes for the replay, and what the replay measures of them.

:class:`Server` starts ``turbokv-server`` on ``127.0.0.1:0`` (``--port-file``) with a fresh data
directory and a ``--capacity``, and reads what the benchmark needs from outside the process:

* :meth:`Server.io`: ``/proc/PID/io`` (``write_bytes``: bytes the process caused to be sent to
  the storage layer, counted when pages are dirtied, all threads; ``cancelled_write_bytes``:
  dirtied bytes whose write-back was cancelled, e.g. by deleting or truncating the file).
* :meth:`Server.disk_bytes`: the space allocated to everything in the data directory
  (``st_blocks * 512`` summed over files, so sparse files count what they really take).

Errors: :class:`ServerError` when the binary is missing or the server does not start.
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ServerError(RuntimeError):
    """The server binary is missing, or a server failed to start or died."""


def find_server_binary(explicit: str | None = None) -> str:
    """``explicit``, else ``$TURBOKV_SERVER_BIN``, else ``$TURBOKV_BUILD_DIR/bin``, else
    ``<repo>/build/bin/turbokv-server``, else the newest ``<repo>/build*/bin/turbokv-server``.
    Raises ServerError when none is executable."""
    candidates: list[str] = []
    for p in (explicit, os.environ.get("TURBOKV_SERVER_BIN")):
        if p:
            candidates.append(p)
    if os.environ.get("TURBOKV_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["TURBOKV_BUILD_DIR"], "bin", "turbokv-server"))
    candidates.append(os.path.join(REPO, "build", "bin", "turbokv-server"))
    found = glob.glob(os.path.join(REPO, "build*", "bin", "turbokv-server"))
    candidates.extend(sorted(found, key=os.path.getmtime, reverse=True))
    for p in candidates:
        if os.access(p, os.X_OK):
            return os.path.abspath(p)
    raise ServerError("turbokv-server not found (looked at %s): build it with `cmake --build "
                      "build --target turbokv-server` or pass --server-bin"
                      % ", ".join(candidates[:3]))


class Server:
    """One ``turbokv-server`` child process with its own temporary data directory.

    Args:
      binary: the server executable.
      capacity_bytes: ``--capacity`` (bytes).
      extra_args: more flags (e.g. ``["--durability", "wal"]``).
      work_dir: where the data directory and log go (a fresh temp folder inside it).
    Use as a context manager; :meth:`stop` removes the data directory unless ``keep``.
    """

    def __init__(self, binary: str, capacity_bytes: int, extra_args: Sequence[str] = (),
                 work_dir: str | None = None, keep: bool = False):
        self.binary = binary
        self.capacity_bytes = int(capacity_bytes)
        self.extra_args = list(extra_args)
        self.root = tempfile.mkdtemp(prefix="turbokv-replay-", dir=work_dir)
        self.data_dir = os.path.join(self.root, "data")
        self.log_path = os.path.join(self.root, "server.log")
        self.keep = keep
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def address(self) -> str:
        assert self.port is not None, "server not started"
        return "127.0.0.1:%d" % self.port

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> Server:
        port_file = os.path.join(self.root, "port")
        args = [self.binary, "--listen", "127.0.0.1:0", "--port-file", port_file,
                "--data-dir", self.data_dir, "--capacity", str(self.capacity_bytes),
                "--metrics-listen", ""]
        if not any(a.split("=")[0] == "--log-level" for a in self.extra_args):
            args += ["--log-level", "warn"]
        args += self.extra_args
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError("turbokv-server exited with %s at start-up: %s"
                                  % (self.proc.returncode, self.log_tail()))
            try:
                with open(port_file) as f:
                    first = f.readline().strip()
                if first:
                    self.port = int(first)
                    return self
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.02)
        self.stop()
        raise ServerError("turbokv-server did not write its port within %.0f s: %s"
                          % (timeout, self.log_tail()))

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def io(self) -> dict[str, int]:
        """The process's /proc/PID/io counters (bytes): write_bytes, cancelled_write_bytes,
        read_bytes, wchar, rchar. Raises ServerError when the process is gone."""
        try:
            with open("/proc/%d/io" % self.pid) as f:
                rows = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError as e:
            raise ServerError("cannot read /proc/%d/io: %s" % (self.pid, e)) from None
        keys = ("write_bytes", "cancelled_write_bytes", "read_bytes", "wchar", "rchar")
        return {k: int(rows[k]) for k in keys if k in rows}

    def disk_bytes(self) -> int:
        """Allocated bytes (st_blocks * 512) of every file under the data directory."""
        total = 0
        stack = [self.data_dir]
        while stack:
            d = stack.pop()
            try:
                with os.scandir(d) as it:
                    for e in it:
                        try:
                            if e.is_dir(follow_symlinks=False):
                                stack.append(e.path)
                            else:
                                total += e.stat(follow_symlinks=False).st_blocks * 512
                        except FileNotFoundError:  # removed while listing (compaction)
                            pass
            except FileNotFoundError:
                pass
        return total

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` s; removes the folder unless ``keep``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
