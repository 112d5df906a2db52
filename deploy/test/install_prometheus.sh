#!/usr/bin/env bash
# Installs Debian's `prometheus` (the server and promtool) when either is missing: the real
# Prometheus that tests/python/test_cluster_observability.py scrapes the server with and that
# deploy/test/check.sh checks the rules and scrape config with. Called by both tools/test.sh
# (before pytest, so that the scrape test runs instead of skipping) and deploy/test/check.sh.
set -euo pipefail
if ! command -v promtool > /dev/null || ! command -v prometheus > /dev/null; then
  echo "[install_prometheus $(date +%H:%M:%S)] apt-get install prometheus"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends prometheus
fi
