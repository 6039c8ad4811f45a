"""Every command without the optional extras (peers, cluster, the Ray launcher): where a path
needs one, one line naming the extra and the pip command, exit code 2, no traceback; where
none is needed (engine=openai, the report, the gate, ...), the command works.

The commands run as subprocesses in an environment that lacks the extras: a folder first on
PYTHONPATH holds a `sitecustomize.py` whose `sys.meta_path` finder raises ModuleNotFoundError
for those packages, and which hides them from `pkgutil` too (Hydra finds its launcher plugins
by walking the `hydra_plugins` namespace with pkgutil, not by importing).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PEERS = 'pip install -e ".[peers]"'
CLUSTER = 'pip install -e ".[cluster]"'
# Every top-level package (or plugin) an extra brings that llmperf may import.
BLOCKED = (
    "transformers",
    "fastapi",
    "starlette",
    "uvicorn",
    "openai",
    "submitit",
    "hydra_plugins.hydra_submitit_launcher",
    "ray",
    "hydra_plugins.hydra_ray_launcher",
    "datasets",
    "gguf",
)
SITECUSTOMIZE = '''
import os, pkgutil, sys

BLOCKED = tuple(n for n in os.environ.get("LLMPERF_TEST_BLOCKED", "").split(",") if n)


def _blocked(name):
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Blocker())
_iter_modules = pkgutil.iter_modules


def _iter_unblocked(path=None, prefix=""):
    return (m for m in _iter_modules(path, prefix) if not _blocked(m.name))


pkgutil.iter_modules = _iter_unblocked
'''


@pytest.fixture(scope="module")
def without(tmp_path_factory):
    """env(blocked) -> an environment in which the `blocked` packages are not installed."""
    folder = tmp_path_factory.mktemp("no_extras")
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)

    def env(blocked: tuple[str, ...] = BLOCKED) -> dict[str, str]:
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT)])}
        environ["LLMPERF_TEST_BLOCKED"] = ",".join(blocked)
        environ.pop("HYDRA_FULL_ERROR", None)
        return environ

    return env


def run(module: str, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_the_blocker_hides_the_extras(without, tmp_path):
    """So the tests below cannot pass because an extra was there after all."""
    probe = (
        "import importlib, pkgutil, hydra_plugins\n"
        "for name in ('transformers', 'fastapi', 'uvicorn', 'openai', 'submitit', 'ray', 'datasets'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise SystemExit(name + ' imported')\n"
        "plugins = [m.name for m in pkgutil.walk_packages(hydra_plugins.__path__, 'hydra_plugins.')]\n"
        "assert not any('submitit' in p or 'ray' in p for p in plugins), plugins\n"
        "import httpx, aiohttp, orjson  # core now\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], env=without(), cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# name: (module, arguments, blocked packages, words the one line must hold)
NEEDS_AN_EXTRA = {
    "llmperf engine=hf": (
        "llmperf",
        ["engine=hf", "model=tiny", "scenario.num_requests=1"],
        BLOCKED,
        ["llmperf: error:", "engine=hf needs transformers", PEERS],
    ),
    "llmperf submitit_local, no plugin": (
        "llmperf",
        ["-m", "engine=synthetic", "hydra/launcher=submitit_local"],
        BLOCKED,
        ["hydra/launcher=submitit_local needs hydra-submitit-launcher", CLUSTER],
    ),
    "llmperf submitit_slurm, no submitit": (
        "llmperf",
        ["-m", "engine=synthetic", "hydra/launcher=submitit_slurm"],
        ("submitit",),
        ["hydra/launcher=submitit_slurm needs submitit", CLUSTER],
    ),
    "llmperf ray launcher": (
        "llmperf",
        ["-m", "engine=synthetic", "hydra/launcher=ray"],
        BLOCKED,
        ["hydra/launcher=ray needs hydra-ray-launcher", 'pip install -e ".[ray]"'],
    ),
    "llmperf on a Ray cluster": (
        "llmperf",
        ["engine=synthetic", "scenario.client.backend=ray", "scenario.client.workers=2"],
        BLOCKED,
        ["scenario.client.backend=ray needs ray", 'pip install -e ".[ray]"'],
    ),
    "llmperf-serve": (
        "llmperf.serve",
        ["engine=synthetic", "port=0"],
        BLOCKED,
        ["llmperf-serve: error:", "llmperf-serve needs uvicorn", PEERS],
    ),
    "llmperf-serve, no fastapi": (
        "llmperf.serve",
        ["engine=synthetic", "port=0"],
        ("fastapi", "starlette"),
        ["llmperf-serve needs fastapi", PEERS],
    ),
    "llmperf-serve engine=hf": (
        "llmperf.serve",
        ["engine=hf", "model=tiny", "port=0"],
        ("transformers",),
        ["llmperf-serve: error:", "engine=hf needs transformers", PEERS],
    ),
    "llmperf-search engine=hf": (
        "llmperf.search",
        ["engine=hf", "model=tiny", "slo.ttft_p99_s=0.5"],
        BLOCKED,
        ["llmperf-search: error:", "engine=hf needs transformers", PEERS],
    ),
    "llmperf-export format=gguf": (
        "llmperf.export",
        ["model=tiny", "format=gguf", "out=OUT/tiny.gguf"],
        BLOCKED,
        ["llmperf-export format=gguf needs gguf", 'pip install -e ".[llama]"'],
    ),
    "llmperf engine.launch=llmperf-serve": (
        "llmperf",
        ["engine=openai", "engine.launch=llmperf-serve", "scenario.num_requests=1"],
        BLOCKED,
        ["llmperf-serve exited with code 2", "llmperf-serve needs uvicorn", PEERS],
    ),
}


@pytest.mark.parametrize("name", NEEDS_AN_EXTRA)
def test_a_missing_extra_is_one_line_naming_it(without, tmp_path, name):
    module, args, blocked, words = NEEDS_AN_EXTRA[name]
    args = [a.replace("OUT", str(tmp_path)) for a in args]
    if module == "llmperf" and "-m" not in args:
        args = [*args, f"hydra.run.dir={tmp_path / 'run'}"]
    elif module == "llmperf":
        args = [*args, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    result = run(module, *args, env=without(blocked), cwd=tmp_path)
    assert_one_line(result, *words)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """tests/fake_server.py (the standard library alone): an OpenAI-compatible stream."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake_server.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("tests/fake_server.py did not start") from None
            time.sleep(0.05)
    yield base + "/v1"
    process.terminate()
    process.wait(timeout=10)


