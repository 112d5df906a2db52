#!/usr/bin/env bash
# Builds the Python client wheel (distribution turbokv-client, import name turbokv) into
# $BUILD/dist, with the codec library of $BUILD bundled (LocalCodec works after `pip install`):
#   1. builds the CMake target turbokv_codec_c in $BUILD (configured by tools/setup.sh),
#   2. copies client/python and the proto into $BUILD/wheel-src (the build writes its
#      stubs, build/ and egg-info there: nothing lands in the source tree),
#   3. `pip wheel` with build isolation (the pinned grpcio-tools of pyproject.toml generates
#      the stubs).
# Prints the wheel's path on the last line.
#   BUILD=build bash tools/build_wheel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(cd "${BUILD:-build}" && pwd)
PY=${PYTHON:-$BUILD/venv/bin/python}
log() { echo "[build_wheel $(date +%H:%M:%S)] $*" >&2; }

cmake --build "$BUILD" -j"${JOBS:-$(nproc)}" --target turbokv_codec_c > /dev/null
[ -f "$BUILD/lib/libturbokv_codec_c.so" ] || { echo "build_wheel: no codec library" >&2; exit 1; }

src=$BUILD/wheel-src
rm -rf "$src" && mkdir -p "$src/proto/turbokv/v1"
tar -C client/python --exclude=__pycache__ --exclude='*.egg-info' --exclude=./build \
  --exclude=./.mypy_cache --exclude=./turbokv/v1 --exclude=./turbokv/_lib -cf - . |
  tar -C "$src" -xf -
cp proto/turbokv/v1/turbokv.proto "$src/proto/turbokv/v1/"
lib=$src/libturbokv_codec_c.so  # without debug info (RelWithDebInfo: 4.4 -> ~1 MB)
strip --strip-debug -o "$lib" "$BUILD/lib/libturbokv_codec_c.so"

mkdir -p "$BUILD/dist"
rm -f "$BUILD"/dist/turbokv_client-*.whl
log "pip wheel $src (codec library $lib)"
TURBOKV_CODEC_LIB=$lib TURBOKV_REQUIRE_CODEC_LIB=1 "$PY" -m pip wheel -q --no-deps \
  --disable-pip-version-check -w "$BUILD/dist" "$src" >&2
ls "$BUILD"/dist/turbokv_client-*.whl
