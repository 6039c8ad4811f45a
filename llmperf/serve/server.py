"""Running the app: `serve()` blocks in uvicorn; `ServerThread` runs it beside the caller."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from engines.registry import ENGINE_CONFIGS, build_engine
from llmperf.serve.app import OpenAIServer, build_app
from llmperf.serve.chat_template import compile_chat_template, load_chat_template
from llmperf.serve.request_log import RequestLog

DEFAULT_HOST = "127.0.0.1"  # loopback only unless asked: the API has no auth by default
DEFAULT_PORT = 8000
GRACEFUL_SHUTDOWN_S = 5.0
# local engines with a tokenizer and a context limit; synthetic: a simulated server for
# testing clients (no model: its latencies are its options)
SERVABLE_ENGINES = ("reference", "hf", "synthetic")


def build_server(
    engine_options: dict[str, Any],
    engine_name: str = "reference",
    api_key: str | None = None,
    served_model_name: str | None = None,
    request_log: str | Path | None = None,
) -> OpenAIServer:
    """Build the engine (weights and all) and the server state over it.

    `engine_options`: `model` (a preset or checkpoint folder) and any of the engine's options.
    """
    check_servable(engine_name)
    fields = {k: v for k, v in engine_options.items() if k != "model"}
    model = str(engine_options.get("model", "tiny"))
    engine = build_engine(ENGINE_CONFIGS.get(engine_name)(**fields), model)
    checkpoint = Path(model).expanduser()
    template, special_tokens = load_chat_template(checkpoint if checkpoint.is_dir() else None)
    return OpenAIServer(
        engine,
        served_model_name=served_model_name or model,
        api_key=api_key,
        request_log=RequestLog(request_log) if request_log else None,
        render_chat=compile_chat_template(template, special_tokens),
    )


def check_servable(engine_name: str) -> None:
    if engine_name not in SERVABLE_ENGINES:
        raise ValueError(
            f"engine={engine_name!r} cannot be served (llmperf-serve serves a local engine); "
            f"valid: {', '.join(SERVABLE_ENGINES)}"
        )


def serve(
    engine_options: dict[str, Any],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    served_model_name: str | None = None,
    engine_name: str = "reference",
    request_log: str | Path | None = None,
) -> None:
    """Serve the engine over HTTP until interrupted (SIGINT/SIGTERM)."""
    server = build_server(engine_options, engine_name, api_key, served_model_name, request_log)
    run_server(server, host, port)


def run_server(server: OpenAIServer, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Start the engine, serve until interrupted, stop the engine."""
    uvicorn.run(
        build_app(server),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


class ServerThread:
    """The app on a uvicorn server in a background thread (tests, notebooks, in-process runs).

    `port=0` takes a free port; `base_url` says which once started.

        with ServerThread(build_app(server)) as running:
            client = OpenAI(base_url=running.base_url, api_key="-")
    """

    def __init__(
        self, app, host: str = DEFAULT_HOST, port: int = 0, startup_timeout_s: float = 60.0
    ):
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        self.server = uvicorn.Server(config)
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._thread = threading.Thread(target=self.server.run, name="llmperf-serve", daemon=True)

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server thread ended during startup (see its log)")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not start within {self.startup_timeout_s} s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