def test_engine_openai_needs_no_extra(without, tmp_path, server):
    run_dir = tmp_path / "run"
    result = run(
        "llmperf",
        "engine=openai",
        f"engine.base_url={server}",
        "scenario.num_requests=4",
        "scenario.warmup_requests=0",
        "scenario.validity.min_duration_s=0",
        "scenario.validity.min_completed=1",
        "report.enabled=false",
        f"hydra.run.dir={run_dir}",
        env=without(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["num_completed"] == 4
    # the report and the gate read the run folder without an extra as well
    report = run("llmperf.report", str(run_dir), env=without(), cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    assert (run_dir / "report.html").is_file()
    gate = run(
        "llmperf.gate",
        "--baseline", str(tmp_path / "baseline.json"),
        "--current", str(run_dir),
        env=without(),
        cwd=tmp_path,
    )
    assert_one_line(gate, "llmperf-gate: error:", "baseline not found")


# The commands that need no extra at all: (module, arguments, exit code).
NEEDS_NONE = {
    "llmperf-export": ("llmperf.export", ["model=tiny", "out={tmp}/ckpt"], 0),
    "llmperf-plan": ("llmperf.perf", ["model=tiny", "hardware=h100-sxm"], 0),
    "llmperf-selfcheck": ("llmperf.selfcheck", ["--gpu", "--only", "device"], 0),
}


@pytest.mark.parametrize("name", NEEDS_NONE)
def test_commands_that_need_no_extra_run_without_them(without, tmp_path, name):
    module, args, code = NEEDS_NONE[name]
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = run(module, *args, env=without(), cwd=tmp_path)
    assert result.returncode == code, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_every_command_is_covered():
    """A new entry in [project.scripts] needs a case here."""
    text = (ROOT / "pyproject.toml").read_text()
    scripts = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    commands = set(re.findall(r"^([\w-]+)\s*=", scripts, re.M))
    covered = {name.split()[0].rstrip(",") for name in NEEDS_AN_EXTRA} | set(NEEDS_NONE)
    covered |= {"llmperf-report", "llmperf-gate"}  # in test_engine_openai_needs_no_extra
    assert commands == covered


def test_the_http_client_is_a_core_dependency():
    text = (ROOT / "pyproject.toml").read_text()
    core = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    peers = text.split("peers = [", 1)[1].split("]", 1)[0]
    for package in ("httpx", "aiohttp", "orjson"):
        assert f'"{package}>=' in core, package
        assert package not in peers, package
