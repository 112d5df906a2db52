"""Prometheus and Grafana against a real turbokv-server on loopback.

* ``promtool check metrics`` accepts the server's /metrics exposition.
* A real Prometheus (Debian's ``prometheus``) scrapes the server as job "turbokv" with the alert
  rules of deploy/prometheus loaded: ``up`` is 1, every series of the exposition is stored, and
  every rule evaluates without error.
* Every PromQL expression of the Grafana dashboard (deploy/grafana/turbokv-dashboard.json) and
  of the alert rules names only metrics that the live scrape contains, and runs on that
  Prometheus without error; the hit-rate and throughput panels return numbers.

Skipped without the server binary, ``prometheus`` or ``promtool`` (deploy/test/check.sh installs
them: ``apt-get install prometheus``).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest

from conftest import REPO, find_server_binary, require_stubs

yaml = pytest.importorskip("yaml")

DASHBOARD = os.path.join(REPO, "deploy", "grafana", "turbokv-dashboard.json")
RULES = os.path.join(REPO, "deploy", "prometheus", "turbokv-alerts.yaml")
SCRAPE_S = 1

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan", "Inf", "NaN", "atan2"}


def metric_names(expr: str) -> set:
    """Metric names a PromQL expression selects (functions, keywords, labels and Grafana
    variables removed)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", " ", s)
    names = set()
    for m in re.finditer(r"(?<![A-Za-z0-9_.:])[A-Za-z_:][A-Za-z0-9_:]*", s):
        if s[m.end():].lstrip().startswith("(") or m.group(0) in _KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def test_metric_name_extraction():
    e = ('histogram_quantile(0.99, sum by (method, le) (rate(turbokv_rpc_duration_seconds_bucket'
         '{job="$job", method=~"a|b"}[$__rate_interval]))) > 0.05 or absent(up{job="x"}) '
         'and on (instance) group_left turbokv_blocks > bool 1e3')
    assert metric_names(e) == {"turbokv_rpc_duration_seconds_bucket", "up", "turbokv_blocks"}


def dashboard_exprs():
    with open(DASHBOARD) as f:
        d = json.load(f)
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def rule_exprs():
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"]]


