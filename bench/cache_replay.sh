#!/usr/bin/env bash
# The cache replay benchmark (issue 21, docs/cache.md): the public Mooncake trace (when
# ../shared is present) and every generated workload (sysprompt, chat, agent, docs), at 5, 10,
# 25 and 50% of each workload's distinct blocks, against the real turbokv-server, with LRU,
# Belady, uncompressed-LRU and the infinite bound simulated in the same run. Writes
# bench/results/cache/cache_replay.{json,png,md} and prints a table as it goes.
#
#   bash bench/cache_replay.sh                      # everything (~35 min on 2 cores)
#   bash bench/cache_replay.sh --quick              # 800 requests a workload, 10 and 50%
#   bash bench/cache_replay.sh --workloads chat,docs --capacities 10,25 --nodes 1,3 \
#       --out-dir /tmp/r --server-arg=--durability=wal
#   bash bench/cache_replay.sh --sim-only           # simulators only (seconds)
#   bash bench/cache_replay.sh --help               # every option
#
# Builds build/bin/turbokv-server and the codec library (turbokv_codec_c) when missing
# (tools/setup.sh when build/ is not set up at all). BUILD=dir picks another build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
if [ ! -x "$BUILD/venv/bin/python" ]; then
  echo "[cache_replay] $BUILD is not set up: running tools/setup.sh" >&2
  BUILD=$BUILD TARGETS="turbokv-server turbokv_codec_c" bash tools/setup.sh >&2
fi
if ! "$BUILD/venv/bin/python" -c "import matplotlib" 2>/dev/null; then
  "$BUILD/venv/bin/pip" install -q --disable-pip-version-check -r tools/requirements.txt >&2
fi
need=()
[ -x "$BUILD/bin/turbokv-server" ] || need+=(--target turbokv-server)
[ -e "$BUILD/lib/libturbokv_codec_c.so" ] || [ -e "$BUILD/bin/libturbokv_codec_c.so" ] \
  || need+=(--target turbokv_codec_c)
if [ ${#need[@]} -gt 0 ]; then
  echo "[cache_replay] building ${need[*]}" >&2
  cmake --build "$BUILD" -j"$(nproc)" "${need[@]}" >&2
fi
export TURBOKV_BUILD_DIR=$PWD/$BUILD
exec "$BUILD/venv/bin/python" -m bench.cache_replay --server-bin "$BUILD/bin/turbokv-server" "$@"
