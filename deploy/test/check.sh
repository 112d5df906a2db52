#!/usr/bin/env bash
# Checks of deploy/ (about a minute on 2 cores once the packages are installed):
#   1. installs what it needs when missing: Debian's `prometheus` (promtool + the server) and,
#      into the build venv, kubernetes-validate (Kubernetes JSON schemas, offline) and PyYAML;
#   2. promtool check config (the example scrape config), check rules, test rules (a unit test
#      per alert);
#   3. pytest deploy/test: manifests (kustomize-free rendering, schema validation for two
#      Kubernetes versions, wiring, the server started with the rendered flags), Dockerfiles,
#      dashboard freshness;
#   4. pytest tests/python/test_cluster_observability.py: a real Prometheus scrapes a real
#      turbokv-server (series present, promtool check metrics, rules healthy) and every
#      Grafana/alert expression's metric names are in the live scrape.
# Idempotent. Needs the build folder of tools/setup.sh (BUILD, default build/) for the server
# binary and the venv.
#   BUILD=build bash deploy/test/check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PY=${PYTHON:-$BUILD/venv/bin/python}
log() { echo "[deploy-check $(date +%H:%M:%S)] $*"; }

bash deploy/test/install_prometheus.sh
if ! "$PY" -c "import kubernetes_validate, yaml" 2> /dev/null; then
  log "pip install kubernetes-validate pyyaml"
  "$PY" -m pip install -q --disable-pip-version-check "kubernetes-validate==1.37.0" "pyyaml>=6"
fi

log "promtool check config / check rules / test rules"
promtool check config deploy/prometheus/prometheus.yml
promtool check rules deploy/prometheus/turbokv-alerts.yaml
promtool test rules deploy/prometheus/turbokv-alerts.test.yaml

log "pytest deploy/test tests/python/test_cluster_observability.py"
TURBOKV_BUILD_DIR="$PWD/$BUILD" "$PY" -m pytest -q -rs deploy/test \
  tests/python/test_cluster_observability.py
log "deploy checks passed"
