#!/usr/bin/env bash
# Style and lint checks that CI enforces (tools/test.sh runs this after the build); each one
# fails the run on a finding:
#   1. clang-format (.clang-format: Google style, 100 columns) on every C++ and CUDA file the
#      project owns: a file that would change is an error (fix: clang-format -i FILE),
#   2. clang-tidy (.clang-tidy: the house naming, bugprone, performance, a modernize subset)
#      on the project's own translation units in $BUILD/compile_commands.json (library, server,
#      client and tool sources; tests and CUDA files are not run through it),
#   3. ruff (ruff.toml: pycodestyle, pyflakes, isort, bugbear, pyupgrade) on the project's Python
#      (the tools venv's pinned ruff, tools/requirements.txt); mypy runs in pytest (test_typing).
# Usage: BUILD=build bash tools/lint.sh [--quick | --tidy]
#   --quick: steps 1 and 3 only (seconds); --tidy: step 2 only (the slow one: about 6 CPU-s per
#   translation unit, 6 minutes on 2 cores; tools/test.sh runs it in the background).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
log() { echo "[lint $(date +%H:%M:%S)] $*"; }
MODE=${1:-all}
case "$MODE" in all|--quick|--tidy) ;; *) echo "usage: $0 [--quick | --tidy]" >&2; exit 2 ;; esac
status=0

if [ "$MODE" != --tidy ]; then
  log "clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1)"
  mapfile -t cxx < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
  bad=()
  for f in "${cxx[@]}"; do
    clang-format --dry-run -Werror "$f" > /dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    log "clang-format: ${#bad[@]} file(s) not formatted (fix: clang-format -i FILE):"
    printf '  %s\n' "${bad[@]}"
    clang-format --dry-run "${bad[0]}" 2>&1 | head -20
    status=1
  fi
  log "ruff $("$BUILD/venv/bin/ruff" --version | cut -d' ' -f2) (ruff.toml)"
  "$BUILD/venv/bin/ruff" check . || status=1
fi

if [ "$MODE" != --quick ]; then
  [ -f "$BUILD/compile_commands.json" ] || { log "no $BUILD/compile_commands.json: build first"; exit 1; }
  mapfile -t units < <("${PYTHON:-python3}" - "$BUILD/compile_commands.json" "$PWD" <<'EOF'
import json, os, sys
root = sys.argv[2] + "/"
for entry in json.load(open(sys.argv[1])):
    path = os.path.realpath(entry["file"])
    rel = path[len(root):] if path.startswith(root) else None
    if rel and rel.endswith(".cc") and rel.split("/")[0] in ("common", "server", "client", "kernels", "tools", "bench"):
        print(rel)
EOF
  )
  log "clang-tidy $(clang-tidy --version | grep -o 'version [0-9.]*') on ${#units[@]} translation units, -j$JOBS"
  out=$(mktemp)
  if ! printf '%s\n' "${units[@]}" | xargs -P "$JOBS" -n 1 clang-tidy -p "$BUILD" --quiet > "$out" 2>&1; then
    grep -E "(warning|error):" "$out" | sort -u | head -50
    log "clang-tidy: $(grep -cE '(warning|error):' "$out") finding(s)"
    status=1
  fi
  rm -f "$out"
fi

[ "$status" = 0 ] && log "lint clean ($MODE)"
exit "$status"
