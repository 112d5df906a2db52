#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and builds turbokv:
#   1. apt-get installs the C++ toolchain and libraries (skipped when all are present),
#   2. a Python venv at $BUILD/venv with tools/requirements.txt,
#   3. CMake configure + build into $BUILD (default: build/), CUDA when nvcc is found.
# Idempotent; re-running only rebuilds what changed.
#   BUILD=build bash tools/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
log() { echo "[setup $(date +%H:%M:%S)] $*"; }

APT_PACKAGES=(build-essential cmake pkg-config git ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  librocksdb-dev prometheus-cpp-dev libxxhash-dev libisal-dev libzstd-dev libgtest-dev libgmock-dev
  libbenchmark-dev libspdlog-dev libcli11-dev libssl-dev clang libclang-rt-14-dev
  clang-format clang-tidy
  libhiredis-dev redis-server nlohmann-json3-dev cppzmq-dev libzmq3-dev libmsgpack-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ -z "$(command -v nvcc || true)" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

PY=${PYTHON:-python3}
if [ ! -x "$BUILD/venv/bin/python" ]; then
  log "python venv $BUILD/venv ($($PY --version))"
  mkdir -p "$BUILD"
  $PY -m venv "$BUILD/venv"
fi
if ! cmp -s tools/requirements.txt "$BUILD/venv/.requirements"; then
  log "pip install -r tools/requirements.txt"
  "$BUILD/venv/bin/pip" install -q --disable-pip-version-check -r tools/requirements.txt
  cp tools/requirements.txt "$BUILD/venv/.requirements"
fi
# The Python client's gRPC stubs: generated from proto/ into $BUILD/python (never into the
# source tree) by the grpcio-tools pinned in client/python/pyproject.toml (its own small venv);
# the .pth puts this checkout's client/python and the stubs on the venv's path.
"$BUILD/venv/bin/python" client/python/scripts/gen_stubs.py --out-root "$BUILD/python" \
  --venv "$BUILD/stubgen-venv"
printf '%s\n' "$PWD/client/python" "$PWD/$BUILD/python" > "$("$BUILD/venv/bin/python" -c \
  'import sysconfig; print(sysconfig.get_paths()["purelib"])')/turbokv-checkout.pth"

log "cmake configure ($BUILD)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-} > "$BUILD/configure.log" 2>&1 \
  || { tail -40 "$BUILD/configure.log"; exit 1; }
grep -E "turbokv:" "$BUILD/configure.log" || true
log "cmake build -j$JOBS"
log "disk: $(df -h --output=avail "$BUILD" | tail -1 | tr -d ' ') free; memory: $(free -g | awk '/Mem:/{print $7}') GiB available"
# The compiler's diagnostics go to a log and, on failure, to the end of the output (where CI
# shows them); a failed build is retried once at -j1 (a compiler killed for memory or a full
# disk under a parallel build says little else).
# TARGETS (space-separated CMake targets) builds only those: tools/demo.sh builds what the demo
# runs, not the test suites, fuzzers and benchmarks (tools/test.sh builds everything).
target_args=()
for t in ${TARGETS:-}; do target_args+=(--target "$t"); done
if ! cmake --build "$BUILD" -j"$JOBS" "${target_args[@]}" 2> "$BUILD/build-errors.log"; then
  log "build failed; df: $(df -h --output=avail "$BUILD" | tail -1), free: $(free -m | awk '/Mem:/{print $7}') MiB"
  grep -E -B2 -A12 "error|Killed|No space" "$BUILD/build-errors.log" | head -80 || true
  log "retrying the build at -j1"
  cmake --build "$BUILD" -j1 "${target_args[@]}" 2>&1 | tail -60 || { log "build failed again"; exit 1; }
fi
log "built: $(ls "$BUILD/bin" | tr '\n' ' ')"
