"""A real SGLang HTTP server (``python -m sglang.launch_server``) in a child process, on CPU.

Used by tests/engine/test_sglang_backend.py with the SGLang venv's python
(tools/setup_engines.sh). The server runs SGLang's own code throughout except for the few
CUDA-only pieces that ``sglang_cpu_shim/turbokv_sglang_cpu_standin.py`` stands in for (its
docstring names each one); this module puts that folder on the server's PYTHONPATH and sets
``TURBOKV_SGLANG_CPU_STANDIN=1`` so that the stand-in loads in SGLang's processes only (the
HTTP server, its tokenizer and its scheduler). Every call of a stood-in ``sgl_kernel`` function
is written to ``standin_log`` as ``CALLED <name>`` (the tests assert there is none).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(HERE, "sglang_cpu_shim")

# Flags every CPU server here gets: fp32 (the numpy reference is fp32), SGLang's torch-native
# attention and sampling (no flashinfer / triton on CPU), no CUDA graphs, a small KV pool; an
# idle scheduler sleeps instead of polling (two servers are up at a time in the tests).
BASE_ARGS = ["--device", "cpu", "--dtype", "float32", "--attention-backend", "torch_native",
             "--sampling-backend", "pytorch", "--disable-cuda-graph", "--max-total-tokens",
             "8192", "--random-seed", "0", "--log-level", "info", "--sleep-on-idle"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hicache_args(extra_config: dict[str, Any], layout: str = "page_first_direct",
                 io_backend: str = "direct") -> list[str]:
    """HiCache with turbokv as its ``dynamic`` storage backend (1 GB host pool; a prefetch
    waits for every page it found, so a hit count does not depend on the machine's speed)."""
    cfg = dict({"backend_name": "turbokv", "module_path": "turbokv.integrations.sglang",
                "class_name": "TurboKVStorage"}, **extra_config)
    return ["--enable-hierarchical-cache", "--hicache-size", "1", "--hicache-io-backend",
            io_backend, "--hicache-mem-layout", layout, "--hicache-write-policy",
            "write_through", "--hicache-storage-backend", "dynamic",
            "--hicache-storage-prefetch-policy", "wait_complete",
            "--hicache-storage-backend-extra-config", json.dumps(cfg)]


class SGLangServer:
    """``python -m sglang.launch_server`` on 127.0.0.1:<free port>; log in ``log_path``."""

    def __init__(self, model_dir: str, log_path: str, extra_args: Sequence[str] = (),
                 page_size: int = 64, stubs_dir: str = "", standin_log: str = ""):
        self.model_dir = model_dir
        self.log_path = log_path
        self.args = list(extra_args)
        self.page_size = page_size
        self.stubs_dir = stubs_dir
        self.standin_log = standin_log
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.startup_s = 0.0
        self._t0 = 0.0

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        path = [SHIM, os.path.join(REPO, "client", "python")]
        if self.stubs_dir:
            path.append(self.stubs_dir)
        # SGLANG_USE_CPU_ENGINE=1: SGLang's own CPU engine (is_cpu(): torch-native RoPE, CPU
        # memory pools and thread binding) instead of its CUDA code paths.
        env.update({"PYTHONPATH": os.pathsep.join(path), "TURBOKV_SGLANG_CPU_STANDIN": "1",
                    "SGLANG_USE_CPU_ENGINE": "1",
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "DO_NOT_TRACK": "1"})
        if self.standin_log:
            env["TURBOKV_SGLANG_STANDIN_LOG"] = self.standin_log
        return env

    def start(self, timeout: float = 900.0) -> SGLangServer:
        """``launch()`` then ``wait_ready()``."""
        return self.launch().wait_ready(timeout)

    def launch(self) -> SGLangServer:
        """Starts the server process and returns at once (several servers can start together;
        their start-up is mostly imports and compilation on one core each)."""
        self.port = free_port()
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", self.model_dir,
               "--host", "127.0.0.1", "--port", str(self.port), "--page-size",
               str(self.page_size)] + BASE_ARGS + self.args
        self._t0 = time.monotonic()
        log = open(self.log_path, "ab")
        # Own process group: stop() ends SGLang's scheduler and detokenizer children too.
        self.proc = subprocess.Popen(cmd, env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        return self

    def wait_ready(self, timeout: float = 900.0) -> SGLangServer:
        """Waits for SGLang's "ready to roll" line (after its own warm-up request); raises
        RuntimeError with the log's tail when the server exits or the timeout passes."""
        assert self.proc is not None
        while time.monotonic() - self._t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("SGLang exited with %s during start-up:\n%s"
                                   % (self.proc.returncode, self.log()[-6000:]))
            if "The server is fired up and ready to roll" in self.log():
                self.startup_s = time.monotonic() - self._t0
                return self
            time.sleep(1.0)
        self.stop()
        raise RuntimeError("SGLang did not start within %.0f s:\n%s" % (timeout,
                                                                    self.log()[-6000:]))

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        try:   # children that outlived the launcher
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc = None

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _url(self, path: str) -> str:
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def flush_cache(self) -> None:
        """SGLang's /flush_cache: empties the device and host caches (not the storage)."""
        req = urllib.request.Request(self._url("/flush_cache"), method="POST")
        urllib.request.urlopen(req, timeout=120).read()

    def generate(self, input_ids: Sequence[int], max_new_tokens: int) -> dict[str, Any]:
        """One greedy request, streamed: returns ``output_ids``, ``meta_info`` (SGLang's, of the
        last chunk: ``cached_tokens``, ``cached_tokens_details``, ...), ``ttft_s`` (wall time to
        the first streamed chunk) and ``wall_s``."""
        body = {"input_ids": list(input_ids), "stream": True,
                "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                    "ignore_eos": True}}
        req = urllib.request.Request(self._url("/generate"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        ttft = None
        last: dict[str, Any] = {}
        with urllib.request.urlopen(req, timeout=900) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                if ttft is None:
                    ttft = time.monotonic() - t0
                last = json.loads(data)
        return {"output_ids": last.get("output_ids"), "meta_info": last.get("meta_info", {}),
                "ttft_s": ttft, "wall_s": time.monotonic() - t0}
