"""Day-one operability of the real binaries (issue 13): start-up checks that fail before any
state is created, capacity warnings, --version, the CLI's error for an unknown command,
`ns list`, the resolved codec at registration, one JSON object per command, progress lines,
valid JSON from `turbokv-codec eval` on an all-zero input, and metrics an operator can trust
(no pre-created zero series, process_* and build-info series, one meaning of stored bytes and
of the compression ratio)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from conftest import FIXTURES, _find_binary, find_cli_binary, find_server_binary

pytestmark = pytest.mark.integration

SMOLLM2_KV = os.path.join(FIXTURES, "smollm2_kv_64_fp16.npy")
SMOLLM2_TOKENS = os.path.join(FIXTURES, "smollm2_tokens_64.npy")


def _binary(name, env):
    p = _find_binary(name, env)
    if p is None:
        pytest.skip("%s binary not found (set %s or TURBOKV_BUILD_DIR)" % (name, env))
    return p


@pytest.fixture
def server_bin():
    p = find_server_binary()
    if p is None:
        pytest.skip("turbokv-server binary not found")
    return p


@pytest.fixture
def cli_bin():
    p = find_cli_binary()
    if p is None:
        pytest.skip("turbokv CLI binary not found")
    return p


class Server:
    """turbokv-server with the given flags; waits for its port file (or for it to exit)."""

    def __init__(self, binary, tmp_path, *args, data_dir=None, metrics=False, name="srv"):
        self.data_dir = str(data_dir or tmp_path / ("%s-data" % name))
        self.log_path = tmp_path / ("%s.log" % name)
        self.port_file = tmp_path / ("%s.ports" % name)
        if self.port_file.exists():
            self.port_file.unlink()
        argv = [binary, "--port-file", str(self.port_file), "--data-dir", self.data_dir,
                "--codec-threads", "1", "--log-level", "info",
                "--metrics-listen", "127.0.0.1:0" if metrics else ""]
        if not any(a.startswith("--listen") for a in args):
            argv += ["--listen", "127.0.0.1:0"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv + list(args), stdout=self._log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        want = 2 if metrics else 1
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.port_file.exists():
                ports = self.port_file.read_text().split()
                if len(ports) >= want:
                    self.ports = [int(p) for p in ports]
                    return
            time.sleep(0.02)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.ports[0]

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.ports[1], timeout=10) as r:
            return r.read().decode()

    def log(self):
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self._log.close()
        return self.proc.returncode


def cli(binary, server, *args, check=True):
    p = subprocess.run([binary, "--server", server.address, "--json", *args],
                       capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stderr)
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1, p.stdout
        return json.loads(lines[0])
    return p


def register(cli_bin, server, head_dim=64, num_kv_heads=3, num_layers=30, preset="k4v4-g32"):
    return cli(cli_bin, server, "ns", "register", "--model", "ops-test", "--num-layers",
               str(num_layers), "--num-kv-heads", str(num_kv_heads), "--head-dim", str(head_dim),
               "--block-tokens", "16", "--dtype", "fp16", "--preset", preset)


# ---- start-up -------------------------------------------------------------------------------

def test_versions(server_bin, cli_bin):
    codec_bin = _binary("turbokv-codec", "TURBOKV_CODEC_BIN")
    for binary, name in ((server_bin, "turbokv-server"), (cli_bin, "turbokv"),
                         (codec_bin, "turbokv-codec")):
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert re.fullmatch(r"%s \d+\.\d+\.\d+" % re.escape(name), p.stdout.strip()), p.stdout


def test_port_in_use_fails_before_creating_the_data_dir(server_bin, tmp_path):
    first = Server(server_bin, tmp_path, name="first")
    try:
        assert first.proc.poll() is None, first.log()
        second = Server(server_bin, tmp_path, "--listen", first.address, name="second")
        assert second.proc.wait(timeout=30) != 0
        second.stop()
        assert "cannot listen" in second.log(), second.log()
        assert not os.path.exists(second.data_dir), os.listdir(second.data_dir)
    finally:
        first.stop()


@pytest.mark.parametrize("metrics_listen", ["127.0.0.1:99999", "not-an-address"])
def test_bad_metrics_address_fails_before_creating_the_data_dir(server_bin, tmp_path,
                                                                metrics_listen):
    s = Server(server_bin, tmp_path, "--metrics-listen", metrics_listen)
    assert s.proc.wait(timeout=30) != 0
    s.stop()
    assert "metrics" in s.log(), s.log()
    assert not os.path.exists(s.data_dir)


def test_metrics_port_in_use_keeps_an_existing_data_dir(server_bin, tmp_path):
    """Cleanup removes only a directory the failed start created, never existing data."""
    first = Server(server_bin, tmp_path, metrics=True, name="first")
    try:
        data = tmp_path / "existing"
        data.mkdir()
        (data / "keep").write_text("x")
        s = Server(server_bin, tmp_path, "--metrics-listen", "127.0.0.1:%d" % first.ports[1],
                   data_dir=data, name="second")
        assert s.proc.wait(timeout=30) != 0
        s.stop()
        assert (data / "keep").read_text() == "x"
    finally:
        first.stop()


def _start(server_bin, tmp_path, port_file, *args, name="pf"):
    log = open(tmp_path / ("%s.log" % name), "wb")
    proc = subprocess.Popen([server_bin, "--port-file", str(port_file), "--data-dir",
                             str(tmp_path / ("%s-data" % name)), "--codec-threads", "1",
                             "--metrics-listen", "", *args], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def test_port_file_is_removed_at_start_and_on_clean_shutdown(server_bin, tmp_path):
    port_file = tmp_path / "ports"
    port_file.write_text("1\n")  # left by an earlier run
    # A start that fails in start-up (its port is taken) has already removed the stale file.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        failed = _start(server_bin, tmp_path, port_file, "--listen",
                        "127.0.0.1:%d" % taken.getsockname()[1], name="failed")
        assert failed.wait(timeout=30) != 0
    assert not port_file.exists()
    # A served start writes its port, and a clean SIGTERM stop removes the file.
    proc = _start(server_bin, tmp_path, port_file, "--listen", "127.0.0.1:0")
    try:
        deadline = time.monotonic() + 30
        ports = []
        while not ports and time.monotonic() < deadline and proc.poll() is None:
            ports = port_file.read_text().split() if port_file.exists() else []
            time.sleep(0.02)
        assert len(ports) == 1, (tmp_path / "pf.log").read_text()
        with socket.create_connection(("127.0.0.1", int(ports[0])), timeout=10):
            pass
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert not port_file.exists()
    assert not (tmp_path / "ports.tmp").exists()
    assert "turbokv-server stopped" in (tmp_path / "pf.log").read_text()


def test_unwritable_port_file_fails_before_creating_the_data_dir(server_bin, tmp_path):
    port_file = tmp_path / "missing-dir" / "ports"
    proc = _start(server_bin, tmp_path, port_file, "--listen", "127.0.0.1:0")
    assert proc.wait(timeout=30) == 1
    log = (tmp_path / "pf.log").read_text()
    assert "--port-file %s: cannot create %s.tmp" % (port_file, port_file) in log, log
    assert "serving" not in log, log
    assert not (tmp_path / "pf-data").exists()


def test_capacity_warnings_at_start(server_bin, tmp_path):
    tiny = Server(server_bin, tmp_path, "--capacity", "100", name="tiny")
    assert tiny.stop() == 0
    assert re.search(r" warning .*--capacity 100 B is smaller than", tiny.log()), tiny.log()
    huge = Server(server_bin, tmp_path, "--capacity", "1000TiB", name="huge")
    assert huge.stop() == 0
    assert re.search(r" warning .*--capacity 1000 TiB is more than", huge.log()), huge.log()
    normal = Server(server_bin, tmp_path, "--capacity", "1GiB", name="normal")
    assert normal.stop() == 0
    assert " warning " not in normal.log(), normal.log()


def test_restart_below_stored_data_warns(server_bin, cli_bin, tmp_path):
    s = Server(server_bin, tmp_path, name="a")
    ns = register(cli_bin, s, preset="raw")
    put = cli(cli_bin, s, "put", "--namespace", ns["namespace_id"], "--kv", SMOLLM2_KV,
              "--tokens", SMOLLM2_TOKENS)
    assert put["blocks_stored"] == 4
    assert s.stop() == 0
    r = Server(server_bin, tmp_path, "--capacity", "400KiB", data_dir=s.data_dir, name="b")
    try:
        assert r.proc.poll() is None, r.log()
        assert re.search(r" warning .*holds .* in 4 blocks, above the high watermark", r.log()), r.log()
    finally:
        r.stop()


# ---- CLI --------------------------------------------------------------------------------------

def test_unknown_command_is_named(cli_bin):
    p = subprocess.run([cli_bin, "frobnicate"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "unknown command 'frobnicate'" in p.stderr, p.stderr
    assert "ns" in p.stderr and "put" in p.stderr


def test_ns_register_shows_the_resolved_codec_and_ns_list(server_bin, cli_bin, tmp_path):
    s = Server(server_bin, tmp_path)
    try:
        big = register(cli_bin, s, head_dim=64)
        assert big["codec"] == "K 4-bit g=32, V 4-bit g=32"
        assert "note" not in big
        small = register(cli_bin, s, head_dim=8, num_kv_heads=4, num_layers=5)
        assert small["codec"] == "K 4-bit g=8, V 4-bit g=8"
        assert "head_dim 8" in small["note"] and "32 -> 8" in small["note"], small
        assert small["bits_per_value"] > 6
        listed = cli(cli_bin, s, "ns", "list")
        assert listed["count"] == 2
        by_id = {n["namespace_id"]: n for n in listed["namespaces"]}
        assert by_id[big["namespace_id"]]["codec"] == big["codec"]
        assert by_id[small["namespace_id"]]["block_shape"] == "[5][2][16][4][8]"
        human = subprocess.run([cli_bin, "--server", s.address, "ns", "list"],
                               capture_output=True, text=True, timeout=60)
        assert human.returncode == 0 and big["namespace_id"] in human.stdout
    finally:
        s.stop()


def test_put_json_failure_is_one_object(server_bin, cli_bin, tmp_path):
    s = Server(server_bin, tmp_path, "--capacity", "100")
    try:
        ns = register(cli_bin, s, preset="raw")
        p = cli(cli_bin, s, "put", "--namespace", ns["namespace_id"], "--kv", SMOLLM2_KV,
                "--tokens", SMOLLM2_TOKENS, check=False)
        assert p.returncode == 1
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1, p.stdout
        out = json.loads(lines[0])
        assert out["blocks_sent"] == 4 and out["blocks_stored"] == 0
        assert out["error"]["code"] == "RESOURCE_EXHAUSTED", out
        assert "4 of 4 blocks were not stored" in out["error"]["message"]
        assert "{" not in p.stderr, p.stderr  # no second object on stderr
        # One block: singular.
        one_kv, one_tokens = tmp_path / "kv16.npy", tmp_path / "tokens16.npy"
        np.save(one_kv, np.load(SMOLLM2_KV)[:, :, :16])
        np.save(one_tokens, np.load(SMOLLM2_TOKENS)[:16])
        p = cli(cli_bin, s, "put", "--namespace", ns["namespace_id"], "--kv", str(one_kv),
                "--tokens", str(one_tokens), check=False)
        assert p.returncode == 1, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[0])
        assert out["blocks_sent"] == 1 and out["blocks_stored"] == 0
        assert "1 of 1 block was not stored; first: " in out["error"]["message"], out
    finally:
        s.stop()


def test_progress_lines(server_bin, cli_bin, tmp_path):
    s = Server(server_bin, tmp_path)
    try:
        ns = register(cli_bin, s)
        p = subprocess.run([cli_bin, "--server", s.address, "--progress", "always", "put",
                            "--namespace", ns["namespace_id"], "--kv", SMOLLM2_KV, "--tokens",
                            SMOLLM2_TOKENS], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert "put: 4/4 blocks" in p.stderr, p.stderr
        quiet = subprocess.run([cli_bin, "--server", s.address, "get", "--namespace",
                                ns["namespace_id"], "--tokens", SMOLLM2_TOKENS, "--out",
                                str(tmp_path / "out.npy")], capture_output=True, text=True,
                               timeout=60)
        assert quiet.returncode == 0 and "blocks" not in quiet.stderr  # auto: not a terminal
    finally:
        s.stop()


def test_codec_eval_all_zero_input_is_valid_json(tmp_path):
    codec_bin = _binary("turbokv-codec", "TURBOKV_CODEC_BIN")
    path = tmp_path / "zeros.npy"
    np.save(path, np.zeros((2, 2, 16, 2, 64), np.float16))
    p = subprocess.run([codec_bin, "eval", "--source", str(path), "--preset", "k4v4-g32",
                        "--min-seconds", "0.001", "--json"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)  # "-nan" would not parse
    assert out["rel_mse"] is None and out["rel_mse_k"] is None
    assert out["mean_cosine"] == 1.0  # zeros decode to exact zeros
    r = subprocess.run([codec_bin, "eval", "--source", "random", "--vectors", "64",
                        "--num-layers", "2", "--min-seconds", "0.001", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["block_shape"][0] == 2 and out["bits_per_value"] > 4


# ---- metrics --------------------------------------------------------------------------------

def _samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_metrics_idle_series_and_byte_terms(server_bin, cli_bin, tmp_path):
    s = Server(server_bin, tmp_path, metrics=True)
    try:
        idle = _samples(s.metrics())
        # No per-(method, code) or per-result child exists before its first RPC (the server
        # used to export 295 samples when idle, 293 of them pre-created zeros); what remains
        # are the store gauges and the counters of fixed label sets (hit/miss, op, backend),
        # with the storage repair/disk series and the auth counters: 45 on 2026-12-02.
        assert not [k for k in idle if k.startswith(("turbokv_rpc_", "turbokv_put_blocks"))], idle
        turbokv = [k for k in idle if k.startswith("turbokv_")]
        assert len(turbokv) < 60, turbokv
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_start_time_seconds", "process_open_fds", "process_max_fds"):
            assert name in idle, name
        assert idle["process_resident_memory_bytes"] > 1 << 20
        assert abs(idle["process_start_time_seconds"] - time.time()) < 120
        info = [k for k in idle if k.startswith("turbokv_build_info{")]
        assert len(info) == 1 and re.search(r'version="\d+\.\d+\.\d+"', info[0]), info

        ns = register(cli_bin, s)
        cli(cli_bin, s, "put", "--namespace", ns["namespace_id"], "--kv", SMOLLM2_KV,
            "--tokens", SMOLLM2_TOKENS)
        stats = cli(cli_bin, s, "stats")
        deadline = time.monotonic() + 10  # gauges refresh every second
        while True:
            m = _samples(s.metrics())
            if m.get("turbokv_blocks") == stats["blocks"]:
                break
            assert time.monotonic() < deadline, m
            time.sleep(0.2)
        assert m["turbokv_stored_bytes"] == stats["stored_bytes"]
        assert m["turbokv_used_bytes"] == stats["used_bytes"]
        assert stats["used_bytes"] > stats["stored_bytes"] > 0
        ratio = stats["logical_bytes"] / stats["stored_bytes"]
        assert abs(stats["compression_ratio"] - ratio) < 1e-4
        assert abs(m["turbokv_compression_ratio"] - ratio) < 1e-6
        assert m['turbokv_rpc_requests_total{code="OK",method="PutBlocks"}'] == 1
        assert 'turbokv_rpc_requests_total{code="INTERNAL",method="PutBlocks"}' not in m
    finally:
        s.stop()


def _data_dir_files(path):
    """Allocated bytes (st_blocks: value-log segments are sparse) of every file in the data
    directory and its values/ folder, by name (values/<segment>.tkv)."""
    files = {e.name: e.stat().st_blocks * 512 for e in os.scandir(path) if e.is_file()}
    values = os.path.join(path, "values")
    if os.path.isdir(values):
        files.update({"values/" + e.name: e.stat().st_blocks * 512
                      for e in os.scandir(values) if e.is_file()})
    return files


def _disk_bytes_settles_at_the_data_dir(s):
    """turbokv_disk_bytes once it equals the allocated bytes of all files in the data directory
    (the gauge follows the maintenance pass, every second), with that listing."""
    deadline = time.monotonic() + 15
    while True:
        files = _data_dir_files(s.data_dir)
        disk = _samples(s.metrics())["turbokv_disk_bytes"]
        if disk == sum(files.values()):
            return disk, files
        assert time.monotonic() < deadline, (disk, sum(files.values()), files)
        time.sleep(0.2)


def test_disk_bytes_counts_the_whole_data_directory(server_bin, cli_bin, tmp_path):
    # An operator graphs turbokv_disk_bytes against the disk: it counts the value log, and
    # RocksDB's info LOG, MANIFEST and OPTIONS and the RESERVE too, not only its SST and WAL.
    s = Server(server_bin, tmp_path, metrics=True)
    try:
        ns = register(cli_bin, s, preset="raw")
        cli(cli_bin, s, "put", "--namespace", ns["namespace_id"], "--kv", SMOLLM2_KV,
            "--tokens", SMOLLM2_TOKENS)
        disk, files = _disk_bytes_settles_at_the_data_dir(s)
        values = sum(v for n, v in files.items() if n.endswith(".tkv"))
        assert values > 4 * ns["raw_block_bytes"], files  # the put: written once, to the log
        wal = sum(v for n, v in files.items() if n.endswith(".log"))
        assert 0 < wal < ns["raw_block_bytes"], files  # only metadata goes through RocksDB
        manifest = [n for n in files if n.startswith("MANIFEST-")]
        assert files["LOG"] > 0 and len(manifest) == 1 and files[manifest[0]] > 0, files
        rest = sum(v for n, v in files.items() if not n.endswith((".sst", ".tkv", ".log")))
        assert rest >= files["LOG"] + files[manifest[0]] > 0
        assert disk >= values + wal + rest
    finally:
        assert s.stop() == 0
    # Reopened: the WAL is flushed into SSTs; the old LOG is kept as LOG.old.*.
    r = Server(server_bin, tmp_path, metrics=True, data_dir=s.data_dir, name="b")
    try:
        disk, files = _disk_bytes_settles_at_the_data_dir(r)
        assert any(n.startswith("LOG.old.") for n in files), files
        assert disk > 4 * ns["raw_block_bytes"], files
    finally:
        assert r.stop() == 0


def _documented_metrics():
    """Metric names in the catalogue table of docs/operations.md (first column)."""
    path = os.path.join(os.path.dirname(FIXTURES), "..", "docs", "operations.md")
    names = set()
    with open(path) as f:
        for line in f:
            if line.startswith("| `"):
                names.update(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    return names


def test_metrics_catalogue_matches_the_server(server_bin, cli_bin, tmp_path):
    """docs/operations.md documents every family a live server exports (after traffic), and
    names nothing the server's source does not define."""
    documented = _documented_metrics()
    assert "turbokv_used_bytes" in documented and "process_open_fds" in documented
    s = Server(server_bin, tmp_path, metrics=True)
    try:
        ns = register(cli_bin, s)
        cli(cli_bin, s, "put", "--namespace", ns["namespace_id"], "--kv", SMOLLM2_KV,
            "--tokens", SMOLLM2_TOKENS)
        cli(cli_bin, s, "get", "--namespace", ns["namespace_id"], "--tokens", SMOLLM2_TOKENS,
            "--out", str(tmp_path / "out.npy"))
        cli(cli_bin, s, "stats")
        exported = set(re.findall(r"^# TYPE (\S+) ", s.metrics(), re.M))
    finally:
        s.stop()
    assert exported, "no metrics scraped"
    missing = exported - documented
    assert not missing, "exported but not in docs/operations.md: %s" % sorted(missing)
    repo = os.path.dirname(os.path.dirname(FIXTURES))
    source = ""
    for root, _, files in os.walk(os.path.join(repo, "server")):
        for name in files:
            if name.endswith((".cc", ".h")):
                with open(os.path.join(root, name)) as f:
                    source += f.read()
    # exposer_* come from prometheus-cpp's Exposer itself.
    stale = {m for m in documented if '"%s"' % m not in source and not m.startswith("exposer_")}
    assert not stale, "documented but defined nowhere in server/: %s" % sorted(stale)


def test_readme_and_docs_stand_on_their_own():
    """README.md, CONTRIBUTING.md and docs/ point at nothing outside the repository: no design
    notes kept elsewhere, and every relative link resolves to a file of the checkout."""
    repo = os.path.dirname(os.path.dirname(FIXTURES))
    pages = [os.path.join(repo, "README.md"), os.path.join(repo, "CONTRIBUTING.md")] + [
        os.path.join(repo, "docs", n) for n in sorted(os.listdir(os.path.join(repo, "docs")))
        if n.endswith(".md")]
    assert len(pages) >= 6, pages
    for page in pages:
        text = open(page).read()
        for outside in ("DESIGN.md", "STYLE.md", "../shared", "seeds/"):
            assert outside not in text, "%s mentions %s" % (page, outside)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page), target))
            assert path.startswith(repo) and os.path.exists(path), (page, target)
