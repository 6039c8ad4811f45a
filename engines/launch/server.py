"""A server process llmperf owns: started in its own process group with its output in
server.log, ready once /health and /v1/models answer, stopped (SIGTERM to the group, then
SIGKILL) on every way out, and watched while the load runs.

The process group is the server's own, so a Ctrl-C at the terminal reaches llmperf alone,
which stops the server itself after writing what it measured. On Linux the server also gets
SIGTERM if llmperf dies without cleaning up (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from engines.launch.base import ServerFamily
from engines.launch.family import build_family
from engines.launch.options import LaunchOptions

POLL_INTERVAL_S = 0.25
PROBE_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 5


class LaunchError(Exception):
    """The server could not be started or never became ready; the message is one line."""


class ManagedServer:
    """`base_url` (…/v1), `metrics_url`, `family` and, once ready, `served_model`, `version`
    and `startup_s` say what runs; `describe()` puts them in the run's records."""

    def __init__(self, options: LaunchOptions, model: str, log_path: Path) -> None:
        self.options = options
        self.model = model
        self.log_path = Path(log_path)
        self.spec: ServerFamily = build_family(options.resolved_family, options)
        self.family = self.spec.name
        self.host = options.host
        self.port: int | None = None
        self.command: list[str] = []
        self.env: dict[str, str] = {}
        self.served_model: str | None = None
        self.version: str | None = None
        self.startup_s: float | None = None
        self.exit_code: int | None = None
        self.died_unexpectedly = False
        self._process: subprocess.Popen | None = None
        self._stopping = threading.Event()

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def metrics_url(self) -> str | None:
        return None if self.spec.metrics_path is None else self.root_url + self.spec.metrics_path

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    # -- start ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the process and wait until it serves; raise LaunchError (and stop it) if not."""
        try:
            self.spec.resolve_binary()
        except FileNotFoundError as err:
            raise LaunchError(f"engine.launch.binary: {err}") from None
        self.port = self._claim_port()
        try:  # a family may prepare its model first (llama.cpp: a folder's GGUF)
            self.command = self.spec.command(self.model, self.host, self.port)
        except ValueError as err:
            raise LaunchError(f"engine.launch: {err}") from None
        self.env = self.spec.env()
        began = time.perf_counter()
        with self.log_path.open("ab") as log:
            try:
                self._process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **self.env},
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as err:
                raise LaunchError(f"engine.launch: cannot run {self.command[0]!r}: {err}") from None
        try:
            self._wait_ready(began + self.options.ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - began
        self.version = self._read_version()

    def _claim_port(self) -> int:
        """The configured port if it is free, else a free one the OS picks."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((self.host, self.options.port or 0))
            except OSError as err:
                raise LaunchError(
                    f"engine.launch.port={self.options.port}: cannot listen on "
                    f"{self.host}:{self.options.port} ({err.strerror}); pick another or null for a free one"
                ) from None
            return sock.getsockname()[1]

    def _wait_ready(self, deadline: float) -> None:
        paths = [self.spec.health_path, self.spec.models_path]
        with httpx.Client(timeout=PROBE_TIMEOUT_S) as http:
            while paths:
                if self._process.poll() is not None:
                    self.exit_code = self._process.returncode
                    raise LaunchError(
                        f"engine.launch: {self.family} exited with code {self.exit_code} before it "
                        f"was ready; {self.log_path}: {self.log_tail()}"
                    )
                if time.perf_counter() > deadline:
                    raise LaunchError(
                        f"engine.launch: {self.family} was not ready within "
                        f"ready_timeout_s={self.options.ready_timeout_s:g} ({self.root_url}{paths[0]} "
                        f"did not answer); see {self.log_path}"
                    )
                try:
                    response = http.get(self.root_url + paths[0])
                except httpx.HTTPError:
                    response = None
                if response is not None and response.status_code == 200:
                    if paths[0] == self.spec.models_path:
                        self.served_model = _first_model(response)
                        if self.served_model is None:
                            response = None
                    if response is not None:
                        paths.pop(0)
                        continue
                time.sleep(POLL_INTERVAL_S)

    def _read_version(self) -> str | None:
        with httpx.Client(timeout=PROBE_TIMEOUT_S) as http:
            for path, key in self.spec.version_routes:
                try:
                    response = http.get(self.root_url + path)
                    value = response.json().get(key) if response.status_code == 200 else None
                except (httpx.HTTPError, ValueError, AttributeError):
                    value = None
                if value:
                    return self.spec.label_version(str(value))
        return self.spec.local_version()

    # -- while the load runs --------------------------------------------------------------

    @contextlib.contextmanager
    def watched(self, on_exit: Callable[[str], None]) -> Iterator[None]:
        """Call `on_exit(reason)` from a thread if the server exits before `stop()`."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(POLL_INTERVAL_S):
                if self._process.poll() is not None and not self._stopping.is_set():
                    self.exit_code = self._process.returncode
                    self.died_unexpectedly = True
                    on_exit(self.death_reason())
                    return

        thread = threading.Thread(target=watch, name="server-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def death_reason(self) -> str:
        return f"the {self.family} server exited during the run (code {self.exit_code}); see server.log"

    # -- stop ----------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after stop_timeout_s. Idempotent."""
        self._stopping.set()
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(self.options.stop_timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        _signal_group(process.pid, signal.SIGKILL)  # children that outlived their leader
        if self.exit_code is None:
            self.exit_code = process.returncode

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- records ---------------------------------------------------------------------------

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        tail = [line.strip() for line in lines if line.strip()][-LOG_TAIL_LINES:]
        return " | ".join(tail) or "(empty log)"

    def describe(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "version": self.version,
            "command": self.command,
            "env": self.env,
            "base_url": self.base_url,
            "metrics_url": self.metrics_url,
            "served_model": self.served_model,
            "startup_s": self.startup_s,
            "log": self.log_path.name,
            "exit_code": self.exit_code,
            "died_during_run": self.died_unexpectedly,
        }


def _first_model(response: httpx.Response) -> str | None:
    try:
        data = response.json().get("data") or []
        return str(data[0]["id"]) if data else None
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        return None


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when llmperf dies (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