def grafana_to_promql(expr: str) -> str:
    return (expr.replace("$__rate_interval", "%ds" % (6 * SCRAPE_S))
            .replace("$job", "turbokv").replace("$instance", ".*"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


@pytest.fixture
def metrics_server(tmp_path):
    binary = find_server_binary()
    if binary is None:
        pytest.skip("turbokv-server binary not found")
    port_file = tmp_path / "ports"
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                             "--data-dir", str(tmp_path / "data"), "--metrics-listen",
                             "127.0.0.1:0", "--codec-threads", "1", "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, open(tmp_path / "server.log").read()
            lines = port_file.read_text().split() if port_file.exists() else []
            if len(lines) >= 2:
                break
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        yield int(lines[0]), int(lines[1])
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def _traffic(grpc_port):
    """Registers, puts, looks up (hits and misses) and gets, so every family has samples."""
    require_stubs()
    from turbokv import Client, PrefixHasher
    with Client("127.0.0.1:%d" % grpc_port) as c:
        ns = c.register_namespace(model="obs", num_layers=2, num_kv_heads=2, head_dim=64,
                                  block_tokens=16, preset="k4v4-g32").namespace_id
        rng = np.random.default_rng(0)
        tokens = np.arange(128)
        chain = PrefixHasher(ns).block_hashes(tokens, 16)
        blocks = rng.standard_normal((8, 2, 2, 16, 2, 64)).astype(np.float16)
        assert all(r.ok for r in c.put_blocks(ns, chain[:6], blocks[:6]))
        assert c.lookup(ns, chain).matched_blocks == 6
        got = c.get_blocks(ns, chain)
        assert sum(g is not None for g in got) == 6
        c.stats()


def _exposition_names(text):
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return names


def test_prometheus_scrapes_a_real_server(metrics_server, tmp_path):
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        pytest.skip("prometheus / promtool not installed (apt-get install prometheus)")
    grpc_port, metrics_port = metrics_server
    _traffic(grpc_port)
    exposition = _get("http://127.0.0.1:%d/metrics" % metrics_port)

    # promtool's linter on the exposition.
    check = subprocess.run([promtool, "check", "metrics"], input=exposition, text=True,
                           capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr

    exported = _exposition_names(exposition)
    for must in ("turbokv_rpc_requests_total", "turbokv_rpc_duration_seconds_bucket",
                 "turbokv_lookup_tokens_total", "turbokv_codec_bytes_total",
                 "turbokv_stored_bytes", "turbokv_capacity_bytes", "turbokv_evictions_total",
                 "turbokv_checksum_failures_total", "turbokv_codec_backend_info"):
        assert must in exported, must

    # Every dashboard / rule expression names only exported metrics (plus Prometheus' `up`).
    known = exported | {"up"}
    for title, expr in dashboard_exprs() + rule_exprs():
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= known, "%s: %s not exported" % (title, sorted(names - known))

    # A real Prometheus scraping it, with the alert rules loaded.
    web = _free_port()
    cfg = {
        "global": {"scrape_interval": "%ds" % SCRAPE_S, "evaluation_interval": "1s"},
        "rule_files": [RULES],
        "scrape_configs": [{"job_name": "turbokv", "static_configs": [
            {"targets": ["127.0.0.1:%d" % metrics_port]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen([prometheus, "--config.file", str(tmp_path / "prometheus.yml"),
                             "--storage.tsdb.path", str(tmp_path / "tsdb"),
                             "--web.listen-address", "127.0.0.1:%d" % web],
                            stdout=log, stderr=subprocess.STDOUT)
    api = "http://127.0.0.1:%d/api/v1/" % web

    def query(q):
        r = json.loads(_get(api + "query?" + urllib.parse.urlencode({"query": q})))
        assert r["status"] == "success", (q, r)
        return r["data"]["result"]

    try:
        deadline = time.monotonic() + 60
        while True:
            assert prom.poll() is None, open(tmp_path / "prometheus.log").read()[-3000:]
            try:
                if [s for s in query('up{job="turbokv"}') if s["value"][1] == "1"]:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, open(tmp_path / "prometheus.log").read()[-3000:]
            time.sleep(0.25)
        # More traffic until rate() sees it: a grown counter scraped twice inside its window
        # (6 scrape intervals). Prometheus' scrapes lag on a loaded machine, so this polls, with
        # traffic on every round, where it used to wait a fixed 5 intervals (a scrape after the
        # traffic that had not come yet left rate() without an increase: a hit rate of NaN).
        hit_expr = grafana_to_promql(dashboard_exprs()[0][1])
        deadline = time.monotonic() + 120
        while True:
            _traffic(grpc_port)
            time.sleep(SCRAPE_S)
            hit = query(hit_expr)
            if hit and not math.isnan(float(hit[0]["value"][1])):
                break
            assert time.monotonic() < deadline, hit

        stored = set(json.loads(_get(api + "label/__name__/values"))["data"])
        missing = exported - stored
        assert not missing, "series not in Prometheus: %s" % sorted(missing)
        for name in ("turbokv_blocks", "turbokv_compression_ratio", "turbokv_lookup_tokens_total"):
            assert query('%s{job="turbokv"}' % name), name

        for _title, expr in dashboard_exprs():
            query(grafana_to_promql(expr))  # asserts status success (valid PromQL)
        assert 0 < float(hit[0]["value"][1]) <= 1, hit
        logical = [e for t, e in dashboard_exprs() if t.startswith("Throughput")][0]
        assert query(grafana_to_promql(logical)), logical

        # Every alert rule evaluated, without error, and none fires on a healthy server.
        deadline = time.monotonic() + 20
        while True:
            groups = json.loads(_get(api + "rules"))["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if rules and all(r.get("lastEvaluation", "").startswith("20") and
                             not r["lastEvaluation"].startswith("0001") for r in rules):
                break
            assert time.monotonic() < deadline, rules
            time.sleep(0.5)
        assert len(rules) == len(rule_exprs())
        for r in rules:
            assert r["health"] == "ok", r
            assert r["state"] == "inactive", r
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        log.close()
