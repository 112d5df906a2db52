#!/usr/bin/env bash
# turbokv-server vs Debian's redis-server, side by side on loopback, in the same run (issue 9).
#
#   bash bench/service_vs_redis.sh [--runs 3] [--seconds 3] [--profile] [--out DIR]
#       [--sizes 2m,368k,8m] [--concurrency 1,4,8] [--skip-prefix] [--skip-lookup]
#       [--connections N] [--server-arg=ARG ...]
#
# Starts turbokv-server (k4v4-g32, --durability wal) and redis-server twice (no persistence;
# AOF appendfsync everysec), then for 2 MiB (Llama-3-8B block: L32 H8 D128, 16 tokens),
# 368,640 B (SmolLM2-135M real KV from tests/fixtures) and 8 MiB (L32 H8 D128, 64 tokens)
# fp16 blocks at concurrency 1, 4, 8 runs a put-only and a get-only phase per system (turbokv
# gets RAW-decoded and PACKED), plus the prefix load (64 Llama-3-8B blocks = 1,024 tokens in
# one GetBlocks RAW / PACKED vs 64 pipelined Redis GETs) and Lookup of a 1,000-block chain.
# Runs are interleaved (run 1 of every cell, then run 2, ...); the table gives the median of
# the runs and the turbokv / Redis ratio per cell. --profile records the server's CPU with
# perf per phase (one extra pass) and prints where its cycles go.
# --sizes / --concurrency / --skip-* run a subset (quick checks; the table shows nan elsewhere).
# turbokv's client opens one connection per worker, as Redis's side does; --connections N
# fixes the count (1: every worker shares one). --server-arg=ARG adds a turbokv-server flag
# (repeatable), e.g. --server-arg=--read-cache-bytes=0 for the server without its read cache.
# Needs: build/ (tools/setup.sh), redis-server, perf for --profile. Prints the machine's load.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNS=3
SECONDS_PER_CELL=3
PROFILE=0
OUT=""
SIZES="2m 368k 8m"
CONCS="1 4 8"
PREFIX=1
LOOKUP=1
CONNECTIONS=0
SERVER_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECONDS_PER_CELL=$2; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    --sizes) SIZES=${2//,/ }; shift 2 ;;
    --concurrency) CONCS=${2//,/ }; shift 2 ;;
    --skip-prefix) PREFIX=0; shift ;;
    --skip-lookup) LOOKUP=0; shift ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --server-arg=*) SERVER_ARGS+=("${1#--server-arg=}"); shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH="$BUILD/bin/service_vs_redis_bench"
SERVER="$BUILD/bin/turbokv-server"
for f in "$BENCH" "$SERVER"; do
  [ -x "$f" ] || { echo "missing $f: run tools/setup.sh (needs libhiredis-dev)" >&2; exit 1; }
