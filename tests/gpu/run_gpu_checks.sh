#!/usr/bin/env bash
# One-shot GPU check for a lent GPU machine (see the `device` tool): configure with CUDA,
# build the codec, the GPU tests and the GPU benchmark, run both, write everything to OUTDIR.
#   bash tests/gpu/run_gpu_checks.sh OUTDIR
# Needs: cmake, g++, nvcc, and the codec's build deps (Abseil, xxHash, GTest). Installs them
# with apt-get when missing (the lent machine starts bare). Exit status: the GPU tests'.
set -uo pipefail
out=${1:?usage: run_gpu_checks.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${TURBOKV_GPU_BUILD_DIR:-/tmp/turbokv-gpu-build}
log() { echo "[gpu-checks $(date +%H:%M:%S)] $*" | tee -a "$out/summary.txt"; }

log "host: $(uname -a)"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed"
if ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
log "nvcc: $(nvcc --version | tail -1)"

need=()
for h in /usr/include/absl/status/status.h /usr/include/xxhash.h /usr/include/gtest/gtest.h \
         /usr/include/CLI/CLI.hpp /usr/include/zstd.h; do
  [ -e "$h" ] || need=(libabsl-dev libxxhash-dev libgtest-dev libcli11-dev libzstd-dev)
done
if [ ${#need[@]} -gt 0 ] || ! command -v cmake >/dev/null; then
  log "installing build deps"
  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q cmake g++ pkg-config \
     "${need[@]}") > "$out/apt.log" 2>&1 || log "apt-get failed (see apt.log)"
fi

log "configure"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTURBOKV_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DTURBOKV_BUILD_SERVICE=OFF -DTURBOKV_BUILD_BENCH=ON \
  > "$out/configure.log" 2>&1 || { log "configure failed"; tail -30 "$out/configure.log"; exit 2; }
log "build"
cmake --build "$build" -j"$(nproc)" --target codec_gpu_tests codec_unit_tests codec_gpu_bench > "$out/build.log" 2>&1 \
  || { log "build failed"; tail -40 "$out/build.log"; exit 2; }
log "GPU tests"
"$build/bin/codec_gpu_tests" --gtest_brief=1 > "$out/gpu_tests.txt" 2>&1
rc=$?
tail -5 "$out/gpu_tests.txt" | tee -a "$out/summary.txt"
log "CPU unit tests on this host (AVX2 equivalence etc.)"
"$build/bin/codec_unit_tests" --gtest_brief=1 > "$out/cpu_tests.txt" 2>&1
tail -3 "$out/cpu_tests.txt" | tee -a "$out/summary.txt"
log "GPU benchmark"
if [ -x "$build/bin/codec_gpu_bench" ]; then
  "$build/bin/codec_gpu_bench" --blocks "${TURBOKV_GPU_BENCH_BLOCKS:-1024}" | tee "$out/gpu_bench.jsonl" | tee -a "$out/summary.txt"
fi
log "done (gpu tests exit $rc)"
exit $rc
