#!/usr/bin/env python3
"""Writes deploy/grafana/turbokv-dashboard.json (Grafana 10+ schema) from the panel list below.

    python3 deploy/grafana/make_dashboard.py            # rewrite the JSON
    python3 deploy/grafana/make_dashboard.py --check    # exit 1 when the JSON is stale

Every query uses only metrics that turbokv-server exports (server/metrics/metrics.cc);
tests/python/test_cluster_observability.py checks each expression's metric names against a live
scrape of a real server and runs each expression on a real Prometheus.
"""
from __future__ import annotations

import json
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "turbokv-dashboard.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job="$job", instance=~"$instance"'
RI = "$__rate_interval"


def target(expr, legend, ref):
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref,
            "range": True}


def panel(pid, title, kind, grid, targets, unit="short", description="", **extra):
    p = {
        "id": pid, "type": kind, "title": title, "description": description, "datasource": DS,
        "gridPos": dict(zip("xywh", grid)),
        "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(targets)],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
    }
    if kind == "timeseries":
        p["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "line", "fillOpacity": 10,
                                                  "lineWidth": 1, "showPoints": "never"}
        p["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["mean", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    p.update(extra)
    return p


def row(pid, title, y):
    return {"id": pid, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []}


def panels():
    hit_ratio = ('sum(rate(turbokv_lookup_tokens_total{%s, result="hit"}[%s])) / '
                 'sum(rate(turbokv_lookup_tokens_total{%s}[%s]))' % (SEL, RI, SEL, RI))
    out = [
        row(1, "Cache effectiveness", 0),
        panel(2, "Lookup hit rate (tokens)", "stat", (0, 1, 6, 5), [(hit_ratio, "hit rate")],
              unit="percentunit",
              description="Share of the tokens asked for by Lookup that were in the matched "
                          "prefix (prefill the workers did not have to recompute)."),
        panel(3, "Lookup tokens per second", "timeseries", (6, 1, 9, 8), [
            ('sum by (result) (rate(turbokv_lookup_tokens_total{%s}[%s]))' % (SEL, RI),
             "{{result}}"),
        ], unit="short", description="Tokens asked for by Lookup, hit (matched) or miss."),
        panel(4, "Hit rate by server (tokens)", "timeseries", (15, 1, 9, 8), [
            ('sum by (instance) (rate(turbokv_lookup_tokens_total{%s, result="hit"}[%s])) / '
             'sum by (instance) (rate(turbokv_lookup_tokens_total{%s}[%s]))' % (SEL, RI, SEL, RI),
             "{{instance}}"),
        ], unit="percentunit"),
        panel(5, "GetBlocks found / missing", "timeseries", (0, 6, 6, 8), [
            ('sum by (result) (rate(turbokv_get_blocks_total{%s}[%s]))' % (SEL, RI), "{{result}}"),
        ], unit="short"),
        row(6, "Throughput and compression", 14),
        panel(7, "Throughput: logical vs stored bytes", "timeseries", (0, 15, 12, 8), [
            ('sum(rate(turbokv_codec_bytes_total{%s, op="encode"}[%s]))' % (SEL, RI),
             "put, logical (raw KV)"),
            ('sum(rate(turbokv_codec_bytes_total{%s, op="encode"}[%s]) / ignoring (op, backend) '
             'group_left turbokv_compression_ratio{%s})' % (SEL, RI, SEL),
             "put, stored (packed, estimated)"),
            ('sum(rate(turbokv_codec_bytes_total{%s, op="decode"}[%s]))' % (SEL, RI),
             "get, logical (decoded)"),
        ], unit="Bps", description="Logical = raw KV bytes through the codec; stored = logical / "
                                   "the server's compression ratio."),
        panel(8, "Compression ratio", "timeseries", (12, 15, 6, 8), [
            ('sum(turbokv_logical_bytes{%s}) / sum(turbokv_stored_bytes{%s})' % (SEL, SEL),
             "cluster (logical / packed values)"),
            ('turbokv_compression_ratio{%s}' % SEL, "{{instance}} (logical / packed values)"),
        ], unit="none"),
        panel(9, "Stored vs logical bytes", "stat", (18, 15, 6, 8), [
            ('sum(turbokv_logical_bytes{%s})' % SEL, "logical"),
            ('sum(turbokv_stored_bytes{%s})' % SEL, "stored (packed values)"),
        ], unit="bytes"),
        panel(10, "RPCs per second by method and code", "timeseries", (0, 23, 12, 8), [
            ('sum by (method, code) (rate(turbokv_rpc_requests_total{%s}[%s]))' % (SEL, RI),
             "{{method}} {{code}}"),
        ], unit="reqps"),
        panel(11, "Blocks put by result", "timeseries", (12, 23, 12, 8), [
            ('sum by (result) (rate(turbokv_put_blocks_total{%s}[%s]))' % (SEL, RI), "{{result}}"),
        ], unit="short"),
        row(12, "Latency", 31),
    ]
    for q, pid, x in [("0.5", 13, 0), ("0.9", 14, 8), ("0.99", 15, 16)]:
        out.append(panel(pid, "RPC latency p%s by method" % q.replace("0.", ""),
                         "timeseries", (x, 32, 8, 8), [
            ('histogram_quantile(%s, sum by (method, le) (rate(turbokv_rpc_duration_seconds_bucket'
             '{%s}[%s])))' % (q, SEL, RI), "{{method}}"),
        ], unit="s"))
    out.append(panel(16, "Mean RPC latency by method", "timeseries", (0, 40, 12, 8), [
        ('sum by (method) (rate(turbokv_rpc_duration_seconds_sum{%s}[%s])) / sum by (method) '
         '(rate(turbokv_rpc_duration_seconds_count{%s}[%s]))' % (SEL, RI, SEL, RI), "{{method}}"),
    ], unit="s"))
    out += [
        row(17, "Capacity and evictions", 48),
        panel(18, "Budget used", "timeseries", (0, 49, 8, 8), [
            ('turbokv_used_bytes{%s} / turbokv_capacity_bytes{%s}' % (SEL, SEL),
             "{{instance}}"),
        ], unit="percentunit", description="Eviction starts at the high watermark (default 98%)."),
        panel(19, "Used bytes and capacity", "timeseries", (8, 49, 8, 8), [
            ('sum(turbokv_used_bytes{%s})' % SEL, "used (values, keys, metadata)"),
            ('sum(turbokv_capacity_bytes{%s})' % SEL, "capacity"),
            ('sum(turbokv_value_log_bytes{%s})' % SEL, "value log"),
            ('sum(turbokv_rocksdb_sst_bytes{%s})' % SEL, "RocksDB SSTs (metadata)"),
            ('sum(turbokv_rocksdb_pending_compaction_bytes{%s})' % SEL, "pending compaction"),
        ], unit="bytes"),
        panel(20, "Evictions and expirations", "timeseries", (16, 49, 8, 8), [
            ('sum by (instance) (rate(turbokv_evictions_total{%s}[%s]))' % (SEL, RI),
             "evicted {{instance}}"),
            ('sum by (instance) (rate(turbokv_expired_blocks_total{%s}[%s]))' % (SEL, RI),
             "expired {{instance}}"),
        ], unit="short"),
        panel(21, "Blocks stored", "timeseries", (0, 57, 8, 8), [
            ('turbokv_blocks{%s}' % SEL, "{{instance}}"),
        ], unit="short"),
        panel(22, "Evicted bytes per second", "timeseries", (8, 57, 8, 8), [
            ('sum by (instance) (rate(turbokv_evicted_bytes_total{%s}[%s]))' % (SEL, RI),
             "{{instance}}"),
        ], unit="Bps"),
        panel(23, "Checksum failures (1h)", "stat", (16, 57, 4, 8), [
            ('sum(increase(turbokv_checksum_failures_total{%s}[1h]))' % SEL, "failures"),
        ], unit="short"),
        panel(24, "Servers up", "stat", (20, 57, 4, 8), [
            ('sum(up{%s})' % SEL, "up"),
            ('sum(turbokv_namespaces{%s})' % SEL, "namespaces (all servers)"),
        ], unit="short"),
        row(25, "Codec", 65),
        panel(26, "Codec backend", "table", (0, 66, 8, 8), [
            ('count by (backend) (turbokv_codec_backend_info{%s})' % SEL, "{{backend}}"),
        ], unit="short", description="Servers per codec backend (cuda, cpu-avx2, cpu-scalar)."),
        panel(27, "Codec time (seconds per second)", "timeseries", (8, 66, 8, 8), [
            ('sum by (op, backend) (rate(turbokv_codec_seconds_total{%s}[%s]))' % (SEL, RI),
             "{{op}} {{backend}}"),
        ], unit="s"),
        panel(28, "Codec speed (logical bytes per codec second)", "timeseries", (16, 66, 8, 8), [
            ('sum by (op, backend) (rate(turbokv_codec_bytes_total{%s}[%s])) / sum by (op, '
             'backend) (rate(turbokv_codec_seconds_total{%s}[%s]))' % (SEL, RI, SEL, RI),
             "{{op}} {{backend}}"),
        ], unit="Bps"),
    ]
    return out


def dashboard():
    return {
        "uid": "turbokv-overview",
        "title": "turbokv",
        "description": "turbokv KV-cache store: hit rate, throughput, compression, latency, "
                       "capacity, codec (deploy/grafana/make_dashboard.py).",
        "tags": ["turbokv", "kv-cache"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus", "current": {}, "hide": 0},
            {"name": "job", "type": "query", "datasource": DS, "label": "job",
             "query": {"query": "label_values(turbokv_blocks, job)", "refId": "job"},
             "definition": "label_values(turbokv_blocks, job)", "refresh": 1,
             "current": {"text": "turbokv", "value": "turbokv"}, "hide": 0},
            {"name": "instance", "type": "query", "datasource": DS, "label": "server",
             "query": {"query": 'label_values(turbokv_blocks{job="$job"}, instance)',
                       "refId": "instance"},
             "definition": 'label_values(turbokv_blocks{job="$job"}, instance)', "refresh": 2,
             "multi": True, "includeAll": True, "allValue": ".*",
             "current": {"text": "All", "value": "$__all"}, "hide": 0},
        ]},
        "panels": panels(),
    }


def main(argv):
    text = json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"
    if "--check" in argv:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit("%s is stale: run python3 deploy/grafana/make_dashboard.py" % OUT)
        return
    with open(OUT, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv)
