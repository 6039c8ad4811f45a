"""llama.cpp: `llama-server -m MODEL.gguf`, with `--metrics` on. `model.path` is the GGUF file."""

from __future__ import annotations

import subprocess
from typing import Any

from engines.launch.base import ServerFamily


class LlamaCpp(ServerFamily):
    name = "llama.cpp"
    version_routes = (("/props", "build_info"),)

    def default_binary(self) -> str:
        return "llama-server"

    def default_args(self) -> dict[str, Any]:
        return {"metrics": True}

    def format_args(self, args: dict[str, Any]) -> list[str]:
        # llama.cpp has no --no-X form for every flag: false leaves the flag out
        return super().format_args({k: v for k, v in args.items() if v is not False})

    def command(self, model: str, host: str, port: int) -> list[str]:
        return [
            self.binary,
            "-m",
            model,
            "--host",
            host,
            "--port",
            str(port),
            *self.format_args(self.args()),
        ]

    def local_version(self) -> str | None:
        try:
            done = subprocess.run(
                [self.binary, "--version"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return None
        lines = (done.stdout + done.stderr).strip().splitlines()
        return next((line for line in lines if line.startswith("version")), None)
