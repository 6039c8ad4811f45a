"""llama.cpp: `llama-server -m MODEL.gguf`, with `--metrics` on. `model.path` is the GGUF file
(`llmperf-export format=gguf` writes one), or a checkpoint folder, whose GGUF gguf_path.py
finds or writes. The binary: the one scripts/install-llama-cpp.sh
builds when it is there, else `llama-server` on PATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from engines.launch.base import ServerFamily
from engines.launch.gguf_path import gguf_for

DEFAULT_DIR = "~/.cache/llmperf/llama.cpp"
DIR_VARIABLE = "LLMPERF_LLAMA_CPP_DIR"
SOURCE_FILE = "LLMPERF_SOURCE"  # scripts/install-llama-cpp.sh: "llama-cpp-python VERSION"


def built_binary() -> Path:
    """Where scripts/install-llama-cpp.sh puts llama-server (whether or not it is built)."""
    root = os.environ.get(DIR_VARIABLE) or DEFAULT_DIR
    return Path(root).expanduser() / "src" / "build" / "bin" / "llama-server"


class LlamaCpp(ServerFamily):
    name = "llama.cpp"
    version_routes = (("/props", "build_info"),)

    def default_binary(self) -> str:
        built = built_binary()
        return str(built) if built.is_file() else "llama-server"

    def install_hint(self) -> str:
        return "; build it with scripts/install-llama-cpp.sh, or set engine.launch.binary"

    def default_args(self) -> dict[str, Any]:
        return {"metrics": True}

    def format_args(self, args: dict[str, Any]) -> list[str]:
        # llama.cpp has no --no-X form for every flag: false leaves the flag out
        return super().format_args({k: v for k, v in args.items() if v is not False})

    def command(self, model: str, host: str, port: int) -> list[str]:
        return [
            self.binary,
            "-m",
            gguf_for(model),
            "--host",
            host,
            "--port",
            str(port),
            *self.format_args(self.args()),
        ]

    def label_version(self, version: str) -> str:
        # A build from an sdist's vendored copy says "b0-unknown" (no git there); the install
        # script writes which sdist it was beside the source
        source = Path(self.binary).resolve().parent.parent.parent / SOURCE_FILE if self.binary else None
        try:
            built_from = source.read_text().strip() if source else ""
        except OSError:
            built_from = ""
        return f"{version} ({built_from})" if built_from else version

    def local_version(self) -> str | None:
        try:
            done = subprocess.run(
                [self.binary, "--version"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return None
        lines = (done.stdout + done.stderr).strip().splitlines()
        return next((line for line in lines if line.startswith("version")), None)
