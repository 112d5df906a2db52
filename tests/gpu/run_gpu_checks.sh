#!/usr/bin/env bash
# The GPU acceptance check of the CUDA codec, as one command on a lent GPU machine.
#
#   bash tests/gpu/run_gpu_checks.sh --prepare    # on a machine with apt (a dev box, CI image):
#                                                 # the Debian packages the build needs -> .gpu-deps/
#   bash tests/gpu/run_gpu_checks.sh OUTDIR       # on the GPU machine (device tool: carry .gpu-deps)
#
# The GPU machine has nvcc, cmake, g++, python3 with torch and pytest, but no package registry:
# Abseil, xxHash, zstd, GoogleTest, CLI11 and pkgconf come from .gpu-deps (Debian 12 .debs,
# unpacked under /tmp) when the system lacks them.
#
# Steps (each logged to OUTDIR/summary.txt with its time):
#   1. configure + build with CUDA for sm_90 (TURBOKV_BUILD_SERVICE=OFF): the codec, the C
#      library, the GPU tests, the warp-emulation and CPU codec tests, the kernel benchmark;
#   2. tests/gpu/codec_gpu_test.cc: CUDA packed bytes == CPU bytes and decoded values == CPU
#      values for every preset x head_dim {8, 64, 96, 128, 256} x dtype {fp16, bf16, fp32} and
#      every (g, bits, qjl) kernel; per-block errors; chunks over both streams with concurrent
#      callers; decode into device memory; the start-up self-test;
#   3. tests/python/test_cuda_decode.py: the Python entry point into torch CUDA tensors;
#   4. the CPU tests of the same build on this host (codec_unit_tests, codec_warp_tests);
#   5. bench/codec_gpu_bench.cc: device-to-device copy bandwidth, then encode / decode kernels at
#      several batch sizes (TURBOKV_GPU_BENCH_BLOCKS, default 16,64,256,1024 blocks of 2 MiB);
#      the pass line compares kernel HBM traffic with the copy's at the largest batch (>= 0.70).
#
# Output files (OUTDIR, at most 8): summary.txt, nvidia-smi.txt, build.log (tail), gpu_tests.txt,
# python_tests.txt, cpu_tests.txt, gpu_bench.jsonl.
# Exit status: 0 every check passed; 1 a check failed; 2 the build failed; 77 no usable CUDA
# device (the build and the CPU tests ran; GPU checks skipped).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
deps=${TURBOKV_GPU_DEPS:-$here/.gpu-deps}
DEBS=(libabsl-dev libabsl20220623 libxxhash-dev libxxhash0 libzstd-dev libzstd1 libgtest-dev
      libgmock-dev libcli11-dev pkgconf-bin libpkgconf3)

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$deps"
  (cd "$deps" && apt-get download "${DEBS[@]}") || { echo "apt-get download failed" >&2; exit 1; }
  echo "prepared $(ls "$deps"/*.deb | wc -l) packages ($(du -sh "$deps" | cut -f1)) in $deps;"
  echo "device run: bash tests/gpu/run_gpu_checks.sh \"\$OUT\"  with carry [\".gpu-deps\"]"
  exit 0
fi

