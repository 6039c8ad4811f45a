"""SGLang: `python -m sglang.launch_server --model-path MODEL`, with its Prometheus metrics on.

The interpreter is `engine.launch.binary` (an SGLang venv's python), else `python3`.
"""

from __future__ import annotations

from typing import Any

from engines.launch.base import ServerFamily


class SGLang(ServerFamily):
    name = "sglang"
    version_routes = (("/get_server_info", "version"), ("/version", "version"))

    def default_binary(self) -> str:
        return "python3"

    def default_args(self) -> dict[str, Any]:
        return {"enable_metrics": True}

    def command(self, model: str, host: str, port: int) -> list[str]:
        return [
            self.binary,
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            host,
            "--port",
            str(port),
            *self.format_args(self.args()),
        ]