done
command -v redis-server > /dev/null || { echo "redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/turbokv-vs-redis.XXXXXX)
OUT=${OUT:-$WORK}
mkdir -p "$OUT"
RESULTS="$OUT/cells.jsonl"
: > "$RESULTS"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$WORK/tkv-data" "$WORK/redis-aof"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$SERVER" --listen 127.0.0.1:0 --port-file "$WORK/tkv.port" --data-dir "$WORK/tkv-data" \
  --metrics-listen "" --capacity 16GiB --durability wal --default-preset k4v4-g32 \
  ${SERVER_ARGS[@]+"${SERVER_ARGS[@]}"} > "$WORK/tkv.log" 2>&1 &
TKV_PID=$!; PIDS+=("$TKV_PID")
for _ in $(seq 100); do [ -s "$WORK/tkv.port" ] && break; sleep 0.1; done
TKV="127.0.0.1:$(head -1 "$WORK/tkv.port")"
REDIS_NONE_PORT=$(free_port)
redis-server --port "$REDIS_NONE_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --protected-mode no --daemonize no --logfile "$WORK/redis-none.log" &
REDIS_NONE_PID=$!; PIDS+=("$REDIS_NONE_PID")
mkdir -p "$WORK/redis-aof"
REDIS_AOF_PORT=$(free_port)
redis-server --port "$REDIS_AOF_PORT" --bind 127.0.0.1 --save "" --appendonly yes \
  --appendfsync everysec --dir "$WORK/redis-aof" --protected-mode no --daemonize no \
  --logfile "$WORK/redis-aof.log" &
REDIS_AOF_PID=$!; PIDS+=("$REDIS_AOF_PID")
sleep 1
echo "turbokv $TKV (pid $TKV_PID), redis none :$REDIS_NONE_PORT, redis aof-everysec :$REDIS_AOF_PORT"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "turbokv-server extra flags: ${SERVER_ARGS[*]:-none}"
grep -o -m1 'codec backend [^ ]*' "$WORK/tkv.log" || true

SMOL=tests/fixtures/smollm2_kv_64_fp16.npy
shape_args() {  # size name -> block arguments
  case "$1" in
    2m) echo "--shape 32,8,128,16" ;;
    368k) echo "--kv $SMOL --block-tokens 16" ;;
    8m) echo "--shape 32,8,128,64" ;;
  esac
}
cell() {  # run system target phase encoding size concurrency label
  local run=$1 system=$2 target=$3 phase=$4 enc=$5 size=$6 conc=$7 label=$8 pid
  case "$target" in
    "$TKV") pid=$TKV_PID ;;
    *":$REDIS_NONE_PORT") pid=$REDIS_NONE_PID ;;
    *) pid=$REDIS_AOF_PID ;;
  esac
  # shellcheck disable=SC2046
  "$BENCH" --system "$system" --target "$target" --phase "$phase" --encoding "$enc" \
    --concurrency "$conc" --seconds "$SECONDS_PER_CELL" --tag "$label-$run-$size-$conc" \
    --server-pid "$pid" --connections "$CONNECTIONS" $(shape_args "$size") | sed "s/^{/{\"run\": $run, \"label\": \"$label\", \"size\": \"$size\", /" >> "$RESULTS"
  [ "$system" = redis ] && redis-cli -p "${target##*:}" flushall > /dev/null
  return 0
}
all_cells() {
  local run=$1
  for size in $SIZES; do
    for conc in $CONCS; do
      cell "$run" turbokv "$TKV" put raw "$size" "$conc" turbokv
      cell "$run" redis "127.0.0.1:$REDIS_NONE_PORT" put raw "$size" "$conc" redis-none
      cell "$run" redis "127.0.0.1:$REDIS_AOF_PORT" put raw "$size" "$conc" redis-aof
      cell "$run" turbokv "$TKV" get raw "$size" "$conc" turbokv-raw
      cell "$run" turbokv "$TKV" get packed "$size" "$conc" turbokv-packed
      cell "$run" redis "127.0.0.1:$REDIS_NONE_PORT" get raw "$size" "$conc" redis-none
      cell "$run" redis "127.0.0.1:$REDIS_AOF_PORT" get raw "$size" "$conc" redis-aof
    done
  done
  if [ "$PREFIX" = 1 ]; then
    cell "$run" turbokv "$TKV" prefix raw 2m 1 turbokv-raw
    cell "$run" turbokv "$TKV" prefix packed 2m 1 turbokv-packed
    cell "$run" redis "127.0.0.1:$REDIS_NONE_PORT" prefix raw 2m 1 redis-none
  fi
  [ "$LOOKUP" = 1 ] && cell "$run" turbokv "$TKV" lookup raw 2m 1 turbokv
  return 0
}
for run in $(seq "$RUNS"); do
  echo "run $run/$RUNS (load $(cut -d' ' -f1-3 /proc/loadavg))"
  all_cells "$run"
done

if [ "$PROFILE" = 1 ]; then
  command -v perf > /dev/null || { echo "perf not found (apt-get install linux-perf)" >&2; exit 1; }
  for spec in "put raw" "get raw" "get packed"; do
    set -- $spec
    perf record -F 499 -g -o "$WORK/perf-$1-$2.data" -p "$TKV_PID" -- sleep "$SECONDS_PER_CELL" \
      > /dev/null 2>&1 &
    PERF=$!
    "$BENCH" --system turbokv --target "$TKV" --phase "$1" --encoding "$2" --concurrency 4 \
      --seconds "$SECONDS_PER_CELL" --tag "profile-$1-$2" --shape 32,8,128,16 > /dev/null
    wait "$PERF" || true
    perf report -i "$WORK/perf-$1-$2.data" --no-children --sort dso,symbol --stdio 2> /dev/null \
      > "$OUT/profile-$1-$2.txt" || true
  done
fi
PROFILE_ARGS=(); [ "$PROFILE" = 1 ] && PROFILE_ARGS=(--profiles "$OUT")
python3 bench/service_vs_redis_report.py "$RESULTS" "${PROFILE_ARGS[@]}" | tee "$OUT/table.md"
echo "cells: $RESULTS; load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