out=${1:?usage: run_gpu_checks.sh OUTDIR | --prepare}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${TURBOKV_GPU_BUILD_DIR:-/tmp/turbokv-gpu-build}
blocks=${TURBOKV_GPU_BENCH_BLOCKS:-16,64,256,1024}
t0=$(date +%s)
log() { echo "[gpu-checks +$(( $(date +%s) - t0 ))s] $*" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
failed=0

log "host: $(uname -srm), $(nproc) cores; repo $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed (no driver?)"
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc > /dev/null || { log "no nvcc on this machine"; exit 2; }
log "nvcc: $(nvcc --version | tail -1); cmake: $(cmake --version | head -1); c++: $(c++ --version | head -1)"

# ---- Build dependencies: the system's, else the prepared .debs --------------------------------
cmake_extra=()
have() { [ -e "$1" ] || compgen -G "$1" > /dev/null; }
# TURBOKV_GPU_FORCE_DEPS=1: unpack .gpu-deps even where the system has the packages (to test it).
if [ "${TURBOKV_GPU_FORCE_DEPS:-0}" = 1 ] || ! have /usr/include/absl/status/status.h || ! have /usr/include/xxhash.h || ! have /usr/include/zstd.h ||
   ! have "/usr/lib/*/cmake/GTest/GTestConfig.cmake" || ! have /usr/share/cmake/CLI11 ||
   ! command -v pkg-config > /dev/null; then
  if ! compgen -G "$deps/*.deb" > /dev/null; then
    log "build dependencies missing and no $deps/*.deb: run 'bash tests/gpu/run_gpu_checks.sh --prepare' where apt works and carry .gpu-deps"
    exit 2
  fi
  prefix=/tmp/turbokv-gpu-deps
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in "$deps"/*.deb; do
    if command -v dpkg-deb > /dev/null; then
      dpkg-deb -x "$f" "$prefix"
    else
      (cd "$prefix" && ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -x --use-compress-program="$(ar t "$f" | grep -q xz && echo xz || echo zstd) -d")
    fi
  done
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  sed -i "s|^prefix=/usr|prefix=$prefix/usr|" "$lib"/pkgconfig/*.pc
  export PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_extra+=("-DCMAKE_PREFIX_PATH=$prefix/usr;$lib/cmake;$prefix/usr/share/cmake")
  if [ "${TURBOKV_GPU_FORCE_DEPS:-0}" = 1 ] || ! command -v pkg-config > /dev/null; then
    cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$prefix/usr/bin/pkgconf")
  fi
  log "build dependencies from $deps ($(ls "$deps"/*.deb | wc -l) packages) unpacked in $prefix"
fi

# ---- 1. Build --------------------------------------------------------------------------------
log "configure ($build)"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTURBOKV_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DTURBOKV_BUILD_SERVICE=OFF -DTURBOKV_BUILD_BENCH=ON \
  "${cmake_extra[@]}" > "$out/build.log" 2>&1 || { log "configure failed"; tail -40 "$out/build.log"; exit 2; }
log "build ($(nproc) jobs)"
cmake --build "$build" -j"$(nproc)" --target codec_gpu_tests codec_warp_tests codec_unit_tests \
  codec_gpu_bench turbokv_codec_c >> "$out/build.log" 2>&1 || { log "build failed"; tail -60 "$out/build.log"; exit 2; }
tail -c 1000000 "$out/build.log" > "$out/build.log.tail" && mv "$out/build.log.tail" "$out/build.log"

# ---- Is there a device? ------------------------------------------------------------------------
bench_line=$("$build/bin/codec_gpu_bench" --device-only 1 2>&1 | head -1)
device=1
case "$bench_line" in *skipped*|*error*|"") device=0 ;; esac
log "device: ${bench_line:-none}"

# ---- 2. GPU tests ------------------------------------------------------------------------------
log "GPU tests (CUDA bytes vs CPU bytes)"
timeout 300 "$build/bin/codec_gpu_tests" --gtest_brief=1 > "$out/gpu_tests.txt" 2>&1
rc=$?
tail -4 "$out/gpu_tests.txt" | tee -a "$out/summary.txt"
[ $rc -eq 0 ] || { failed=1; log "GPU tests FAILED (exit $rc)"; }
if [ $device -eq 1 ] && grep -q "SKIPPED" "$out/gpu_tests.txt"; then
  failed=1
  log "GPU tests were skipped although a device answered"
fi

# ---- 3. Python decode into torch CUDA tensors -------------------------------------------------
py=${TURBOKV_GPU_PYTHON:-python3}
if "$py" -c "import pytest, numpy" 2> /dev/null; then
  log "Python decode_to_device ($("$py" --version 2>&1))"
  (cd "$here" && TURBOKV_BUILD_DIR="$build" PYTHONDONTWRITEBYTECODE=1 timeout 180 "$py" -m pytest -q \
     -p no:cacheprovider tests/python/test_cuda_decode.py) > "$out/python_tests.txt" 2>&1
  rc=$?
  tail -2 "$out/python_tests.txt" | tee -a "$out/summary.txt"
  [ $rc -eq 0 ] || { failed=1; log "Python tests FAILED (exit $rc)"; }
  if [ $device -eq 1 ] && grep -q "skipped" "$out/python_tests.txt" && ! grep -q " passed" "$out/python_tests.txt"; then
    failed=1
    log "Python device tests were skipped although a device answered"
  fi
else
  echo "$py has no pytest/numpy: skipped" > "$out/python_tests.txt"
  log "Python decode_to_device skipped: $py has no pytest/numpy (set TURBOKV_GPU_PYTHON)"
  [ $device -eq 1 ] && failed=1
fi

# ---- 4. CPU tests of this build ---------------------------------------------------------------
log "CPU codec tests on this host (scalar/AVX2/AVX-512 equivalence, warp emulation)"
{ timeout 300 "$build/bin/codec_unit_tests" --gtest_brief=1; echo "exit $?";
  timeout 300 "$build/bin/codec_warp_tests" --gtest_brief=1; echo "exit $?"; } > "$out/cpu_tests.txt" 2>&1
grep -E "PASSED|FAILED|^exit" "$out/cpu_tests.txt" | tee -a "$out/summary.txt"
grep -q "^exit [^0]" "$out/cpu_tests.txt" && { failed=1; log "CPU tests FAILED"; }

# ---- 5. Kernel benchmark -----------------------------------------------------------------------
if [ $device -eq 1 ]; then
  log "kernel benchmark (blocks $blocks)"
  timeout 300 "$build/bin/codec_gpu_bench" --blocks "$blocks" --reps 5 --host-gib 1 > "$out/gpu_bench.jsonl" 2>&1 ||
    { failed=1; log "benchmark FAILED"; }
  python3 - "$out/gpu_bench.jsonl" <<'EOF' | tee -a "$out/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
copy = next((r for r in rows if r.get("kind") == "copy"), None)
if copy:
    print("d2d copy: %.0f GB/s (bytes read + written)" % copy["hbm_gbps"])
ok = True
for r in rows:
    if r.get("kind") == "kernels":
        print("%-12s %-13s %5d blocks: encode %6.0f GB/s HBM (%.2f x copy), decode %6.0f GB/s HBM "
              "(%.2f x copy), fp16 in/out %5.0f / %5.0f GB/s, bytes match %s"
              % (r["shape"], r["preset"], r["blocks"], r["encode_hbm_gbps"], r["encode_vs_copy"],
                 r["decode_hbm_gbps"], r["decode_vs_copy"], r["encode_fp16_gbps"], r["decode_fp16_gbps"],
                 r["bytes_match"]))
        ok = ok and r["bytes_match"]
    elif r.get("kind") == "host":
        print("host path %s %s %d blocks: encode %.1f GB/s, decode %.1f GB/s (fp16, one caller), bytes match %s"
              % (r["shape"], r["preset"], r["blocks"], r["encode_fp16_gbps"], r["decode_fp16_gbps"], r["bytes_match"]))
        ok = ok and r["bytes_match"]
    elif "error" in r:
        print("benchmark error:", r["error"]); ok = False
largest = [r for r in rows if r.get("kind") == "kernels" and r["shape"] == "llama3-8b"]
if largest:
    n = max(r["blocks"] for r in largest)
    for r in (r for r in largest if r["blocks"] == n):
        for op in ("encode", "decode"):
            print("%s %s %s at %d blocks: %.2f x copy bandwidth (target >= 0.70)"
                  % ("PASS" if r[op + "_vs_copy"] >= 0.70 else "BELOW", r["preset"], op, n, r[op + "_vs_copy"]))
print("benchmark bytes match: %s" % ("yes" if ok else "NO"))
sys.exit(0 if ok else 1)
EOF
  [ $? -eq 0 ] || failed=1
else
  echo "$bench_line" > "$out/gpu_bench.jsonl"
  log "benchmark skipped: $bench_line"
fi

if [ $device -eq 0 ]; then
  log "no usable CUDA device: GPU checks skipped (build and CPU tests: $([ $failed -eq 0 ] && echo ok || echo FAILED))"
  [ $failed -eq 0 ] && exit 77 || exit 1
fi
log "done: $([ $failed -eq 0 ] && echo 'all checks passed' || echo 'SOME CHECKS FAILED')"
exit $failed
