#!/usr/bin/env bash
# Build llama.cpp's `llama-server` once, from the llama.cpp vendored in the
# llama-cpp-python source distribution on PyPI (its `vendor/llama.cpp`), and print the
# binary's path. Usage: scripts/install-llama-cpp.sh [DIR]
# (default: $LLMPERF_LLAMA_CPP_DIR, else ~/.cache/llmperf/llama.cpp). A no-op once built.
#
# CPU build: no CURL (models are local GGUF files), no tests or examples; only the
# llama-server target (about 5-7 minutes on 2 cores). $LLAMA_CPP_PYTHON_VERSION picks the
# sdist (default 0.3.36), $LLAMA_CPP_SDIST a local copy of it instead of the download,
# $JOBS the build's parallelism (default 2).
#
# Every step's output goes to DIR/build.log; a step that fails prints one line naming it
# and the log, and the script exits 2.
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
DIR=${1:-${LLMPERF_LLAMA_CPP_DIR:-$HOME/.cache/llmperf/llama.cpp}}
PY=${PYTHON:-python3}
JOBS=${JOBS:-2}
SRC="$DIR/src"
BIN="$SRC/build/bin/llama-server"
LOG="$DIR/build.log"
SOURCE_FILE="$SRC/LLMPERF_SOURCE"  # which sdist the build came from (the recorded version)

fail() {
  echo "install-llama-cpp.sh: error: $1" >&2
  exit 2
}

step() {  # step WHAT CMD...: CMD's output into the log; one line and exit 2 if it fails
  local what=$1 rc=0
  shift
  echo "== $what: $*" >>"$LOG"
  "$@" >>"$LOG" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || fail "$what failed (exit $rc); see $LOG"
}

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "llama-server already built ($("$BIN" --version 2>&1 | grep '^version' || true))" >&2
  echo "$BIN"
  exit 0
fi
mkdir -p "$DIR" || fail "cannot create $DIR"
: >"$LOG"
for tool in cmake c++ tar; do
  command -v "$tool" >/dev/null || fail "$tool not found: llama.cpp's build needs cmake, a C++ compiler and tar"
done
TMP=$(mktemp -d "$DIR/download.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ -n "${LLAMA_CPP_SDIST:-}" ]; then
  [ -f "$LLAMA_CPP_SDIST" ] || fail "LLAMA_CPP_SDIST=$LLAMA_CPP_SDIST: no such file"
  SDIST=$LLAMA_CPP_SDIST
else
  step "downloading llama-cpp-python==$VERSION's source" \
    "$PY" -m pip download --no-deps --no-binary :all: -d "$TMP" "llama-cpp-python==$VERSION"
  SDIST=$(ls "$TMP"/llama_cpp_python-*.tar.gz 2>/dev/null | head -n 1 || true)
  [ -n "$SDIST" ] || fail "pip downloaded no llama-cpp-python sdist; see $LOG"
fi
step "unpacking $SDIST" tar -xzf "$SDIST" -C "$TMP"
VENDORED=$(ls -d "$TMP"/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -n 1 || true)
[ -n "$VENDORED" ] || fail "$SDIST holds no vendor/llama.cpp"
rm -rf "$SRC"
mv "$VENDORED" "$SRC"
cd "$SRC"
step "configuring llama.cpp (cmake)" cmake -B build -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release
step "building llama-server" cmake --build build --target llama-server -j"$JOBS"
step "running the built llama-server --version" "$BIN" --version
echo "llama-cpp-python $(basename "$SDIST" .tar.gz | sed 's/^llama_cpp_python-//')" >"$SOURCE_FILE"
echo "llama-server built from $(basename "$SDIST")'s vendored llama.cpp; log: $LOG" >&2
echo "$BIN"
