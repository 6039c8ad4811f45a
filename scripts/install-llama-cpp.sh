#!/usr/bin/env bash
# Build llama.cpp's `llama-server` once, from the llama.cpp vendored in the
# llama-cpp-python source distribution on PyPI (its `vendor/llama.cpp`), and print the
# binary's path. Usage: scripts/install-llama-cpp.sh [DIR]
# (default: $LLMPERF_LLAMA_CPP_DIR, else ~/.cache/llmperf/llama.cpp). A no-op once built.
#
# CPU build: no CURL (models are local GGUF files), no tests or examples; only the
# llama-server target (about 5-7 minutes on 2 cores). $LLAMA_CPP_PYTHON_VERSION picks the
# sdist (default 0.3.36), $JOBS the build's parallelism (default 2).
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
DIR=${1:-${LLMPERF_LLAMA_CPP_DIR:-$HOME/.cache/llmperf/llama.cpp}}
PY=${PYTHON:-python3}
JOBS=${JOBS:-2}
SRC="$DIR/src"
BIN="$SRC/build/bin/llama-server"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "llama-server already built ($("$BIN" --version 2>&1 | grep '^version' || true))" >&2
  echo "$BIN"
  exit 0
fi
mkdir -p "$DIR"
TMP=$(mktemp -d "$DIR/download.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
"$PY" -m pip download --quiet --no-deps --no-binary :all: -d "$TMP" "llama-cpp-python==$VERSION" >&2
SDIST=$(ls "$TMP"/llama_cpp_python-*.tar.gz | head -n 1)
tar -xzf "$SDIST" -C "$TMP"
rm -rf "$SRC"
mv "$TMP"/llama_cpp_python-*/vendor/llama.cpp "$SRC"
cd "$SRC"
cmake -B build -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release >&2
cmake --build build --target llama-server -j"$JOBS" >&2
"$BIN" --version >&2
echo "llama-server built from llama-cpp-python $VERSION's vendored llama.cpp" >&2
echo "$BIN"
